from django.db import migrations

from workhorse.contrib.django.operations import ApplyWorkhorseMigration


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    dependencies: list[tuple[str, str]] = [("workhorse", "0021_dependencies")]
    operations = [ApplyWorkhorseMigration(22)]
