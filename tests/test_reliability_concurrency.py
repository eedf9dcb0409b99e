"""Processes sharing one store: every result right, each kernel compiled once, the store consistent.

Races start workers behind a barrier under each start method, from a parent that
already used the store (its index connection, locks and numba state are what
forked workers inherit). Interleavings at the commit step are forced with the
store's checkpoints (``numba_cache/store/checkpoints.py``): a writer is paused
right before renaming its record into place (``before-rename``), or after it but
before indexing it (``before-index``), while another process reads or writes.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
import reliability as rel
from helpers import run_cli
from reliability import Checkpoint, assert_correct, keys_of, verify_problems

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

GRAPH = "sumexp"
POOL = ["sumexp", "tanh", "sqrtcos", "cumsum", "maxshift"]
WARM_UP = "logistic"
CLEAN_ENV = {"NBCACHE_DISABLE": "", "NBCACHE_READONLY": "", "NBCACHE_MAX_SIZE": ""}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("concurrency") / "store"
    report = rel.run(POOL, CLEAN_ENV | {"NBCACHE_DIR": str(root)})
    assert_correct(report)
    return root, report


def store_without_graph_entry(compiled, private_store) -> tuple[Path, str, str]:
    """A copy of the compiled store without GRAPH's graph entry: its root, fingerprint, key."""
    baseline, report = compiled
    root = rel.copy_store(baseline, private_store)
    (key,) = keys_of(report, GRAPH, "graph")
    rel.open_store(root).remove(report["fingerprint"], key)
    return root, report["fingerprint"], key


def graph_decision(report: dict) -> str:
    return rel.decisions(report, GRAPH)["graph"]


# Races


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_racing_processes_compile_each_kernel_once(method):
    """Three workers compile the same graph first, then the others in rotated orders."""
    rest = POOL[1:]
    groups = [[GRAPH, *rest[shift:], *rest[:shift]] for shift in range(3)]
    outcome = rel.run([method, WARM_UP, *(",".join(group) for group in groups)], command="race")
    assert outcome["exitcodes"] == [0, 0, 0]
    decisions = defaultdict(list)
    for report in outcome["reports"]:
        assert_correct(report)
        assert report["warnings"] == []
        for lookups in report["lookups"].values():
            for lookup in lookups:
                if lookup["kind"] in ("graph", "op"):
                    decisions[lookup["key"]].append(lookup["decision"])
    not_compiled_once = {key: found for key, found in decisions.items() if found.count("miss") != 1}
    assert not not_compiled_once
    assert verify_problems() == []


# Interleavings at the commit step


def wait_for_text(path: Path, text: str, process, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        assert process.poll() is None, path.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{text!r} not seen in {timeout} s"
        time.sleep(0.02)


def test_a_reader_waits_for_a_writer_paused_before_its_rename_then_loads_its_entry(
    compiled, private_store, tmp_path
):
    root, fingerprint, key = store_without_graph_entry(compiled, private_store)
    paused = Checkpoint(tmp_path, "before-rename")
    writer = rel.start([GRAPH], paused.env)
    paused.wait(writer)
    log = tmp_path / "reader.log"
    reader = rel.start([GRAPH], {"NBCACHE_LOG": "debug"}, stderr=log)
    wait_for_text(log, "rewrite hit", reader)  # next: the graph's lookup, and its lock
    time.sleep(1.0)
    assert reader.poll() is None, "the reader did not wait for the writer's lock"
    assert not rel.record_path(root, fingerprint, key).exists()
    paused.release()
    written, read = rel.finish(writer), rel.finish(reader)
    assert (graph_decision(written), graph_decision(read)) == ("miss", "hit")
    for report in written, read:
        assert_correct(report)
        assert report["warnings"] == []
    assert verify_problems() == []


def test_a_reader_loads_a_record_renamed_into_place_before_it_is_indexed(
    compiled, private_store, tmp_path
):
    root, _, key = store_without_graph_entry(compiled, private_store)
    paused = Checkpoint(tmp_path, "before-index")
    writer = rel.start([GRAPH], paused.env)
    paused.wait(writer)
    read = rel.run([GRAPH], timeout=120)  # does not need the writer's lock: the record is there
    assert graph_decision(read) == "hit"
    paused.release()
    written = rel.finish(writer)
    assert graph_decision(written) == "miss"
    for report in written, read:
        assert_correct(report)
        assert report["warnings"] == []
    assert verify_problems() == []
    assert key in {entry.key for entry in rel.open_store(root).entries()}


def test_a_process_waits_for_another_rewriting_the_same_graph_then_restores_its_rewrite(
    compiled, private_store, tmp_path
):
    """Rewrites are single-flight like kernels: the writer holds the rewrite key's lock
    from its miss to its save (paused before renaming the record), the reader waits
    for it, then restores the writer's rewrite instead of rewriting the graph itself."""
    baseline, report = compiled
    root = rel.copy_store(baseline, private_store)
    (key,) = keys_of(report, GRAPH, "rewrite")
    rel.open_store(root).remove(report["fingerprint"], key)
    paused = Checkpoint(tmp_path, "before-rename")
    writer = rel.start([GRAPH], paused.env)
    paused.wait(writer)
    log = tmp_path / "reader.log"
    reader = rel.start([GRAPH], {"NBCACHE_LOG": "debug"}, stderr=log)
    wait_for_text(log, "not stored: taking its lock", reader)
    time.sleep(1.0)
    assert reader.poll() is None, "the reader did not wait for the writer's rewrite"
    paused.release()
    written, read = rel.finish(writer), rel.finish(reader)
    assert rel.decisions(written, GRAPH)["rewrite"] == "miss"
    assert rel.decisions(read, GRAPH) == {"rewrite": "hit", "graph": "hit"}
    for report_ in written, read:
        assert_correct(report_)
        assert report_["warnings"] == []
        assert report_["stats"].get("rewrite.miss", 0) + report_["stats"].get("rewrite.hit", 0) == 1
    assert verify_problems() == []


def test_two_writers_committing_the_same_key_leave_one_valid_record(
    compiled, private_store, tmp_path
):
    """The second writer gives up waiting for the first one's lock (1 s) and compiles too;
    both pause before renaming, then commit, second first."""
    root, fingerprint, key = store_without_graph_entry(compiled, private_store)
    first = Checkpoint(tmp_path, "before-rename", "first")
    second = Checkpoint(tmp_path, "before-rename", "second")
    first_writer = rel.start([GRAPH], first.env)
    first.wait(first_writer)
    second_writer = rel.start([GRAPH], second.env | {"NBCACHE_LOCK_TIMEOUT": "1"})
    second.wait(second_writer)
    assert len([path for path in rel.temp_files(root) if path.name.startswith(f"{key}.nbk.")]) == 2
    assert not rel.record_path(root, fingerprint, key).exists()

    second.release()
    second_report = rel.finish(second_writer)
    assert rel.open_store(root).load(fingerprint, key) is not None
    first.release()
    first_report = rel.finish(first_writer)

    for report in first_report, second_report:
        assert_correct(report)
        assert graph_decision(report) == "miss"
    assert first_report["warnings"] == []
    assert len(second_report["warnings"]) == 1 and "waited 1 s" in second_report["warnings"][0]
    assert rel.temp_files(root) == []
    assert verify_problems() == []
    following = rel.run([GRAPH])
    assert_correct(following)
    assert graph_decision(following) == "hit"


# Eviction


def test_evicting_while_processes_load_breaks_none_of_them(compiled, private_store):
    """Two processes compile pool graphs at random while this one evicts, again and again,
    down to random sizes, in process and with ``numba-cache prune``."""
    baseline, _ = compiled
    root = rel.copy_store(baseline, private_store)
    workers = [rel.start(["12", str(seed), *POOL], command="churn") for seed in range(2)]
    store = rel.open_store(root)
    chooser = random.Random(0)
    evicted, passes = 0, 0
    while any(worker.poll() is None for worker in workers):
        total = store.stats()["bytes"]
        if passes % 10 == 9:
            size = str(chooser.randrange(total // 2 + 1))
            result = run_cli("prune", "--max-size", size)
            assert result.returncode == 0, result.stderr
        else:
            evicted += len(store.evict_to(chooser.randrange(total // 2 + 1), timeout=10))
        passes += 1
        time.sleep(0.05)
    for report in map(rel.finish, workers):
        assert report["wrong"] == [] and report["warnings"] == [], report
        assert report["stats"].get("graph.miss", 0) > 0  # evictions did make them compile
    assert passes > 10 and evicted > 0
    assert verify_problems() == []
