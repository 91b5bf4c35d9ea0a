"""mypy --strict infers enqueue's payload type from the body's annotation: JobHandle[R, P]."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).with_name("typed_example.py")


def test_a_wrong_payload_is_a_type_error_and_a_right_one_is_not(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    wrong = {number for number, line in enumerate(lines, 1) if line.endswith("# WRONG")}
    assert len(wrong) == 4
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path),
         "--follow-imports=silent", str(EXAMPLE)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    flagged = {int(m.group(1)) for m in re.finditer(rf"{re.escape(EXAMPLE.name)}:(\d+): error", done.stdout)}
    assert flagged == wrong, done.stdout
