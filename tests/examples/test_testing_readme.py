"""The "Testing your jobs" example (docs/guides/testing.md) runs as written: its jobs module and its test file in a
project of their own, run by a separate pytest process with the workhorse plugin."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).parents[2] / "docs" / "guides" / "testing.md"


def blocks() -> tuple[str, str]:
    section = PAGE.read_text()
    jobs, tests = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    assert jobs.startswith("# myproject/jobs.py") and tests.startswith("# tests/test_jobs.py")
    return jobs, tests


def test_the_testing_example_runs_as_written(tmp_path: Path, database_url: str) -> None:
    jobs, tests = blocks()
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "__init__.py").write_text("")
    (tmp_path / "myproject" / "jobs.py").write_text(jobs)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_jobs.py").write_text(tests)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nworkhorse_app = myproject.jobs:app\nasyncio_mode = auto\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "WORKHORSE_DATABASE_URL": database_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
