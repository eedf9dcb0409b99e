"""The pytest plugin: a small suite of our own, run by a real pytest in subprocesses with two
xdist workers, on one store, with and without ``-p numba_cache.pytest_plugin``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import child_environment, run_cli, run_python

from numba_cache.cli.formatting import human_size

SUITE = '''
import os
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.raise_op import Assert

REFERENCE = Mode(linker="py", optimizer="fast_run")


def check(name, inputs, outputs, *values):
    """Compiled with NUMBA, the same as PyTensor's Python linker; its bytes written out."""
    result = pytensor.function(inputs, outputs, mode="NUMBA")(*values)
    expected = pytensor.function(inputs, outputs, mode=REFERENCE)(*values)
    np.testing.assert_allclose(result, expected, rtol=1e-12)
    (Path(os.environ["SUITE_OUT"]) / f"{name}.bin").write_bytes(np.asarray(result).tobytes())


def test_elementwise():
    x = pt.vector("x")
    check("elementwise", [x], pt.exp(x) * 2.0 + pt.tanh(x), np.linspace(-1, 1, 7))


def test_matrix():
    a = pt.matrix("a")
    check("matrix", [a], (a @ a.T).sum(axis=0), np.arange(6.0).reshape(2, 3))


def test_reduction():
    x, y = pt.vectors("x", "y")
    check("reduction", [x, y], pt.log1p(pt.exp(x - y)).max(), np.arange(4.0), np.ones(4))


def test_graph_that_raises():
    x = pt.vector("x")
    positive = Assert("x must be positive")(x, pt.all(x > 0))
    f = pytensor.function([x], positive * 2.0, mode="NUMBA")
    with pytest.raises(AssertionError, match="x must be positive") as raised:
        f(-np.ones(2))
    (Path(os.environ["SUITE_OUT"]) / "raises.bin").write_bytes(
        str(raised.value).encode() + np.asarray(f(np.ones(2))).tobytes())
'''

UNCACHEABLE = '''
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op


class PerformOnly(Op):
    """No numba implementation: numba runs it in object mode, uncacheable."""

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0] + 1.0


def test_object_mode_op():
    x = pt.vector("x")
    assert (pytensor.function([x], PerformOnly()(x) * 3.0, mode="NUMBA")(np.zeros(2)) == 3).all()
'''

SUMMARY = re.compile(
    r"^numba_cache: (?P<hits>\d+) hits?, (?P<misses>\d+) miss(?:es)?, (?P<compiles>\d+) "
    r"compiles?(?: \((?P<ahead>\d+) ahead, in helpers\))? in (?P<seconds>[\d.]+) s, "
    r"(?P<uncacheable>\d+) uncacheable(?: \((?P<reasons>[^)]*)\))?; "
    r"store (?P<root>.+): (?P<entries>\d+) entr(?:y|ies), (?P<size>.+)$",
    re.MULTILINE,
)
PLUGIN = ("-p", "numba_cache.pytest_plugin")


def run_suite(suite: Path, out: Path, store: Path, state: Path, *options: str):
    """``pytest -n 2 OPTIONS`` on `suite`, as a user runs it; its results' bytes go to `out`."""
    out.mkdir()
    env = child_environment({
        "NBCACHE_DIR": str(store), "XDG_STATE_HOME": str(state), "SUITE_OUT": str(out),
        "NBCACHE_ACTIVATE": None, "PYTEST_ADDOPTS": None,
    })
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", *options],
        cwd=suite, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert process.returncode == 0, process.stdout[-5000:] + process.stderr[-3000:]
    return process.stdout


def results(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def summary_of(output: str) -> dict:
    found = SUMMARY.findall(output)
    assert len(found) == 1, f"not one summary line:\n{output[-3000:]}"
    return SUMMARY.search(output).groupdict()


def store_stats(store: Path, state: Path) -> dict:
    env = {"NBCACHE_DIR": str(store), "XDG_STATE_HOME": str(state)}
    stats = run_cli("stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    return json.loads(stats.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, state_home):
    """The suite without the plugin, then with it twice on one store (the first explained)."""
    base = tmp_path_factory.mktemp("plugin")
    suite = base / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")  # the suite's own rootdir, no conftest of ours
    (suite / "test_suite.py").write_text(SUITE)
    store = base / "store"
    found = {"store": store, "state": state_home}
    found["plain"] = run_suite(suite, base / "plain", store, state_home)
    found["store_after_plain"] = store.exists() and any(store.iterdir())
    found["cold"] = run_suite(suite, base / "cold", store, state_home, *PLUGIN,
                              "--numba-cache-explain")
    found["cold_stats"] = store_stats(store, state_home)
    found["warm"] = run_suite(suite, base / "warm", store, state_home, *PLUGIN)
    found["warm_stats"] = store_stats(store, state_home)
    found["results"] = {name: results(base / name) for name in ("plain", "cold", "warm")}
    return found


def test_without_the_plugin_asked_for_nothing_is_cached(runs):
    assert not runs["store_after_plain"], "the store was written without -p"
    assert "numba_cache" not in runs["plain"]


def test_every_test_wrote_its_results(runs):
    assert set(runs["results"]["plain"]) == {
        "elementwise.bin", "matrix.bin", "reduction.bin", "raises.bin"}


def test_the_first_run_misses_and_compiles(runs):
    cold = summary_of(runs["cold"])
    assert int(cold["misses"]) > 0 and int(cold["compiles"]) > 0
    assert float(cold["seconds"]) > 0


def test_the_second_run_compiles_nothing_and_gives_numba_s_results(runs):
    warm = summary_of(runs["warm"])
    assert warm["compiles"] == "0" and warm["ahead"] is None and warm["misses"] == "0", warm
    assert int(warm["hits"]) > 0
    plain = runs["results"]["plain"]
    assert runs["results"]["cold"] == plain
    assert runs["results"]["warm"] == plain


def test_the_summary_line_agrees_with_the_store(runs):
    cold, warm = summary_of(runs["cold"]), summary_of(runs["warm"])
    cold_stats, warm_stats = runs["cold_stats"], runs["warm_stats"]
    # The store counts every process's lookups: after the first run, that run's.
    assert (int(cold["hits"]), int(cold["misses"])) == (cold_stats["hits"], cold_stats["misses"])
    assert int(warm["hits"]) == warm_stats["hits"] - cold_stats["hits"]
    assert warm_stats["misses"] == cold_stats["misses"]
    assert cold["uncacheable"] == warm["uncacheable"] == "0"
    for summary, stats in ((cold, cold_stats), (warm, warm_stats)):
        assert Path(summary["root"]) == runs["store"]
        assert int(summary["entries"]) == stats["entries"]
        assert summary["size"] == human_size(stats["bytes"])


def test_explain_names_each_miss_of_a_run_on_an_empty_store(runs):
    lines = runs["cold"].splitlines()
    [header] = [n for n, line in enumerate(lines) if "missed kernels" in line]
    misses = int(re.search(r"numba_cache: (\d+) missed kernels", lines[header]).group(1))
    explained = lines[header + 1:header + 1 + misses]
    assert misses > 0 and all(" miss " in line for line in explained), explained
    assert all(line.endswith("entry was stored before") for line in explained), explained
    kinds = {line.split()[0] for line in explained}
    assert {"graph", "op"} <= kinds
    assert any("Composite" in line for line in explained)
    # One line per missed key: the store counted each of them once.
    assert misses == int(summary_of(runs["cold"])["misses"])
    assert "missed kernels" not in runs["warm"]  # only asked for the first


SAME_GRAPH = '''
import json
import os
import time
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt

import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles


def test_same_graph():
    """Run in both workers (--dist each); each waits for the other, then both compile."""
    out = Path(os.environ["SUITE_OUT"])
    me = os.environ["PYTEST_XDIST_WORKER"]
    (out / f"ready-{me}").touch()
    deadline = time.monotonic() + 120
    while len(list(out.glob("ready-*"))) < 2:
        assert time.monotonic() < deadline, "the other worker never came"
        time.sleep(0.01)
    x, y = pt.vectors("x", "y")
    with count_numba_compiles() as compiled:
        f = pytensor.function([x, y], pt.tanh(x) * pt.exp(y) + pt.dot(x, y), mode="NUMBA")
        value = f(np.arange(3.0), np.ones(3))
    (out / f"{me}.json").write_text(json.dumps({
        "compiles": len(compiled), "stats": dict(numba_cache.session_stats()),
        "value": value.tolist()}))
'''


WARM_UP = """
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.vector("x")
pytensor.function([x], x - 1.0, mode="NUMBA_CACHE")(np.ones(2))
"""


def test_two_workers_compiling_one_graph_at_once_share_one_compile(tmp_path, state_home):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_same.py").write_text(SAME_GRAPH)
    store = tmp_path / "store"
    env = {"NBCACHE_DIR": str(store), "XDG_STATE_HOME": str(state_home)}
    # A new store's first processes each run the self-test, which compiles probes: done
    # here first, with a graph of other ops, so that the workers compile the graph only.
    run_python(f"{WARM_UP}print('{{}}')", env)
    assert run_cli("stats", "--zero", env=env).returncode == 0
    output = run_suite(suite, tmp_path / "out", store, state_home, *PLUGIN, "--dist", "each")
    workers = [json.loads(path.read_text()) for path in sorted((tmp_path / "out").glob("gw*.json"))]
    assert len(workers) == 2
    assert workers[0]["value"] == workers[1]["value"]
    compiler, loader = sorted(workers, key=lambda worker: -worker["compiles"])
    # Single flight: one compiled it; the other waited on the entry lock, then loaded it.
    assert compiler["compiles"] > 0 and loader["compiles"] == 0, workers
    assert compiler["stats"].get("graph.miss") == 1 and loader["stats"].get("graph.hit") == 1
    assert loader["stats"].get("graph.miss", 0) == 0 and loader["stats"].get("op.miss", 0) == 0
    stats = store_stats(store, state_home)
    entries = json.loads(run_cli("list", "--json", env=env).stdout)["entries"]
    keys = [entry["key"] for entry in entries]
    assert len(keys) == len(set(keys)) == stats["entries"]
    assert stats["counters"]["graph.miss"] == 1 and stats["counters"]["graph.hit"] == 1
    summary = summary_of(output)
    assert int(summary["hits"]) == stats["hits"] and int(summary["misses"]) == stats["misses"]
    assert int(summary["compiles"]) == compiler["compiles"] + int(summary["ahead"] or 0)


def test_without_xdist_uncacheable_kernels_are_counted_as_the_store_counts_them(
        tmp_path, state_home):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_uncacheable.py").write_text(UNCACHEABLE)
    store = tmp_path / "store"
    output = run_suite(suite, tmp_path / "out", store, state_home, *PLUGIN, "-n", "0")
    summary, stats = summary_of(output), store_stats(store, state_home)
    uncacheable = {name.removeprefix("uncacheable:"): value
                   for name, value in stats["counters"].items() if name.startswith("uncacheable:")}
    assert "object-mode-op" in uncacheable, stats["counters"]
    assert int(summary["uncacheable"]) == sum(uncacheable.values())
    assert summary["reasons"] == ", ".join(f"{reason} {count}"
                                           for reason, count in sorted(uncacheable.items()))
    assert int(summary["compiles"]) > 0 and int(summary["entries"]) == stats["entries"]


def test_a_bad_store_setting_is_one_clear_line(tmp_path, state_home):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    env = child_environment({"XDG_STATE_HOME": str(state_home), "NBCACHE_MAX_SIZE": "lots"})
    process = subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert process.returncode == 4, process.stdout + process.stderr  # pytest's usage error
    assert "Traceback" not in process.stderr
    [line] = [line for line in process.stderr.splitlines() if "numba_cache" in line]
    assert "NBCACHE_MAX_SIZE" in line and "'lots'" in line, line


def test_the_plugin_registers_no_entry_point():
    """Installed is not asked for: pytest loads no plugin of numba_cache by itself."""
    from importlib.metadata import entry_points

    assert not [point for point in entry_points(group="pytest11")
                if point.value.startswith("numba_cache")]
    assert "pytest11" not in textwrap.dedent(
        (Path(__file__).parents[1] / "pyproject.toml").read_text())
