"""The shared tier on a real redis-server: "machines" are processes with their own local stores.

Each test runs fresh processes (``remote_machines.machine``) that compile small graphs
through the cache against one server on loopback, and reads what they compiled, what
they computed, and the counters they left in their store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import MOVED_FUNCTION_IDS, run_cli
from redis_server import RedisServer, ServerUnavailable, redis_server
from remote_machines import (FAILURES, GRAPHS, OTHER_SECRET, PATIENT, SECRET, fresh_machine,
                             machine, unavailable)

from numba_cache.store import CorruptEntry, tier_notes
from numba_cache.store.remote import envelope

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow


@contextlib.contextmanager
def start_server(directory: Path) -> Iterator[RedisServer]:
    """A running server; a failure to start fails the test in CI and skips it elsewhere."""
    with contextlib.ExitStack() as stack:
        try:
            running = stack.enter_context(redis_server(directory))
        except ServerUnavailable as problem:
            unavailable("redis-server", problem)
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RedisServer]:
    with start_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def remote(server, monkeypatch, request) -> dict:
    """Point this test (and its children) at the server, under a prefix of its own."""
    prefix = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    monkeypatch.setenv("NBCACHE_REMOTE", server.url)
    monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
    monkeypatch.setenv("NBCACHE_REMOTE_PREFIX", prefix)
    for variable, value in PATIENT.items():
        monkeypatch.setenv(variable, value)
    return {"prefix": prefix, "client": server.client()}


@pytest.fixture(scope="module")
def published(server, tmp_path_factory) -> dict:
    """The envelopes a first machine published for GRAPHS (by ``fingerprint:key``), and its report."""
    env = {"NBCACHE_REMOTE": server.url, "NBCACHE_REMOTE_SECRET": SECRET,
           "NBCACHE_REMOTE_PREFIX": "seed"}
    report = machine(tmp_path_factory.mktemp("machine-a"), GRAPHS, **env)
    client = server.client()
    entries = {name.decode().removeprefix("seed:"): client.hgetall(name)
               for name in client.scan_iter(match="seed:*")}
    return {"report": report, "entries": entries}


def seed(remote: dict, published: dict) -> list[str]:
    """Copy the first machine's entries under this test's prefix; their Redis names."""
    names = []
    for address, fields in published["entries"].items():
        name = f"{remote['prefix']}:{address}"
        remote["client"].hset(name, mapping=fields)
        names.append(name)
    return names


def remote_names(remote: dict) -> set[str]:
    return {name.decode() for name in remote["client"].scan_iter(match=f"{remote['prefix']}:*")}


def test_first_machine_compiles_and_publishes_every_entry(published):
    report = published["report"]
    assert report["compiled"], "the first machine compiled nothing"
    assert report["remote"]["published"] == len(published["entries"]) > 0
    assert report["remote"]["miss"] == len(published["entries"])
    assert report["remote"]["bytes_out"] > 0
    assert "hit" not in report["remote"] and "error" not in report["remote"]


def test_second_machine_loads_everything_from_redis(remote, published, tmp_path):
    seed(remote, published)
    second = machine(tmp_path / "machine-b", GRAPHS)
    assert second["compiled"] == []
    assert second["remote"]["hit"] > 0
    assert "miss" not in second["remote"] and "published" not in second["remote"]
    assert second["warnings"] == []
    # The hits were written back: with the server emptied, the second machine is warm.
    remote["client"].delete(*remote_names(remote))
    again = machine(tmp_path / "machine-b", GRAPHS)
    assert again["compiled"] == []
    assert again["remote"]["hit"] == second["remote"]["hit"], "nothing more came from the server"


def test_what_a_helper_compiled_ahead_is_published_too(remote, tmp_path):
    """A helper process compiling op kernels ahead stores them, and so publishes them: a
    second machine loads everything the first compiled, compiling nothing."""
    helped = machine(tmp_path / "machine-a", GRAPHS, NBCACHE_COMPILE_AHEAD="1")
    assert helped["counters"].get("compiled_ahead:helper", 0) >= 1, helped["counters"]
    second = machine(tmp_path / "machine-b", GRAPHS)
    assert second["compiled"] == []
    assert second["remote"]["hit"] > 0
    assert second["values"] == helped["values"]


def test_a_machine_whose_lookups_all_hit_locally_never_opens_the_tier(remote, tmp_path):
    """Opening the tier imports its client (``redis``: about 0.1 s, as long as a warm
    compile): a process that finds everything in its local store does not."""
    first = machine(tmp_path / "store", GRAPHS)
    assert first["compiled"] and first["clients_imported"] == ["redis"]
    warm = machine(tmp_path / "store", GRAPHS)
    assert warm["compiled"] == [] and warm["values"] == first["values"]
    assert warm["clients_imported"] == []


def test_a_fresh_machine_serves_data_of_new_lengths_by_the_notes_of_the_tier(remote, tmp_path):
    """The side files that let a graph of other static lengths load the graph kernel of its
    code, without converting its ops, travel as notes: a fresh machine's first graph of new
    lengths compiles nothing and imports no numba dispatch, as the machine that stored them."""
    first = machine(tmp_path / "machine-a", ["outer40", "outer50"])
    assert first["session"].get("op_keys.remembered") == 1, first["session"]
    second = machine(tmp_path / "machine-b", ["outer70"])
    assert second["compiled"] == [], "the fresh machine compiled for the new lengths"
    assert second["session"].get("graph_by_code.hit") == 1, second["session"]
    assert second["session"].get("op_keys.remembered") == 1, second["session"]
    assert not second["dispatch_imported"], "the fresh machine converted the graph's ops"


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"], ids=["killed", "hung"])
def test_server_failing_mid_run_degrades_to_local_with_one_warning(tmp_path, monkeypatch, fault):
    with start_server(tmp_path / "redis") as own_server:
        monkeypatch.setenv("NBCACHE_REMOTE", own_server.url)
        monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
        report = machine(tmp_path / "store", ["sumexp", f"signal {fault}", "tanh", "cumsum"],
                         faulty=True, REDIS_PID=str(own_server.process.pid))
    assert set(report["values"]) == {"sumexp", "tanh", "cumsum"}
    assert report["remote"]["published"] > 0, "nothing was published before the fault"
    # One failure, then the back-off keeps the server out of the compile path. A killed
    # server refuses connections (an error); a stopped one does not answer (a timeout).
    counted = {"SIGKILL": "error", "SIGSTOP": "timeout"}[fault]
    failures = {name: n for name, n in report["remote"].items() if name in FAILURES}
    assert failures == {counted: 1}, report["remote"]
    remote_warnings = [text for text in report["warnings"] if "remote cache" in text]
    assert len(remote_warnings) == 1 and "using the local cache only" in remote_warnings[0]


def test_what_is_compiled_during_the_back_off_is_published_when_the_server_answers_again(
        tmp_path, monkeypatch):
    """The server stalls while `tanh` is looked up: the process compiles it and a graph at
    two lengths locally during the back-off, noting the graph's code and op kernels, and
    publishes entries and notes at its next lookup after the back-off (`cumsum`'s), so a
    second machine compiles nothing, at the graph's third length too."""
    backoff = 4
    with start_server(tmp_path / "redis") as own_server:
        monkeypatch.setenv("NBCACHE_REMOTE", own_server.url)
        monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
        steps = ["sumexp", "signal SIGSTOP", "tanh", "outer40", "outer50", "signal SIGCONT",
                 f"sleep {backoff}", "cumsum"]
        first = machine(tmp_path / "machine-a", steps, faulty=True,
                        REDIS_PID=str(own_server.process.pid), NBCACHE_REMOTE_BACKOFF=str(backoff))
        assert first["remote"].get("timeout", 0) >= 1, first["remote"]
        assert first["session"].get("op_keys.remembered") == 1, first["session"]
        second = machine(tmp_path / "machine-b", ["sumexp", "tanh", "cumsum", "outer70"])
    assert second["compiled"] == [], "what the first machine compiled during the back-off"
    assert all(second["values"][name] == first["values"][name] for name in first["values"]
               if name in second["values"])
    assert second["session"].get("graph_by_code.hit") == 1, "the code index was not published"
    assert second["session"].get("op_keys.remembered") == 1, "the op kernel keys were not published"


def test_a_bug_in_the_remote_tier_is_reported_as_a_bug_and_never_fails_a_compile(
        server, tmp_path, monkeypatch):
    monkeypatch.setenv("NBCACHE_REMOTE", server.url)
    monkeypatch.setenv("NBCACHE_REMOTE_SECRET", SECRET)
    report = machine(tmp_path / "store", ["bug", "sumexp", "tanh"], faulty=True)
    assert set(report["values"]) == {"sumexp", "tanh"}
    assert report["remote"].get("bug") == 1 and "error" not in report["remote"], report["remote"]
    [warning] = [text for text in report["warnings"] if "remote" in text]
    assert "a bug in numba_cache's remote tier" in warning and "TypeError" in warning


def test_the_secret_can_come_from_a_file(remote, published, monkeypatch, tmp_path):
    seed(remote, published)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")  # as `echo` or an editor writes it
    monkeypatch.delenv("NBCACHE_REMOTE_SECRET")
    report = machine(tmp_path / "store", GRAPHS, NBCACHE_REMOTE_SECRET_FILE=str(secret_file))
    assert report["compiled"] == [] and report["remote"]["hit"] > 0


def test_damaged_entries_are_misses_and_are_repaired(remote, published, tmp_path):
    names = sorted(seed(remote, published))
    client = remote["client"]
    for flipped in names[::2]:
        sealed = bytearray(client.hget(flipped, "envelope"))
        sealed[-5] ^= 0xFF  # a bit flip in the payload
        client.hset(flipped, "envelope", bytes(sealed))
    for resealed in names[1::2]:
        # Correctly signed, but not a record: what a buggy publisher would send.
        _, fingerprint, key = resealed.split(":")
        client.hset(resealed, "envelope",
                    envelope.seal(fingerprint, key, b"not a record", b"", SECRET.encode()))
    second = machine(tmp_path / "machine-b", GRAPHS)
    # Every entry is damaged, so every lookup of the first machine is repeated here.
    assert second["remote"]["damaged"] == len(names)
    assert second["compiled"], "the damaged entries were compiled again"
    assert any("damaged entry" in text for text in second["warnings"])
    # Deleted, compiled again and published again: a third machine gets everything.
    assert second["remote"]["published"] == len(names)
    third = machine(tmp_path / "machine-c", GRAPHS)
    assert third["compiled"] == []
    assert "damaged" not in third["remote"] and "miss" not in third["remote"]


def test_entries_signed_with_another_secret_are_never_loaded(remote, tmp_path):
    other = machine(tmp_path / "other-team", GRAPHS, NBCACHE_REMOTE_SECRET=OTHER_SECRET)
    assert other["remote"]["published"] > 0
    ours = machine(tmp_path / "machine-b", GRAPHS)
    assert ours["remote"]["rejected"] == other["remote"]["published"]
    assert "hit" not in ours["remote"]
    assert len(ours["compiled"]) == len(other["compiled"]), "not everything was compiled here"
    # Once per process: at the self-test (numba's runtime functions, on stderr) or later.
    told = [*ours["warnings"], *ours["stderr"].split("numba_cache: ")]
    assert sum("refused entry" in text for text in told) == 1


def test_readonly_remote_reads_but_never_writes(remote, published, tmp_path):
    names = seed(remote, published)
    client = remote["client"]
    for name in names:
        client.persist(name)  # so that a renewed TTL would show
    [graph_key] = [lookup["key"] for lookup in published["report"]["lookups"]["tanh"]
                   if lookup["kind"] == "graph"]
    [damaged] = [name for name in names if name.endswith(graph_key)]
    client.hset(damaged, "envelope", b"garbage")
    before = {name: client.hgetall(name) for name in remote_names(remote)}
    report = machine(tmp_path / "machine-b", [*GRAPHS, "cumsum"], NBCACHE_REMOTE_READONLY="1")
    assert report["remote"]["hit"] > 0 and report["remote"]["damaged"] == 1
    assert report["compiled"], "cumsum (and the damaged entry) were compiled"
    assert "published" not in report["remote"]
    after = {name: client.hgetall(name) for name in remote_names(remote)}
    assert after == before, "a read-only machine changed the server"
    assert all(client.ttl(name) == -1 for name in after), "a read-only machine renewed a TTL"


def test_another_fingerprint_is_never_loaded(remote, tmp_path):
    # NUMBA_BOUNDSCHECK is a component of the fingerprint: another environment.
    third = machine(tmp_path / "machine-c", GRAPHS, NUMBA_BOUNDSCHECK="1")
    theirs = remote_names(remote)
    assert len(theirs) == third["remote"]["published"] > 0
    ours = machine(tmp_path / "machine-b", GRAPHS)
    assert ours["fingerprint"] != third["fingerprint"]
    assert "hit" not in ours["remote"] and "rejected" not in ours["remote"]
    assert ours["compiled"] and ours["remote"]["miss"] == ours["remote"]["published"]
    # Their entries copied over ours fail the signature, which covers fingerprint and key.
    client = remote["client"]
    targets = sorted(remote_names(remote) - theirs)
    for target, source in zip(targets, sorted(theirs) * len(targets)):
        client.hset(target, mapping=client.hgetall(source))
    fresh = machine(tmp_path / "machine-d", GRAPHS)
    assert fresh["remote"]["rejected"] == len(targets) > 0
    assert len(fresh["compiled"]) == len(ours["compiled"])


def test_without_a_secret_the_remote_tier_refuses_to_start(remote, monkeypatch, tmp_path):
    monkeypatch.delenv("NBCACHE_REMOTE_SECRET")
    report = machine(tmp_path / "store", ["sumexp"])
    assert report["compiled"] and report["remote"] == {}
    # Warned when the tier is first asked for (a vouch, by the self-test), before the child
    # records warnings: so on its stderr.
    assert report["stderr"].count("needs a shared secret") == 1
    assert remote_names(remote) == set()
    refused = run_cli("stats", "--remote")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "NBCACHE_REMOTE_SECRET" in refused.stderr
    short = run_cli("list", "--remote", env={"NBCACHE_REMOTE_SECRET": "short"})
    assert short.returncode == 2 and "at least 16" in short.stderr


def test_a_url_the_redis_client_refuses_is_warned_and_compiles_go_on_locally(
        server, remote, monkeypatch, tmp_path):
    monkeypatch.setenv("NBCACHE_REMOTE", f"{server.url}?socket_timeout=abc")
    report = machine(tmp_path / "store", ["sumexp"])
    assert report["compiled"] and report["remote"] == {}
    assert report["stderr"].count("Invalid value for 'socket_timeout'") == 1
    refused = run_cli("stats", "--remote")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "socket_timeout" in refused.stderr


def test_an_entry_over_the_size_limit_stays_local(remote, tmp_path):
    report = machine(tmp_path / "store", ["sumexp"], NBCACHE_REMOTE_MAX_SIZE="1K")
    assert report["remote"]["too_large"] > 0
    published = report["remote"].get("published", 0)
    assert len(remote_names(remote)) == published


def test_a_reader_with_a_smaller_size_limit_loads_entries_and_leaves_them(remote, published,
                                                                          tmp_path):
    """``NBCACHE_REMOTE_MAX_SIZE`` bounds what a machine sends. A reader with a smaller
    one (or the same one, which bounds the envelope, not what it inflates to) loads the
    others' entries, and never deletes them as damaged."""
    names = seed(remote, published)
    reader = machine(tmp_path / "store", GRAPHS, NBCACHE_REMOTE_MAX_SIZE="1K")
    assert reader["compiled"] == []
    assert reader["remote"]["hit"] > 0 and "damaged" not in reader["remote"], reader["remote"]
    assert remote_names(remote) == set(names)


def test_a_foreign_value_under_the_prefix_is_not_an_entry(remote, published, tmp_path):
    """A key of another kind under the prefix is left out of listings; a value of another
    kind at an entry's name is a damaged entry: compiled again, and replaced."""
    names = seed(remote, published)
    remote["client"].set(f"{remote['prefix']}:notes:x", "hello")
    # An entry the machine reads (not a note it has no use for, such as the code index's).
    read = {lookup["key"] for lookups in published["report"]["lookups"].values()
            for lookup in lookups}
    taken = min(name for name in names if name.rsplit(":", 1)[1] in read)
    remote["client"].delete(taken)
    remote["client"].set(taken, "not a hash")
    report = machine(tmp_path / "store", GRAPHS)
    assert report["remote"].get("damaged") == 1 and "error" not in report["remote"], \
        report["remote"]
    assert remote["client"].type(taken) == b"hash", "the damaged entry was not replaced"
    stats = run_cli("stats", "--remote", "--json", env={"NBCACHE_DIR": str(tmp_path / "store")})
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["entries"] == len(names)


def test_command_line_stats_list_and_clear_the_remote_tier(remote, published, tmp_path):
    names = seed(remote, published)
    machine(tmp_path / "store", GRAPHS)
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    stats = run_cli("stats", "--remote", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["entries"] == len(names)
    listing = json.loads(run_cli("list", "--remote", "--json", env=env).stdout)
    assert {f"{remote['prefix']}:{row['fingerprint']}:{row['key']}" for row in listing["entries"]} \
        == set(names)
    hits = json.loads(run_cli("stats", "--json", env=env).stdout)["counters"]["remote:hit"]
    [row] = [line for line in run_cli("stats", env=env).stdout.splitlines() if line.startswith("remote")]
    assert f"{hits} hits, 0 misses, 0 errors" in row
    dry = json.loads(run_cli("prune", "--remote", "--max-size", "0", "--dry-run", "--json",
                             env=env).stdout)
    assert len(dry["evicted"]) == len(names) and dry["remaining_bytes"] == 0
    assert remote_names(remote) == set(names), "a dry run deleted something"
    readonly = run_cli("clear", "--remote", "--yes", env=env | {"NBCACHE_REMOTE_READONLY": "1"})
    assert readonly.returncode == 2 and "NBCACHE_REMOTE_READONLY" in readonly.stderr
    cleared = run_cli("clear", "--remote", "--yes", "--json", env=env)
    assert json.loads(cleared.stdout)["deleted"] == len(names)
    assert remote_names(remote) == set()


# A fresh local store on a warm tier: the self-test too is vouched for by the tier

def vouch_name(remote: dict, fingerprint: str) -> str:
    return f"{remote['prefix']}:{fingerprint}:{tier_notes.VOUCH_KEY}"


def test_a_fresh_store_on_a_warm_tier_compiles_nothing_not_even_the_self_test(remote, tmp_path):
    first = fresh_machine(tmp_path / "machine-a")
    assert "self_test.<locals>.probe" in first["compiled"] and first["runtime_compiles"] == 1
    assert remote["client"].exists(vouch_name(remote, first["fingerprint"]))
    second = fresh_machine(tmp_path / "machine-b")
    assert second["enabled"] and second["warnings"] == []
    assert second["compiled"] == [] and second["runtime_compiles"] == 0
    assert second["bits"] == first["bits"]
    assert second["remote"]["hit"] > 0 and "miss" not in second["remote"]
    assert "published" not in second["remote"], "the vouch was published again"
    # The vouch was recorded locally: with the server emptied, the second machine is warm.
    remote["client"].delete(*remote_names(remote))
    again = fresh_machine(tmp_path / "machine-b")
    assert again["compiled"] == [] and again["runtime_compiles"] == 0 and again["enabled"]
    assert again["remote"]["hit"] == second["remote"]["hit"], "nothing more came from the server"


def test_a_vouch_signed_with_another_secret_is_not_taken(remote, tmp_path):
    other = fresh_machine(tmp_path / "other-team", NBCACHE_REMOTE_SECRET=OTHER_SECRET)
    assert remote["client"].exists(vouch_name(remote, other["fingerprint"]))
    ours = fresh_machine(tmp_path / "machine-b")
    assert "self_test.<locals>.probe" in ours["compiled"] and ours["runtime_compiles"] == 1
    assert ours["remote"]["rejected"] == other["remote"]["published"]  # the vouch among them
    assert ours["enabled"] and ours["bits"] == other["bits"]
    # Ours replaced theirs: a third machine of ours takes it.
    third = fresh_machine(tmp_path / "machine-c")
    assert third["compiled"] == [] and third["runtime_compiles"] == 0 and third["enabled"]


def test_a_moved_seam_turns_the_cache_off_despite_a_vouch(remote, tmp_path):
    first = fresh_machine(tmp_path / "machine-a")
    assert remote["client"].exists(vouch_name(remote, first["fingerprint"]))
    moved = fresh_machine(tmp_path / "machine-b", setup=MOVED_FUNCTION_IDS)
    assert not moved["enabled"]
    [warning] = [text for text in moved["warnings"] if "turned off" in text]
    assert "FunctionIdentity._unique_ids" in warning
    # Turned off before anything was asked of the server or loaded: every graph compiled.
    assert moved["remote"] == {} and "self_test.<locals>.probe" not in moved["compiled"]
    assert {name for name in moved["compiled"] if name.startswith("graph_")}, moved["compiled"]
    assert not list((tmp_path / "machine-b").rglob("*.nbk"))


# The envelope and the settings, without a server


FINGERPRINT, KEY, OTHER_KEY = "a" * 64, "b" * 64, "c" * 64


def test_a_note_is_read_only_whole_of_its_kind_and_about_what_it_was_asked_about():
    code, graph = "a" * 64, "b" * 64
    assert tier_notes.CODE.decode(code, tier_notes.CODE.encode(code, graph)) == graph
    keys = [graph, code]
    assert tier_notes.OP_KEYS.decode(graph, tier_notes.OP_KEYS.encode(graph, keys)) == keys
    for kind, about, note in [
        (tier_notes.CODE, code, tier_notes.CODE.encode("c" * 64, graph)),  # about another code
        (tier_notes.CODE, code, tier_notes.CODE.encode(code, "not a key")),
        (tier_notes.CODE, code, tier_notes.OP_KEYS.encode(code, [graph])),  # another kind
        (tier_notes.OP_KEYS, graph, tier_notes.OP_KEYS.encode(graph, [])),
        (tier_notes.OP_KEYS, graph, tier_notes.OP_KEYS.encode(graph, [code, 7])),
        (tier_notes.CODE, code, b"{not json"),
    ]:
        with pytest.raises(CorruptEntry):
            kind.decode(about, note)


def test_publish_sends_the_notes_of_side_tables_naming_only_kernels_it_holds():
    stored, gone = "d" * 64, "e" * 64
    tables = {"registries": {"1" * 64: "2" * 64},
              "code_index": {"3" * 64: stored, "4" * 64: gone},
              "remembered_op_keys": {"5" * 64: [stored, stored], "6" * 64: [stored, gone]}}
    notes = tier_notes.notes_of_side_tables(FINGERPRINT, {"numba": "0.68"}, tables, {stored})
    assert notes == {
        tier_notes.VOUCH_KEY: tier_notes.VOUCH.encode(FINGERPRINT, {"numba": "0.68"}),
        tier_notes.registry_key("1" * 64): tier_notes.REGISTRY.encode("1" * 64, "2" * 64),
        tier_notes.code_key("3" * 64): tier_notes.CODE.encode("3" * 64, stored),
        tier_notes.op_keys_key("5" * 64): tier_notes.OP_KEYS.encode("5" * 64, [stored, stored]),
    }
    without_self_test = tier_notes.notes_of_side_tables(FINGERPRINT, None, tables, {stored})
    assert tier_notes.VOUCH_KEY not in without_self_test


def test_an_envelope_opens_only_intact_with_its_secret_at_its_address():
    sealed = envelope.seal(FINGERPRINT, KEY, b"record", b"source", SECRET.encode())
    assert envelope.open_envelope(sealed, FINGERPRINT, KEY, SECRET.encode()) == (
        b"record", b"source")
    with pytest.raises(envelope.BadSignature):
        envelope.open_envelope(sealed, FINGERPRINT, KEY, OTHER_SECRET.encode())
    with pytest.raises(envelope.BadSignature):
        envelope.open_envelope(sealed, FINGERPRINT, OTHER_KEY, SECRET.encode())
    flipped = bytearray(sealed)
    flipped[-1] ^= 1
    with pytest.raises(envelope.DamagedEnvelope):
        envelope.open_envelope(bytes(flipped), FINGERPRINT, KEY, SECRET.encode())
    with pytest.raises(envelope.DamagedEnvelope):
        envelope.open_envelope(sealed[:-3], FINGERPRINT, KEY, SECRET.encode())


def test_an_envelope_that_would_inflate_past_the_limit_is_refused():
    bomb = envelope.seal(FINGERPRINT, KEY, bytes(10**6), b"", SECRET.encode())
    assert len(bomb) * envelope.INFLATION_LIMIT < 10**6
    with pytest.raises(envelope.TooLarge, match="inflates past"):
        envelope.open_envelope(bomb, FINGERPRINT, KEY, SECRET.encode())


@pytest.mark.parametrize("variable, value, message", [
    ("NBCACHE_REMOTE", "http://cache:6379", "is not a remote cache URL"),
    ("NBCACHE_REMOTE", "s3:///prefix", "names no bucket"),
    ("NBCACHE_REMOTE", "s3://my bucket/prefix", "'my bucket' is not a bucket name"),
    ("NBCACHE_REMOTE_PREFIX", "a b*", "cannot be a key prefix"),
    ("NBCACHE_REMOTE_TTL", "soon", "cannot read 'soon' as a duration"),
    ("NBCACHE_REMOTE_TIMEOUT", "0", "must be a positive number of seconds"),
    ("NBCACHE_REMOTE_TIMEOUT", "nan", "must be a positive number of seconds"),
    ("NBCACHE_REMOTE", "redis://127.0.0.1:99999/0", "not a server address (Port out of range"),
    ("NBCACHE_REMOTE", "redis://cache:port/0", "not a server address (Port could not be cast"),
    ("NBCACHE_REMOTE", "redis://[::1/0", "not a server address (Invalid IPv6 URL)"),
    # redis-py would take database 0, and database 12 for /1/2
    ("NBCACHE_REMOTE", "redis://cache:6379/abc", "'abc' is not a database number"),
    ("NBCACHE_REMOTE", "redis://cache:6379/1/2", "'1/2' is not a database number"),
    ("NBCACHE_REMOTE", "redis://cache:6379/?db=one", "'one' is not a database number"),
    ("NBCACHE_REMOTE", "unix:///run/redis.sock?db=-1", "'-1' is not a database number"),
])
def test_bad_remote_settings_are_one_line_errors(variable, value, message):
    result = run_cli("stats", "--remote", env={variable: value})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr and variable in result.stderr
