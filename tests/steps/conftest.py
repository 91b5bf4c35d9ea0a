"""The process tests here reuse ``tests/process``: its fixtures (``proc_env``, ``spawn``), its kit and
its app (``procapp``, where the step jobs live)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROCESS = Path(__file__).parents[1] / "process"
if str(PROCESS) not in sys.path:
    sys.path.insert(0, str(PROCESS))

_spec = importlib.util.spec_from_file_location("workhorse_process_fixtures", PROCESS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

proc_env = _fixtures.proc_env
spawn = _fixtures.spawn
