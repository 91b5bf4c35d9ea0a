"""``Job``: an unmanaged, read-only Django model over workhorse's jobs table, for the admin.

Design: docs/guides/django.md
"""

from __future__ import annotations

from django.db import models

from workhorse.contrib.django.settings import schema_name

STATES = ("ready", "delayed", "pending", "running", "suspended", "done", "failed", "dead", "cancelled")


class Job(models.Model):  # type: ignore[misc]  # Django ships no type hints
    id = models.UUIDField(primary_key=True)
    name = models.TextField()
    queue = models.TextField()
    tenant = models.TextField(null=True)
    state = models.TextField(choices=[(s, s) for s in STATES])
    priority = models.IntegerField()
    payload = models.JSONField()
    result = models.JSONField(null=True)
    last_error = models.JSONField(null=True)
    errors = models.JSONField(null=True)
    progress = models.JSONField(null=True)
    key = models.TextField(db_column="idempotency_key", null=True)
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    dead_letter = models.BooleanField()
    claims = models.IntegerField()
    worker_id = models.TextField(null=True)
    lease_expires_at = models.DateTimeField(null=True)
    run_at = models.DateTimeField()
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField()
    flow_key = models.TextField(null=True)
    traceparent = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = f'"{schema_name()}"."jobs"'  # quoted whole: Django passes it through as schema.table
        ordering = ("-id",)  # ids are UUIDv7: newest first, on the primary key
        verbose_name = "job"
        default_permissions = ("view", "change")  # change: may requeue and cancel (never edit)

    def __str__(self) -> str:
        return f"{self.name} {self.id}"
