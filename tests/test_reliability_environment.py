"""Stores that cannot be written, disks that fail, and entries of other environments.

In every case the compile succeeds with Python mode's result and at most one
warning, and nothing half-written is left behind. Writes fail for real (a
read-only mount, a full tmpfs, a root below a regular file) or are made to fail
at one step of the write path with the errno a failing disk gives
(``NBCACHE_TEST_FAULT``, see ``numba_cache/store/checkpoints.py``).
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import reliability as rel
from helpers import run_cli, without_op_loads
from reliability import assert_correct, run, verify_problems

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

CACHED = ["sumexp", "tanh"]
NEW = ["cumsum"]
CLEAN_ENV = {"NBCACHE_DISABLE": "", "NBCACHE_READONLY": "", "NBCACHE_MAX_SIZE": ""}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("environment") / "store"
    report = run(CACHED, CLEAN_ENV | {"NBCACHE_DIR": str(root)})
    assert_correct(report)
    return root, report


def mount(*arguments: str) -> None:
    """Run mount(8), or skip the test where mounting is refused (it needs root)."""
    result = shutil.which("mount") and subprocess.run(
        ["mount", *arguments], capture_output=True, check=False
    )
    if not result or result.returncode != 0:
        pytest.skip(f"cannot mount here: {getattr(result, 'stderr', b'no mount')!r}")


@contextlib.contextmanager
def mounted(*arguments: str, at: Path):
    at.mkdir(parents=True, exist_ok=True)
    mount(*arguments, str(at))
    try:
        yield at
    finally:
        subprocess.run(["umount", "--lazy", str(at)], check=False)


def assert_one_warning(report: dict, *fragments: str) -> None:
    assert len(report["warnings"]) == 1, report["warnings"]
    for fragment in fragments:
        assert fragment in report["warnings"][0], report["warnings"][0]


# Read-only stores


def check_readonly_use(root: Path, env: dict, reason: str) -> None:
    before = rel.snapshot(root)
    report = run(CACHED + NEW, env)
    assert_correct(report)
    stats = {name: n for name, n in report["stats"].items() if not name.startswith("op.")}
    assert stats == {"rewrite.hit": 2, "graph.hit": 2, "rewrite.miss": 1, "graph.miss": 1}
    assert_one_warning(report, "read-only", reason)
    assert rel.snapshot(root) == before


def test_the_readonly_setting_serves_hits_compiles_misses_in_memory_and_writes_nothing(
    compiled, private_store
):
    root = rel.copy_store(compiled[0], private_store)
    check_readonly_use(root, {"NBCACHE_READONLY": "1"}, "readonly setting")


def test_a_readonly_directory_serves_hits_compiles_misses_in_memory_and_writes_nothing(
    compiled, private_store, tmp_path
):
    rel.copy_store(compiled[0], private_store)
    view = tmp_path / "readonly-view"
    with mounted("--bind", str(private_store), at=view):
        mount("-o", "remount,bind,ro", str(view))
        check_readonly_use(view, {"NBCACHE_DIR": str(view)}, "not writable")


NOBODY = 65534


def use_store_as_nobody(root: str, fingerprint: str, keys: list[str], results) -> None:
    """Drop to the user nobody, then look `keys` up in `root` as a compile would."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            store = rel.open_store(Path(root))
            outcome = {"readonly": store.readonly,
                       "loaded": [store.load(fingerprint, key) is not None for key in keys]}
            store.count(fingerprint, "graph.miss")
        except Exception as error:  # noqa: BLE001 - any exception is the failure looked for
            outcome = {"error": repr(error)}
    results.put(outcome | {"warnings": [str(warning.message) for warning in caught]})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run a child as another user")
def test_a_store_this_user_may_not_even_search_is_a_miss_with_no_crash(compiled, private_store):
    """The store sits in pytest's temp directory, private to root; the child is nobody."""
    baseline, report = compiled
    root = rel.copy_store(baseline, private_store)
    keys = [rel.key_of(report, name, "graph") for name in CACHED]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=use_store_as_nobody,
                            args=(str(root), report["fingerprint"], keys, results))
    child.start()
    outcome = results.get(timeout=60)
    child.join(30)
    assert "error" not in outcome, outcome
    assert outcome["readonly"] and outcome["loaded"] == [False] * len(keys)
    assert sorted(message.split(" ")[1:4] for message in outcome["warnings"]) == [
        ["cannot", "read", "the"], ["the", "cache", str(root)],
    ], outcome["warnings"]


# Failing writes


def full_filesystem(at: Path, by: str) -> contextlib.AbstractContextManager:
    """A tmpfs with a store root in it, then filled: no block, or no inode, left."""
    options = "size=512k" if by == "blocks" else "size=64m,nr_inodes=64"
    return mounted("-t", "tmpfs", "-o", options, "tmpfs", at=at)


def fill(directory: Path, by: str) -> list[Path]:
    """Files taking every block, or every inode, of the filesystem `directory` is on."""
    fillers: list[Path] = []
    with contextlib.suppress(OSError):
        if by == "blocks":
            with (directory / "filler").open("wb") as file:
                fillers.append(directory / "filler")
                while True:
                    file.write(b"\0" * 4096)
                    file.flush()
        while True:
            (directory / f"filler{len(fillers)}").touch()
            fillers.append(directory / f"filler{len(fillers)}")
    return fillers


@pytest.mark.parametrize("by", ["blocks", "inodes"])
def test_a_full_disk_compiles_without_saving_with_one_warning(tmp_path, by):
    with full_filesystem(tmp_path / "tiny", by) as disk:
        root = disk / "store"
        root.mkdir(mode=0o700)
        fillers = fill(disk, by)
        env = {"NBCACHE_DIR": str(root)}
        report = run(CACHED, env)
        assert_correct(report)
        assert_one_warning(report, f"cannot write to the cache {root}")
        assert not list(root.rglob("*.nbk")) and not list(root.rglob("*.py"))
        assert rel.temp_files(root) == []

        for filler in fillers:  # space again: the same graphs are saved
            filler.unlink()
        again = run(CACHED, env)
        assert_correct(again)
        assert again["warnings"] == [] and again["stats"]["graph.miss"] == 2
        assert verify_problems(env) == []
        assert without_op_loads(run(CACHED, env)["stats"]) == {"rewrite.hit": 2, "graph.hit": 2}


FAULTS = [
    ("before-temp-write", "ENOSPC"),
    ("after-temp-write", "ENOSPC"),
    ("after-temp-write", "EIO"),
    ("before-rename", "EIO"),
]


@pytest.mark.parametrize(("checkpoint", "code"), FAULTS)
def test_a_write_failing_at_any_step_compiles_without_saving_with_one_warning(
    private_store, checkpoint, code
):
    # One writer, whose saves are counted below (tests/test_compile_ahead.py fails a
    # helper's writes too).
    report = run(CACHED, {"NBCACHE_TEST_FAULT": f"{checkpoint}:{code}",
                          "NBCACHE_COMPILE_AHEAD": "0"})
    assert_correct(report)
    assert_one_warning(report, os.strerror(getattr(errno, code)), f"injected at {checkpoint}")
    # Every miss, and numba's runtime functions (kernels/runtime/numba_runtime.py), stored by a new store's
    # first process.
    saves = sum(report["stats"][f"{kind}.miss"] for kind in ("rewrite", "graph", "op")) + 1
    assert rel.open_store(private_store).stats()["counters"]["write_error"] == saves
    assert not list(private_store.rglob("*.nbk")) and not list(private_store.rglob("*/??/*.py"))
    assert rel.temp_files(private_store) == []
    assert verify_problems() == []


def test_a_root_below_a_regular_file_compiles_with_one_warning(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    root = tmp_path / "a-file" / "store"
    report = run(CACHED, {"NBCACHE_DIR": str(root)})
    assert_correct(report)
    assert_one_warning(report, str(root))


def test_a_store_whose_temp_directory_is_a_file_compiles_with_one_warning(private_store):
    private_store.mkdir(mode=0o700)
    (private_store / "tmp").write_text("not a directory")
    report = run(CACHED)
    assert_correct(report)
    assert_one_warning(report, "cannot write")
    assert not list(private_store.rglob("*.nbk"))
    (problem,) = verify_problems()
    assert problem["problem"] == "the temporary directory is not a directory"
    assert run_cli("verify", "--repair").returncode == 1
    assert verify_problems() == []
    assert run(CACHED)["warnings"] == [] and list(private_store.rglob("*.nbk"))


def test_a_file_where_a_shard_directory_belongs_is_found_and_removed_by_verify(private_store):
    cold = run(CACHED)
    assert_correct(cold)
    record = rel.record_path(private_store, cold["fingerprint"], rel.key_of(cold, CACHED[0], "graph"))
    shutil.rmtree(record.parent)
    record.parent.write_text("not a directory")
    report = run(CACHED)
    assert_correct(report)
    assert_one_warning(report, "cannot write")
    found = [problem for problem in verify_problems()
             if problem["problem"] == "a file where the store keeps a directory"]
    assert [problem["path"] for problem in found] == [str(record.parent)]
    assert run_cli("verify", "--repair").returncode == 1
    assert verify_problems() == []
    assert run(CACHED)["warnings"] == [] and record.exists()


# Entries of other environments


OTHER_ENVIRONMENTS = {
    "fastmath off": {"PYTENSOR_FLAGS": "numba__fastmath=False"},
    "generic CPU": {"NUMBA_CPU_NAME": "generic"},
}


def test_entries_of_other_fingerprints_are_never_loaded(compiled, private_store):
    """Three environments share a store; each loads only its own entries, even
    when another's records are put where its own would be."""
    baseline, report = compiled
    root = rel.copy_store(baseline, private_store)
    own = {"this": report["fingerprint"]}
    for label, env in OTHER_ENVIRONMENTS.items():
        cold = run(CACHED, env)
        assert_correct(cold)
        assert not any(stat.endswith(".hit") for stat in cold["stats"]), (label, cold["stats"])
        own[label] = cold["fingerprint"]
    assert len(set(own.values())) == 3
    assert {path.name for path in root.iterdir() if len(path.name) == 64} == set(own.values())

    # The fastmath-off records of the first graph, moved to this environment's addresses.
    other = run(CACHED[:1], OTHER_ENVIRONMENTS["fastmath off"])
    for kind in ("rewrite", "graph"):
        shutil.copyfile(
            rel.record_path(root, own["fastmath off"], rel.key_of(other, CACHED[0], kind)),
            rel.record_path(root, own["this"], rel.key_of(report, CACHED[0], kind)),
        )
    warm = run(CACHED)
    assert_correct(warm)
    assert rel.decisions(warm, CACHED[0]) == {"rewrite": "miss", "graph": "miss", "op": "hit"}
    assert len(warm["warnings"]) == 2
    assert all("another key or fingerprint" in message for message in warm["warnings"])
    for label, env in OTHER_ENVIRONMENTS.items():
        again = run(CACHED, env)
        assert_correct(again)
        assert without_op_loads(again["stats"]) == {"rewrite.hit": 2, "graph.hit": 2}, label
    assert verify_problems() == []
