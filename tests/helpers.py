"""Running code in fresh Python processes, the only place cache hits mean something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).parent


def child_environment(env: dict | None = None) -> dict:
    """This process's environment, the tests and the checkout on the path, then `env`."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    environment.update(env or {})
    return environment


def run_cli(*args: str, env: dict | None = None, cwd: Path = TESTS, stdin=None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``numba-cache ARGS`` in a fresh process, as a user runs it; output captured as text."""
    return subprocess.run([sys.executable, "-m", "numba_cache", *args], env=child_environment(env),
                          cwd=cwd, stdin=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)


def one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """The command refused (status 2) with one line on stderr, no traceback, naming `fragments`."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def run_python(code: str, env: dict | None = None, timeout: float = 600) -> dict:
    """Run `code` in a fresh interpreter; it must print one JSON object last.

    Raises AssertionError with the child's stderr if it fails.
    """
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child_environment(env), capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{process.stderr[-5000:]}"
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    assert lines, f"child printed no JSON:\n{process.stdout[-2000:]}\n{process.stderr[-3000:]}"
    result = json.loads(lines[-1])
    result["stderr"] = process.stderr
    return result
