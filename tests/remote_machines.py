"""Fresh processes as "machines" of the shared tier's tests (Redis and buckets alike).

A machine compiles small graphs through the cache in a fresh process with its own local
store, and reports what it compiled (numba's compile events), what it computed, and the
counters it left in its store. Every child first runs the cache's per-machine self-test
(a tiny probe kernel, outside the counted compiles): it checks this machine's numba, not
the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import run_python
from reliability import RTOL

SECRET = "test-secret-0123456789abcdef"
OTHER_SECRET = "another-team-secret-0123456789"
GRAPHS = ["sumexp", "tanh"]

CHILD = """
import json, os, signal, sys, time
import numba_cache, reliability
from numba_cache import settings
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.kernels.context import current_context
from numba_cache.store import Store

current_context()  # the per-machine self-test, before counting
report = {{"compiled": [], "values": {{}}, "expected": {{}}, "warnings": []}}
for step in {steps!r}:
    if step.startswith("signal "):  # "signal <name>": done to the server, mid-run
        pid = int(os.environ["REDIS_PID"])
        os.kill(pid, getattr(signal, step.split()[1]))
        while open(f"/proc/{{pid}}/stat").read().split()[2] not in "TZX":
            time.sleep(0.01)  # until it is stopped or dead
        continue
    if step == "bug":  # numba_cache's own remote code failing, not the server
        from numba_cache.store.remote.redis_backend import RedisBackend
        def broken(self, fingerprint, key):
            raise TypeError("a bug")
        RedisBackend.get = broken
        continue
    with count_numba_compiles() as compiled:
        result = reliability.compile_graphs([step])
    report["compiled"] += compiled
    report["values"] |= result["values"]
    report["expected"] |= result["expected"]
    report["warnings"] += result["warnings"]
    report.setdefault("lookups", {{}}).update(result["lookups"])
report["clients_imported"] = sorted({{"redis", "obstore"}} & set(sys.modules))
report["counters"] = Store(settings.current()).stats()["counters"]
report["fingerprint"] = result["fingerprint"]
print(json.dumps(report))
"""


def machine(store: Path, steps: list[str], **env: str) -> dict:
    """Run `steps` (graph names, or ``signal <NAME>`` to the server) in a fresh process.

    Its compiles and the server's counters are those of one process: no helper compiles
    ahead (numba_cache/kernels/helpers/compile_ahead.py) unless `env` asks for one.
    """
    env = {"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "0", **env}
    report = run_python(CHILD.format(steps=steps), env=env)
    for name, value in report["values"].items():
        assert np.allclose(value, report["expected"][name], rtol=RTOL, atol=0), name
    report["remote"] = {
        name.removeprefix("remote:"): value
        for name, value in report["counters"].items()
        if name.startswith("remote:")
    }
    return report


def unavailable(server: str, problem: Exception):
    """A test server that cannot start fails the test in CI and skips it elsewhere, saying so."""
    if os.environ.get("CI"):
        pytest.fail(f"cannot start {server}, needed by the remote tier tests: {problem}")
    pytest.skip(f"REMOTE TIER NOT TESTED: cannot start {server} ({problem})")


FRESH_CHILD = """
import json, warnings
import numpy as np
{setup}
from numba_cache._compat import numba_internals
runtime_compiles = []
compile_runtime = numba_internals.compile_runtime_library
def counted(*args):  # numba's runtime is compiled by LLVM, which no compile event shows
    runtime_compiles.append(1)
    return compile_runtime(*args)
numba_internals.compile_runtime_library = counted
from numba_cache.evaluation.compile_events import count_numba_compiles
with count_numba_compiles() as compiled:  # from the start: the self-test counts
    import reliability
    from numba_cache import settings
    from numba_cache.kernels.context import current_context
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enabled = current_context().enabled
    result = reliability.compile_graphs({graphs!r})
from numba_cache.store import Store
print(json.dumps({{
    "compiled": compiled, "runtime_compiles": len(runtime_compiles), "enabled": enabled,
    "bits": {{name: np.asarray(value).tobytes().hex() for name, value in result["values"].items()}},
    "values": result["values"], "expected": result["expected"],
    "warnings": [str(w.message) for w in caught] + result["warnings"],
    "counters": Store(settings.current()).stats()["counters"],
    "fingerprint": result["fingerprint"],
}}))
"""


def fresh_machine(store: Path, setup: str = "", **env: str) -> dict:
    """GRAPHS compiled in a fresh process on the store `store`, counting from its start."""
    env = {"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "0", **env}
    report = run_python(FRESH_CHILD.format(setup=setup, graphs=GRAPHS), env=env)
    for name, value in report["values"].items():
        assert np.allclose(value, report["expected"][name], rtol=RTOL, atol=0), name
    report["remote"] = {name.removeprefix("remote:"): value
                        for name, value in report["counters"].items() if name.startswith("remote:")}
    return report
