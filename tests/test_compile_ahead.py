"""A helper process compiles op kernels from the graph's end while the graph is typed.

Each test runs fresh processes (a cold compile forks the helper, or spawns it
beside a second Python thread) against stores of their own, and compares the
outputs bit for bit: cold with the helper, cold without it, and warm. The graph is a logp-like cost and its gradient through
views of every kind whose layout the helper predicts (transposes, slices, added
and dropped axes, inplace updates, a fused sum over rows), so a wrong prediction
shows in the counters of the cold compile.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import child_environment, run_cli, run_python

COMPILE = """
import gc, json, os, threading, warnings
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import session

thresholds = gc.get_threshold()
full_collections_beside_helper = []
def count_full_collections(phase, info):
    if phase == "start" and info["generation"] == 2 and session.current().compile_ahead_running:
        full_collections_beside_helper.append(info)
gc.callbacks.append(count_full_collections)

x = pt.vector("x", shape=(6,))
m = pt.matrix("m", shape=(6, 6))
projected = pt.dot(pt.exp(m).T, x)
window = pt.cumsum(pt.tanh(x))[1:4]
rows = pt.exp(m).sum(axis=1)
cost = (pt.log1p(projected ** 2).sum() + (window * x[::2]).sum() + (rows * x).sum()
        + pt.sqrt(pt.dot(m, pt.exp(m)) ** 2 + 1).sum())
outputs = [cost, *pt.grad(cost, [x, m])]
point = [np.linspace(-0.5, 0.7, 6), np.arange(36.0).reshape(6, 6) / 40]
{prelude}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    function = pytensor.function([x, m], outputs, mode="NUMBA_CACHE")
    values = function(*point)
try:
    os.waitpid(-1, os.WNOHANG)
    children = True
except ChildProcessError:
    children = False
print(json.dumps({{
    "stats": dict(numba_cache.session_stats()),
    "values": [np.asarray(value).tolist() for value in values],
    "children_left": children,
    "thresholds_kept": gc.get_threshold() == thresholds,
    "full_collections_beside_helper": len(full_collections_beside_helper),
    "warnings": [str(warning.message) for warning in caught
                 if "numba_cache" in str(warning.message)],
}}))
"""


def compile_cost(env: dict | None = None, prelude: str = "") -> dict:
    return run_python(COMPILE.format(prelude=prelude), env=env)


@pytest.fixture(scope="module")
def cold_runs(tmp_path_factory):
    """A cold compile with the helper, one without it (each in a store of its own), and a
    warm compile in the first store."""
    root = tmp_path_factory.mktemp("ahead")
    helped = compile_cost({"NBCACHE_DIR": str(root / "helped"), "NBCACHE_COMPILE_AHEAD": "1"})
    alone = compile_cost({"NBCACHE_DIR": str(root / "alone"), "NBCACHE_COMPILE_AHEAD": "0"})
    warm = compile_cost({"NBCACHE_DIR": str(root / "helped"), "NBCACHE_COMPILE_AHEAD": "1"})
    yield {"helped": helped, "alone": alone, "warm": warm, "store": root / "helped"}
    shutil.rmtree(root, ignore_errors=True)


def test_a_helped_cold_compile_gives_the_bits_of_one_alone_and_of_a_warm_one(cold_runs):
    helped, alone, warm = cold_runs["helped"], cold_runs["alone"], cold_runs["warm"]
    assert helped["values"] == alone["values"] == warm["values"]
    assert helped["stats"]["graph.miss"] == alone["stats"]["graph.miss"] == 1
    assert warm["stats"]["graph.hit"] == 1


def test_the_helper_compiles_op_kernels_the_typing_loads_and_they_count_as_misses(cold_runs):
    helped, alone = cold_runs["helped"]["stats"], cold_runs["alone"]["stats"]
    assert helped["compiled_ahead:helper"] == 1
    assert helped.get("op.compiled_ahead", 0) >= 1, helped
    # What the helper compiled is a miss of this compile, not a hit: the counts are
    # those of the compile alone.
    assert helped["op.miss"] == alone["op.miss"]
    assert helped.get("op.hit", 0) == alone.get("op.hit", 0)
    assert "compiled_ahead:helper" not in alone and "op.compiled_ahead" not in alone


def test_the_helper_predicts_the_layouts_of_views(cold_runs):
    """The type of every value of the graph, predicted from the types its node read, is
    the one numba's typing found (views of C, F or any layout; inplace outputs; a fused
    reduction over a trailing axis), and every op kernel the helper stored was used."""
    stats = cold_runs["helped"]["stats"]
    assert stats.get("compiled_ahead:mispredicted", 0) == 0, stats
    assert stats.get("compiled_ahead:unused", 0) == 0, stats


def test_no_helper_is_left_behind_and_the_store_verifies(cold_runs):
    assert not cold_runs["helped"]["children_left"]
    result = run_cli("verify", env={"NBCACHE_DIR": str(cold_runs["store"])})
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_full_collection_copies_the_pages_a_helper_shares(cold_runs):
    """While the helper lives, this process collects only its young generations (a full
    collection writes into every object, copying their pages for the helper); after,
    the collector is as it was."""
    helped = cold_runs["helped"]
    assert helped["full_collections_beside_helper"] == 0
    assert helped["thresholds_kept"]


def test_a_warm_compile_forks_no_helper(cold_runs):
    assert "compiled_ahead:helper" not in cold_runs["warm"]["stats"]


LAYOUTS = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

x = pt.vector("x")
outputs = {outputs}
values = pytensor.function([x], outputs, mode="NUMBA_CACHE")(np.linspace(-1.0, 1.0, 9))
print(json.dumps({{"stats": dict(numba_cache.session_stats()),
                  "values": [np.asarray(value).tolist() for value in values]}}))
"""


def test_a_stored_op_kernel_called_with_a_new_layout_starts_the_helper(tmp_path):
    """The store holds ``exp`` for a contiguous vector; a new graph calls it on a strided
    view (the same op kernel, a signature it lacks), then a new ``cumsum`` last. The
    typing's first compile is that ``exp``, so the helper starts there and compiles the
    ``cumsum`` ahead (started at the new kernel only, the last step, it would have
    nothing ahead to do); the bits are those of the graph compiled alone."""
    store = {"NBCACHE_DIR": str(tmp_path / "store"), "NBCACHE_COMPILE_AHEAD": "1"}
    first = run_python(LAYOUTS.format(outputs="[pt.exp(x), x[::2]]"), env=store)
    assert first["stats"]["graph.miss"] == 1
    strided = LAYOUTS.format(outputs="[pt.cumsum(pt.exp(x[::2]))]")
    helped = run_python(strided, env=store)
    alone = run_python(strided, env={"NBCACHE_DIR": str(tmp_path / "alone"),
                                     "NBCACHE_COMPILE_AHEAD": "0"})
    stats = helped["stats"]
    assert stats["compiled_ahead:helper"] == 1, stats
    assert stats["op.compiled_ahead"] == 1, stats
    assert stats.get("compiled_ahead:unused", 0) == 0, stats
    assert helped["values"] == alone["values"]


EDITED = """
import inspect, json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import session_stats
from numba_cache.kernels.helpers.compile_ahead import CompileAhead

started = []
start = CompileAhead._start
def recorded_start(self, index, predicted):
    started.append({{"index": index, "loaded": session_stats().get("op.hit", 0),
                    "typing": any(frame.function == "typer" for frame in inspect.stack())}})
    return start(self, index, predicted)
CompileAhead._start = recorded_start
begun = []
begin = CompileAhead.begin
def recorded_begin(self, value_types):
    begun.append(sorted((name, str(type_)) for name, type_ in value_types.items()))
    return begin(self, value_types)
CompileAhead.begin = recorded_begin

x = pt.vector("x", shape=(9,))
outputs = {outputs}
values = pytensor.function([x], outputs, mode="NUMBA_CACHE")(np.linspace(-1.0, 1.0, 9))
print(json.dumps({{"stats": dict(session_stats()), "started": started, "begun": begun,
                  "values": [np.asarray(value).tolist() for value in values]}}))
"""


def test_an_edit_starts_the_helper_before_the_typing_loads_its_stored_kernels(tmp_path):
    """An edit whose new op kernels come after stored ones (here new kernels after the
    stored ``sort`` and ``cumsum``): the helper is started when the graph function's
    lookup misses, before numba compiles it, from the types predicted; not once the
    typing has loaded the stored kernels and met the first new one. The bits are those
    of the edit compiled alone."""
    store = {"NBCACHE_DIR": str(tmp_path / "store"), "NBCACHE_COMPILE_AHEAD": "1"}
    run_python(EDITED.format(outputs="[pt.sort(x), pt.cumsum(x)]"), env=store)
    edit = EDITED.format(outputs="[pt.sort(x), pt.cumsum(x), "
                                 "pt.argsort(pt.cumprod(pt.sort(x) + pt.cumsum(x)))]")
    helped = run_python(edit, env=store)
    alone = run_python(edit, env={"NBCACHE_DIR": str(tmp_path / "alone"),
                                  "NBCACHE_COMPILE_AHEAD": "0"})
    stats = helped["stats"]
    assert stats["compiled_ahead:helper"] == 1, stats
    assert stats.get("op.hit", 0) >= 2, stats  # stored kernels the typing loaded
    [started] = helped["started"]
    assert started["index"] > 0 and started["loaded"] == 0, helped["started"]
    assert not started["typing"], helped["started"]  # numba's compile had not begun
    # The types it started from are those the typing then began with (told it again).
    [before_compile, typing] = helped["begun"]
    assert before_compile == typing
    assert stats["op.compiled_ahead"] >= 1, stats
    assert stats.get("compiled_ahead:unused", 0) == 0, stats
    assert helped["values"] == alone["values"]


def test_a_prediction_that_fails_before_the_compile_leaves_the_helper_to_the_typing(tmp_path):
    """The types the helper would start from cannot be made before numba's compile (made
    to raise here): the compile goes on, the typing starts the helper, and the bits are
    those of the edit compiled alone."""
    store = {"NBCACHE_DIR": str(tmp_path / "store"), "NBCACHE_COMPILE_AHEAD": "1"}
    run_python(EDITED.format(outputs="[pt.sort(x), pt.cumsum(x)]"), env=store)
    failing = ("from numba_cache.kernels.assembly import graph_kernel\n"
               "def types_of_arguments(*arguments):\n"
               "    raise RuntimeError('no types')\n"
               "graph_kernel.types_of_arguments = types_of_arguments\n")
    edit = EDITED.format(outputs="[pt.sort(x), pt.cumsum(x), "
                                 "pt.argsort(pt.cumprod(pt.sort(x) + pt.cumsum(x)))]")
    helped = run_python(failing + edit, env=store)
    alone = run_python(edit, env={"NBCACHE_DIR": str(tmp_path / "alone"),
                                  "NBCACHE_COMPILE_AHEAD": "0"})
    assert helped["stats"]["compiled_ahead:helper"] == 1, helped["stats"]
    [started] = helped["started"]
    assert started["typing"], helped["started"]
    assert helped["values"] == alone["values"]


SECOND_THREAD = ("stop = threading.Event()\n"
                 "threading.Thread(target=stop.wait, daemon=True).start()")


def test_beside_another_python_thread_the_helper_is_spawned_not_forked(cold_runs, tmp_path):
    """A fork copies only the forking thread: a lock another thread holds would never be
    released in the child. With a second thread alive, the helper is a new interpreter,
    and the compile gives the same bits."""
    threaded = compile_cost({"NBCACHE_DIR": str(tmp_path / "threaded"),
                             "NBCACHE_COMPILE_AHEAD": "1"}, prelude=SECOND_THREAD)
    assert threaded["stats"]["compiled_ahead:helper"] == 1
    assert threaded["stats"]["compiled_ahead:spawned"] == 1
    assert threaded["values"] == cold_runs["alone"]["values"]
    assert not threaded["children_left"]


def test_a_helper_whose_writes_fail_changes_nothing_but_the_time(cold_runs, tmp_path):
    """With every write failing (a disk failing at the rename), the helper stores nothing,
    and the compile gives the same bits with the one warning it gives alone."""
    store = tmp_path / "failing"
    failing = compile_cost({"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "1",
                            "NBCACHE_TEST_FAULT": "before-rename:EIO"})
    assert failing["stats"]["compiled_ahead:helper"] == 1
    assert failing["values"] == cold_runs["alone"]["values"]
    assert failing["stats"]["op.miss"] == cold_runs["alone"]["stats"]["op.miss"]
    assert "op.compiled_ahead" not in failing["stats"]
    assert len(failing["warnings"]) == 1 and "Input/output error" in failing["warnings"][0]
    assert not list(store.rglob("*.nbk"))


HEAVY = """
import json, threading
import numpy as np
import pytensor
import numba_cache
from numba_cache.evaluation import models
{prelude}
model = models.gp_model()
values = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")(*model.point)
print(json.dumps({{"stats": dict(numba_cache.session_stats()),
                  "values": [np.asarray(value).tolist() for value in values]}}))
"""


@pytest.fixture(scope="module")
def gp_alone(tmp_path_factory):
    """The GP's cold compile without a helper."""
    store = tmp_path_factory.mktemp("gp-alone")
    yield run_python(HEAVY.format(prelude=""),
                     env={"NBCACHE_DIR": str(store), "NBCACHE_COMPILE_AHEAD": "0"})
    shutil.rmtree(store, ignore_errors=True)


def test_a_spawned_helper_compiles_ahead_for_the_store_and_settings_of_its_process(
        tmp_path, gp_alone):
    """A spawned helper (beside a second thread) adopts the settings of the process it
    helps, here a store configured from Python, not the environment: the GP's cold
    compile loads op kernels it compiled, and gives the bits of a compile alone."""
    configured = ("from numba_cache import settings\n"
                  f"settings.configure(root={str(tmp_path / 'configured')!r})")
    spawned = run_python(HEAVY.format(prelude=f"{SECOND_THREAD}\n{configured}"),
                         env={"NBCACHE_COMPILE_AHEAD": "1",
                              "NBCACHE_DIR": str(tmp_path / "not-this-one")})
    alone = gp_alone
    assert spawned["stats"]["compiled_ahead:spawned"] == 1
    assert spawned["stats"].get("op.compiled_ahead", 0) >= 1, spawned["stats"]
    # Its kernels' object-mode blocks, loaded at the first call, are no hits either.
    assert _hits_and_misses(spawned["stats"]) == _hits_and_misses(alone["stats"])
    assert spawned["values"] == alone["values"]
    assert not (tmp_path / "not-this-one").exists()


def test_a_spawned_helper_takes_the_pytensor_flags_set_in_python(tmp_path):
    """The PyTensor flags of the fingerprint, here ``numba__fastmath`` (on by default) set
    in Python: a spawned helper without them would compute other keys and compile
    nothing the process loads."""
    exact = "pytensor.config.numba__fastmath = False"
    spawned = run_python(HEAVY.format(prelude=f"{SECOND_THREAD}\n{exact}"),
                         env={"NBCACHE_DIR": str(tmp_path / "spawned"),
                              "NBCACHE_COMPILE_AHEAD": "1"})
    alone = run_python(HEAVY.format(prelude=exact),
                       env={"NBCACHE_DIR": str(tmp_path / "alone"), "NBCACHE_COMPILE_AHEAD": "0"})
    assert spawned["stats"]["compiled_ahead:spawned"] == 1
    assert spawned["stats"].get("op.compiled_ahead", 0) >= 1, spawned["stats"]
    assert spawned["values"] == alone["values"]


def test_in_a_jupyter_kernel_a_cold_compile_is_helped_and_gives_the_bits_alone(
        tmp_path, gp_alone):
    """A real Jupyter kernel (ipykernel, started by jupyter_client) runs several threads:
    the GP's cold compile there spawns its helper, loads op kernels it compiled, and
    gives the bits and the hits and misses of a compile alone."""
    from jupyter_client.manager import start_new_kernel

    code = HEAVY.format(prelude="").replace(
        '"stats":', '"threads": threading.active_count(), "stats":')
    manager, client = start_new_kernel(
        startup_timeout=120, kernel_name="python3",
        env=child_environment({"NBCACHE_DIR": str(tmp_path / "store"),
                               "NBCACHE_COMPILE_AHEAD": "1"}))
    printed = []
    try:
        reply = client.execute_interactive(
            code, timeout=600, output_hook=lambda message: printed.append(
                message["content"].get("text", "") if message["msg_type"] == "stream" else ""))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", reply["content"]
    notebook = json.loads("".join(printed).strip().splitlines()[-1])
    assert notebook["threads"] > 1
    assert notebook["stats"]["compiled_ahead:spawned"] == 1
    assert notebook["stats"].get("op.compiled_ahead", 0) >= 1, notebook["stats"]
    assert _hits_and_misses(notebook["stats"]) == _hits_and_misses(gp_alone["stats"])
    assert notebook["values"] == gp_alone["values"]


@pytest.mark.parametrize("prelude", ["", SECOND_THREAD], ids=["forked", "spawned"])
def test_a_helper_dies_with_the_process_it_helps(tmp_path, prelude):
    """A process killed while its helper compiles leaves no helper compiling alone (and
    holding an entry's lock): the kernel kills it with its parent."""
    env = child_environment({"NBCACHE_DIR": str(tmp_path / "store"),
                             "NBCACHE_COMPILE_AHEAD": "1"})
    compiling = subprocess.Popen([sys.executable, "-c", HEAVY.format(prelude=prelude)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    helper = None
    deadline = time.monotonic() + 120
    while helper is None and time.monotonic() < deadline and compiling.poll() is None:
        helper = _helper_child(compiling.pid)
        time.sleep(0.01)
    assert helper is not None, f"no helper was seen: {compiling.communicate()[1][-2000:]}"
    compiling.send_signal(signal.SIGKILL)
    compiling.wait()
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "the helper outlived the process it helped"


def _hits_and_misses(stats: dict) -> dict:
    """The lookups of the graph's kernels; not of numba's implementations, which a helper
    compiles for the kernels it compiles and the process it helps may then load."""
    return {name: count for name, count in stats.items()
            if name.endswith((".hit", ".miss")) and not name.startswith("overload.")}


def _helper_child(parent: int) -> int | None:
    """A child of `parent` running what it runs (a fork, not a compiler PyTensor started),
    or a spawned helper."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    for child in children:
        try:
            child_command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if child_command == command or b"numba_cache.kernels.helpers.spawned_helper" in child_command:
            return int(child)
    return None


def _alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
