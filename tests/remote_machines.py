"""Fresh processes as "machines" of the shared tier's tests (Redis and buckets alike).

A machine compiles small graphs through the cache in a fresh process with its own local
store, and reports what it compiled (numba's compile events), what it computed, and the
counters it left in its store. Every child first runs the cache's per-machine self-test
(a tiny probe kernel, outside the counted compiles): it checks this machine's numba, not
the cache.

A machine on a healthy server waits longer than the tier does (:data:`PATIENT`) and
must report no remote failure: on a loaded CI machine a loopback server once took
more than 0.5 s (the tier's timeout then) to answer a GET, the back-off kept the
machine from publishing, and the next machine compiled what the test said it would
load. Tests of failures run machines with ``faulty=True``: the tier's own timeouts,
failures allowed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import run_python
from reliability import RTOL

from numba_cache.settings import BY_NAME

SECRET = "test-secret-0123456789abcdef"
OTHER_SECRET = "another-team-secret-0123456789"
GRAPHS = ["sumexp", "tanh"]

_TIMEOUTS = ("remote_timeout", "remote_connect_timeout")
#: The tier's timeouts as a user has them (numba_cache/settings.py).
TIER_TIMEOUTS = {BY_NAME[name].variable: str(BY_NAME[name].default) for name in _TIMEOUTS}
#: What a machine on a healthy server waits instead: a stall of the test server is not
#: the failure a test of sharing tests.
PATIENT_SECONDS = 10.0
PATIENT = {BY_NAME[name].variable: str(PATIENT_SECONDS) for name in _TIMEOUTS}
#: The counters of a failed remote operation (numba_cache/store/remote/failures.py).
FAILURES = ("error", "timeout", "bug")

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
        pid, name = int(os.environ["REDIS_PID"]), step.split()[1]
        os.kill(pid, getattr(signal, name))
        stopped = lambda: open(f"/proc/{{pid}}/stat").read().split()[2] in "TZX"
        while stopped() == (name == "SIGCONT"):
            time.sleep(0.01)  # until it is stopped or dead, or runs again
        continue
    if step.startswith("sleep "):  # "sleep <seconds>": a back-off running out, say
        time.sleep(float(step.split()[1]))
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
report["dispatch_imported"] = "pytensor.link.numba.dispatch" in sys.modules
report["session"] = result["stats"]
report["counters"] = Store(settings.current()).stats()["counters"]
report["fingerprint"] = result["fingerprint"]
print(json.dumps(report))
"""


def machine(store: Path, steps: list[str], faulty: bool = False, **env: str) -> dict:
    """Run `steps` (graph names, ``signal <NAME>`` to the server, ``sleep <seconds>``) in a
    fresh process.

    Its compiles and the server's counters are those of one process: no helper compiles
    ahead (numba_cache/kernels/helpers/compile_ahead.py) unless `env` asks for one.
    Unless `faulty`, the server must not fail it (see the module's docstring).
    """
    env = {"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "0",
           **(TIER_TIMEOUTS if faulty else PATIENT), **env}
    report = run_python(CHILD.format(steps=steps), env=env)
    for name, value in report["values"].items():
        assert np.allclose(value, report["expected"][name], rtol=RTOL, atol=0), name
    return _with_remote_counters(report, faulty)


def _with_remote_counters(report: dict, faulty: bool) -> dict:
    report["remote"] = {name.removeprefix("remote:"): value
                        for name, value in report["counters"].items()
                        if name.startswith("remote:")}
    failed = {name: report["remote"][name] for name in FAILURES if name in report["remote"]}
    assert faulty or not failed, (
        f"the remote tier failed on a healthy server ({failed}): {report['warnings']}")
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
    env = {"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "0", **PATIENT, **env}
    report = run_python(FRESH_CHILD.format(setup=setup, graphs=GRAPHS), env=env)
    for name, value in report["values"].items():
        assert np.allclose(value, report["expected"][name], rtol=RTOL, atol=0), name
    return _with_remote_counters(report, faulty=False)
