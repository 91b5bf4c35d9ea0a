"""Statements of ``workhorse.contrib.django``: its Django migrations and its Tasks backend."""

# The lock `workhorse migrate` takes (migrations.LOCK), with the schema as a literal: a Django
# migration is SQL text (`sqlmigrate` prints it), without bound parameters.
MIGRATE_LOCK = "select pg_advisory_xact_lock(hashtext('workhorse:migrate:{schema}'))"

# Apply one migration file unless workhorse's ledger records it, and record it, in one statement.
# {tag} dollar-quotes the file's text for EXECUTE (a tag the text never contains).
MIGRATE_ONCE = """do $workhorse_guard$
begin
    if not exists (select from {schema}.migrations where version = {version}) then
        execute {tag}{text}{tag};
        insert into {schema}.migrations (version, name) values ({version}, '{name}');
    end if;
end
$workhorse_guard$"""

# A Django task's result, read on Django's connection (so inside an open transaction.atomic() a
# task enqueued in it is found). jsonb columns arrive as text there: Django loads JSON itself.
TASK_RESULT = """
select j.id::text as id, j.name, j.state, j.payload, j.result, j.last_error, j.errors, j.attempt,
       j.worker_id, j.created_at, j.started_at, j.finished_at
from {schema}.jobs as j
where j.id = %(id)s::uuid
"""
