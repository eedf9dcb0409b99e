"""Damaged stores, end to end: never a crash, never a wrong result.

One process compiles tiny graphs into a store (:func:`compiled`); a test damages
a copy of it, file kind by file kind, and a fresh process compiles the same
graphs. That process must exit 0 with Python mode's results, warn about and count
each damaged record it meets ("corrupt"), recompile and store it again, and leave
``numba-cache verify`` clean. A damaged record
that went undetected would show as a wrong value: "another entry's valid record
swapped in" is the case where a cache without key checks returns another graph's
results with exit status 0.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import reliability as rel
from helpers import run_cli, without_op_loads
from reliability import assert_correct, key_of, record_path, run, verify_problems

from numba_cache.store import CorruptEntry, record

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

RECORD_DAMAGES = [
    rel.truncate_half,
    rel.truncate_last_byte,
    rel.empty,
    rel.garbage,
    rel.flip_bit_in_summary,
    rel.flip_bit_in_payload,
    rel.metadata_without_payload,
    rel.payload_without_metadata,
    rel.payload_of_another_entry,
    rel.swap_in,
]
TARGETS = ("rewrite", "graph", "op")
#: The graph whose records are swapped into the others' places.
DONOR = "scale1"
#: Graph names of each damage's three targets, disjoint across damages.
GRAPHS_OF = {
    damage.__name__: dict(zip(TARGETS, rel.scales(3, first=2 + 3 * number), strict=True))
    for number, damage in enumerate(RECORD_DAMAGES)
}
EXTRA = ["sumexp", "cumsum"]  # graphs of other shapes, for damage to files every graph uses
#: A graph with an op whose source PyTensor writes into the store (generated_src).
GENERATED = "padmax"
ALL_GRAPHS = [DONOR, *EXTRA, GENERATED, *(name for graphs in GRAPHS_OF.values() for name in graphs.values())]


@dataclass(frozen=True)
class Compiled:
    root: Path
    report: dict  # of the process that compiled ALL_GRAPHS cold

    @property
    def fingerprint(self) -> str:
        return self.report["fingerprint"]

    def key(self, name: str, kind: str) -> str:
        return key_of(self.report, name, kind)

    def record(self, root: Path, name: str, kind: str) -> Path:
        return record_path(root, self.fingerprint, self.key(name, kind))


CLEAN_ENV = {"NBCACHE_DISABLE": "", "NBCACHE_READONLY": "", "NBCACHE_MAX_SIZE": ""}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Compiled:
    root = tmp_path_factory.mktemp("corruption") / "store"
    report = run(ALL_GRAPHS, CLEAN_ENV | {"NBCACHE_DIR": str(root)})
    assert_correct(report)
    assert report["stats"]["graph.miss"] == len(ALL_GRAPHS)
    return Compiled(root, report)


@pytest.fixture
def store(compiled, private_store) -> Path:
    """A copy of the compiled store, where NBCACHE_DIR points."""
    return rel.copy_store(compiled.root, private_store)


def stored_counters(root: Path) -> dict:
    """The counters every process adds to in the store (``numba-cache stats``)."""
    return rel.open_store(root).stats()["counters"]


def assert_warned_about(report: dict, keys: list[str]) -> None:
    for key in keys:
        warned = [message for message in report["warnings"] if key[:12] in message]
        assert warned and "unreadable" in warned[0], (key, report["warnings"])


# Records: every byte matters


def test_every_flipped_bit_and_every_truncation_of_a_record_is_detected(compiled):
    """Decoding a record flipped anywhere (header, metadata, payload) or cut anywhere fails.

    Every byte of the header and metadata is flipped, and bytes all along the
    payload; the record must then be refused, never decoded into a different entry.
    """
    path = compiled.record(compiled.root, DONOR, "graph")
    data = path.read_bytes()
    address = (compiled.fingerprint, compiled.key(DONOR, "graph"))
    assert record.decode(data, *address).blobs
    header, metadata, _ = rel.record_parts(data)
    blobs_start = len(header) + len(metadata)
    positions = [*range(blobs_start), *range(blobs_start, len(data), 97)]
    undetected = []
    for position in positions:
        for bit in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[position] ^= bit
            try:
                record.decode(bytes(damaged), *address)
            except CorruptEntry:
                continue
            undetected.append((position, bit, bytes(data[max(0, position - 10):position + 10])))
    assert not undetected, f"{len(undetected)} flips not detected, the first: {undetected[:5]}"
    for length in [*range(len(header) + len(metadata) + 2), *range(0, len(data), 101)]:
        with pytest.raises(CorruptEntry):
            record.decode(data[:length], *address)


METADATA_FIELDS = ["key", "fingerprint", "kind", "summary", "components", "cacheable", "reason",
                   "created", "tool_version", "blobs"]


@pytest.mark.parametrize("field", METADATA_FIELDS)
def test_a_record_missing_a_metadata_field_is_refused_even_with_valid_checksums(compiled, field):
    """What a buggy writer, or another version, could store: refused, not a KeyError."""
    data = compiled.record(compiled.root, DONOR, "graph").read_bytes()
    _, metadata, blobs = rel.record_parts(data)
    edited = json.loads(metadata)
    del edited[field]
    text = json.dumps(edited, separators=(",", ":")).encode()
    header = record.MAGIC + len(text).to_bytes(4, "big") + hashlib.sha256(text).digest()
    with pytest.raises(CorruptEntry):
        record.decode(header + text + blobs, compiled.fingerprint, compiled.key(DONOR, "graph"))


@pytest.mark.parametrize("damage", RECORD_DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_record_is_a_warned_counted_miss_compiled_again(store, compiled, damage):
    """Damage the rewrite record of one graph, the graph record of a second, the op
    record of a third (whose graph record is removed, so that its op is looked up)."""
    graphs = GRAPHS_OF[damage.__name__]
    damaged = []
    for kind, name in graphs.items():
        path = compiled.record(store, name, kind)
        damage(path, compiled.record(store, DONOR, kind))
        damaged.append(compiled.key(name, kind))
    rel.open_store(store).remove(compiled.fingerprint, compiled.key(graphs["op"], "graph"))

    fresh = run(list(graphs.values()))
    assert_correct(fresh)
    assert rel.decisions(fresh, graphs["rewrite"]) == {"rewrite": "miss", "graph": "hit"}
    assert rel.decisions(fresh, graphs["graph"]) == {"rewrite": "hit", "graph": "miss", "op": "hit"}
    assert rel.decisions(fresh, graphs["op"]) == {"rewrite": "hit", "graph": "miss", "op": "miss"}
    assert stored_counters(store)["corrupt"] == 3
    assert_warned_about(fresh, damaged)
    assert verify_problems() == []
    repaired = rel.open_store(store)
    assert all(repaired.load(compiled.fingerprint, key) is not None for key in damaged)


def test_a_missing_record_is_a_plain_miss(store, compiled):
    graphs = GRAPHS_OF["empty"]
    for kind, name in graphs.items():
        path = compiled.record(store, name, kind)
        path.unlink()
        path.with_suffix(".py").unlink(missing_ok=True)
    rel.open_store(store).remove(compiled.fingerprint, compiled.key(graphs["op"], "graph"))
    fresh = run(list(graphs.values()))
    assert_correct(fresh)
    assert "corrupt" not in stored_counters(store) and fresh["warnings"] == []
    assert verify_problems() == []


# The other files of a store


SOURCE_DAMAGES = [rel.flip_byte_at(0.5), rel.swap_in, rel.delete]


@pytest.mark.parametrize("damage", SOURCE_DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_source_copy_changes_no_result(store, compiled, damage):
    """The ``.py`` copies are for people (``numba-cache show``): nothing loads them.

    Nor can ``verify`` tell a damaged one: kernel records do not hold their source.
    """
    names = ["sumexp", "cumsum"]
    for name in names:
        for key in [compiled.key(name, "graph"), *rel.keys_of(compiled.report, name, "op")]:
            path = rel.source_path(store, compiled.fingerprint, key)
            damage(path, compiled.record(store, DONOR, "graph").with_suffix(".py"))
    fresh = run(names)
    assert_correct(fresh)
    assert without_op_loads(fresh["stats"]) == {"rewrite.hit": 2, "graph.hit": 2} and fresh["warnings"] == []
    assert verify_problems() == []


def stray_quotes(path: Path, other: Path) -> None:
    """Text still, of the same size (PyTensor keeps using such a file: it checks sizes),
    which no function in it can be read from: quotes for its opening parentheses."""
    path.write_bytes(path.read_bytes().replace(b"(", b'"'))


GENERATED_SOURCE_DAMAGES = [stray_quotes, rel.flip_byte_at(0.5), rel.truncate_half, rel.delete]


def damaged_generated_sources(directory: Path) -> list[Path]:
    """The files of `directory` whose content is not what their name (its digest) says."""
    return sorted(path for path in directory.glob("m*.py")
                  if f"m{hashlib.sha256(path.read_bytes()).hexdigest()}" != path.stem)


@pytest.mark.parametrize("damage", GENERATED_SOURCE_DAMAGES, ids=lambda damage: damage.__name__)
def test_damaged_generated_source_fails_no_compile_and_verify_removes_it(
        compiled, private_store, damage):
    """PyTensor writes the source it generates into the store (``generated_src``, each file
    named by the digest of its content) and reuses a file of the right size unread: its
    functions are compiled from the source in memory, but numba reads the file back
    (the source lines pickled with a kernel). A process converting the ops again must
    compile and store them (stray quotes failed the compile; a damaged file made the
    kernel unserializable), and ``verify`` must find and remove a file that is not
    what its name says."""
    generated = compiled.root / compiled.fingerprint / "generated_src"
    copied = private_store / compiled.fingerprint / "generated_src"
    shutil.copytree(generated, copied)  # only these: every kernel is compiled again
    assert list(copied.glob("m*.py"))
    for path in copied.glob("m*.py"):
        damage(path, path)
    fresh = run([GENERATED])
    assert_correct(fresh)
    assert fresh["warnings"] == []
    # Every kernel stored: numba pickles a kernel's source lines, read from its file.
    assert not [event for event in fresh["stats"] if event.startswith("uncacheable")], fresh
    still_damaged = damaged_generated_sources(copied)
    if damage in GENERATED_SOURCE_DAMAGES[:2]:
        assert still_damaged  # reused by PyTensor: only verify finds them
    reported = sorted(Path(problem["path"]) for problem in verify_problems())
    assert reported == still_damaged
    assert run_cli("verify", "--repair").returncode == (1 if still_damaged else 0)
    assert damaged_generated_sources(copied) == [] and verify_problems() == []


INDEX_DAMAGES = [rel.garbage, rel.truncate_half, rel.flip_byte_at(0.01), rel.empty, rel.delete]


@pytest.mark.parametrize("damage", INDEX_DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_index_is_rebuilt_from_the_records(store, compiled, damage):
    names = ["sumexp", "cumsum", DONOR]
    damage(store / "index.sqlite3", store / "index.sqlite3")
    fresh = run(names)
    assert_correct(fresh)
    assert without_op_loads(fresh["stats"]) == {"rewrite.hit": 3, "graph.hit": 3}
    assert all("index" in message for message in fresh["warnings"]), fresh["warnings"]
    assert len(fresh["warnings"]) <= 1
    assert verify_problems() == []
    listed = json.loads(run_cli("list", "--json").stdout)["entries"]
    assert len(listed) == len(list(store.rglob("*.nbk")))


def another_fingerprints_description(path: Path, other: Path) -> None:
    path.write_text(json.dumps({"fingerprint": "0" * 64, "components": {"numba": "0.1"}}))


FINGERPRINT_DAMAGES = [
    rel.garbage, rel.truncate_half, rel.empty, rel.delete, another_fingerprints_description,
]


@pytest.mark.parametrize("damage", FINGERPRINT_DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_fingerprint_description_is_written_again(store, compiled, damage):
    """``fingerprint.json`` names the components (for ``explain``), and marks the self-test
    passed: a damaged one must not stay damaged, costing every process the self-test."""
    path = store / compiled.fingerprint / "fingerprint.json"
    original = json.loads(path.read_text())
    damage(path, path)
    fresh = run(["sumexp", "cumsum"])
    assert_correct(fresh)
    assert without_op_loads(fresh["stats"]) == {"rewrite.hit": 2, "graph.hit": 2} and fresh["warnings"] == []
    assert json.loads(path.read_text()) == original
    assert verify_problems() == []


def a_directory(path: Path, other: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


LOCK_DAMAGES = [rel.garbage, rel.delete, a_directory]


@pytest.mark.parametrize("damage", LOCK_DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_lock_file_neither_blocks_nor_fails_a_compile(store, compiled, damage):
    name = "cumsum"
    key = compiled.key(name, "graph")
    rel.open_store(store).remove(compiled.fingerprint, key)
    lock = store / compiled.fingerprint / "locks" / f"{key}.lock"
    damage(lock, lock)
    fresh = run([name], {"NBCACHE_LOCK_TIMEOUT": "600"}, timeout=120)
    assert_correct(fresh)
    assert fresh["stats"]["graph.miss"] == 1
    assert len(fresh["warnings"]) <= 1
    assert all("lock" in message for message in fresh["warnings"])
    assert verify_problems() == []
    assert without_op_loads(run([name])["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}
