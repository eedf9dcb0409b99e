"""``numba-cache warm``, ``export`` and ``import``, run for real against real stores.

One store is warmed per module (:func:`warmed`): ``warm -j 2`` over a callable
returning three good graphs and one numba cannot compile, and over a script
that builds a function without calling it. It is exported once; tests import
that archive, or damaged copies of it, into clean stores under another HOME.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import warm_targets
from helpers import (MOVED_FUNCTION_IDS, TESTS, one_line_error, run_cli, run_python,
                     without_op_loads)
from reliability import snapshot

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

FAST_OFF = {"PYTENSOR_FLAGS": "numba__fastmath=False"}
GOOD = {**warm_targets.EXPRESSIONS, "script": warm_targets.SCRIPT_EXPRESSION}


@dataclass(frozen=True)
class Warmed:
    root: Path
    warm: dict  # warm --json
    archive: Path
    export: dict  # export --json


@pytest.fixture(scope="module")
def warmed(tmp_path_factory) -> Warmed:
    base = tmp_path_factory.mktemp("warmed")
    env = {"NBCACHE_DIR": str(base / "store"), "NBCACHE_DISABLE": "", "NBCACHE_READONLY": ""}
    result = run_cli("warm", "-j", "2", "--json", "warm_targets:with_broken_graph",
                         "warm_script.py", env=env)
    assert result.returncode == 1, result.stderr  # the broken graph
    exported = run_cli("export", str(base / "cache.tar.gz"), "--json", env=env)
    assert exported.returncode == 0, exported.stderr
    return Warmed(base / "store", json.loads(result.stdout), base / "cache.tar.gz",
                  json.loads(exported.stdout))


def fresh(tmp_path: Path, name: str) -> dict:
    """The environment of another machine: its own HOME and an empty store."""
    (tmp_path / f"{name}-home").mkdir()
    return {"HOME": str(tmp_path / f"{name}-home"), "NBCACHE_DIR": str(tmp_path / f"{name}-store"),
            "NBCACHE_DISABLE": "", "NBCACHE_READONLY": ""}


def compile_good_graphs(env: dict) -> dict:
    """Compile and call every good graph in a fresh process; values, numba compiles, counters."""
    return run_python(f"""
        import json
        import numpy as np
        from numba_cache.evaluation.compile_events import count_numba_compiles
        with count_numba_compiles() as compiled:
            import pytensor, numba_cache, warm_targets
            values = {{
                name: np.asarray(pytensor.function(*warm_targets.build(expression),
                                 mode="NUMBA_CACHE")(warm_targets.INPUT)).tolist()
                for name, expression in {GOOD!r}.items()
            }}
        print(json.dumps({{"values": values, "compiled": compiled,
                          "stats": dict(numba_cache.session_stats())}}))
    """, env=env)


def listing(env: dict) -> list[dict]:
    result = run_cli("list", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["entries"]


def verify_clean(env: dict) -> None:
    result = run_cli("verify", "--json", env=env)
    assert result.returncode == 0 and json.loads(result.stdout)["problems"] == [], result.stdout


def rewrite_archive(source: Path, destination: Path, change) -> None:
    """Copy the archive `source`, passing each member's name and bytes through `change`,
    which returns the bytes to write (or None to leave the member out)."""
    with tarfile.open(source, "r:gz") as old, tarfile.open(destination, "w:gz") as new:
        for member in old.getmembers():
            data = change(member.name, old.extractfile(member).read())
            if data is None:
                continue
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))


def manifest_of(archive: Path) -> dict:
    with tarfile.open(archive, "r:gz") as opened:
        return json.loads(opened.extractfile("manifest.json").read())


def graph_entry(warmed: Warmed) -> dict:
    """The manifest entry of one whole-graph kernel in the archive."""
    return next(item for item in manifest_of(warmed.archive)["entries"] if item["kind"] == "graph")


def test_warm_stores_the_good_graphs_and_reports_the_broken_one(warmed, tmp_path):
    report = warmed.warm
    (failure,) = report["failures"]
    assert failure["target"] == "warm_targets:with_broken_graph"
    assert failure["graph"] == "broken"
    assert failure["error"].startswith("TypingError"), failure
    assert "no_such_function" in failure["details"]
    by_target = {target["target"]: target for target in report["targets"]}
    assert by_target["warm_script.py"]["failures"] == []
    assert by_target["warm_script.py"]["compiled"] >= 2  # its rewrite and graph kernel, uncalled
    assert report["compiled"] >= 2 * len(GOOD) and report["write_errors"] == 0

    # Warming again finds everything cached; the text report names the failure and exits 1.
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    shutil.copytree(warmed.root, tmp_path / "store")
    again = run_cli("warm", "warm_targets:with_broken_graph", "warm_script.py", env=env)
    assert again.returncode == 1, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0].startswith("warming 2 targets, 1 at a time, into")
    assert lines[1].startswith("[1/2] warm_targets:with_broken_graph: ")
    assert lines[2].startswith("[2/2] warm_script.py: 0 compiled, 2 already cached"), lines
    assert "FAILED warm_targets:with_broken_graph: broken: TypingError:" in again.stdout


def test_exported_cache_serves_every_graph_on_another_machine(warmed, tmp_path):
    assert warmed.export["entries"] == len(listing({"NBCACHE_DIR": str(warmed.root)}))
    assert warmed.export["unreadable"] == []
    manifest = manifest_of(warmed.archive)
    assert manifest["format"] == "numba_cache archive" and manifest["tool_version"]
    assert set(manifest["fingerprints"]) == {manifest["exported_from"]}
    assert all(len(item["record"]["sha256"]) == 64 for item in manifest["entries"])

    env = fresh(tmp_path, "other")
    imported = run_cli("import", str(warmed.archive), "--json", env=env)
    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    assert report["imported"] == warmed.export["entries"] and report["skipped"] == []
    verify_clean(env)

    run = compile_good_graphs(env)
    assert run["compiled"] == []  # not one numba compilation, not even the self-test
    assert without_op_loads(run["stats"]) == {"rewrite.hit": len(GOOD), "graph.hit": len(GOOD)}, (
        run["stats"])
    for name, expression in GOOD.items():
        assert np.allclose(run["values"][name], warm_targets.expected(expression), rtol=1e-12)

    again = run_cli("import", str(warmed.archive), "--json", env=env)
    assert again.returncode == 0
    assert json.loads(again.stdout)["present"] == warmed.export["entries"]


IMPORT_CHILD = """
import contextlib, io, json
{setup}
from numba_cache import cli
from numba_cache.evaluation.compile_events import count_numba_compiles
stdout, stderr = io.StringIO(), io.StringIO()
with (count_numba_compiles() as compiled, contextlib.redirect_stdout(stdout),
      contextlib.redirect_stderr(stderr)):
    status = cli.main(["import", {archive!r}, "--json"])
print(json.dumps({{"status": status, "compiled": compiled, "out": stdout.getvalue(),
                  "err": stderr.getvalue()}}))
"""


def import_counting_compiles(archive: Path, env: dict, setup: str = "") -> dict:
    """``numba-cache import ARCHIVE`` in a fresh process: its status, output (``out``, ``err``)
    and the numba compiles it made."""
    return run_python(IMPORT_CHILD.format(archive=str(archive), setup=setup), env=env)


def test_an_archive_vouches_for_its_fingerprint_so_import_compiles_nothing(warmed, tmp_path):
    """Its entries of this fingerprint come from a store where the self-test passed: the
    seam checks that compile are left out, the others run (the next test)."""
    env = fresh(tmp_path, "other")
    result = import_counting_compiles(warmed.archive, env)
    assert result["status"] == 0, result["err"]
    assert json.loads(result["out"])["imported"] == warmed.export["entries"]
    assert result["compiled"] == []
    # Without the fingerprint's components, the archive vouches for nothing.
    bare = tmp_path / "bare.tar.gz"
    rewrite_archive(warmed.archive, bare, lambda name, data: data if name != "manifest.json" else
                    json.dumps(json.loads(data) | {"fingerprints": {
                        digest: None for digest in json.loads(data)["fingerprints"]}}).encode())
    checked = import_counting_compiles(bare, fresh(tmp_path, "checked"))
    assert checked["status"] == 0, checked["err"]
    assert "self_test.<locals>.probe" in checked["compiled"]


def test_a_moved_seam_refuses_the_import_of_a_vouching_archive(warmed, tmp_path):
    env = fresh(tmp_path, "other")
    result = import_counting_compiles(warmed.archive, env, setup=MOVED_FUNCTION_IDS)
    assert result["status"] == 2
    assert "cannot work in this environment" in result["err"]
    assert "FunctionIdentity._unique_ids" in result["err"] and "nothing imported" in result["err"]
    assert result["compiled"] == [] and not Path(env["NBCACHE_DIR"]).exists()


def test_import_from_another_fingerprint_imports_nothing(warmed, tmp_path):
    env = fresh(tmp_path, "other") | FAST_OFF
    result = run_cli("import", str(warmed.archive), env=env)
    assert result.returncode == 0, result.stderr
    assert "imported 0 entries" in result.stdout
    assert (f"skipped {warmed.export['entries']} entries of another environment: fingerprint "
            in result.stdout)
    assert "pytensor_numba__fastmath=True" in result.stdout  # what differs, as the archive has it
    assert listing(env) == []
    verify_clean(env)


def test_import_skips_entries_that_fail_their_checksum(warmed, tmp_path):
    target = graph_entry(warmed)
    damaged = tmp_path / "flipped.tar.gz"

    def flip_one_byte(name: str, data: bytes) -> bytes:
        if name.endswith(f"{target['key']}.nbk"):
            middle = len(data) // 2
            return data[:middle] + bytes([data[middle] ^ 0x40]) + data[middle + 1:]
        return data

    rewrite_archive(warmed.archive, damaged, flip_one_byte)
    env = fresh(tmp_path, "other")
    result = run_cli("import", str(damaged), env=env)
    assert result.returncode == 1, result.stderr
    assert f"skipped {target['key'][:12]} (graph, " in result.stdout
    assert "its record fails its checksum (damaged or altered)" in result.stdout
    assert f"imported {warmed.export['entries'] - 1} entries" in result.stdout
    assert target["key"] not in {entry["key"] for entry in listing(env)}
    verify_clean(env)


def test_a_consistently_altered_record_never_replaces_a_valid_entry(warmed, tmp_path):
    """The manifest is rewritten to match the altered record: the record's own checksums
    catch it, whether the store holds the entry already or not."""
    target = graph_entry(warmed)
    altered = tmp_path / "altered.tar.gz"
    record_name = f"entries/{target['fingerprint']}/{target['key']}.nbk"
    with tarfile.open(warmed.archive, "r:gz") as opened:
        record = bytearray(opened.extractfile(record_name).read())
    record[-100] ^= 0x01  # inside the last blob: the compiled kernel
    manifest = manifest_of(warmed.archive)
    for item in manifest["entries"]:
        if item["key"] == target["key"]:
            item["record"] = {"size": len(record), "sha256": hashlib.sha256(record).hexdigest()}
    replaced = {record_name: bytes(record), "manifest.json": json.dumps(manifest).encode()}
    rewrite_archive(warmed.archive, altered, lambda name, data: replaced.get(name, data))

    clean = fresh(tmp_path, "clean")
    result = run_cli("import", str(altered), env=clean)
    assert result.returncode == 1
    assert "not a valid record: blob" in result.stdout and "fails its checksum" in result.stdout
    assert target["key"] not in {entry["key"] for entry in listing(clean)}
    verify_clean(clean)

    holding = fresh(tmp_path, "holding")
    assert run_cli("import", str(warmed.archive), env=holding).returncode == 0
    before = snapshot(Path(holding["NBCACHE_DIR"]))
    result = run_cli("import", str(altered), env=holding)
    assert result.returncode == 1
    after = snapshot(Path(holding["NBCACHE_DIR"]))
    assert {name: digest for name, digest in after.items() if name.endswith((".nbk", ".py"))} == {
        name: digest for name, digest in before.items() if name.endswith((".nbk", ".py"))
    }
    verify_clean(holding)


def test_truncated_or_foreign_archives_are_refused_whole(warmed, tmp_path):
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(warmed.archive.read_bytes()[: warmed.archive.stat().st_size * 3 // 4])
    env = fresh(tmp_path, "other")
    result = run_cli("import", str(truncated), env=env)
    one_line_error(result, "truncated, damaged or not a numba_cache archive; nothing imported")
    assert not Path(env["NBCACHE_DIR"]).exists()  # no empty store made for it is left behind

    plain = tmp_path / "plain.tar.gz"
    rewrite_archive(warmed.archive, plain, lambda name, data: None if name == "manifest.json" else data)
    one_line_error(run_cli("import", str(plain), env=env), "has no manifest.json")
    not_an_archive = tmp_path / "notes.txt"
    not_an_archive.write_text("hello\n")
    one_line_error(run_cli("import", str(not_an_archive), env=env), "nothing imported")
    one_line_error(run_cli("import", str(tmp_path / "missing.tar.gz"), env=env), "no such file")
    assert not Path(env["NBCACHE_DIR"]).exists()


def test_warm_and_export_refuse_bad_requests(tmp_path):
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    one_line_error(run_cli("warm", "no_such_file.py", env=env), "no such file: no_such_file.py")
    one_line_error(run_cli("warm", "no_such_module:main", env=env), "no module named")
    one_line_error(run_cli("warm", "-j", "0", "warm_script.py", env=env), "-j must be at least 1")
    one_line_error(run_cli("warm", "warm_script.py", env=env | {"NBCACHE_DISABLE": "1"}),
                   "the cache is disabled")
    one_line_error(run_cli("export", str(tmp_path / "nowhere" / "a.tar.gz"), env=env),
                   "no such directory")


def test_warm_runs_a_pytest_selection_with_the_cache_as_default_mode(tmp_path):
    """The tests compile with PyTensor's default mode; warm makes it NUMBA_CACHE."""
    (tmp_path / "test_model.py").write_text(
        "import numpy as np, pytensor, pytensor.tensor as pt\n"
        "def test_model():\n"
        "    x = pt.vector('x', dtype='float64')\n"
        "    assert pytensor.function([x], pt.sinh(x) + 1.0)(np.zeros(2)).tolist() == [1.0, 1.0]\n"
    )
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    result = run_cli("warm", "--json", "test_model.py::test_model", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["failures"] == [] and report["compiled"] >= 2, report
    kinds = {entry["kind"] for entry in listing(env)}
    assert {"rewrite", "graph", "op"} <= kinds


def test_import_while_other_processes_compile_in_the_store(warmed, tmp_path):
    """Two processes compile graphs (one of them the archive's ``exp`` graph, by content)
    in the store the archive is imported into; every value stays right, every entry
    imported or already there, the store verifies clean and serves every graph."""
    from reliability import finish, start

    env = fresh(tmp_path, "busy")
    names = ["scale2", "tanh", "sqrtcos", "cumsum"]  # scale2 is the archive's exp graph
    workers = [start(["6", str(seed), *names], env, command="churn") for seed in (1, 2)]
    imported = run_cli("import", str(warmed.archive), "--json", env=env)
    reports = [finish(worker) for worker in workers]
    assert imported.returncode == 0, imported.stderr
    report = json.loads(imported.stdout)
    assert report["imported"] + report["present"] == warmed.export["entries"], report
    for churned in reports:
        assert churned["wrong"] == [] and churned["warnings"] == [], churned
    verify_clean(env)
    run = compile_good_graphs(env)
    assert run["compiled"] == [] and not any(name.endswith(".miss") for name in run["stats"])


def test_warm_survives_a_target_that_crashes_its_process(tmp_path):
    """A segfault in one target is that target's failure; the other targets are warmed."""
    (tmp_path / "crash.py").write_text(
        "import os, signal\nprint('about to crash')\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    (tmp_path / "odd.py").write_text("def returns_a_number():\n    return 3\n")
    shutil.copy(TESTS / "warm_script.py", tmp_path)
    shutil.copy(TESTS / "warm_targets.py", tmp_path)
    env = {"NBCACHE_DIR": str(tmp_path / "store")}
    result = run_cli("warm", "--json", "crash.py", "odd:returns_a_number", "warm_script.py",
                         env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    failures = {failure["target"]: failure for failure in report["failures"]}
    assert set(failures) == {"crash.py", "odd:returns_a_number"}
    assert failures["crash.py"]["error"] == "the process warming it died (SIGSEGV)"
    assert "about to crash" in failures["crash.py"]["details"]
    assert failures["odd:returns_a_number"]["error"].startswith("TypeError: it returned a int")
    by_target = {target["target"]: target for target in report["targets"]}
    assert by_target["warm_script.py"]["compiled"] >= 2 and by_target["warm_script.py"]["failures"] == []


SECRET = {"NBCACHE_REMOTE_SECRET": "archive-secret-0123456789abcdef"}
OTHER_SECRET = {"NBCACHE_REMOTE_SECRET": "another-secret-0123456789abcdef"}


def test_with_a_secret_only_archives_signed_with_it_are_imported(warmed, tmp_path):
    """A poisoned CI cache cannot make a job load its code: where a secret is set, an
    unsigned, foreign-signed or altered archive is refused whole, nothing imported."""
    source = {"NBCACHE_DIR": str(warmed.root), "NBCACHE_DISABLE": "", "NBCACHE_READONLY": ""}
    signed, foreign = tmp_path / "signed.tar.gz", tmp_path / "foreign.tar.gz"
    assert run_cli("export", str(signed), env=source | SECRET).returncode == 0
    assert run_cli("export", str(foreign), env=source | OTHER_SECRET).returncode == 0
    altered = tmp_path / "altered.tar.gz"

    def alter(name: str, data: bytes) -> bytes:
        if name != "manifest.json":
            return data
        manifest = json.loads(data)
        manifest["entries"][0]["summary"] += " (altered)"
        return json.dumps(manifest, indent=1, sort_keys=True).encode()

    rewrite_archive(signed, altered, alter)
    env = fresh(tmp_path, "job")
    for archive, why in ((warmed.archive, "is not signed"),
                         (foreign, "signed with another secret"),
                         (altered, "altered after it was signed")):
        one_line_error(run_cli("import", str(archive), env=env | SECRET), why, "nothing imported")
        assert not Path(env["NBCACHE_DIR"]).exists(), archive  # not even an empty store
    imported = run_cli("import", str(signed), "--json", env=env | SECRET)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["imported"] == warmed.export["entries"]
    # Without a secret nothing is checked, as before: a signed archive imports as any.
    unchecked = fresh(tmp_path, "unchecked")
    assert run_cli("import", str(signed), env=unchecked).returncode == 0
    assert len(listing(unchecked)) == warmed.export["entries"]


def test_a_secret_too_short_is_refused_before_anything_is_written(warmed, tmp_path):
    short = {"NBCACHE_REMOTE_SECRET": "short"}
    env = fresh(tmp_path, "job") | short
    one_line_error(run_cli("import", str(warmed.archive), env=env), "at least 16")
    assert not Path(env["NBCACHE_DIR"]).exists()
    source = {"NBCACHE_DIR": str(warmed.root), "NBCACHE_DISABLE": "", "NBCACHE_READONLY": ""}
    one_line_error(run_cli("export", str(tmp_path / "out.tar.gz"), env=source | short),
                   "at least 16")
    assert not (tmp_path / "out.tar.gz").exists()
