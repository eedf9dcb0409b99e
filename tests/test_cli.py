"""The ``numba-cache`` console script, run for real in subprocesses against real stores.

One store is compiled per module (:func:`compiled`): two small graphs, cold, under
this environment's fingerprint; the first again with ``numba__fastmath`` off (a
second fingerprint); then, after a pause, both warm, so that the entries they
load are the most recently used, the second graph's last. Tests that change a
store work on a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import one_line_error, run_python
from helpers import run_cli as numba_cache

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

FAST_OFF = {"PYTENSOR_FLAGS": "numba__fastmath=False"}
EXP = 'pt.exp(x) * 2.0'
LOG = 'pt.log(x) + pt.sum(x)'
ENTRY_FIELDS = {
    "key", "fingerprint", "kind", "summary", "cacheable", "reason",
    "size", "created", "last_used", "hits",
}


def program(*expressions: str) -> str:
    """A script compiling and calling a PyTensor function per expression through numba_cache."""
    return (
        "import numpy as np, pytensor, pytensor.tensor as pt\n"
        "import numba_cache\n"
        'x = pt.vector("x")\n'
    ) + "".join(
        f'pytensor.function([x], {expression}, mode="NUMBA_CACHE")(np.ones(2))\n'
        for expression in expressions
    )


def reporting(*expressions: str) -> str:
    """:func:`program`, printing its session counters and fingerprint."""
    return program(*expressions) + (
        "import json\n"
        "from numba_cache.keys import current_fingerprint\n"
        'print(json.dumps({"stats": dict(numba_cache.session_stats()),'
        ' "fingerprint": current_fingerprint().digest}))\n'
    )


def json_of(*args, env=None):
    result = numba_cache(*args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def listing(**filters) -> list[dict]:
    options = [f"--{name}={value}" for name, value in filters.items()]
    return json_of("list", *options)["entries"]


def keys(entries) -> set[str]:
    return {entry["key"] for entry in entries}


@dataclass(frozen=True)
class Compiled:
    root: Path
    current: str  # this environment's fingerprint
    fast_off: str  # the fingerprint with numba__fastmath off
    counters: dict  # fingerprint to the session counters its runs added up to


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Compiled:
    root = tmp_path_factory.mktemp("compiled") / "store"
    base = {"NBCACHE_DIR": str(root), "NBCACHE_DISABLE": "", "NBCACHE_READONLY": "",
            "NBCACHE_MAX_SIZE": ""}
    runs = [run_python(reporting(EXP), base), run_python(reporting(LOG), base),
            run_python(reporting(EXP), base | FAST_OFF)]
    time.sleep(2)  # a gap in last use, between the entries of the runs above and below
    runs.append(run_python(reporting(EXP, LOG), base))
    counters: dict[str, Counter] = {}
    for run in runs:
        counters.setdefault(run["fingerprint"], Counter()).update(run["stats"])
    current, fast_off = runs[0]["fingerprint"], runs[2]["fingerprint"]
    assert current != fast_off
    return Compiled(root, current, fast_off, {fp: dict(values) for fp, values in counters.items()})


@pytest.fixture
def store(compiled, private_store) -> Path:
    """A copy of the compiled store, where NBCACHE_DIR points."""
    shutil.copytree(compiled.root, private_store)
    return private_store


def entry_of(entries, *, kind, fingerprint, summary_part="") -> dict:
    (found,) = [
        entry for entry in entries
        if entry["kind"] == kind and entry["fingerprint"] == fingerprint
        and summary_part in entry["summary"]
    ]
    return found


def graph_of_exp(store: Path, entries: list[dict], fingerprint: str,
                 marker: str = "(constants lifted)") -> dict:
    """The graph entry of `EXP` under `fingerprint`: the one whose source has `marker`
    (its constant is lifted out of its kernel, LOG's graph has none)."""
    (found,) = [
        entry for entry in entries
        if entry["kind"] == "graph" and entry["fingerprint"] == fingerprint
        and marker in source_copy(store, entry).read_text()
    ]
    return found


def source_copy(store: Path, entry: dict) -> Path:
    return store / entry["fingerprint"] / entry["key"][:2] / f"{entry['key']}.py"


# stats


def test_stats_count_every_lookup_of_every_process_per_fingerprint(store, compiled):
    stats = json_of("stats")
    for fingerprint, counters in compiled.counters.items():
        assert stats["fingerprints"][fingerprint]["counters"] == counters
    # The cold runs only missed, the warm run only hit.
    assert stats["counters"]["graph.miss"] == 3 and stats["counters"]["graph.hit"] == 2
    assert stats["hits"] == sum(v for k, v in stats["counters"].items() if k.endswith(".hit"))
    assert stats["misses"] == sum(v for k, v in stats["counters"].items() if k.endswith(".miss"))
    assert stats["hit_rate"] == pytest.approx(stats["hits"] / (stats["hits"] + stats["misses"]))
    assert stats["kinds"]["graph"] == 3 and stats["current_fingerprint"] == compiled.current

    human = numba_cache("stats").stdout
    assert f"hit rate      {stats['hit_rate']:.1%}" in human
    rows = {line.split()[0]: line for line in human.splitlines() if line[:12].isalnum()}
    assert rows[compiled.current[:12]].endswith("current")
    assert rows[compiled.fast_off[:12]].endswith("pytensor_numba__fastmath=False")

    assert numba_cache("stats", "--zero").returncode == 0
    assert json_of("stats")["counters"] == {}
    assert json_of("stats")["entries"] == stats["entries"]  # entries stay


def test_stats_and_list_show_uncacheable_kernels_by_reason(private_store):
    registering = (
        "import numba_cache, pytensor.tensor as pt\n"
        "numba_cache.register_uncacheable(pt.elemwise.Elemwise, 'a test')\n"
    )
    run_python(registering + program(EXP) + "print('{}')")
    stats = json_of("stats")
    assert stats["counters"]["uncacheable:registered"] == 1
    assert stats["counters"]["uncacheable:contains-uncacheable"] == 1  # its graph
    assert stats["uncacheable"] == 2  # markers, so that the next process does not retry
    human = numba_cache("stats").stdout
    assert "(contains-uncacheable 1, registered 1); 2 markers stored" in human
    summaries = [line.split("  ")[-1] for line in numba_cache("list").stdout.splitlines()]
    assert any(line.startswith("[uncacheable: registered] op Composite") for line in summaries)


# listings


def test_every_listing_has_json_with_its_documented_fields(store, compiled):
    assert set(json_of("dir")) == {"root", "source", "exists"}
    assert {"entries", "bytes", "kinds", "counters", "fingerprints", "hits", "misses",
            "hit_rate", "current_fingerprint", "max_size", "root"} <= set(json_of("stats"))
    assert set(json_of("fingerprint")) == {"digest", "components"}
    entries = listing()
    assert entries and all(set(entry) == ENTRY_FIELDS for entry in entries)
    shown = json_of("show", entries[0]["key"][:10])
    assert set(shown) == ENTRY_FIELDS | {"tool_version", "blobs", "components", "source_path", "source"}
    assert json_of("verify") == {"problems": [], "dangling": [], "repaired": False}
    pruned = json_of("prune", "--max-size", "1G", "--dry-run")
    assert set(pruned) == {"dry_run", "evicted", "evicted_bytes", "remaining_entries", "remaining_bytes"}
    compared = json_of("explain", entries[0]["key"], entries[1]["key"])
    assert set(compared) == {"old", "new", "differences"}
    assert all(set(d) == {"component", "old", "new"} for d in compared["differences"])
    cleared = json_of("clear", "--fingerprint", compiled.fast_off[:8], "--yes")
    # Its rewritten graph, graph kernel and op kernel, and numba's runtime functions.
    assert cleared == {"deleted": 4, "bytes": cleared["bytes"]} and cleared["bytes"] > 0


def test_list_sorts_filters_and_limits(store, compiled):
    everything = listing()
    for sort, field in (("size", "size"), ("hits", "hits"), ("created", "created"),
                        ("last-used", "last_used")):
        values = [entry[field] for entry in listing(sort=sort)]
        assert values == sorted(values, reverse=True), sort
    assert len(listing(limit=2)) == 2
    graphs = listing(kind="graph")
    assert len(graphs) == 3 and {entry["kind"] for entry in graphs} == {"graph"}
    fast_off = listing(fingerprint=compiled.fast_off[:6])
    assert keys(fast_off) == {e["key"] for e in everything if e["fingerprint"] == compiled.fast_off}

    lines = numba_cache("list", "--kind", "graph").stdout.splitlines()
    assert lines[0].split() == ["KEY", "KIND", "FINGERPRINT", "SIZE", "CREATED", "LAST", "USED",
                                "HITS", "SUMMARY"]
    summary_column = lines[0].index("SUMMARY")
    assert all(line[summary_column:].startswith("graph:") for line in lines[1:4])
    assert lines[4].startswith("3 entries")


def test_show_prints_one_entry_by_a_unique_key_prefix(store, compiled):
    graph = graph_of_exp(store, listing(), compiled.current)
    result = numba_cache("show", graph["key"][:8])
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert graph["key"] in text and compiled.current in text
    assert "components" in text and "Elemwise (constants lifted)" in text
    assert "source" in text and "def graph_" in text
    shown = json_of("show", graph["key"][:8])
    assert shown["components"]["fingerprint"] == compiled.current
    assert shown["source"] == Path(shown["source_path"]).read_text()


def test_show_refuses_an_ambiguous_or_unknown_key_in_one_line(store):
    from numba_cache import settings
    from numba_cache.store import Entry, Store

    real = listing()[0]
    ninth = "0" if real["key"][8] != "0" else "1"  # so that nine digits tell them apart
    twin = real["key"][:8] + ninth + "0" * 54 + ("1" if real["key"][-1] != "1" else "2")
    Store(settings.current()).save(Entry(key=twin, fingerprint=real["fingerprint"], kind="op"))
    one_line_error(numba_cache("show", real["key"][:8]), "ambiguous", "2 entries")
    assert numba_cache("show", real["key"][:9]).returncode == 0
    one_line_error(numba_cache("show", "f" * 40), "no entry")
    one_line_error(numba_cache("show", "not-a-key"), "not a key")


# prune


def test_prune_evicts_the_least_recently_used_down_to_the_size(store, compiled):
    by_last_use = sorted(listing(), key=lambda entry: entry["last_used"])
    # The entries the warm run loaded, after the fixture's pause: two rewritten graphs,
    # their graph kernels, the op kernels these call (loaded with them) and numba's
    # runtime functions.
    uses = [entry["last_used"] for entry in by_last_use]
    gap = max(range(1, len(uses)), key=lambda n: uses[n] - uses[n - 1])
    kept = by_last_use[gap:]
    kinds = Counter(entry["kind"] for entry in kept)
    assert kinds["rewrite"] == kinds["graph"] == 2 and kinds["op"] >= 2
    assert kinds["runtime"] == 1 and len(kinds) == 4
    # The oldest graph is kept: prune goes by last use, not by age or size.
    graphs = [entry for entry in by_last_use if entry["kind"] == "graph"]
    assert min(graphs, key=lambda entry: entry["created"]) in kept
    budget = str(sum(entry["size"] for entry in kept))

    planned = json_of("prune", "--max-size", budget, "--dry-run")
    assert [entry["key"] for entry in planned["evicted"]] == [e["key"] for e in by_last_use[:gap]]
    assert keys(listing()) == keys(by_last_use)  # a dry run deletes nothing

    result = numba_cache("prune", "--max-size", budget)
    assert result.returncode == 0, result.stderr
    assert f"evicted {gap} entries" in result.stdout
    assert keys(listing()) == keys(kept)
    assert json_of("stats")["counters"]["eviction"] == gap


def test_prune_older_than_evicts_the_entries_unused_for_that_long(store):
    by_last_use = sorted(listing(), key=lambda entry: entry["last_used"])
    uses = [entry["last_used"] for entry in by_last_use]
    gap = max(range(1, len(uses)), key=lambda n: uses[n] - uses[n - 1])  # the fixture's pause
    cutoff = (uses[gap - 1] + uses[gap]) / 2
    assert json_of("prune", "--older-than", "1d")["evicted"] == []
    age = f"{time.time() - cutoff:.2f}s"
    pruned = json_of("prune", "--older-than", age)
    assert keys(pruned["evicted"]) == keys(by_last_use[:gap])
    assert keys(listing()) == keys(by_last_use[gap:])


# verify


def test_verify_finds_and_repairs_a_corrupted_entry_and_a_stale_temp_file(store, compiled):
    assert numba_cache("verify").returncode == 0
    op = entry_of(listing(), kind="op", fingerprint=compiled.current, summary_part="exp")
    record = store / op["fingerprint"] / op["key"][:2] / f"{op['key']}.nbk"
    data = bytearray(record.read_bytes())
    data[-100] ^= 0xFF  # inside the kernel blob, at the end of the record
    record.write_bytes(bytes(data))
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    stale = store / "tmp" / f"{op['key']}.nbk.{finished.pid}.0badf00d.tmp"
    stale.write_bytes(b"partial")

    result = numba_cache("verify")
    assert result.returncode == 1
    assert op["key"][:12] in result.stdout and "fails its checksum" in result.stdout
    problems = json.loads(numba_cache("verify", "--json").stdout)["problems"]
    assert {(p["key"], p["problem"].split(":")[0]) for p in problems if p["key"]} == {
        (op["key"], "unreadable record")
    }
    assert [p["path"] for p in problems if p["path"]] == [str(stale)]
    assert record.exists() and stale.exists()  # verify alone changes nothing

    assert numba_cache("verify", "--repair").returncode == 1
    assert not record.exists() and not stale.exists()
    assert op["key"] not in keys(listing())
    result = numba_cache("verify")
    assert result.returncode == 0 and "no problems" in result.stdout


# clear


def test_clear_deletes_one_fingerprint_and_asks_first(store, compiled):
    before = listing()
    refused = numba_cache("clear", stdin=subprocess.DEVNULL)
    one_line_error(refused, "--yes")
    assert keys(listing()) == keys(before)

    result = numba_cache("clear", "--fingerprint", compiled.fast_off[:10], "--yes")
    assert result.returncode == 0 and "deleted 4 entries" in result.stdout
    assert keys(listing()) == {e["key"] for e in before if e["fingerprint"] == compiled.current}


def test_clear_stale_keeps_the_fingerprint_of_the_environment_it_runs_in(store, compiled):
    before = listing()
    # With fastmath off, the current fingerprint is the other one: the default's entries are stale.
    result = numba_cache("clear", "--stale", "--yes", env=FAST_OFF)
    assert result.returncode == 0, result.stderr
    assert keys(listing()) == {e["key"] for e in before if e["fingerprint"] == compiled.fast_off}
    assert numba_cache("clear", "--yes").returncode == 0
    assert listing() == []


# explain


def test_explain_names_the_node_whose_constant_changed(store, compiled, tmp_path):
    """A constant baked into its kernel (a comparison's), changed: a miss of both levels."""
    baked = "pt.exp(x) * (x > 2.0)"
    run_python(program(baked) + "print('{}')")
    target = tmp_path / "three.py"
    target.write_text(program(baked.replace("2.0", "3.0")))
    before = listing()
    result = numba_cache("explain", str(target), "--json", "-vv")
    assert result.returncode == 0, result.stderr
    lookups = {lookup["kind"]: lookup for lookup in json.loads(result.stdout)["lookups"]}
    graph = lookups["graph"]
    assert graph["decision"] == "miss"
    # The nearest graph is the one with the other constant, not EXP's, as like it but
    # for its node.
    assert graph["nearest"]["key"] == graph_of_exp(store, before, compiled.current,
                                                   marker="gt(i0, 2.0)")["key"]
    assert graph["differences"] == [{
        "component": "nodes[0].op",
        "old": "Composite{(exp(i0) * gt(i0, 2.0))}",
        "new": "Composite{(exp(i0) * gt(i0, 3.0))}",
    }]
    assert lookups["op"]["decision"] == "miss"
    # -vv logs each lookup with its decision and key components.
    assert f"graph miss {graph['key'][:12]}" in result.stderr
    assert f"fingerprint={compiled.current[:12]}" in result.stderr
    assert listing() == before  # explaining stores nothing and touches nothing


def test_explain_of_two_keys_of_different_kinds_says_so(store, compiled):
    entries = listing()
    op = entry_of(entries, kind="op", fingerprint=compiled.current, summary_part="exp")
    graph = next(entry for entry in entries if entry["kind"] == "graph")
    result = numba_cache("explain", op["key"][:12], graph["key"][:12])
    assert result.returncode == 0, result.stderr
    assert "an op entry and a graph entry are keyed by different components" in result.stdout
    same = numba_cache("explain", graph["key"][:12], graph["key"][:12])
    assert "different components" not in same.stdout


def test_explain_tells_a_changed_lifted_constant_hits_both_levels(store, compiled, tmp_path):
    """EXP's constant is an argument of its op kernel and of its graph kernel
    (numba_cache/codegen/lifted_constants.py): another value is a hit."""
    target = tmp_path / "three.py"
    target.write_text(program(EXP.replace("2.0", "3.0")))
    before = listing()
    result = numba_cache("explain", str(target), "--json")
    assert result.returncode == 0, result.stderr
    lookups = {lookup["kind"]: lookup for lookup in json.loads(result.stdout)["lookups"]}
    assert lookups["graph"]["decision"] == "hit"
    assert lookups["graph"]["key"] == graph_of_exp(store, before, compiled.current)["key"]
    assert lookups["rewrite"]["decision"] == "miss"  # rewriting reads the value
    assert set(lookups) == {"rewrite", "graph"}  # a graph hit looks up no op kernel


def test_explain_names_the_fingerprint_component_that_changed(store, tmp_path):
    target = tmp_path / "log.py"
    target.write_text(program(LOG))
    result = numba_cache("explain", str(target), env=FAST_OFF)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    graph = next(n for n, line in enumerate(lines) if line.startswith("graph miss"))
    assert lines[graph + 1].endswith("another fingerprint")
    assert lines[graph + 2].strip() == "fingerprint.pytensor_numba__fastmath: True → False"
    assert len([line for line in lines if "fastmath: True → False" in line]) >= 3  # every kind


def test_explain_a_rewrite_miss_beside_a_data_bound_entry(store, tmp_path):
    """A data-bound rewrite leaves an entry with no key components (no fingerprint among
    them): explaining a later rewrite miss compares with it and must not fail."""
    data_mean = "x - pt.as_tensor(np.linspace({}, 2.0, 40)).mean()"  # folded: data-bound
    run_python(program(data_mean.format(1.0)) + "print('{}')")
    target = tmp_path / "other_data.py"
    target.write_text(program(data_mean.format(0.5)))
    result = numba_cache("explain", str(target), "--json")
    assert result.returncode == 0, result.stderr
    lookups = json.loads(result.stdout)["lookups"]
    assert "miss" in {lookup["decision"] for lookup in lookups if lookup["kind"] == "rewrite"}


def test_nbcache_log_debug_logs_each_lookup_with_its_decision(store, compiled):
    result = run_python(program(EXP) + "print('{}')", {"NBCACHE_LOG": "debug"})
    lines = [line for line in result["stderr"].splitlines() if line.startswith("numba_cache DEBUG")]
    graph_hit = [line for line in lines if " graph hit " in line]
    assert len(graph_hit) == 1
    assert f"fingerprint={compiled.current[:12]}" in graph_hit[0] and "nodes=1 node" in graph_hit[0]


# errors


def test_a_store_it_may_not_read_is_one_clear_line(tmp_path):
    # As root, permissions do not stop reads, so the command runs in a forked child
    # that drops to the unprivileged user nobody (the venv is not its to execute).
    from numba_cache import cli

    base = Path(tempfile.mkdtemp(prefix="numba_cache_private_"))
    base.chmod(0o755)
    root = base / "store"
    root.mkdir(mode=0o700)
    stderr_path = tmp_path / "stderr"
    try:
        if os.geteuid() != 0:
            root.chmod(0)
        child = os.fork()
        if child == 0:
            status = 99
            try:
                sys.stderr = open(stderr_path, "w")
                if os.geteuid() == 0:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                os.environ["NBCACHE_DIR"] = str(root)
                status = cli.main(["list"])
                sys.stderr.flush()
            finally:
                os._exit(status)
        _, wait_status = os.waitpid(child, 0)
    finally:
        root.chmod(0o700)
        shutil.rmtree(base)
    stderr = stderr_path.read_text()
    assert os.waitstatus_to_exitcode(wait_status) == 2
    assert stderr == f"numba-cache: cannot read the store {root} (env NBCACHE_DIR): permission denied\n"


# dir, demo


def test_dir_says_where_the_setting_came_from(private_store):
    result = json_of("dir")
    assert result == {"root": str(private_store), "source": "env NBCACHE_DIR", "exists": False}
    assert numba_cache("dir").stdout.endswith("(env NBCACHE_DIR, does not exist yet)\n")
    private_store.write_text("a file, not a store")
    assert numba_cache("dir").stdout.endswith(
        "(env NBCACHE_DIR, not a directory: the cache cannot be used)\n")


def test_demo_runs_and_compares_like_with_like():
    result = numba_cache("demo")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "numba_cache cold vs warm:      identical, bit for bit" in result.stdout
    [versus] = [line for line in result.stdout.splitlines() if "numba_cache vs built-in NUMBA:" in line]
    assert "apart at most" in versus and "bound" in versus
    warm_line = [line for line in result.stdout.splitlines() if line.startswith("numba_cache") and " warm " in line]
    assert warm_line and warm_line[0].split()[5] == "0"  # numba compiles in the warm process
