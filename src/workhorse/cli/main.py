"""The root command: global options, loading the app, and turning refusals into exit codes.

Every ``WorkhorseError`` a command raises is a refusal: it is printed (code, cause, fix) and the
process exits 2. The app named by ``--app`` is loaded lazily, by the command that needs it, so
that a bad ``--app`` is reported in the shape the command's own ``--json`` asks for.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from workhorse import embedded
from workhorse.app import App
from workhorse.cli.output import print_refusal, redact
from workhorse.drivers.direct import check_reachable as reachable
from workhorse.embedded import ENV_URL
from workhorse.errors import ConfigurationError, SchemaError, WorkhorseError

ENV_APP = "WORKHORSE_APP"
REFUSED = 2
FAILED = 1

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Refusal(Exception):
    """A ``WorkhorseError`` with the exit code it should end the process with."""

    def __init__(self, error: WorkhorseError, exit_code: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.exit_code = exit_code


@dataclass
class State:
    """What the root options decided, shared with every command through click's context."""

    database_url: str | None = None
    database_url_given: bool = False  # on the command line, not from the environment
    app_spec: str | None = None
    schema: str | None = None
    as_json: bool = False
    # Set by ``main()`` only: the real process may end itself hard (see the worker command);
    # an in-process invocation (tests, click's CliRunner) never does.
    standalone: bool = False
    # What ``workhorse db`` found and stopped before its command ran (``embedded.stop_orphans``).
    orphans: list[dict[str, object]] = field(default_factory=list)
    _app: App | None = field(default=None, repr=False)

    def app(self, *, required: bool = False) -> App:
        """The ``--app`` app, else a bare ``App`` on the chosen database and schema."""
        if self._app is None:
            if self.app_spec:
                self._app = self._load()
            elif required:
                raise ConfigurationError(
                    code="APP_REQUIRED",
                    cause="this command runs your jobs, so it needs the App that declares them: "
                    f"no --app was given and {ENV_APP} is not set",
                    fix=f"workhorse --app myproject.jobs:app worker   # or: export {ENV_APP}=myproject.jobs:app",
                )
            else:
                self._app = App(self.database_url, schema=self.schema or "workhorse")
        return self._app

    def _load(self) -> App:
        assert self.app_spec is not None
        if self.database_url_given and self.database_url:
            # An App() built without a URL reads this variable when it first connects: passing
            # --database-url is the same as exporting WORKHORSE_DATABASE_URL for this process.
            os.environ[ENV_URL] = self.database_url
        app = load_app(self.app_spec)
        if self.schema is not None and self.schema != app.schema:
            raise ConfigurationError(
                code="APP_OPTION_CONFLICT",
                cause=f"--schema {self.schema!r} was given, but the app {self.app_spec!r} uses schema {app.schema!r}",
                fix=f"drop --schema (the app decides), or build the app with App(schema={self.schema!r})",
            )
        if self.database_url_given and self.database_url and app.database_url != self.database_url:
            raise ConfigurationError(
                code="APP_OPTION_CONFLICT",
                cause=f"--database-url was given, but the app {self.app_spec!r} names its own database "
                f"({redact(app.database_url)})",
                fix=f"drop --database-url, or build the app with App() so it reads {ENV_URL}",
            )
        return app


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (the current directory first on the path) and check it is an App.
    ``module`` alone means ``module:app``."""
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        attribute = "app"
    if not module_name or not attribute or ":" in attribute:
        raise ConfigurationError(
            code="APP_INVALID",
            cause=f"--app expected MODULE:ATTRIBUTE or MODULE (a module path, then a colon and the App's name, "
            f"app by default), got {spec!r}",
            fix="workhorse --app myproject.jobs:app worker",
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not (module_name == error.name or module_name.startswith(error.name + ".")):
            raise _import_failed(spec, module_name, error) from error
        raise ConfigurationError(
            code="APP_NOT_FOUND",
            cause=f"--app {spec!r}: no module named {error.name!r} on the path (searched from {cwd})",
            fix=f"run from your project's root, or check the module path: python -c 'import {module_name}'",
        ) from error
    except WorkhorseError:
        raise  # a declaration refused at import (a job without a tenant...): already says what to do
    except Exception as error:
        raise _import_failed(spec, module_name, error) from error
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            apps = sorted(name for name, value in vars(module).items() if isinstance(value, App))
            hint = f"; it defines {', '.join(apps)}" if apps else "; it defines no App"
            raise ConfigurationError(
                code="APP_NOT_FOUND",
                cause=f"--app {spec!r}: module {module_name!r} has no attribute {attribute!r}{hint}",
                fix=f"workhorse --app {module_name}:{apps[0] if apps else 'app'} ...",
            )
        found = getattr(found, part)
    if not isinstance(found, App):
        raise ConfigurationError(
            code="APP_INVALID",
            cause=f"--app {spec!r} names a {type(found).__name__}, not a workhorse.App",
            fix=f"point --app at the App your jobs are declared on: app = workhorse.App() in {module_name}",
        )
    if found.is_memory:
        raise ConfigurationError(
            code="APP_INVALID",
            cause=f"--app {spec!r} uses the in-process memory driver; the command line works on PostgreSQL, "
            "where other processes' jobs live",
            fix="build the app without driver='memory' (keep that for unit tests)",
        )
    return found


def _import_failed(spec: str, module_name: str, error: Exception) -> ConfigurationError:
    return ConfigurationError(
        code="APP_IMPORT_FAILED",
        cause=f"--app {spec!r}: importing {module_name!r} raised {type(error).__name__}: {error}",
        fix=f"python -c 'import {module_name}'   # shows the full traceback",
    )


def check_reachable(app: App) -> None:
    """Connect once, directly, before a command opens the app's connection pool: an unreachable
    database fails at once with PostgreSQL's own reason (``drivers.direct.check_reachable``)."""
    reachable(app.database_url)


def run_with_app(app: App, work: Callable[[App], Awaitable[T]]) -> T:
    """Run ``work(app)`` on a fresh event loop, closing the app's connections afterwards."""
    check_reachable(app)

    async def body() -> T:
        try:
            return await work(app)
        finally:
            await app.close()

    return asyncio.run(body())


def run_role(app: App, work: Callable[[App], Awaitable[T]]) -> T:
    """Run a long-running role (``worker``, ``scheduler``) like ``run_with_app``: the database is
    checked reachable first, the app's connections are closed at the end, a refusal before the
    role started (``ConfigurationError``, ``SchemaError``) exits 2 like every refusal, and any
    other ``WorkhorseError`` (the database unreachable at start, a role that failed) exits 1."""
    try:
        return run_with_app(app, work)
    except (ConfigurationError, SchemaError):
        raise
    except WorkhorseError as error:
        raise Refusal(error, FAILED) from error


def remember_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(State).as_json = True
    return value


def json_option(fn: F) -> F:
    """The per-command ``--json`` flag; it also shapes how a refusal is printed."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=remember_json,
        help="Print exactly one JSON document on stdout (errors too).",
    )(fn)


pass_state = click.make_pass_decorator(State, ensure=True)


ROOT_OPTIONS = ("--database-url", "--app", "--schema")  # accepted after the command too


def hoisted(args: list[str]) -> list[str]:
    """``args`` with the root's options (``ROOT_OPTIONS``, each with its value) that follow the
    command moved before it: ``workhorse ls --app m:app`` is ``workhorse --app m:app ls``. Nothing
    after a ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    command_seen = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if name in ROOT_OPTIONS:
            width = 1 if "=" in arg or i + 1 == len(args) else 2
            front += args[i : i + width]
            i += width
            continue
        if not command_seen and not arg.startswith("-"):
            command_seen = True
        (rest if command_seen else front).append(arg)
        i += 1
    return front + rest


class RootGroup(click.Group):
    """Lists commands in the order they were added, takes the root's options after the command
    too, and turns refusals into exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoisted(list(args)))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            # A command reads the embedded database where it is, and never makes one in the wrong
            # directory: only `migrate`, `demo` and `db start` create it (embedded.creation).
            with embedded.creation(allowed=False):
                return super().invoke(ctx)
        except Refusal as refusal:
            print_refusal(refusal.error, as_json=ctx.ensure_object(State).as_json)
            ctx.exit(refusal.exit_code)
        except WorkhorseError as error:
            print_refusal(error, as_json=ctx.ensure_object(State).as_json)
            ctx.exit(REFUSED)


@click.group(
    cls=RootGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Examples:
  workhorse migrate
  workhorse --app myproject.jobs:app worker --concurrency 20
  workhorse ls --state dead
  workhorse show 0190f1c2-... --json
  workhorse stats --since 15m
  workhorse requeue --all --state dead --dry-run
  workhorse pause emails --reason "provider outage"
  workhorse metrics --serve :9464

Run `workhorse COMMAND --help` for a command's options.""",
)
@click.option(
    "--database-url",
    metavar="URL",
    envvar=ENV_URL,
    show_envvar=True,
    help="PostgreSQL to use. Default: the embedded server under ./.workhorse (WORKHORSE_HOME). "
    "With --app, the app module decides its database; this option then acts as "
    f"{ENV_URL} for an app built with App().",
)
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:ATTR",
    envvar=ENV_APP,
    show_envvar=True,
    help="The App your jobs are declared on, e.g. myproject.jobs:app. Required by `worker`; "
    "other commands work without it.",
)
@click.option(
    "--schema",
    metavar="NAME",
    help="Postgres schema holding workhorse's tables (default: workhorse). With --app, the app's own.",
)
@click.version_option(package_name="workhorse", message="workhorse %(version)s")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, app_spec: str | None, schema: str | None) -> None:
    """Durable background work on PostgreSQL: run workers, inspect and operate on jobs.

    Every command that prints data takes --json and then prints exactly one JSON document on
    stdout. A refused command exits 2 and prints its error code, cause and fix.
    """
    state = ctx.ensure_object(State)
    state.database_url = database_url or None
    state.database_url_given = ctx.get_parameter_source("database_url") is ParameterSource.COMMANDLINE
    state.app_spec = app_spec or None
    state.schema = schema


def main() -> None:
    """The console script ``workhorse``."""
    cli.main(prog_name="workhorse", obj=State(standalone=True))
