from django.db import migrations, models

from workhorse.contrib.django.operations import ApplyWorkhorseMigration
from workhorse.contrib.django.settings import schema_name


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        ApplyWorkhorseMigration(1),
        # The admin's read-only model (models.Job): Django's state only; the table is workhorse's.
        migrations.CreateModel(
            name="Job",
            fields=[("id", models.UUIDField(primary_key=True, serialize=False))],
            options={
                "managed": False,
                "db_table": f'"{schema_name()}"."jobs"',  # as models.Job says: the schema of the settings
                "ordering": ("-id",),
                "verbose_name": "job",
                "default_permissions": ("view", "change"),
            },
        ),
    ]
