"""Issue 16, defect 5: a job declared in a module run as ``__main__`` is named as the same function is
when its module is imported by name, so a script that enqueues and a worker that imports the script
agree on the name. Where no such name exists (``python -c``), the declaration is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.process

SCRIPT = textwrap.dedent(
    """
    import os

    from workhorse import App, JobContext

    app = App(os.environ["WORKHORSE_DATABASE_URL"], schema=os.environ["WORKHORSE_TEST_SCHEMA"])


    @app.job(tenant="none")
    async def hello(ctx: JobContext, payload: dict) -> dict:
        return {"hello": payload["who"]}


    @app.task(every="1d", tenant="none")
    async def daily(ctx: JobContext, payload: dict) -> None:
        return None


    if __name__ == "__main__":
        app.migrate_sync()
        print(hello.enqueue_sync({"who": "ada"}).id)
        print(hello.name, daily.name, sep="\\n")
    """
)


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def script_env(database_url: str, schema: str) -> dict[str, str]:
    env = {**os.environ, "WORKHORSE_DATABASE_URL": database_url, "WORKHORSE_TEST_SCHEMA": schema}
    env.pop("PYTHONPATH", None)  # the script's directory is the only place it is found
    return env


def job_row(database_url: str, schema: str, job_id: str) -> tuple[str, str]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            f"select name, state from {schema}.jobs where id = %s",  # type: ignore[arg-type]
            (job_id,),
        ).fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.parametrize("launch", [["script.py"], ["-m", "script"]], ids=["python-script.py", "python-m"])
def test_a_script_run_as_main_enqueues_what_the_worker_importing_it_runs(
    launch: list[str], tmp_path: Path, script_env: dict[str, str], database_url: str, schema: str
) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    enqueued = run(launch, tmp_path, script_env)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id, job_name, task_name = enqueued.stdout.split()
    assert (job_name, task_name) == ("script.hello", "script.daily")
    assert job_row(database_url, schema, job_id) == ("script.hello", "ready")

    worker = run(["-m", "workhorse", "--app", "script:app", "worker", "--burst"], tmp_path, script_env)
    assert worker.returncode == 0, worker.stderr
    assert job_row(database_url, schema, job_id) == ("script.hello", "done")


def test_a_module_run_with_python_m_takes_its_dotted_name(tmp_path: Path, script_env: dict[str, str]) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "from workhorse import App\n"
        "app = App(driver='memory')\n"
        "@app.job(tenant='none')\n"
        "def hello(ctx, payload): return None\n"
        "print(hello.name)\n"
    )
    ran = run(["-m", "pkg.mod"], tmp_path, script_env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["pkg.mod.hello"]


DECLARE = (
    "from workhorse import App, ConfigurationError\n"
    "app = App(driver='memory')\n"
    "def hello(ctx, payload): return None\n"
    "try:\n"
    "    app.job(tenant='none')(hello)\n"
    "except ConfigurationError as error:\n"
    "    print(error.code); print(error.cause); print(error.fix)\n"
    "    print(sorted(app.jobs))\n"
    "print(app.job(name='greet.hello', tenant='none')(hello).name)\n"
)


@pytest.mark.parametrize("launch", [["-c", DECLARE], ["-"]], ids=["python-c", "stdin"])
def test_a_declaration_with_no_stable_name_is_refused(
    launch: list[str], tmp_path: Path, script_env: dict[str, str]
) -> None:
    ran = subprocess.run(
        [sys.executable, *launch],
        cwd=tmp_path,
        env=script_env,
        input=DECLARE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    code, cause, fix, registered, named = ran.stdout.splitlines()
    assert code == "JOB_NAME_UNSTABLE"
    assert "hello" in cause and "__main__" in cause
    assert "name=" in fix
    assert registered == "[]"
    assert named == "greet.hello"  # an explicit name is always accepted
