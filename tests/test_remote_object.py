"""The shared tier in a bucket, on moto's real S3 server on loopback (``tests/object_server.py``).

"Machines" are fresh processes with their own local stores (``remote_machines.machine``),
as in tests/test_remote.py; faults the S3 server cannot play (an error status, refused
credentials, silence) come from tiny loopback servers that can only play them.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterator

import pytest
from helpers import cli_here
from object_server import MotoServer, ServerUnavailable, answering, down, moto_server, silent
from remote_machines import (FAILURES, GRAPHS, OTHER_SECRET, PATIENT, SECRET, fresh_machine,
                             machine, unavailable)

from numba_cache import settings
from numba_cache.store.remote import RemoteConfigError, envelope, open_tier

BUCKET = "nbcache-tests"
SEED = "seed"  # the URL path the first machine publishes under
NAMESPACE = "nbcache"  # NBCACHE_REMOTE_PREFIX's default: objects are <path>/nbcache/<fp>/<key>


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    try:
        with moto_server() as server:
            server.client().create_bucket(Bucket=BUCKET)
            yield server
    except ServerUnavailable as problem:
        unavailable("moto's S3 server", problem)


def objects(moto: MotoServer, path: str) -> dict[str, bytes]:
    """Every object under `path` of the bucket, by name relative to it: its body."""
    client = moto.client()
    names = [item["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=f"{path}/") for item in page.get("Contents", [])]
    return {name.removeprefix(f"{path}/"): client.get_object(Bucket=BUCKET, Key=name)["Body"].read()
            for name in names}


def write(moto: MotoServer, path: str, found: dict[str, bytes]) -> None:
    for name, body in found.items():
        moto.client().put_object(Bucket=BUCKET, Key=f"{path}/{name}", Body=body)


@pytest.fixture
def bucket(moto, monkeypatch, request) -> dict:
    """Point this test (and its children) at the bucket, under a path of its own."""
    path = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    for variable, value in (moto.environment() | PATIENT).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("NBCACHE_REMOTE", f"s3://{BUCKET}/{path}")
    monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
    return {"path": path, "moto": moto}


@pytest.fixture(scope="module")
def published(moto, tmp_path_factory) -> dict:
    """What a first machine published for GRAPHS (object name to body), and its report."""
    env = {**moto.environment(), "NBCACHE_REMOTE": f"s3://{BUCKET}/{SEED}",
           "NBCACHE_REMOTE_SECRET": SECRET}
    report = machine(tmp_path_factory.mktemp("machine-a"), GRAPHS, **env)
    return {"report": report, "objects": objects(moto, SEED)}


def address(name: str) -> tuple[str, str]:
    """(fingerprint, key) of an object name ``nbcache/<fingerprint>/<key>``."""
    _, fingerprint, key = name.split("/")
    return fingerprint, key


def test_a_second_machine_loads_everything_from_the_bucket(bucket, published, tmp_path):
    first = published["report"]
    assert first["compiled"] and first["remote"]["published"] == len(published["objects"]) > 0
    assert all(name.startswith(f"{NAMESPACE}/") for name in published["objects"])
    write(bucket["moto"], bucket["path"], published["objects"])
    second = machine(tmp_path / "machine-b", GRAPHS)
    assert second["compiled"] == [], "the second machine compiled a kernel"
    assert second["remote"]["hit"] > 0 and "miss" not in second["remote"]
    assert second["values"] == first["values"], "results differ from the first machine's"
    assert second["warnings"] == []


# Each fault: what serves the endpoint, the counter its one failure lands in, and a
# fragment of the one warning.
FAULTS = {
    "down": (down, "error", "error sending request"),
    "hung": (silent, "timeout", "error sending request"),
    "5xx": (lambda: answering(500), "error", "500 Internal Server Error"),
    # moto accepts any credentials: a server refusing them is played by one answering 403.
    "bad-credentials": (lambda: answering(403), "error", "PermissionDeniedError"),
}


def test_a_fresh_store_on_a_warm_bucket_compiles_nothing_not_even_the_self_test(bucket, tmp_path):
    first = fresh_machine(tmp_path / "machine-a")
    assert "self_test.<locals>.probe" in first["compiled"] and first["runtime_compiles"] == 1
    second = fresh_machine(tmp_path / "machine-b")
    assert second["enabled"] and second["warnings"] == []
    assert second["compiled"] == [] and second["runtime_compiles"] == 0
    assert second["bits"] == first["bits"]
    assert second["remote"]["hit"] > 0 and "miss" not in second["remote"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_failing_store_degrades_to_local_with_one_warning(bucket, tmp_path, fault):
    endpoint, counter, said = FAULTS[fault]
    with endpoint() as url:
        report = machine(tmp_path / "store", GRAPHS, faulty=True, AWS_ENDPOINT_URL=url)
    assert set(report["values"]) == set(GRAPHS) and report["compiled"]
    failures = {name: n for name, n in report["remote"].items() if name in FAILURES}
    assert failures == {counter: 1}, report["remote"]  # then the breaker keeps it out
    [warning] = remote_warnings(report)
    assert "using the local cache only" in warning and said in warning, warning


def test_publish_sends_what_a_machine_compiled_while_the_store_was_down(bucket, tmp_path):
    """A process compiling while the store is unreachable publishes nothing; `numba-cache
    publish` sends its entries afterwards (none twice), and a second machine loads them."""
    with down() as url:
        first = machine(tmp_path / "machine-a", [*GRAPHS, "outer40", "outer50"], faulty=True,
                        AWS_ENDPOINT_URL=url)
    assert first["compiled"] and "published" not in first["remote"], first["remote"]
    assert objects(bucket["moto"], bucket["path"]) == {}
    store = {"NBCACHE_DIR": str(tmp_path / "machine-a")}
    dry = cli_here("publish", "--dry-run", "--json", env=store)
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert listed["dry_run"] and listed["published"] and listed["present"] == 0, listed
    assert listed["notes_published"] >= 3 and listed["notes_present"] == 0, listed
    assert objects(bucket["moto"], bucket["path"]) == {}, "a dry run sent something"
    sent = cli_here("publish", "--json", env=store)
    assert sent.returncode == 0, sent.stderr
    report = json.loads(sent.stdout)
    assert report["published"] == listed["published"]
    assert report["too_large"] == report["unreadable"] == []
    on_server = {address(name) for name in objects(bucket["moto"], bucket["path"])}
    assert {(row["fingerprint"], row["key"]) for row in report["published"]} <= on_server
    again = cli_here("publish", env=store)
    count = len(report["published"])
    assert again.returncode == 0 and again.stdout.splitlines()[-1].startswith(
        "published 0 entries (0 B here) and 0 notes"), again.stdout
    assert f"; {count} of {count} local entries were there already" in again.stdout
    # The notes let a graph of new lengths find its graph kernel, converting nothing.
    second = machine(tmp_path / "machine-b", [*GRAPHS, "outer70"])
    assert second["compiled"] == [], "the second machine compiled a kernel"
    assert all(second["values"][name] == first["values"][name] for name in first["values"]
               if name in second["values"])
    assert second["session"].get("graph_by_code.hit") == 1, second["session"]
    assert second["session"].get("op_keys.remembered") == 1, second["session"]
    assert not second["dispatch_imported"], "the second machine converted the graph's ops"


def remote_warnings(report: dict) -> list[str]:
    """The child's warnings about the remote cache: recorded, or on its stderr when given
    before the child recorded warnings (at the self-test, whose probe kernel is looked up)."""
    told = [*report["warnings"], *report["stderr"].split("numba_cache: ")]
    return [text for text in told if "remote cache" in text]


def test_a_missing_bucket_is_a_failure_not_an_empty_cache(bucket, tmp_path):
    report = machine(tmp_path / "store", ["sumexp"], faulty=True,
                     NBCACHE_REMOTE="s3://no-such-bucket/x")
    assert report["compiled"] and report["remote"] == {"error": 1}, report["remote"]
    [warning] = remote_warnings(report)
    assert "the bucket does not exist" in warning


def test_damaged_truncated_and_foreign_objects_are_never_loaded(bucket, published, tmp_path):
    moto, path = bucket["moto"], bucket["path"]
    names = sorted(published["objects"])
    assert len(names) >= 3, names
    changed = {}
    for position, name in enumerate(names):
        body = published["objects"][name]
        if position % 3 == 0:  # a bit flip in the payload
            changed[name] = body[:-5] + bytes([body[-5] ^ 0xFF]) + body[-4:]
        elif position % 3 == 1:  # a write cut short
            changed[name] = body[: len(body) // 2]
        else:  # intact, but signed by another team (or a forger)
            fingerprint, key = address(name)
            opened = envelope.open_envelope(body, fingerprint, key, SECRET.encode())
            changed[name] = envelope.seal(fingerprint, key, *opened, OTHER_SECRET.encode())
    write(moto, path, changed)
    foreign = names[2::3]
    second = machine(tmp_path / "machine-b", GRAPHS)
    assert "hit" not in second["remote"], "a damaged or foreign entry was loaded"
    assert second["remote"]["damaged"] == len(names) - len(foreign)
    assert second["remote"]["rejected"] == len(foreign)
    assert len(second["compiled"]) == len(published["report"]["compiled"])
    assert second["values"] == published["report"]["values"]
    # Damaged objects were deleted and published again; foreign ones are left alone, and
    # create-if-absent writes keep them (clear --remote removes them).
    after = objects(moto, path)
    assert set(after) == set(names)
    for name in names:
        if name in foreign:
            assert after[name] == changed[name]
        else:
            envelope.open_envelope(after[name], *address(name), SECRET.encode())


def test_a_readonly_machine_reads_but_never_writes(bucket, published, tmp_path):
    moto, path = bucket["moto"], bucket["path"]
    damaged = dict(published["objects"])
    # An entry the machine reads (not a note it has no use for, such as the code index's,
    # nor numba's implementations, which it loads no graph kernel's compile to ask for).
    read = {lookup["key"] for lookups in published["report"]["lookups"].values()
            for lookup in lookups if lookup["kind"] != "overload"}
    damaged[min(name for name in damaged if address(name)[1] in read)] = b"garbage"
    write(moto, path, damaged)
    report = machine(tmp_path / "store", [*GRAPHS, "cumsum"], NBCACHE_REMOTE_READONLY="1")
    assert report["remote"]["hit"] > 0 and report["remote"]["damaged"] == 1
    assert "published" not in report["remote"]
    assert objects(moto, path) == damaged, "a read-only machine changed the bucket"


def test_concurrent_publishers_of_one_key_leave_one_intact_entry(bucket):
    """Eight publishers, each with its own client, put different envelopes at one key at
    once: the bucket holds exactly one object there, one of theirs whole."""
    fingerprint, key = "a" * 64, "b" * 64
    sealed = [envelope.seal(fingerprint, key, b"record %d " % n * 4096, b"", SECRET.encode())
              for n in range(8)]
    start, failures = threading.Barrier(len(sealed)), []

    def publish(body: bytes) -> None:
        backend = open_tier(settings.current(), lambda *counted: None).backend
        start.wait()
        try:
            backend.put(fingerprint, key, body)
        except Exception as error:  # noqa: BLE001 - reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=publish, args=(body,)) for body in sealed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    found = objects(bucket["moto"], bucket["path"])
    assert list(found) == [f"{NAMESPACE}/{fingerprint}/{key}"]
    [body] = found.values()
    assert body in sealed
    assert envelope.open_envelope(body, fingerprint, key, SECRET.encode())[0] \
        .startswith(b"record ")
    # The first stays: a later publisher never replaces it.
    backend = open_tier(settings.current(), lambda *counted: None).backend
    later = next(other for other in sealed if other != body)
    backend.put(fingerprint, key, later)
    assert backend.get(fingerprint, key) == body


def test_command_line_stats_list_prune_and_clear_a_bucket(bucket):
    fingerprint = "f" * 64
    tier = open_tier(settings.current(), lambda *counted: None)
    sizes = {}
    for n in range(4):
        key = f"{n:064x}"
        body = envelope.seal(fingerprint, key, bytes(1000 * (n + 1)), b"", SECRET.encode())
        tier.backend.put(fingerprint, key, body)
        sizes[key] = len(body)
    stats = json.loads(cli_here("stats", "--remote", "--json").stdout)
    assert (stats["entries"], stats["bytes"]) == (4, sum(sizes.values()))
    assert stats["prefix"] == NAMESPACE and stats["fingerprints"][fingerprint]["entries"] == 4
    listing = json.loads(cli_here("list", "--remote", "--json").stdout)
    assert {row["key"]: row["size"] for row in listing["entries"]} == sizes
    assert all(row["written"] > 0 for row in listing["entries"])
    limit = sum(sizes.values()) - 1  # one entry too many: the oldest written goes
    dry = json.loads(cli_here("prune", "--remote", "--max-size", str(limit), "--dry-run",
                              "--json").stdout)
    assert len(dry["evicted"]) == 1 and len(tier.entries()) == 4
    pruned = json.loads(cli_here("prune", "--remote", "--max-size", str(limit), "--json").stdout)
    assert pruned["evicted"] == dry["evicted"] and pruned["remaining_entries"] == 3
    assert pruned["remaining_bytes"] == sum(row[2] for row in tier.entries()) <= limit
    readonly = cli_here("prune", "--remote", "--max-size", "0",
                        env={"NBCACHE_REMOTE_READONLY": "1"})
    assert readonly.returncode == 2 and "NBCACHE_REMOTE_READONLY" in readonly.stderr
    cleared = json.loads(cli_here("clear", "--remote", "--yes", "--json").stdout)
    assert cleared["deleted"] == 3 and tier.entries() == []


def test_a_bucket_url_gets_the_object_backend_and_a_redis_url_redis(monkeypatch):
    monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
    for url, backend in (("s3://bucket/path", "ObjectBackend"), ("gs://bucket", "ObjectBackend"),
                         ("redis://127.0.0.1:1/0", "RedisBackend")):
        monkeypatch.setenv("NBCACHE_REMOTE", url)
        assert type(open_tier(settings.current(), lambda *counted: None).backend).__name__ \
            == backend


def test_without_obstore_the_tier_says_which_extra_to_install(monkeypatch):
    monkeypatch.setenv("NBCACHE_REMOTE", "s3://bucket/path")
    monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
    monkeypatch.setitem(sys.modules, "obstore", None)  # import obstore: ImportError
    monkeypatch.delitem(sys.modules, "numba_cache.store.remote.object_backend", raising=False)
    with pytest.raises(RemoteConfigError, match=r"pip install 'numba_cache\[s3\]'"):
        open_tier(settings.current(), lambda *counted: None)


def test_entries_of_different_signatures_of_one_key_are_merged_never_replaced(bucket):
    """Two publishers of one kernel key hold different overloads (numba signatures): the
    bucket ends with both, the first's kept, each write a compare-and-swap."""
    from numba_cache.store import Entry, record
    from numba_cache.store.entry_layout import overload_blob_name

    fingerprint, key = "c" * 64, "d" * 64

    def entry_record(*signatures: str) -> bytes:
        return record.encode(Entry(key=key, fingerprint=fingerprint, kind="op",
                                   blobs={overload_blob_name(name): name.encode() * 100
                                          for name in signatures}))

    tier = open_tier(settings.current(), lambda *counted: None)
    merge = lambda theirs, ours: record.merged(theirs, ours, fingerprint, key)  # noqa: E731
    assert tier.publish(fingerprint, key, entry_record("float64"), None, merge)
    first = tier.backend.get(fingerprint, key)
    assert tier.publish(fingerprint, key, entry_record("int64"), None, merge)
    stored = record.decode(tier.fetch(fingerprint, key, lambda data: data)[0], fingerprint, key)
    assert set(stored.blobs) == {overload_blob_name("float64"), overload_blob_name("int64")}
    # What adds nothing sends nothing: the stored entry stays as it is.
    merged_body = tier.backend.get(fingerprint, key)
    assert merged_body != first
    assert tier.publish(fingerprint, key, entry_record("float64"), None, merge)
    assert tier.backend.get(fingerprint, key) == merged_body
    # A writer between a read and its replace makes the replace fail: it reads again.
    _, version = tier.backend.get_version(fingerprint, key)
    assert tier.backend.replace(fingerprint, key, first, version)  # the writer between
    assert not tier.backend.replace(fingerprint, key, merged_body, version)
    assert tier.backend.get(fingerprint, key) == first


RADON_WITH_A_HELPER = """
import json
import numpy as np
import pytensor
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.evaluation.models import radon_model

model = radon_model()
with count_numba_compiles() as compiled:
    function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
    values = function(*model.point)
print(json.dumps({"compiled": len(compiled), "stats": dict(numba_cache.session_stats()),
                  "bits": [np.asarray(value).tobytes().hex() for value in values]}))
"""


def test_a_compile_with_a_forked_helper_fills_the_bucket_for_the_next_machine(bucket, tmp_path):
    """The helper compiling op kernels ahead is forked, where obstore's client cannot run
    (its threads are not copied: a call would wait forever): the helper stores locally,
    the process it helps publishes what it loads of that, and a fresh machine compiles
    nothing."""
    from helpers import run_python

    first = run_python(RADON_WITH_A_HELPER, env={"NBCACHE_DIR": str(tmp_path / "a"),
                                                 "NBCACHE_COMPILE_AHEAD": "1"}, timeout=300)
    assert first["stats"].get("op.compiled_ahead"), first["stats"]  # a helper did work
    second = run_python(RADON_WITH_A_HELPER, env={"NBCACHE_DIR": str(tmp_path / "b")},
                        timeout=300)
    assert second["compiled"] == 0, second["stats"]
    assert set(second["stats"]) == {"rewrite.hit", "op.hit", "graph.hit"}, second["stats"]
    assert second["bits"] == first["bits"]


ONE_GRAPH = """
import json, sys
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache

x = pt.vector("x")
function = pytensor.function([x], (pt.exp(x) * 2.0).sum(), mode="NUMBA_CACHE")
value = function(np.arange(3.0))
print(json.dumps({"value": float(value), "stats": dict(numba_cache.session_stats()),
                  "sparse_imported": "pytensor.sparse" in sys.modules}))
"""


def test_a_fresh_machine_keys_its_graph_without_importing_scipy_sparse(bucket, tmp_path):
    """The rewrite key needs the digest of PyTensor's rewrite registry as if pytensor.sparse
    were imported: a note on the tier gives it to a fresh store, which imports nothing."""
    from helpers import run_python

    env = {"NBCACHE_COMPILE_AHEAD": "0"}
    first = run_python(ONE_GRAPH, env={**env, "NBCACHE_DIR": str(tmp_path / "a")})
    assert first["sparse_imported"], "the first machine had no note and imported it"
    second = run_python(ONE_GRAPH, env={**env, "NBCACHE_DIR": str(tmp_path / "b")})
    assert second["stats"].get("rewrite.hit") == 1, second["stats"]
    assert not second["sparse_imported"], "the note on the tier was not used"
    assert second["value"] == first["value"]
