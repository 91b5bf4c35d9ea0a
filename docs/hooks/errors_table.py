"""MkDocs hook: the errors reference is generated from the code, so it cannot drift.

Every ``code="..."`` argument and every ``code = "..."`` class attribute under src/workhorse is an
error code a user can meet. This hook scans the source at build time (no import needed) and
replaces the ``<!-- errors-table -->`` marker in reference/errors.md with one row per code: the
code, the exception class that carries it by default (if any), where it is raised, and a short
note on when (kept in ``NOTES`` below; a code without a note still gets its row).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src" / "workhorse"
MARKER = "<!-- errors-table -->"
LITERAL = r"""["']([A-Z][A-Z0-9]*_[A-Z0-9_]+)["']"""
CODE_LINE = re.compile(r"\bcode\s*=\s*[^\n]*")  # code="X", code="X" if ... else "Y"
CODE_IN_ROW = re.compile(r"""["']code["']\s*[:,]\s*""" + LITERAL)  # a last_error built in SQL or JSON
CONSTANT = re.compile(r"^[A-Z_]+\s*=\s*" + LITERAL + r"\s*$", re.M)  # USAGE = "CLI_USAGE"
LOGGED = re.compile(r"\(([A-Z]+_[A-Z0-9_]+)\): ")  # a code a worker logs: "... (JOB_SLOT_LOST): ..."
CODE_MAP = re.compile(r"^_?[A-Z_]*CODES\s*=\s*\{[^}\n]*\}", re.M)  # _NAME_CODES = {"name": "JOB_NAME_INVALID"}
CLASS = re.compile(r"^class\s+(\w+)\s*[(:]", re.M)

# When each code is raised, in a line. Grouped by the first code of a family where one note fits.
NOTES: dict[str, str] = {
    'DASHBOARD_INPUT_INVALID': 'a dashboard query string or form that is not UTF-8 text',
    'DATABASE_ALIAS_UNKNOWN': 'Django settings name a database alias that `DATABASES` does not have',
    'DELAY_TOO_LONG': "a `delay=`, a backoff or a step's sleep that would land more than 100 years ahead (the furthest time workhorse stores)",
    'ERROR_UNSTORABLE': "PostgreSQL refused the text of the error a body raised: this error is stored in its place (the worker logs the original) and the retry policy still decides",
    'EVENT_TTL_TOO_LONG': "an event's `ttl=` longer than 100 years",
    'JOB_NAME_INVALID': 'an `ls` name filter holding text PostgreSQL cannot store (a NUL, a lone surrogate): no job has such a name',
    'POOLER_INVALID': "`WORKHORSE_POOLER` is neither `none` nor `transaction`: set `transaction` behind a PgBouncer in `pool_mode=transaction`, or unset it",
    'VACUUM_SETTING_INVALID': "`WORKHORSE_VACUUM` is neither `on` nor `off`, or `Scheduler(vacuum=)` is not a bool or None ([vacuum](../guides/vacuum.md))",
    'VACUUM_HORIZON_PINNED': "a warning, not an error (`stats`, the dashboard, the leader's log): a transaction, prepared transaction or replication slot has held the vacuum horizon too long; the fix names the SQL that ends it ([vacuum](../guides/vacuum.md))",
    'DEAD_ROWS_HIGH': "a warning, not an error: a table of the schema is past its dead-row threshold and nothing vacuumed it in 5 minutes; the fix is the `VACUUM` to run ([vacuum](../guides/vacuum.md))",
    'POOL_SIZE_INVALID': "`WORKHORSE_POOL_SIZE` is not a whole number from 1 to 1000: unset it for 10, or set e.g. `WORKHORSE_POOL_SIZE=4`",
    'POSTGRES_ONLY': "the memory driver, a test double, was asked for what only PostgreSQL keeps (flow control's usage, stats and counters, bulk verbs, pauses, cron leadership, retention, search, the outbox, webhooks, backfills): use the `pg_app` fixture",
    'SETTLE_UNSTORABLE': "PostgreSQL refused a run's outcome even without its progress, result and error: the job is dead-lettered (or failed) with this code, and the worker logs why",
    'PAUSE_REASON_INVALID': 'a pause reason PostgreSQL cannot store as text (a NUL, a lone surrogate)',
    'PAYLOAD_NUMBER_CHANGED': 'a number PostgreSQL would store but not give back unchanged (a huge int, a float past 1e16): send it as a string',
    'RUN_AT_TOO_LATE': 'a `run_at=` (or a step\'s `sleep_until`) more than 100 years ahead, the furthest time workhorse stores',
    'SCHEMA_FORWARD_ONLY': 'a Django migration tried to reverse a workhorse migration: the schema only moves forward',
    'SCHEMA_VERSION_UNKNOWN': 'a Django migration asks for a workhorse migration this version does not ship',
    'STATS_WINDOW_TOO_LONG': '`stats --since` longer than the longest window (36525d)',
    'TASK_EVERY_TOO_LONG': "a task's `every=` period too long to schedule",
    'APP_IMPORT_FAILED': 'importing the module `--app` names raised (the error is in the cause)',
    'APP_INVALID': '`--app` is not `MODULE:ATTRIBUTE`, or names something that is not a `workhorse.App`',
    'APP_NOT_FOUND': '`--app` names a module that is not on the path, or an attribute it lacks',
    'APP_OPTION_CONFLICT': '`--schema` or `--database-url` contradicts what the `--app` module declares',
    'BACKFILL_ERROR': 'the root of the `BACKFILL_*` refusals',
    'CLAIM_QUEUES_EMPTY': 'a claim named no queues',
    'DASHBOARD_NOT_FOUND': 'the dashboard has no such page or job (404)',
    'DASHBOARD_REFRESH_INVALID': '`--refresh` under a second',
    'DASHBOARD_REFUSED': "the root of the dashboard's refusals",
    'EMBEDDED_NO_USER': 'as root, no unprivileged user to run the embedded server as',
    'EMBEDDED_PATH_NOT_TRAVERSABLE': "the embedded server's user cannot reach its data directory",
    'EMBEDDED_SERVER_FAILED': 'the embedded PostgreSQL could not be found or started',
    'EMBEDDED_START_FAILED': 'the embedded server did not start (its log is named in the cause)',
    'ENQUEUE_KEY_CONTENDED': 'an idempotency key kept changing hands during one enqueue; retry it',
    'JOB_CANCELLED': 'an operator cancelled the job while its body ran (raised inside the body)',
    'LEASE_RENEWAL_UNANSWERED': 'a lease renewal got no answer within the visibility window (logged; the run is cancelled)',
    'METRICS_TIMEOUT_INVALID': 'a metrics `timeout` outside 0 to 300 seconds',
    'OPERATOR_REFUSED': "the root of the operator verbs' refusals",
    'RELAY_RUNNING': '`relay.run()` called on a relay already running',
    'SCHEDULER_NO_TASKS': '`workhorse scheduler` for an app that declares no cron task',
    'SCHEDULER_RUNNING': '`scheduler.run()` called on a scheduler already running',
    'STEPS_UNAVAILABLE': '`ctx.step` on a `JobContext` not made by a worker (or `run_job`)',
    'STEP_ERROR': 'the root of the `STEP_*` errors',
    'STEP_FUNCTION_INVALID': '`ctx.step.run` was given something that is not callable',
    'TENANT_INVALID': "a job's tenant function raised, or answered something that is not a short string; a tenant filter holding text PostgreSQL cannot store",
    'WEBHOOK_ERROR': 'the root of the `WEBHOOK_*` errors',
    'WEBHOOK_VERIFICATION_FAILED': "the root of `verify`'s refusals (`WebhookVerificationError`)",
    'WORKER_NO_QUEUES': 'a worker with no queue to claim from: no job declared and no `queues=`',
    'WORKER_RUNNING': '`worker.run()` called on a worker already running',
    "APP_REQUIRED": "a command that runs your jobs (`worker`, `manage.py workhorse_worker`) was given no app",
    "BACKFILL_APPLIED": "`backfill run` named no declared backfill (the cause lists them); one already completed here (`--force` re-runs it as a new ledger row); one has a live pass (its job id)",
    "BACKFILL_BATCH_FAILED": "a declaration refused; a cursor that is not JSON; a dry-run batch raised; `--wait` on a pass that failed; a backfill on the memory driver",
    "BACKFILL_CURSOR_INVALID": "a declaration refused; a cursor that is not JSON; a dry-run batch raised; `--wait` on a pass that failed; a backfill on the memory driver",
    "BACKFILL_ENVIRONMENT": "a backfill's gates: `WORKHORSE_ENV` (`development` when unset) is not in its `environments`; the migration its `requires` names is not applied",
    "BACKFILL_FAILED": "a declaration refused; a cursor that is not JSON; a dry-run batch raised; `--wait` on a pass that failed; a backfill on the memory driver",
    "BACKFILL_INVALID": "a declaration refused; a cursor that is not JSON; a dry-run batch raised; `--wait` on a pass that failed; a backfill on the memory driver",
    "BACKFILL_MIGRATION_PENDING": "a backfill's gates: `WORKHORSE_ENV` (`development` when unset) is not in its `environments`; the migration its `requires` names is not applied",
    "BACKFILL_PENDING": "`backfill ls --pending`: a backfill declared for this environment has no completed pass here (the deploy gate)",
    "BACKFILL_RUNNING": "`backfill run` named no declared backfill (the cause lists them); one already completed here (`--force` re-runs it as a new ledger row); one has a live pass (its job id)",
    "BACKFILL_STALLED": "a pass's function ended the sweep while its `count` still answered rows (the pass ends `stalled`, its job dead-lettered)",
    "BACKFILL_UNKNOWN": "`backfill run` named no declared backfill (the cause lists them); one already completed here (`--force` re-runs it as a new ledger row); one has a live pass (its job id)",
    "BULK_LIMIT_INVALID": "a bulk verb asked for a state it cannot move (`rm --all --state running`), or more than 1,000 rows a call",
    "BULK_STATE_INVALID": "a bulk verb asked for a state it cannot move (`rm --all --state running`), or more than 1,000 rows a call",
    "CLI_USAGE": "a verb given both an ID and `--all`, neither, or `--all` without `--state`",
    "CONFIG_INVALID": 'an option or argument refused at declaration or call ("expected X, got Y"); an unknown `settings.WORKHORSE` key or Tasks backend `OPTIONS` key',
    "CONN_INVALID": "`conn=` got something other than a psycopg 3, SQLAlchemy 2 or Django connection, or one whose driver is not psycopg 3 (the cause names it); a Django `DATABASES` alias not on PostgreSQL",
    "CONN_UNSUPPORTED": "`conn=` given to the memory driver, which has no transactions",
    "DASHBOARD_ADDRESS_INVALID": "`workhorse dashboard` would listen beyond loopback without a token; a token under 8 characters; a `--bind` that is not HOST:PORT",
    "DASHBOARD_CSRF_INVALID": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DASHBOARD_EXTRA_MISSING": "the dashboard's packages are not installed: `pip install 'workhorse[dashboard]'`",
    "DASHBOARD_FORM_TOO_LARGE": "an action's form was over 16 KB (413; refused on its `Content-Length`, or as soon as the stream passes it)",
    "DASHBOARD_HOST_REFUSED": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DASHBOARD_METHOD_NOT_ALLOWED": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DASHBOARD_ORIGIN_REFUSED": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DASHBOARD_READ_ONLY": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DASHBOARD_TOKEN_INVALID": "`workhorse dashboard` would listen beyond loopback without a token; a token under 8 characters; a `--bind` that is not HOST:PORT",
    "DASHBOARD_TOKEN_REQUIRED": "`workhorse dashboard` would listen beyond loopback without a token; a token under 8 characters; a `--bind` that is not HOST:PORT",
    "DASHBOARD_UNAUTHORIZED": "the dashboard refused a request: no or a wrong token (401); without a token, a `Host` that is not loopback (403: browse `http://127.0.0.1:PORT/` or set a token); an action from another origin, without its form's CSRF token, on a read-only dashboard, or by GET",
    "DATABASE_ERROR": "psycopg errors, translated at the driver seam",
    "DATABASE_UNAVAILABLE": "psycopg errors, translated at the driver seam",
    "DEPENDENCY_FAILED": "in the `last_error` of a job enqueued with `after=` and `when=\"done\"`, cancelled without running because a dependency ended failed, dead or cancelled (it names which)",
    "DEPENDENCY_UNKNOWN": "`enqueue(after=[...])` named an id no job has (never enqueued, removed, purged, malformed, or uncommitted in another transaction): nothing was inserted",
    "DRAIN_ENDLESS": "`workhorse.testing.drain` on an app not on the memory driver; jobs still waiting after 10,000 rounds",
    "EMBEDDED_BINARIES_MISSING": "no PostgreSQL server binaries for the embedded database",
    "EMBEDDED_NOT_FOUND": "a command that reads a database found no embedded one (no `.workhorse` here or above); it creates none: `workhorse migrate` does",
    "EVENT_KEY_INVALID": "a step or event named with something other than short text",
    "EVENT_NAME_INVALID": "a step or event named with something other than short text",
    "EXPORT_DIR_INVALID": "`export --out` names a directory that is not empty or cannot be written; a row of another tenant reached an export (a driver bug: the export stops)",
    "EXPORT_TENANT_MISMATCH": "`export --out` names a directory that is not empty or cannot be written; a row of another tenant reached an export (a driver bug: the export stops)",
    "HAND_BACK_INVALID": "`ctx.hand_back()` called while the worker is not draining",
    "ID_PREFIX_INVALID": "`ls --id-prefix` is not hex digits of an id; `--created-from/--created-to` is neither ISO 8601 nor a duration",
    "JOB_ID_AMBIGUOUS": "`show` (or another verb) got a short id or an id prefix that more than one job has: the cause names them",
    "JOB_KEY_BUSY": 'a job declaring `Concurrency(..., when_busy="fail")` was refused: its key ran at its cap (in its `last_error`)',
    "JOB_KEY_HELD": "operator verbs that do not apply",
    "JOB_LEASE_LOST": "a step write found its run no longer owns the job (raised inside the body)",
    "JOB_NAME_TAKEN": "two declarations share one job name on an App",
    "JOB_NAME_UNSTABLE": "a job declared where it has no importable name (`python -c`, a REPL): pass `name=`",
    "JOB_NOT_CANCELLABLE": "operator verbs that do not apply",
    "JOB_NOT_FOUND": "operator verbs that do not apply",
    "JOB_NOT_PROMOTABLE": "operator verbs that do not apply",
    "JOB_NOT_REQUEUEABLE": "operator verbs that do not apply",
    "JOB_RUNNING": "operator verbs that do not apply",
    "JOB_SLOT_LOST": "a worker frozen past its lease found its concurrency slot given to another run; the run was cancelled and wrote nothing (logged)",
    "JOB_TENANT_REQUIRED": 'a job declared without `tenant=` (a function of the payload, or `"none"`)',
    "JOB_UNKNOWN": "`app.wait` reached its timeout before the job finished; `app.enqueue` named no declared job (the cause lists the known ones)",
    "METRICS_ADDRESS_INVALID": "`workhorse metrics --serve` got a malformed address, or could not bind it",
    "METRICS_BIND_FAILED": "`workhorse metrics --serve` got a malformed address, or could not bind it",
    "OUTBOX_NOT_MIGRATED": "a stage or a relay found no staging table in the source database: `workhorse outbox migrate --source URL`",
    "OUTBOX_SOURCE_UNAVAILABLE": "`workhorse relay` or `outbox migrate` could not reach a `--source` database (PostgreSQL's reason in the cause)",
    "PAGE_CURSOR_INVALID": "`ls` asked for more than 200 rows, or with a cursor that is not a job id (a uuid; the cause names `after` or `before`)",
    "PAGE_LIMIT_INVALID": "`ls` asked for more than 200 rows, or with a cursor that is not a job id (a uuid; the cause names `after` or `before`)",
    "PAYLOAD_INVALID": "the payload is not storable JSON, or over `App(max_payload_bytes=)`",
    "PAYLOAD_TOO_LARGE": "the payload is not storable JSON, or over `App(max_payload_bytes=)`",
    "PLATFORM_UNSUPPORTED": 'a worker or scheduler started on Windows (see "Running workers")',
    "PROGRESS_INVALID": "`ctx.progress` got something other than a fraction in [0, 1] or `(done, total)`",
    "QUEUE_NAME_INVALID": "`pause`/`resume` named no queue (or more than 200 characters); a queue name or filter holding text PostgreSQL cannot store",
    "RESULT_INVALID": "a body returned a value that is not storable JSON (in the job's `last_error`; the job ends at once)",
    "RESULT_TOO_LARGE": "a body returned a value that is not storable JSON (in the job's `last_error`; the job ends at once)",
    "SCHEMA_BEHIND": "run `workhorse migrate`, or deploy the newer code",
    "SCHEMA_NOT_MIGRATED": "run `workhorse migrate`, or deploy the newer code",
    "SCHEMA_TOO_NEW": "run `workhorse migrate`, or deploy the newer code",
    "SEARCH_INVALID": "a payload search is neither FIELD=VALUE nor a JSON object, or an error search is empty or over 200 characters",
    "STATE_UNKNOWN": "a bulk verb asked for a state it cannot move (`rm --all --state running`), or more than 1,000 rows a call",
    "STEPS_NEED_ASYNC": "a step misused in a job body; the job is dead-lettered at once",
    "STEP_DUPLICATE": "a step misused in a job body; the job is dead-lettered at once",
    "STEP_NAME_INVALID": "a step or event named with something other than short text",
    "STEP_REPLAY_MISMATCH": "a step misused in a job body; the job is dead-lettered at once",
    "STEP_RESULT_INVALID": "a step failed (recorded `failed`; the attempt is retried per policy)",
    "STEP_TIMEOUT": "a step failed (recorded `failed`; the attempt is retried per policy)",
    "STEP_UNKNOWN": "`requeue --from-step` named a step the job never recorded",
    "TASK_CATCH_UP_INVALID": '`catch_up=` is neither `"skip"` nor `"run-once"`',
    "TASK_NEVER_FIRES": "a schedule with no occurrence (`0 0 31 2 *`)",
    "TASK_PAYLOAD_INVALID": "a task's `payload=` is not a JSON object",
    "TASK_SCHEDULE_INVALID": "a cron expression or `every=` period that cannot be parsed",
    "TASK_ZONE_UNKNOWN": "`timezone=` is not an IANA zone",
    "TESTING_NEEDS_MEMORY": "`workhorse.testing.drain` on an app not on the memory driver; jobs still waiting after 10,000 rounds",
    "TEST_APP_UNBOUND": "a test on the pytest plugin's `app` fixture used another App that would reach a real database; the fix names the `workhorse_app` ini line",
    "TIME_INVALID": "`ls --id-prefix` is not hex digits of an id; `--created-from/--created-to` is neither ISO 8601 nor a duration",
    "WAIT_TIMEOUT": "`app.wait` reached its timeout before the job finished; `app.enqueue` named no declared job (the cause lists the known ones)",
    "WEBHOOKS_NOT_ENABLED": "`add_endpoint`/`rotate_secret`/`send` on an App built without `webhooks=`; webhooks on the memory driver",
    "WEBHOOK_ADDRESS_REFUSED": "an endpoint URL that is not http(s) with a host (or carries credentials); plain http without `allow_http`; a host that is or resolves to a non-public address (SSRF)",
    "WEBHOOK_BODY_INVALID": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_DELIVERY_FAILED": "a delivery's host did not resolve; an attempt failed (in the job's `last_error`, after its ledger row)",
    "WEBHOOK_DNS_FAILED": "a delivery's host did not resolve; an attempt failed (in the job's `last_error`, after its ledger row)",
    "WEBHOOK_ENDPOINT_DISABLED": "`send` or a `webhooks` verb named no endpoint (or not a uuid); `send` to a disabled endpoint, or an event it was not added for",
    "WEBHOOK_ENDPOINT_NOT_FOUND": "`send` or a `webhooks` verb named no endpoint (or not a uuid); `send` to a disabled endpoint, or an event it was not added for",
    "WEBHOOK_EVENT_NOT_SUBSCRIBED": "`send` or a `webhooks` verb named no endpoint (or not a uuid); `send` to a disabled endpoint, or an event it was not added for",
    "WEBHOOK_HEADERS_MISSING": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_SECRET_INVALID": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_SIGNATURE_INVALID": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_TIMEOUT_OVER_DRAIN": "a worker's `drain_timeout` is shorter than `WebhookPolicy(timeout=)` + 2 s",
    "WEBHOOK_TIMESTAMP_INVALID": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_TIMESTAMP_TOO_NEW": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_TIMESTAMP_TOO_OLD": "`workhorse.webhooks.verify` refused a delivery (`WebhookVerificationError`)",
    "WEBHOOK_URL_INVALID": "an endpoint URL that is not http(s) with a host (or carries credentials); plain http without `allow_http`; a host that is or resolves to a non-public address (SSRF)",
    "WEBHOOK_URL_REFUSED": "an endpoint URL that is not http(s) with a host (or carries credentials); plain http without `allow_http`; a host that is or resolves to a non-public address (SSRF)",
    "WINDOW_INVALID": "`app.admin.counter_minutes` asked for more than the two hours of minute counters kept",
}


def _area(path: Path) -> str:
    rel = path.relative_to(SRC)
    head = rel.parts[0]
    return head.removesuffix(".py").lstrip("_") or "workhorse"


def scan(src: Path = SRC) -> dict[str, dict[str, Any]]:
    """Every error code in the source: {code: {"classes": set, "areas": set}}."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(src.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        classes = [(m.start(), m.group(1)) for m in CLASS.finditer(text)]
        hits = [(m.start(), c) for m in CODE_LINE.finditer(text) for c in re.findall(LITERAL, m.group(0))]
        for pattern in (CODE_IN_ROW, CONSTANT, LOGGED):
            hits += [(m.start(), m.group(1)) for m in pattern.finditer(text)]
        hits += [(m.start(), c) for m in CODE_MAP.finditer(text) for c in re.findall(r""":\s*""" + LITERAL, m.group(0))]
        for start, code in hits:
            if code.startswith("WORKHORSE_"):  # an environment variable's name, not a code
                continue
            entry = found.setdefault(code, {"classes": set(), "areas": set()})
            entry["areas"].add(_area(path))
            line_start = text.rfind("\n", 0, start) + 1
            is_attribute = text[line_start:start] == "    " and text[start:].startswith("code =")
            if is_attribute:
                owner = [name for pos, name in classes if pos < start]
                if owner:
                    entry["classes"].add(owner[-1])
    return found


def table(found: dict[str, dict[str, Any]]) -> str:
    rows = ["| code | when | where |", "|---|---|---|"]
    for code in sorted(found):
        entry = found[code]
        when = NOTES.get(code, "")
        if entry["classes"]:  # the default code of an exception class: name it
            when += f" (`{'`, `'.join(sorted(entry['classes']))}`)"
        where = ", ".join(sorted(entry["areas"]))
        rows.append(f"| `{code}` | {when.strip()} | {where} |")
    return "\n".join(rows) + f"\n\n{len(found)} codes, read from the source when this page was built.\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, table(scan()))
