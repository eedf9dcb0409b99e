"""The store: round trips, corruption, eviction, locking, read-only stores and failing disks.

Real files, real SQLite, real processes; nothing is mocked. Each test names the
protection it checks, and would fail without it.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from numba_cache import settings
from numba_cache import store as store_package
from numba_cache.store import CorruptEntry, Entry, Store, StoreWarning, record
from numba_cache.store.verify import Problem
from numba_cache.store import index as index_module

REPO = Path(__file__).resolve().parents[1]
NOBODY = 65534


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


FINGERPRINT = digest("fingerprint")
OTHER_FINGERPRINT = digest("another fingerprint")


def open_store(root, **changes) -> Store:
    values = dict(root=Path(root), disabled=False, readonly=False)
    values |= dict(max_size=2**30, lock_timeout=30.0)
    values.update(changes)
    return Store(settings.override(settings.current(), **values))


def source_of(name: str) -> str:
    return f"def kernel_{name}(x):\n    return x + 1\n"


def make_entry(name: str, kernel_size: int = 1000, fingerprint: str = FINGERPRINT) -> Entry:
    # Incompressible, so the sizes the eviction tests count are the sizes on disk.
    kernel = hashlib.shake_256(name.encode()).digest(kernel_size)
    return Entry(
        key=digest(name),
        fingerprint=fingerprint,
        kind="graph",
        summary=f"graph {name} ≈ x + 1",
        components={"name": name, "ops": ["Add"]},
        blobs={"kernel": kernel, "source": source_of(name).encode()},
    )


def save(store: Store, name: str, **options) -> Entry:
    entry = make_entry(name, **options)
    assert store.save(entry, source_of(name))
    return entry


def record_path(root: Path, entry: Entry) -> Path:
    return root / entry.fingerprint / entry.key[:2] / f"{entry.key}.nbk"


def keys_of(entries) -> list[str]:
    return [entry.key for entry in entries]


def close_stores() -> None:
    """Close the SQLite connections of dropped Store objects (they sit in reference cycles)."""
    gc.collect()


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` with the hash of its content.

    SQLite's ``-wal`` and ``-shm`` files are left out: a reader may create them.
    """
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file() and not path.name.endswith(("-wal", "-shm"))
    }


@contextlib.contextmanager
def caught_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def store_warnings(caught) -> list[str]:
    return [str(item.message) for item in caught if issubclass(item.category, StoreWarning)]


def delete_row(root: Path, entry: Entry) -> None:
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as database:
        database.execute("DELETE FROM entries WHERE key = ?", (entry.key,))
        database.commit()


# Process bodies (module level, so that spawned children can import them).


def hold_lock(root: str, key: str, held, release) -> None:
    with open_store(root).lock(FINGERPRINT, key) as got:
        if got:
            held.set()
        release.wait(30)


def compile_once(root: str, name: str, barrier, log: str) -> None:
    store = open_store(root)
    barrier.wait(30)
    with store.lock(FINGERPRINT, digest(name)):
        if store.load(FINGERPRINT, digest(name)) is None:
            time.sleep(0.3)  # a slow compile: the others pile up on the lock meanwhile
            with open(log, "a") as file:
                file.write(f"{os.getpid()}\n")
            save(store, name)
    sys.exit(0 if store.load(FINGERPRINT, digest(name)) is not None else 1)


def rewrite_repeatedly(root: str, stop) -> None:
    store = open_store(root)
    version = 0
    while not stop.is_set():
        size = 100_000 + (version % 5) * 60_000
        kernel = bytes([version % 256]) * size
        entry = Entry(key=digest("hot"), fingerprint=FINGERPRINT, kind="op", blobs={"k": kernel})
        store.save(entry)
        version += 1


# Round trips


def test_round_trip_keeps_blobs_and_metadata_and_writes_the_source_copy(tmp_path):
    root = tmp_path / "cache"
    entry = save(open_store(root), "a")
    loaded = open_store(root).load(FINGERPRINT, entry.key)
    assert loaded.blobs == entry.blobs
    assert (loaded.kind, loaded.summary) == (entry.kind, entry.summary)
    assert loaded.components == entry.components
    assert loaded.cacheable and loaded.reason is None and loaded.created == entry.created
    assert open_store(root).source_path(FINGERPRINT, entry.key).read_text() == source_of("a")
    assert record_path(root, entry).read_bytes().startswith(record.MAGIC)
    assert os.listdir(root / "tmp") == []  # every temp file was renamed into place
    assert open_store(root).load(FINGERPRINT, digest("never saved")) is None


def test_uses_and_counts_within_bookkeeping_together_are_written_once_at_its_end(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    a, b = save(store, "a"), save(store, "b")
    hits = lambda: {entry.key: entry.hits for entry in store.entries()}
    transactions = []
    real = index_module._write_transaction

    def counted(connection):
        transactions.append(1)
        return real(connection)

    monkeypatch.setattr(index_module, "_write_transaction", counted)
    with store.bookkeeping_together():
        with store.bookkeeping_together():  # nested: written at the outer end
            assert store.load(FINGERPRINT, a.key) is not None
        assert store.load(FINGERPRINT, b.key) is not None
        assert store.load(FINGERPRINT, a.key) is not None
        store.count(FINGERPRINT, "hit", 3)
        assert transactions == [] and hits() == {a.key: 0, b.key: 0}
        assert store.stats()["counters"] == {}
    assert transactions == [1] and hits() == {a.key: 2, b.key: 1}
    assert store.stats()["counters"] == {"hit": 3}
    with pytest.raises(RuntimeError), store.bookkeeping_together():
        store.load(FINGERPRINT, b.key)
        raise RuntimeError("a compile that fails still counts its loads")
    store.load(FINGERPRINT, a.key)  # outside a block: written at once
    assert transactions == [1, 1, 1] and hits() == {a.key: 3, b.key: 2}


def test_uncacheable_marker_round_trip(tmp_path):
    store = open_store(tmp_path)
    marker = Entry.uncacheable(
        fingerprint=FINGERPRINT, key=digest("m"), kind="op", reason="object mode", summary="Op m"
    )
    assert store.save(marker, None)
    loaded = store.load(FINGERPRINT, marker.key)
    assert (loaded.cacheable, loaded.reason, loaded.blobs) == (False, "object mode", {})
    stats = store.stats()
    assert (stats["uncacheable"], stats["kinds"]["op"], stats["entries"]) == (1, 0, 1)
    with pytest.raises(ValueError, match="marker"):
        store.save(Entry(key=digest("x"), fingerprint=FINGERPRINT, kind="op", cacheable=False))


@pytest.mark.parametrize("bad", ["../../etc/passwd", digest("k").upper(), digest("k")[:63], ""])
def test_keys_and_fingerprints_that_are_not_sha256_hex_are_refused(tmp_path, bad):
    store = open_store(tmp_path / "cache")
    with pytest.raises(ValueError, match="key"):
        store.load(FINGERPRINT, bad)
    with pytest.raises(ValueError, match="fingerprint"):
        store.save(Entry(key=digest("k"), fingerprint=bad, kind="op", blobs={"kernel": b"1"}), None)
    assert not (tmp_path / "cache").exists()


def test_disabled_store_neither_serves_nor_writes(tmp_path):
    writer = open_store(tmp_path / "cache")
    save(writer, "a")
    # Closing the writer's SQLite connection checkpoints its WAL into the index file:
    # done now, not whenever the garbage collector gets to it during the test.
    del writer
    gc.collect()
    before = snapshot(tmp_path / "cache")
    disabled = store_package.NullStore(
        settings.override(settings.current(), root=tmp_path / "cache", disabled=True))
    assert disabled.load(FINGERPRINT, digest("a")) is None
    assert disabled.save(make_entry("b"), source_of("b")) is False
    disabled.count(FINGERPRINT, "miss")
    with disabled.lock(FINGERPRINT, digest("b")) as held:
        assert held is False
    assert snapshot(tmp_path / "cache") == before


# Layout and permissions


def test_root_and_missing_parents_are_created_private_at_the_first_write_only(tmp_path):
    root = tmp_path / "a" / "b" / "cache"
    store = open_store(root)
    assert store.load(FINGERPRINT, digest("a")) is None
    assert store.entries() == [] and store.stats()["entries"] == 0
    assert not (tmp_path / "a").exists()  # reading creates nothing
    save(store, "a")
    for directory in (tmp_path / "a", tmp_path / "a" / "b", root):
        assert directory.stat().st_mode & 0o777 == 0o700, directory


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_root_others_can_write_warns_once_per_process(tmp_path, mode):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    with pytest.warns(StoreWarning, match="pickles") as caught:
        open_store(root)
    assert str(root) in str(caught[0].message)
    with caught_warnings() as again:
        open_store(root)
    assert store_warnings(again) == []


def test_a_private_root_does_not_warn(tmp_path):
    root = tmp_path / "private"
    root.mkdir(mode=0o700)
    with caught_warnings() as caught:
        open_store(root)
    assert store_warnings(caught) == []


def test_a_root_that_is_a_file_others_can_write_is_refused_without_a_permissions_warning(tmp_path):
    """A device or file others can write (``/dev/null``) is no directory to make private:
    the one warning says the cache cannot be written there, and why."""
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    root.chmod(0o666)
    with caught_warnings() as caught:
        store = open_store(root)
        assert not store.save(make_entry("a"), source_of("a"))
    assert store.readonly and root.read_text() == "not a directory"
    assert store_warnings(caught) == [
        f"numba_cache: the cache {root} is read-only (it is not a directory): "
        "cached kernels are loaded, nothing is saved or counted."]


def test_a_root_through_a_link_to_nothing_is_read_only_and_says_why(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "unmounted" / "cache")
    root = tmp_path / "link" / "store"
    with caught_warnings() as caught:
        store = open_store(root)
        assert not store.save(make_entry("a"), source_of("a"))
    assert store.readonly and not (tmp_path / "unmounted").exists()
    assert store_warnings(caught) == [
        f"numba_cache: the cache {root} is read-only (it is below {tmp_path / 'link'}, a symbolic "
        f"link to {tmp_path / 'unmounted' / 'cache'}, which does not exist): cached kernels are "
        "loaded, nothing is saved or counted."]


# Index, counters, listings


def test_listing_and_counters_survive_a_new_store_and_a_new_process(tmp_path):
    root = tmp_path / "cache"
    store = open_store(root)
    a, b = save(store, "a"), save(store, "b")
    store.load(FINGERPRINT, a.key)
    store.load(FINGERPRINT, a.key)
    store.count(FINGERPRINT, "hit", 2)
    store.count(FINGERPRINT, "miss", 2)

    fresh = open_store(root)
    assert keys_of(fresh.entries()) == [b.key, a.key]  # least recently used first
    assert {entry.key: entry.hits for entry in fresh.entries()} == {a.key: 2, b.key: 0}
    stats = fresh.stats()
    assert (stats["entries"], stats["kinds"]["graph"]) == (2, 2)
    assert stats["counters"] == {"hit": 2, "miss": 2}
    assert stats["bytes"] == sum(entry.size for entry in fresh.entries()) > 2000
    assert stats["fingerprints"][FINGERPRINT]["entries"] == 2

    child = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from numba_cache import settings
        from numba_cache.store import Store
        configured = settings.override(
            settings.current(), root=Path({str(root)!r}), readonly=False, disabled=False
        )
        store = Store(configured)
        assert store.load({FINGERPRINT!r}, {a.key!r}) is not None
        store.count({FINGERPRINT!r}, "hit")
        store.count({FINGERPRINT!r}, "miss")
        print(json.dumps(store.stats()["counters"]))
    """)
    environment = dict(os.environ, PYTHONPATH=str(REPO))
    output = subprocess.run(
        [sys.executable, "-c", child], env=environment, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(output.splitlines()[-1]) == {"hit": 3, "miss": 3}
    assert open_store(root).stats()["counters"] == {"hit": 3, "miss": 3}
    assert {entry.key: entry.hits for entry in open_store(root).entries()}[a.key] == 3


def test_listings_filter_by_fingerprint_and_kind_and_clear_keeps_other_fingerprints(tmp_path):
    store = open_store(tmp_path)
    a = save(store, "a")
    other = save(store, "b", fingerprint=OTHER_FINGERPRINT)
    marker = Entry.uncacheable(fingerprint=FINGERPRINT, key=digest("m"), kind="op", reason="r")
    store.save(marker, None)
    store.count(OTHER_FINGERPRINT, "miss")
    assert keys_of(store.entries(FINGERPRINT)) == [a.key, marker.key]
    assert keys_of(store.entries(kind="op")) == [marker.key]
    assert store.stats(OTHER_FINGERPRINT)["counters"] == {"miss": 1}
    assert store.clear(FINGERPRINT) == 2
    assert keys_of(store.entries()) == [other.key]
    assert not store.source_path(FINGERPRINT, a.key).exists()
    store.zero_counters()
    assert store.stats()["counters"] == {}


def test_a_row_without_its_file_is_dropped_when_found(tmp_path):
    store = open_store(tmp_path)
    entry = save(store, "a")
    record_path(tmp_path, entry).unlink()
    assert store.load(FINGERPRINT, entry.key) is None
    assert store.entries() == []


def test_a_file_without_its_row_is_indexed_when_found(tmp_path):
    store = open_store(tmp_path)
    entry = save(store, "a")
    delete_row(tmp_path, entry)
    assert store.entries() == []
    assert store.load(FINGERPRINT, entry.key) is not None
    assert [(found.key, found.hits) for found in store.entries()] == [(entry.key, 1)]


def test_a_use_noted_before_its_entry_is_evicted_leaves_no_row_behind(tmp_path):
    """A load's use is written at the end of its bookkeeping block; an eviction in
    the block (a save over the cap) removed the entry meanwhile: no row comes back."""
    store = open_store(tmp_path)
    kept, evicted = save(store, "kept"), save(store, "evicted")
    with store.bookkeeping_together():
        assert store.load(FINGERPRINT, evicted.key) is not None
        store.load(FINGERPRINT, kept.key)
        assert store.evict_to(0) == [(FINGERPRINT, kept.key), (FINGERPRINT, evicted.key)]
    assert store.entries() == [] and store.stats()["bytes"] == 0
    assert store.verify() == []


def test_a_deleted_index_is_rebuilt_from_the_files(tmp_path):
    store = open_store(tmp_path)
    a, b = save(store, "a"), save(store, "b")
    del store
    close_stores()
    for path in tmp_path.glob("index.sqlite3*"):
        path.unlink()
    fresh = open_store(tmp_path)
    assert set(keys_of(fresh.entries())) == {a.key, b.key}  # from the files alone
    fresh.load(FINGERPRINT, a.key)  # the first write creates the index, filled from the files
    assert {entry.key: entry.hits for entry in fresh.entries()} == {a.key: 1, b.key: 0}


def test_a_store_removed_under_a_running_process_is_indexed_again_not_in_the_deleted_file(
        tmp_path):
    """`rm -rf` of the store while a process holds its index open: the process's next
    write goes to the index now there (another process's new one, or one it makes from
    the files), not to the deleted file, so what it saves after is listed and counted
    in the size that eviction keeps under the cap."""
    root = tmp_path / "store"
    running = open_store(root)
    save(running, "before")
    shutil.rmtree(root)
    started_meanwhile = open_store(root)
    meanwhile = save(started_meanwhile, "meanwhile")  # a new index
    after = save(running, "after")
    assert set(keys_of(started_meanwhile.entries())) == {meanwhile.key, after.key}
    sizes = {entry.key: sum(path.stat().st_size  # the record and its source
                            for path in record_path(root, entry).parent.glob(f"{entry.key}.*"))
             for entry in (meanwhile, after)}
    assert started_meanwhile.stats()["bytes"] == sum(sizes.values())
    assert started_meanwhile.evict_to(sizes[after.key]) == [(FINGERPRINT, meanwhile.key)]

    shutil.rmtree(root)  # again, and no other process: the running one makes the index
    last = save(running, "last")
    assert (root / "index.sqlite3").exists()
    assert keys_of(running.entries()) == [last.key]


def test_a_corrupt_index_is_moved_aside_and_rebuilt(tmp_path):
    store = open_store(tmp_path)
    entry = save(store, "a")
    del store
    close_stores()
    (tmp_path / "index.sqlite3").write_bytes(b"this is not an SQLite database" * 100)
    fresh = open_store(tmp_path)
    with pytest.warns(StoreWarning, match="corrupt"):
        assert keys_of(fresh.entries()) == [entry.key]
    assert list(tmp_path.glob("index.sqlite3.corrupt-*"))
    assert fresh.load(FINGERPRINT, entry.key) is not None
    assert [(found.key, found.hits) for found in fresh.entries()] == [(entry.key, 1)]


def test_an_unusable_index_warns_and_the_store_carries_on_with_the_files(tmp_path):
    (tmp_path / "index.sqlite3").mkdir()  # cannot be opened as a database
    store = open_store(tmp_path)
    with pytest.warns(StoreWarning, match="index"):
        entry = save(store, "a")
    assert store.load(FINGERPRINT, entry.key).blobs == entry.blobs
    assert keys_of(store.entries()) == [entry.key]
    assert store.stats()["entries"] == 1


def test_an_index_locked_by_another_process_is_waited_for_once_not_at_every_load(tmp_path):
    """A process holding the index's lock (stopped, or a long maintenance) costs one busy
    wait, then the store leaves the index alone for a while: loads go on from the files."""
    store = open_store(tmp_path)
    entries = [save(store, name) for name in "abcdef"]
    close_stores()
    store = open_store(tmp_path)
    with contextlib.closing(sqlite3.connect(tmp_path / "index.sqlite3",
                                            isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        with caught_warnings() as caught:
            began = time.monotonic()
            loaded = [store.load(FINGERPRINT, entry.key) for entry in entries]
            waited = time.monotonic() - began
        holder.execute("ROLLBACK")
    assert [entry.blobs for entry in loaded] == [entry.blobs for entry in entries]
    assert len(store_warnings(caught)) == 1 and "locked" in store_warnings(caught)[0]
    # One busy timeout, not one a load (six of them without the backoff).
    assert index_module.BUSY_TIMEOUT <= waited < 2 * index_module.BUSY_TIMEOUT


# Corruption


def truncate(path: Path, other: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def flip_a_blob_byte(path: Path, other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01
    path.write_bytes(bytes(data))


def swap_in_another_keys_record(path: Path, other: Path) -> None:
    shutil.copyfile(other, path)


def garble_the_json(path: Path, other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[12:14] = b"}{"
    path.write_bytes(bytes(data))


def overwrite_the_magic(path: Path, other: Path) -> None:
    path.write_bytes(b"NOTCACHE" + path.read_bytes()[8:])


def empty(path: Path, other: Path) -> None:
    path.write_bytes(b"")


DAMAGES = [
    truncate,
    flip_a_blob_byte,
    swap_in_another_keys_record,
    garble_the_json,
    overwrite_the_magic,
    empty,
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_corrupt_record_is_a_warned_counted_and_removed_miss(tmp_path, damage):
    store = open_store(tmp_path)
    victim, bystander = save(store, "a"), save(store, "b")
    damage(record_path(tmp_path, victim), record_path(tmp_path, bystander))
    with pytest.warns(StoreWarning, match=victim.key[:12]):
        assert store.load(FINGERPRINT, victim.key) is None
    assert not record_path(tmp_path, victim).exists()
    assert keys_of(store.entries()) == [bystander.key]
    assert store.stats()["counters"]["corrupt"] == 1
    assert store.load(FINGERPRINT, bystander.key).blobs == bystander.blobs


def test_concurrent_rewrites_never_expose_a_partial_record(tmp_path):
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    writer = context.Process(target=rewrite_repeatedly, args=(str(tmp_path), stop))
    writer.start()
    store = open_store(tmp_path)
    seen = 0
    try:
        with caught_warnings() as caught:
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                entry = store.load(FINGERPRINT, digest("hot"))
                if entry is not None:
                    kernel = entry.blobs["k"]
                    assert kernel == kernel[:1] * len(kernel)
                    seen += 1
    finally:
        stop.set()
        writer.join(30)
    assert store_warnings(caught) == []
    assert seen > 20


# Eviction


def test_eviction_removes_the_least_recently_used_first(tmp_path):
    store = open_store(tmp_path)
    a, b, c, d = (save(store, name) for name in "abcd")
    time.sleep(0.01)
    store.load(FINGERPRINT, a.key)  # the oldest save becomes the most recently used
    size = {entry.key: entry.size for entry in store.entries()}
    budget = size[d.key] + size[a.key]  # room for two entries, not three
    assert store.evict_to(budget) == [(FINGERPRINT, b.key), (FINGERPRINT, c.key)]
    assert keys_of(store.entries()) == [d.key, a.key]
    assert store.load(FINGERPRINT, b.key) is None and store.load(FINGERPRINT, a.key) is not None
    assert store.stats()["counters"]["eviction"] == 2


def test_a_cap_smaller_than_what_a_process_uses_is_warned_once(tmp_path):
    """Under a cap too small for one model, each save evicts what the process just stored:
    every run compiles everything again. Said once; a cap that only evicts older work is
    not warned about."""
    filler = open_store(tmp_path)
    old = [save(filler, f"old-{n}") for n in range(3)]
    close_stores()
    size = max(entry.size for entry in open_store(tmp_path).entries())
    with caught_warnings() as caught:
        roomy = open_store(tmp_path, max_size=int(3.5 * size))
        save(roomy, "new-0")  # evicts the oldest entry, made by another process
    assert store_warnings(caught) == []
    assert open_store(tmp_path).load(FINGERPRINT, old[0].key) is None
    with caught_warnings() as caught:
        tight = open_store(tmp_path, max_size=int(1.5 * size))
        for n in range(1, 5):
            save(tight, f"new-{n}")
    [warned] = store_warnings(caught)
    assert "NBCACHE_MAX_SIZE" in warned and "evicted" in warned


def test_eviction_of_entries_unused_since_a_time_and_its_dry_run(tmp_path):
    store = open_store(tmp_path)
    a, b, c = (save(store, name) for name in "abc")
    time.sleep(0.01)
    cutoff = time.time()
    store.load(FINGERPRINT, a.key)  # used after the cutoff: it stays
    before = snapshot(tmp_path)
    planned = store.evict_to(None, last_used_before=cutoff, dry_run=True)
    assert planned == [(FINGERPRINT, b.key), (FINGERPRINT, c.key)]
    assert snapshot(tmp_path) == before  # a dry run deletes nothing
    assert store.evict_to(None, last_used_before=cutoff) == planned
    assert keys_of(store.entries()) == [a.key]


def test_saves_keep_the_store_within_its_maximum_size(tmp_path):
    entry_size = len(record.encode(make_entry("entry0"))) + len(source_of("entry0"))
    max_size = 3 * entry_size + entry_size // 2
    store = open_store(tmp_path, max_size=max_size)
    names = [f"entry{number}" for number in range(8)]
    with pytest.warns(StoreWarning, match="NBCACHE_MAX_SIZE"):  # it evicts its own saves
        for name in names:
            save(store, name)
            assert store.stats()["bytes"] <= max_size
    remaining = set(keys_of(store.entries()))
    assert digest(names[-1]) in remaining and digest(names[0]) not in remaining
    assert store.stats()["counters"]["eviction"] == len(names) - len(remaining)
    assert sum(1 for _ in tmp_path.rglob("*.nbk")) == len(remaining)


def test_eviction_skips_an_entry_whose_lock_another_process_holds(tmp_path):
    store = open_store(tmp_path)
    busy, b, c = save(store, "busy"), save(store, "b"), save(store, "c")
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=hold_lock, args=(str(tmp_path), busy.key, held, release))
    holder.start()
    try:
        assert held.wait(60)
        evicted = store.evict_to(0)
    finally:
        release.set()
        holder.join(30)
    assert sorted(evicted) == sorted([(FINGERPRINT, b.key), (FINGERPRINT, c.key)])
    assert store.load(FINGERPRINT, busy.key) is not None



def test_an_entry_saved_again_during_an_eviction_keeps_its_record_and_row(tmp_path):
    """A writer saving a key that has a row, paused with its new record in place but not
    yet indexed, while this process evicts everything. The writer holds the key's lock
    (every save does), so the eviction skips the key: without it, the eviction removes
    the new record and the writer then indexes it, a row without its record."""
    store = open_store(tmp_path)
    save(store, "a")
    pause = tmp_path / "paused"
    child = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        from test_store import open_store, save
        save(open_store({str(tmp_path)!r}), "a", kernel_size=2000)
    """)
    environment = dict(os.environ, PYTHONPATH=str(REPO),
                       NBCACHE_TEST_CHECKPOINT=f"before-index:{pause}")
    writer = subprocess.Popen([sys.executable, "-c", child], env=environment,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{pause}.reached").exists():
            assert writer.poll() is None, writer.communicate()[1]
            assert time.monotonic() < deadline, "the writer did not reach before-index"
            time.sleep(0.02)
        evicted = store.evict_to(0, timeout=10)
    finally:
        Path(f"{pause}.release").touch()
        assert writer.wait(60) == 0, writer.communicate()[1]
    assert evicted == []
    assert store.verify() == []
    assert len(store.load(FINGERPRINT, digest("a")).blobs["kernel"]) == 2000


# Locks


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_single_flight_one_process_compiles_the_others_load(tmp_path, start_method):
    root = tmp_path / "cache"
    open_store(root).count(FINGERPRINT, "opened")  # forked children inherit an open index
    context = multiprocessing.get_context(start_method)
    workers = 4
    barrier = context.Barrier(workers)
    log = tmp_path / "compiled.log"
    processes = [
        context.Process(target=compile_once, args=(str(root), "shared", barrier, str(log)))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [process.exitcode for process in processes] == [0] * workers
    assert len(log.read_text().splitlines()) == 1


def test_the_lock_of_a_killed_holder_is_free_at_once(tmp_path):
    context = multiprocessing.get_context("fork")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=hold_lock, args=(str(tmp_path), digest("a"), held, release))
    holder.start()
    assert held.wait(30)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    store = open_store(tmp_path, lock_timeout=10.0)
    started = time.monotonic()
    with store.lock(FINGERPRINT, digest("a")) as got:
        assert got
    assert time.monotonic() - started < 2


@contextlib.contextmanager
def lock_held_elsewhere(root, key: str):
    """The entry lock of `key` held by a forked process until the block ends, or until
    the event yielded is set."""
    context = multiprocessing.get_context("fork")
    held, release = context.Event(), context.Event()
    holder = context.Process(target=hold_lock, args=(str(root), key, held, release))
    holder.start()
    try:
        assert held.wait(30)
        yield release
    finally:
        release.set()
        holder.join(30)


def test_a_lock_timeout_warns_and_runs_the_block_without_the_lock(tmp_path):
    with lock_held_elsewhere(tmp_path, digest("a")):
        store = open_store(tmp_path, lock_timeout=0.2)
        with pytest.warns(StoreWarning, match="waited"):
            with store.lock(FINGERPRINT, digest("a")) as got:
                assert got is False
                assert save(store, "a")


def test_a_waiter_polls_on_after_its_quick_polling_and_times_out_only_at_the_timeout(
        tmp_path, monkeypatch):
    from numba_cache.store import locks

    monkeypatch.setattr(locks, "POLLING", ((0.1, 0.005), (float("inf"), 0.05)))
    with lock_held_elsewhere(tmp_path, digest("a")) as release:
        path = tmp_path / FINGERPRINT / "locks" / f"{digest('a')}.lock"
        assert path.exists()
        started = time.monotonic()
        with pytest.raises(locks.LockBusy):
            locks.acquire(path, 0.3)  # past the quick polling, before the holder lets go
        assert time.monotonic() - started >= 0.3
        threading.Timer(0.4, release.set).start()
        lock = locks.acquire(path, 30.0)  # the holder lets go in the slow polling
        assert lock.is_locked
        lock.release()


# Read-only stores


def test_the_readonly_setting_serves_hits_and_writes_nothing(tmp_path):
    writer = open_store(tmp_path)
    a, b = save(writer, "a"), save(writer, "b")
    del writer
    close_stores()
    flip_a_blob_byte(record_path(tmp_path, b), record_path(tmp_path, a))
    before = snapshot(tmp_path)
    store = open_store(tmp_path, readonly=True)
    with caught_warnings() as caught:
        assert store.load(FINGERPRINT, a.key).blobs == a.blobs
        assert store.load(FINGERPRINT, b.key) is None  # corrupt: a miss, but not removed
        assert store.save(make_entry("c"), source_of("c")) is False
        store.count(FINGERPRINT, "miss")
        with store.lock(FINGERPRINT, digest("c")) as held:
            assert held is False
        assert store.evict_to(0) == []
        store.remove(FINGERPRINT, a.key)
        assert store.clear() == 0
        store.zero_counters()
        assert len(store.verify(repair=True)) == 1
        assert store.stats()["entries"] == 2
    assert snapshot(tmp_path) == before
    messages = store_warnings(caught)
    assert len([message for message in messages if "read-only" in message]) == 1
    assert len(messages) == 2  # the read-only notice and the corrupt entry


def test_read_neither_records_a_use_nor_repairs_nor_warns(tmp_path):
    store = open_store(tmp_path)
    a, b = save(store, "a"), save(store, "b")
    flip_a_blob_byte(record_path(tmp_path, b), record_path(tmp_path, a))
    before = snapshot(tmp_path)
    with caught_warnings() as caught:
        assert store.read(FINGERPRINT, a.key).blobs == a.blobs
        with pytest.raises(CorruptEntry):
            store.read(FINGERPRINT, b.key)
        assert store.read(FINGERPRINT, digest("absent")) is None
    assert store_warnings(caught) == []
    assert snapshot(tmp_path) == before
    assert {entry.key: entry.hits for entry in store.entries()} == {a.key: 0, b.key: 0}


def test_fingerprint_components_are_kept_once_and_not_by_a_readonly_store(tmp_path):
    readonly = open_store(tmp_path, readonly=True)
    readonly.record_fingerprint(FINGERPRINT, {"numba": "0.68.0"})
    assert readonly.fingerprint_components(FINGERPRINT) is None
    assert not (tmp_path / FINGERPRINT).exists()
    store = open_store(tmp_path)
    store.record_fingerprint(FINGERPRINT, {"numba": "0.68.0"})
    store.record_fingerprint(FINGERPRINT, {"numba": "something else"})  # written once only
    assert store.fingerprint_components(FINGERPRINT) == {"numba": "0.68.0"}
    assert store.fingerprint_components(OTHER_FINGERPRINT) is None
    assert store.verify() == []  # neither an entry nor an orphan
    (tmp_path / FINGERPRINT / "fingerprint.json").write_text("{not JSON")
    assert store.fingerprint_components(FINGERPRINT) is None


def use_unwritable_store(root: Path) -> dict:
    """Use a store whose root cannot be written; report what happened."""
    with caught_warnings() as caught:
        before = snapshot(root)
        store = open_store(root)
        outcome = {
            "readonly": store.readonly,
            "hit": store.load(FINGERPRINT, digest("a")) is not None,
            "saved": store.save(make_entry("c"), source_of("c")),
            "listed": {entry.key: entry.hits for entry in store.entries()},
        }
        store.count(FINGERPRINT, "miss")
        outcome["unchanged"] = snapshot(root) == before
    outcome["warnings"] = store_warnings(caught)
    return outcome


def use_unwritable_store_as_nobody(root: Path, results) -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    results.put(use_unwritable_store(root))


def test_a_root_that_cannot_be_written_is_readonly():
    # As root, chmod does not stop writes (and os.access says writable), so the
    # store is used from a child that drops to the unprivileged user nobody.
    base = Path(tempfile.mkdtemp(prefix="numba_cache_readonly_"))
    base.chmod(0o755)
    root = base / "cache"
    try:
        writer = open_store(root)
        a = save(writer, "a")
        writer.load(FINGERPRINT, a.key)
        del writer
        close_stores()
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(root)], check=True)
            root.chmod(0o500)
            context = multiprocessing.get_context("fork")
            results = context.Queue()
            child = context.Process(target=use_unwritable_store_as_nobody, args=(root, results))
            child.start()
            outcome = results.get(timeout=60)
            child.join(30)
        else:
            root.chmod(0o500)
            outcome = use_unwritable_store(root)
    finally:
        with contextlib.suppress(FileNotFoundError):
            root.chmod(0o700)  # so that a non-root user can delete it
        shutil.rmtree(base)
    assert outcome["readonly"] and outcome["hit"] and outcome["unchanged"]
    assert outcome["saved"] is False
    assert outcome["listed"] == {a.key: 1}  # the index is read although it cannot be written
    assert len(outcome["warnings"]) == 1 and "not writable" in outcome["warnings"][0]


# Failing writes


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 1 MiB tmpfs, where a big write fails with a real ENOSPC; skips where mount is refused."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = shutil.which("mount") and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True
    )
    if not mounted or mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); the tmp-is-a-file case still runs")
    try:
        yield mount_point
    finally:
        close_stores()
        subprocess.run(["umount", "--lazy", str(mount_point)], check=False)


def test_a_full_disk_makes_save_return_false_with_a_warning(tiny_filesystem):
    root = tiny_filesystem / "cache"
    store = open_store(root)
    small = save(store, "small")
    big = make_entry("big", kernel_size=4 * 1024 * 1024)
    with pytest.warns(StoreWarning, match="No space left"):
        assert store.save(big, source_of("big")) is False
    assert not record_path(root, big).exists()
    assert os.listdir(root / "tmp") == []  # the partial temp file was removed
    assert store.stats()["counters"]["write_error"] == 1
    assert store.load(FINGERPRINT, small.key) is not None
    assert save(store, "after")  # the space of the failed write was given back


def test_an_unwritable_temp_directory_makes_save_return_false_with_a_warning(tmp_path):
    store = open_store(tmp_path)
    (tmp_path / "tmp").write_text("a file where the temp directory should be")
    entry = make_entry("a")
    with pytest.warns(StoreWarning, match="cannot write"):
        assert store.save(entry, source_of("a")) is False
    with caught_warnings() as caught:
        assert store.save(make_entry("b"), source_of("b")) is False
    assert store_warnings(caught) == []  # once per process
    assert store.load(FINGERPRINT, entry.key) is None
    assert store.stats()["counters"]["write_error"] == 2


# Verification


def test_verify_finds_problems_then_repairs_them(tmp_path):
    store = open_store(tmp_path)
    good, corrupt, mismatched, unindexed, rowonly = (
        save(store, name) for name in ("good", "corrupt", "mismatched", "unindexed", "rowonly")
    )
    flip_a_blob_byte(record_path(tmp_path, corrupt), record_path(tmp_path, good))
    store.source_path(FINGERPRINT, mismatched.key).write_text("# edited by hand\n")
    delete_row(tmp_path, unindexed)
    record_path(tmp_path, rowonly).unlink()
    store.source_path(FINGERPRINT, rowonly.key).unlink()
    orphan = store.source_path(FINGERPRINT, digest("orphan"))
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_text(source_of("orphan"))
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead_temp = tmp_path / "tmp" / f"{good.key}.nbk.{finished.pid}.0badf00d.tmp"
    live_temp = tmp_path / "tmp" / f"{good.key}.nbk.{os.getpid()}.0000beef.tmp"
    dead_temp.write_bytes(b"partial")
    live_temp.write_bytes(b"in flight")

    def summary(problems):
        return sorted((p.key or p.path.name, p.problem.split(":")[0]) for p in problems)

    expected = sorted([
        (corrupt.key, "unreadable record"),
        (mismatched.key, "the .py copy differs from the record's source"),
        (unindexed.key, "entry missing from the index"),
        (rowonly.key, "index row without an entry file"),
        (digest("orphan"), "source copy without a record"),
        (dead_temp.name, "temp file of a dead or stuck writer"),
    ])
    assert summary(store.verify()) == expected
    assert dead_temp.exists() and orphan.exists() and record_path(tmp_path, corrupt).exists()
    assert summary(store.verify(repair=True)) == expected
    assert store.verify() == []
    assert not dead_temp.exists() and not orphan.exists() and live_temp.exists()
    assert not record_path(tmp_path, corrupt).exists()
    assert store.source_path(FINGERPRINT, mismatched.key).read_text() == source_of("mismatched")
    assert set(keys_of(store.entries())) == {good.key, mismatched.key, unindexed.key}
    assert store.load(FINGERPRINT, good.key).blobs == good.blobs



def test_verify_checks_what_entries_promise_each_other(tmp_path):
    """A kernel's object-mode blocks, a graph kernel's op kernels and a rewrite's graph
    kernel: missing ones are dangling (reported, kept by repair); unreadable or
    wrong-kind promises are problems."""
    from numba_cache.store import entry_layout as layout

    store = open_store(tmp_path)
    kernel = make_entry("kernel")
    kernel.blobs[layout.BLOCKS_BLOB] = layout.encode_blocks(["uuid-present", "uuid-absent"])
    block = Entry(key=digest("block"), fingerprint=FINGERPRINT, kind="objmode",
                  components={layout.BLOCK_COMPONENT: "uuid-present"}, blobs={"kernel": b"k"})
    op = Entry(key=digest("op"), fingerprint=FINGERPRINT, kind="op", blobs={"kernel:(x,)": b"o"})

    def calling(name: str, *targets: str) -> Entry:
        links = layout.encode_op_links((target, b"sig", f"symbol_{target[:4]}")
                                       for target in targets)
        return Entry(key=digest(name), fingerprint=FINGERPRINT, kind="graph",
                     blobs={"kernel:(x,)": b"g", layout.op_links_blob_name("(x,)"): links})

    calls_present = calling("calls present", op.key)
    calls_evicted = calling("calls evicted", op.key, digest("evicted op"))
    calls_block = calling("calls a block entry", block.key)

    def rewrite(name: str, target: str, blob: bytes | None = None) -> Entry:
        blobs = {layout.REWRITTEN_GRAPH_BLOB: b"g", layout.KERNEL_SOURCE_BLOB: b"s",
                 layout.GRAPH_KEY_BLOB: blob or layout.encode_graph_key("graph", "", {}, target)}
        return Entry(key=digest(name), fingerprint=FINGERPRINT, kind="rewrite",
                     components={layout.GRAPH_KERNEL_COMPONENT: target}, blobs=blobs)

    fine = rewrite("fine", kernel.key)
    dangling = rewrite("dangling", digest("evicted graph"))
    unreadable = rewrite("unreadable", kernel.key, blob=b"\x80\x04pickled")
    wrong_kind = rewrite("wrong kind", block.key)
    for entry in (kernel, block, fine, dangling, unreadable, wrong_kind, op, calls_present,
                  calls_evicted, calls_block):
        assert store.save(entry)

    def summary(problems):
        return sorted((p.key, p.dangling, p.problem) for p in problems)

    expected = summary([
        Problem("dangling reference: its object-mode block uuid-absent is not in the store",
                FINGERPRINT, kernel.key, dangling=True),
        Problem(f"dangling reference: its graph kernel {digest('evicted graph')[:12]} is not "
                "in the store", FINGERPRINT, dangling.key, dangling=True),
        Problem("broken reference: unreadable graph key (not the JSON this version writes)",
                FINGERPRINT, unreadable.key),
        Problem(f"broken reference: its graph kernel {block.key[:12]} is an objmode entry",
                FINGERPRINT, wrong_kind.key),
        Problem(f"dangling reference: its op kernel {digest('evicted op')[:12]} is not in the "
                "store", FINGERPRINT, calls_evicted.key, dangling=True),
        Problem(f"broken reference: its op kernel {block.key[:12]} is an objmode entry",
                FINGERPRINT, calls_block.key),
    ])
    assert summary(store.verify()) == expected
    assert summary(store.verify(repair=True)) == expected
    assert summary(store.verify()) == [item for item in expected if item[1]]  # dangling stay
    assert set(keys_of(store.entries())) == {kernel.key, block.key, fine.key, dangling.key,
                                             op.key, calls_present.key, calls_evicted.key}


# Record format


def test_the_entry_layout_is_the_format_stores_already_hold():
    """Blob names and encodings are stored format: these are what stores written before
    hold, and changing one goes with a new key format version (numba_cache/versions.py),
    or a new name (the IR digest's "ir3:", whose "ir:" and "ir2:" predecessors are not
    misread: they are not read at all)."""
    from numba_cache.store import entry_layout as layout

    signature = "(float64,)"
    assert layout.overload_blob_names(signature) == (
        f"kernel:{signature}", f"symbols:{signature}", f"op-links:{signature}",
        f"ir3:{signature}", f"ir-before-module-passes:{signature}", "objmode_blocks",
        "objmode_namespaces")
    assert (layout.WARNINGS_BLOB, layout.CFUNC_LINKS_BLOB, layout.SOURCE_BLOB) == (
        "warnings", "links", "source")
    assert (layout.RUNTIME_OBJECT_BLOB, layout.RUNTIME_BITCODE_BLOB,
            layout.RUNTIME_SYMBOLS_BLOB) == ("object", "bitcode", "symbols")
    assert layout.REWRITE_BLOBS == ("graph", "graph_key", "kernel_source")
    assert layout.REWRITE_DATA_BLOB == "data"
    assert (layout.GRAPH_KERNEL_COMPONENT, layout.BLOCK_COMPONENT) == ("graph_kernel", "block")
    encoded = [
        (layout.encode_symbols(["a", "b"]), b"a\nb", layout.decode_symbols, ["a", "b"]),
        (layout.encode_blocks(["u1", "u2"]), b"u1\nu2", layout.decode_blocks, ["u1", "u2"]),
        (layout.encode_op_links([("k", b"\x01", "s"), ("k", b"\x01", "s"), ("a", b"", "t")]),
         b'[["a", "", "t"], ["k", "01", "s"]]', layout.decode_op_links,
         [("a", b"", "t"), ("k", b"\x01", "s")]),
        (layout.encode_digest("ab12"), b"ab12", layout.decode_digest, "ab12"),
        (layout.encode_warnings([{"message": "m"}]), b'[{"message": "m"}]',
         layout.decode_warnings, [{"message": "m"}]),
        (layout.encode_cfunc_links({"b": 1, "a": []}), b'{"a": [], "b": 1}',
         layout.decode_cfunc_links, {"a": [], "b": 1}),
        (layout.encode_graph_key("graph", "s", {}, "d"),
         b'{"components": {}, "digest": "d", "kind": "graph", "summary": "s"}',
         layout.decode_graph_key,
         {"components": {}, "digest": "d", "kind": "graph", "summary": "s"}),
    ]
    for blob, stored, decode, value in encoded:
        assert blob == stored and decode(blob) == value
    assert layout.decode_rewrite_data(layout.encode_rewrite_data({"folds": [1]})) == {"folds": [1]}
    assert layout.decode_warnings(None) == layout.decode_blocks(None) == []


def test_blobs_are_compressed_when_that_makes_them_smaller():
    entry = make_entry("compressible")
    entry.blobs["kernel"] = b"\x90" * 100_000  # like runs of padding in object code
    data = record.encode(entry)
    assert len(data) < 10_000
    assert record.decode(data, entry.fingerprint, entry.key).blobs == entry.blobs
    incompressible = make_entry("random", kernel_size=5000)
    decoded = record.decode(record.encode(incompressible), FINGERPRINT, incompressible.key)
    assert decoded.blobs == incompressible.blobs


def _format_2_record(entry: Entry) -> bytes:
    """A record as numba_cache 0.1's first format wrote it: raw blobs, no encodings."""
    metadata = {
        "key": entry.key, "fingerprint": entry.fingerprint, "kind": entry.kind,
        "summary": entry.summary, "components": entry.components, "cacheable": True,
        "reason": None, "created": entry.created, "tool_version": "0.1.0",
        "blobs": [{"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                  for name, data in entry.blobs.items()],
    }
    text = json.dumps(metadata).encode()
    header = b"NBCACHE2" + len(text).to_bytes(4, "big") + hashlib.sha256(text).digest()
    return header + text + b"".join(entry.blobs.values())


def test_format_2_records_are_still_read():
    entry = make_entry("old")
    decoded = record.decode(_format_2_record(entry), FINGERPRINT, entry.key)
    assert decoded.blobs == entry.blobs and decoded.summary == entry.summary


def test_a_blob_that_decodes_to_another_size_is_corrupt():
    entry = make_entry("sized")
    entry.blobs["kernel"] = b"\x90" * 1000
    data = record.encode(entry)
    lying = data.replace(b'"decoded_size":1000', b'"decoded_size":1001')
    text_size = int.from_bytes(lying[8:12], "big")
    text = lying[44:44 + text_size]
    lying = lying[:12] + hashlib.sha256(text).digest() + lying[44:]  # a valid metadata checksum
    with pytest.raises(CorruptEntry, match="wrong size"):
        record.decode(lying, FINGERPRINT, entry.key)


def indexed_total(root: Path) -> tuple[int, int]:
    """The total the index keeps, and the sum of its rows' sizes."""
    with contextlib.closing(sqlite3.connect(root / "index.sqlite3")) as connection:
        kept = connection.execute("SELECT bytes FROM totals").fetchone()[0]
        summed = connection.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()[0]
    return kept, summed


def test_the_index_keeps_the_total_size_through_saves_resaves_loads_removals_and_clears(tmp_path):
    store = open_store(tmp_path)
    entries = [save(store, name) for name in "abc"]
    assert indexed_total(tmp_path)[0] == indexed_total(tmp_path)[1] > 0
    store.save(make_entry("a", kernel_size=5000), source=source_of("a"))  # same key, larger
    store.load(FINGERPRINT, entries[1].key)
    store.remove(FINGERPRINT, entries[2].key)
    kept, summed = indexed_total(tmp_path)
    assert kept == summed == sum(entry.size for entry in store.entries())
    store.clear()
    assert indexed_total(tmp_path) == (0, 0)


def test_an_index_of_schema_1_is_upgraded_in_place_with_its_rows_and_counters(tmp_path):
    store = open_store(tmp_path)
    for name in "ab":
        save(store, name)
    store.count(FINGERPRINT, "graph.hit", 3)
    del store
    gc.collect()
    with contextlib.closing(sqlite3.connect(tmp_path / "index.sqlite3")) as connection:
        for name in ("entries_added", "entries_removed", "entries_resized"):
            connection.execute(f"DROP TRIGGER {name}")
        connection.execute("DROP TABLE totals")
        connection.execute("PRAGMA user_version = 1")
        connection.commit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an upgrade is silent
        upgraded = open_store(tmp_path)
        save(upgraded, "c")
    assert upgraded.stats()["counters"] == {"graph.hit": 3}
    assert len(upgraded.entries()) == 3
    kept, summed = indexed_total(tmp_path)
    assert kept == summed == sum(entry.size for entry in upgraded.entries())


def test_a_readonly_store_with_an_index_of_schema_1_plans_eviction_without_a_warning(tmp_path):
    store = open_store(tmp_path)
    for name in "ab":
        save(store, name)
    del store
    gc.collect()
    with contextlib.closing(sqlite3.connect(tmp_path / "index.sqlite3")) as connection:
        connection.execute("DROP TABLE totals")
        connection.execute("PRAGMA user_version = 1")
        connection.commit()
    readonly = open_store(tmp_path, readonly=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(readonly.evict_to(0, dry_run=True)) == 2


def open_and_save_at_once(root: str, index: int, barrier, results) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = open_store(root)
        barrier.wait()
        for n in range(3):
            entry = make_entry(f"{index}-{n}")
            store.save(entry, None)
            store.load(FINGERPRINT, entry.key)
    results.put([str(warning.message) for warning in caught])


def test_processes_creating_a_new_store_at_once_all_use_its_index(tmp_path):
    """SQLite refuses the switch to WAL at once (no busy wait) while another process creates
    the index; every process must still get it, with no warning (20 new stores, 4 processes)."""
    context = multiprocessing.get_context("fork")
    for trial in range(20):
        root = tmp_path / f"store-{trial}"
        barrier, results = context.Barrier(4), context.Queue()
        workers = [context.Process(target=open_and_save_at_once, args=(str(root), i, barrier, results))
                   for i in range(4)]
        for worker in workers:
            worker.start()
        messages = [message for _ in workers for message in results.get(timeout=60)]
        for worker in workers:
            worker.join(30)
        assert messages == [], (trial, messages)
        assert len(open_store(root).entries()) == 12
