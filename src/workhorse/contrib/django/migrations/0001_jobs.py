from django.db import migrations

from workhorse.contrib.django.operations import ApplyWorkhorseMigration


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [ApplyWorkhorseMigration(1)]
