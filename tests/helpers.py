"""Running code in fresh Python processes, the only place cache hits mean something; and
the command line in this process, where a test needs no fresh interpreter."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

TESTS = Path(__file__).parent


def child_environment(env: dict | None = None) -> dict:
    """This process's environment, the tests and the checkout on the path, then `env`
    (a variable given as None is unset)."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def run_cli(*args: str, env: dict | None = None, cwd: Path = TESTS, stdin=None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """``numba-cache ARGS`` in a fresh process, as a user runs it; output captured as text."""
    return subprocess.run([sys.executable, "-m", "numba_cache", *args], env=child_environment(env),
                          cwd=cwd, stdin=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)


def cli_here(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``numba-cache ARGS`` through ``numba_cache.cli.main`` in this process, for tests that
    need no fresh interpreter; as :func:`run_cli` returns it, environment `env` added."""
    from numba_cache import cli, session

    stdout, stderr = io.StringIO(), io.StringIO()
    warnings_given = session.current().warnings_given
    given, saved = set(warnings_given), dict(os.environ)
    warnings_given.clear()  # once-per-process warnings: this is a process of its own
    os.environ.update(env or {})
    try:
        with (contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr),
              warnings.catch_warnings()):  # restores the warning printer the CLI installs
            try:
                status = cli.main(list(args))
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else 2
    finally:
        os.environ.clear()
        os.environ.update(saved)
        warnings_given.clear()
        warnings_given.update(given)
    return subprocess.CompletedProcess(["numba-cache", *args], status, stdout.getvalue(),
                                       stderr.getvalue())


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


#: A child's set-up simulating numba moving a seam whose check compiles nothing
#: (numba_cache/_compat/numba_unique_ids.py): function ids no longer drawn from _unique_ids.
MOVED_FUNCTION_IDS = (
    "import itertools\n"
    "from numba.core.bytecode import FunctionIdentity\n"
    "numba_from_function, counter = FunctionIdentity.from_function.__func__, itertools.count(1)\n"
    "def from_function(cls, pyfunc):\n"
    "    identity = numba_from_function(cls, pyfunc)\n"
    "    identity.unique_id = next(counter)\n"
    "    return identity\n"
    "FunctionIdentity.from_function = classmethod(from_function)\n"
)


def without_op_loads(stats: dict) -> dict:
    """Session counters less ``op.hit``: the op kernels a stored graph kernel calls by
    symbol are loaded with it, one hit each (see numba_cache/kernels/assembly/op_links.py)."""
    return {name: count for name, count in stats.items() if name != "op.hit"}


def wait_for_linked_builds(root: Path, timeout: float = 300.0) -> list[dict]:
    """The linking claims of the store at `root` (numba_cache/kernels/helpers/linked_build.py) once
    no build runs there, or `timeout` passed: failed builds, or builds whose helper died."""
    from store_states import settings_for

    from numba_cache.kernels.helpers import linked_build as linked_build
    from numba_cache.store import Store

    store = Store(settings_for(root))
    linked_build.wait_for_builds(store, stale_after=timeout)
    return store.linking_claims()
