"""Running code in fresh Python processes, the only place cache hits mean something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent


def run_python(code: str, env: dict | None = None, timeout: float = 600) -> dict:
    """Run `code` in a fresh interpreter; it must print one JSON object last.

    Raises AssertionError with the child's stderr if it fails.
    """
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    environment.update(env or {})
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment, capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{process.stderr[-5000:]}"
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    assert lines, f"child printed no JSON:\n{process.stdout[-2000:]}\n{process.stderr[-3000:]}"
    result = json.loads(lines[-1])
    result["stderr"] = process.stderr
    return result
