"""A writer killed (SIGKILL) at any step of a write leaves nothing that looks valid but is not.

The writer compiles a graph whose entry of one kind is missing from the store, and
is stopped at a checkpoint of the store's write path (``numba_cache/store/
checkpoints.py``) while writing that entry, with the entry's lock held; the test
checks what is on disk there, kills it, and starts the next process. That process
must get the lock at once (the kernel released the dead holder's ``flock``), load
or compile the graph with Python mode's result, warn about nothing, remove the dead
writer's temp file, and leave ``numba-cache verify`` clean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import reliability as rel
from reliability import Checkpoint, assert_correct, keys_of, verify_problems

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

GRAPH = "sumexp"
CLEAN_ENV = {"NBCACHE_DISABLE": "", "NBCACHE_READONLY": "", "NBCACHE_MAX_SIZE": ""}
#: Long enough that a next process waiting on the dead writer's lock would time out.
LOCK_TIMEOUT = {"NBCACHE_LOCK_TIMEOUT": "600"}
NEXT_PROCESS_TIMEOUT = 120
#: The checkpoints by the state they leave: no record yet, or the complete record.
BEFORE_RECORD = ("before-temp-write", "after-temp-write", "before-rename")
AFTER_RECORD = ("after-rename", "before-index")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("crash") / "store"
    report = rel.run([GRAPH], CLEAN_ENV | {"NBCACHE_DIR": str(root)})
    assert_correct(report)
    return root, report


def first_written_key(report: dict, kind: str) -> str:
    """The key of kind `kind` the writer saves first: the rewrite, the graph, or its first op."""
    return keys_of(report, GRAPH, kind)[0]


def remove_entries(root: Path, fingerprint: str, report: dict, kind: str) -> None:
    """Remove what makes the writer write an entry of `kind` (an op needs its graph to miss)."""
    store = rel.open_store(root)
    kinds = {"rewrite": ["rewrite"], "graph": ["graph"], "op": ["graph", "op"]}[kind]
    for removed in kinds:
        for key in keys_of(report, GRAPH, removed):
            store.remove(fingerprint, key)


def indexed_keys(root: Path) -> set[str]:
    return {entry.key for entry in rel.open_store(root, readonly=True).entries()}


def check_paused_state(root: Path, fingerprint: str, key: str, kind: str, checkpoint: str) -> None:
    """What the disk holds with the writer paused at `checkpoint`, writing an entry of `kind`."""
    record = rel.record_path(root, fingerprint, key)
    temps = [path for path in rel.temp_files(root) if path.name.startswith(f"{key}.nbk.")]
    # The copy (kernels have one) comes after the record, as the last step of the backend's write.
    copied = checkpoint == "before-index" and kind != "rewrite"
    assert rel.source_path(root, fingerprint, key).exists() == copied
    if checkpoint in BEFORE_RECORD:
        assert not record.exists()
        assert len(temps) == (0 if checkpoint == "before-temp-write" else 1)
    else:
        assert record.exists() and temps == []
        assert key not in indexed_keys(root)


#: Every checkpoint while the graph entry is written (its lock held); one for the others.
CASES = [("graph", checkpoint) for checkpoint in (*BEFORE_RECORD, *AFTER_RECORD)]
CASES += [(kind, "before-rename") for kind in ("rewrite", "op")]


@pytest.mark.parametrize(("kind", "checkpoint"), CASES)
def test_a_writer_killed_at_a_checkpoint_leaves_a_store_the_next_process_trusts(
    compiled, private_store, tmp_path, kind, checkpoint
):
    baseline, report = compiled
    root = rel.copy_store(baseline, private_store)
    fingerprint = report["fingerprint"]
    remove_entries(root, fingerprint, report, kind)
    key = first_written_key(report, kind)

    paused = Checkpoint(tmp_path, checkpoint)
    writer = rel.start([GRAPH], paused.env)
    paused.wait(writer)
    check_paused_state(root, fingerprint, key, kind, checkpoint)
    rel.kill(writer)

    following = rel.run([GRAPH], LOCK_TIMEOUT, timeout=NEXT_PROCESS_TIMEOUT)
    assert_correct(following)
    expected = "hit" if checkpoint in AFTER_RECORD else "miss"
    assert rel.decision_of(following, GRAPH, key) == expected
    assert following["warnings"] == []
    assert rel.temp_files(root) == []
    assert verify_problems() == []
    assert rel.open_store(root).load(fingerprint, key) is not None
