"""The collision detector (``NBCACHE_VERIFY_HITS``, ``numba-cache verify --recompile``)
catches a collision planted on purpose."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from helpers import run_cli, run_python

import numba_cache
from numba_cache import session, settings
from numba_cache.kernels.protocol import ir_digest as digests
from numba_cache.kernels.protocol.ir_digest import CodeDigests, ir_digest, normalized_ir
from numba_cache.kernels.context import current_context
from numba_cache.store import StoreWarning, entry_layout

VALUES = np.array([0.5, 1.0, 2.0])
#: A target for ``numba-cache verify --recompile``: compiles and calls exp(x) as
#: :func:`compile_and_call` does.
EXP_TARGET = (
    "import numpy as np, pytensor, pytensor.tensor as pt\n"
    'x = pt.vector("x")\n'
    'pytensor.function([x], pt.exp(x), mode="NUMBA_CACHE")(np.array([0.5, 1.0, 2.0]))\n'
)


def compile_and_call(make_output):
    x = pt.vector("x")
    return pytensor.function([x], make_output(x), mode="NUMBA_CACHE")(VALUES)


def graph_entries() -> dict:
    context = current_context()
    return {entry.summary + entry.key: entry for entry in
            context.store.entries(context.fingerprint.digest, kind="graph")}


def plant_collision():
    """Compile exp(x) and log(x), then store log's graph record under exp's graph key."""
    compile_and_call(pt.exp)
    [exp_key] = graph_entries().values()
    compile_and_call(pt.log)
    [log_key] = [e for e in graph_entries().values() if e.key != exp_key.key]
    store_record_under(exp_key.key, log_key.key)
    return exp_key.key, log_key.key


def store_record_under(key: str, served_key: str) -> None:
    """Store the record of entry `served_key` under `key`: the code of one key served for another."""
    context = current_context()
    served = context.store.read(context.fingerprint.digest, served_key)
    context.store.save(dataclasses.replace(served, key=key))


def test_a_planted_collision_is_served_without_the_detector():
    """The plant works: the exp graph then returns log's values (what the detector is for)."""
    plant_collision()
    np.testing.assert_allclose(compile_and_call(pt.exp), np.log(VALUES))


def test_the_detector_catches_a_planted_collision_and_names_both_keys():
    exp_key, log_key = plant_collision()
    settings.configure(verify_hits=1)
    numba_cache.reset_session_stats()
    with pytest.warns(StoreWarning, match="key collision") as caught:
        result = compile_and_call(pt.exp)
    np.testing.assert_allclose(result, np.exp(VALUES))
    [message] = [str(w.message) for w in caught if "key collision" in str(w.message)]
    assert exp_key[:12] in message and log_key[:12] in message
    assert numba_cache.session_stats()["collision"] == 1
    context = current_context()
    assert context.store.stats(context.fingerprint.digest)["counters"]["collision"] == 1
    # The bad entry was replaced by the code compiled now: later processes get exp.
    settings.configure(verify_hits=0)
    np.testing.assert_allclose(compile_and_call(pt.exp), np.exp(VALUES))


def test_verified_hits_of_sound_entries_pass():
    compile_and_call(pt.exp)
    settings.configure(verify_hits=1)
    numba_cache.reset_session_stats()
    np.testing.assert_allclose(compile_and_call(pt.exp), np.exp(VALUES))
    stats = numba_cache.session_stats()
    assert stats["verify.same"] >= 1 and stats["collision"] == 0, stats


def test_the_limit_caps_the_hits_verified_per_process(monkeypatch):
    compile_and_call(pt.exp)  # stores two graph kernels: two hits next time
    compile_and_call(pt.log)
    monkeypatch.setattr(session.current(), "hits_sampled", 0)
    settings.configure(verify_hits=1, verify_hits_limit=1)
    numba_cache.reset_session_stats()
    compile_and_call(pt.exp)
    compile_and_call(pt.log)
    stats = numba_cache.session_stats()
    assert stats["graph.hit"] == 2, stats
    assert stats["verify.same"] == 1, stats


def test_verify_recompile_finds_a_planted_collision_then_passes(tmp_path):
    exp_key, log_key = plant_collision()
    target = tmp_path / "exp.py"
    target.write_text(EXP_TARGET)
    result = run_cli("verify", "--recompile", "5", str(target), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["problems"] == []  # the checksums are sound: only recompiling finds it
    recompiled = report["recompile"]
    assert [(c["key"], c["made_under"]) for c in recompiled["collisions"]] == [(exp_key, log_key)]
    assert recompiled["removed"] == 1 and 1 <= recompiled["verified"] <= 5, recompiled
    # The entry now holds exp's code: a second check finds the store sound.
    again = run_cli("verify", "--recompile", "5", str(target))
    assert again.returncode == 0, again.stdout + again.stderr
    summary = again.stdout.splitlines()[-1]
    assert summary.endswith("hits verified, 0 collisions; 0 entries removed"), again.stdout
    assert int(summary.split()[0]) > 0
    # The text output names both keys.
    store_record_under(exp_key, log_key)
    text = run_cli("verify", "--recompile", "5", str(target))
    assert text.returncode == 1
    [line] = [line for line in text.stdout.splitlines() if line.startswith("COLLISION")]
    assert exp_key[:12] in line and log_key[:12] in line


def test_verify_recompile_verifies_at_most_n_hits_in_all(tmp_path):
    compile_and_call(pt.exp)
    target = tmp_path / "exp.py"
    target.write_text(EXP_TARGET)
    result = run_cli("verify", "--recompile", "1", str(target), str(target), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    recompiled = json.loads(result.stdout)["recompile"]
    assert recompiled["verified"] == 1 and recompiled["collisions"] == []
    assert [t["run"] for t in recompiled["targets"]] == [True, False]


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (["--recompile", "0", "exp.py"], "N must be a positive whole number, got '0'"),
        (["--recompile", "two", "exp.py"], "N must be a positive whole number, got 'two'"),
        (["--recompile", "3"], "--recompile needs at least one TARGET"),
        (["--recompile", "3", "missing.py"], "no such file: missing.py"),
        (["--recompile", "3", "no_such_module:run"], "no module named 'no_such_module'"),
        (["exp.py"], "TARGETs are run only with --recompile N"),
    ],
)
def test_verify_recompile_bad_input_is_one_clear_line(arguments, fragment):
    result = run_cli("verify", *arguments)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert fragment in result.stderr, result.stderr


def test_normalized_ir_ignores_numba_unique_ids_only():
    first = ('@_ZN1f5graphB4v123B3abcE5ArrayE = global ptr null\n'
             '@".const" = internal constant [9 x i8] c"missing Environment: _ZN1fB4v123B3abcE"')
    second = first.replace("v123", "v987").replace("B3abc", "B5xyzuv").replace("[9 x", "[11 x")
    assert normalized_ir(first) == normalized_ir(second)
    assert normalized_ir(first) != normalized_ir(first.replace("ArrayE", "ArrayI"))
    # ir_digest hashes the normalized IR piece by piece, never joined: the same digest.
    for text in (first, second, first.replace("ArrayE", "ArrayI")):
        assert ir_digest(text) == hashlib.sha256(normalized_ir(text).encode()).hexdigest()


def test_normalized_ir_ignores_what_a_process_s_history_changes_not_the_code():
    """The same kernel compiled in two processes: numba reused a subroutine it had compiled
    for another kernel (its environment pointer, a ``freeze``, other value numbers), and
    pickled its constants with other type numbers, so of other lengths, which the code
    passes to ``numba_unpickle``. A swapped operand is still seen."""
    first = (
        '@.const.pickledata.88b9 = internal constant [518 x i8] c"\\80\\04_code\\94K\\19"\n'
        "define i64 @f(i64 %arg.x.5.1) {\n"
        "entry:\n"
        "  %arg.x.5.1.fr.i = freeze i64 %arg.x.5.1\n"
        "  %.463.not.i = icmp eq i64 %arg.x.5.1.fr.i, 1\n"
        "  %.470 = sub i64 %.463.not.i, %arg.x.5.1\n"
        "  call void @g(ptr @.const.picklebuf.88b9)\n"
        "  %.471 = call ptr @numba_unpickle(ptr nonnull @.const.pickledata.88b9, i32 518, "
        "ptr nonnull @.const.pickledata.88b9.sha1)\n"
        "  ret i64 %.470\n"
        "}\n")
    second = (
        '@.const.pickledata.3a2a = internal constant [518 x i8] c"\\80\\04_code\\94M@\\03"\n'
        "@_ZN08NumbaEnv5numba7cpython8tupleobj19getitem_literal_idx = common global ptr null\n"
        "define i64 @f(i64 %arg.x.5.1) {\n"
        "entry:\n"
        "  %.478.not.i = icmp eq i64 %arg.x.5.1, 1\n"
        "  %.485 = sub i64 %.478.not.i, %arg.x.5.1\n"
        "  call void @g(ptr @.const.picklebuf.3a2a)\n"
        "  %.486 = call ptr @numba_unpickle(ptr nonnull @.const.pickledata.3a2a, i32 13485, "
        "ptr nonnull @.const.pickledata.3a2a.sha1)\n"
        "  ret i64 %.485\n"
        "}\n")
    assert normalized_ir(first) == normalized_ir(second)
    swapped = second.replace("sub i64 %.478.not.i, %arg.x.5.1", "sub i64 %arg.x.5.1, %.478.not.i")
    assert normalized_ir(first) != normalized_ir(swapped)


def test_normalized_ir_ignores_the_padding_of_label_comments():
    """LLVM pads the comment after a label to a column, so a block named otherwise in the
    verifying process (an inlined block's suffix: a ``Squeeze`` kernel compiled itself,
    verified as a collision in every other process) is padded otherwise. The blocks a
    branch goes to are still seen."""
    first = ("define i32 @f(i1 %c) {\nentry:\n  br i1 %c, label %B2.i, label %B4\n"
             "B2.i:                                   ; preds = %entry\n  ret i32 1\n"
             "B4:                                     ; preds = %entry\n  ret i32 0\n}\n")
    second = first.replace("B2.i:      ", "B2.i17:    ").replace("%B2.i,", "%B2.i17,")
    assert normalized_ir(first) == normalized_ir(second)
    assert normalized_ir(first) != normalized_ir(
        first.replace("label %B2.i, label %B4", "label %B4, label %B2.i"))


def test_normalized_ir_leaves_out_numbas_own_functions_and_string_constant_names():
    """numba's implementation of ``np.ascontiguousarray`` came out of the optimiser
    otherwise in a process that had compiled it before, and its string constants are
    named by their ``hash()``: a reduction's kernel verified as a collision in every
    other process. A change of a kernel's own code, or of a string, is still seen."""
    kernel = ("define i32 @_ZN11numba_cache7codegen9generated6ArgmaxB2v1B3abcE(i64 %x) {{\n"
              "  %y = call i32 @_ZN5numba2np8arrayobj4implB2v2B3defE(i64 %x)\n"
              "  call void @raise(ptr @.bytes.{hashed})\n"
              "  ret i32 %y\n}}\n")
    numbas = ("define internal i32 @_ZN5numba2np8arrayobj4implB2v2B3defE(i64 %a) {{\n"
              "{body}\n}}\n")
    first = ('@.bytes.-123 = internal constant [4 x i8] c"bad\\00"\n'
             + kernel.format(hashed="-123") + numbas.format(body="  %b = phi i64 [ 0, %e ]\n  ret i32 0"))
    second = ('@.bytes.987 = internal constant [4 x i8] c"bad\\00"\n'
              + kernel.format(hashed="987") + numbas.format(body="  %c = shl i64 %a, 3\n  ret i32 1"))
    assert normalized_ir(first) == normalized_ir(second)
    assert normalized_ir(first) != normalized_ir(first.replace("ret i32 %y", "ret i32 %x"))
    assert normalized_ir(first) != normalized_ir(first.replace('c"bad', 'c"odd'))


def test_the_digest_does_not_depend_on_where_the_ir_is_cut_in_chunks(monkeypatch):
    """A large IR is digested a chunk of lines at a time; where the cuts fall depends on
    the lengths of the names in it, which differ between processes."""
    function = ("define i64 @f{n}(i64 %x) {{\nentry:\n  %y = freeze i64 %x\n"
                "  br label %next\nnext:\n  %z = add i64 %y, {n}\n  ret i64 %z\n}}\n\n")
    text = ('@.const.pickledata.ab = internal constant [1 x i8] c"\\80"\n\n'
            + "".join(function.format(n=n) for n in range(6)))
    whole = ir_digest(text)
    for chunk in (1, 5, 17, 40, 64, 101):
        monkeypatch.setattr(digests, "_CHUNK", chunk)
        assert ir_digest(text) == whole, chunk


BLAS_AND_VIEWS = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import settings
settings.configure(verify_hits={verify})
A, x = pt.matrix("A"), pt.matrix("x", shape=(None, 1))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = pytensor.function([A, x], pt.dot(A, x.squeeze(1)), mode="NUMBA_CACHE")(
        np.arange(12.0).reshape(3, 4), np.ones((4, 1)))
print(json.dumps({{"value": value.tolist(), "stats": dict(numba_cache.session_stats()),
                  "warnings": [str(w.message) for w in caught]}}))
"""


def test_sound_blas_kernels_verify_clean_in_another_process():
    """BLAS kernels hold object-mode blocks and pickled constants, and a view kernel
    reuses numba subroutines: the process that stored them and the one verifying them
    compile them after different work, and must not see a collision (it would remove
    every such entry at every verified run)."""
    cold = run_python(BLAS_AND_VIEWS.format(verify=0))
    verified = run_python(BLAS_AND_VIEWS.format(verify=1))
    assert verified["value"] == cold["value"]
    stats = verified["stats"]
    assert stats.get("collision", 0) == 0, verified["warnings"]
    assert stats["verify.same"] >= 3 and stats["objmode.hit"] >= 1, stats
    # Blocks are stored without a digest: their code is Python, in their environment.
    assert stats["verify.unrecorded"] == stats["objmode.hit"], stats


REDUCTIONS = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import settings
settings.configure(verify_hits={verify})
x = pt.matrix("x")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    values = pytensor.function([x], [pt.argmax(x, axis=0), pt.cumsum(x, axis=0), x.max(axis=1)],
                               mode="NUMBA_CACHE")(np.arange(12.0).reshape(4, 3))
print(json.dumps({{"values": [v.tolist() for v in values],
                  "stats": dict(numba_cache.session_stats()),
                  "warnings": [str(w.message) for w in caught]}}))
"""


def test_sound_reduction_kernels_verify_clean_in_another_process():
    cold = run_python(REDUCTIONS.format(verify=0))
    verified = run_python(REDUCTIONS.format(verify=1))
    assert verified["values"] == cold["values"]
    assert verified["stats"].get("collision", 0) == 0, verified["warnings"]
    assert verified["stats"]["verify.same"] >= 4, verified["stats"]


OP_PLANT = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import session, settings
x = pt.vector("x")
if {verify}:
    settings.configure(verify_hits=1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = pytensor.function([x], pt.exp(x), mode="NUMBA_CACHE")(np.array({values}))
print(json.dumps({{"value": value.tolist(), "stats": dict(numba_cache.session_stats()),
                  "warnings": [str(w.message) for w in caught]}}))
"""


def test_an_op_kernel_loaded_for_a_graph_kernel_is_verified_too():
    """A graph kernel stored against log's code under exp's op key calls it by symbol;
    verifying that op kernel when the graph loads it finds the collision, and the graph
    kernel compiled meanwhile calls exp's code."""
    compile_and_call(pt.exp)
    compile_and_call(pt.log)
    context = current_context()
    fingerprint = context.fingerprint.digest
    ops = {entry.summary: entry for entry in context.store.entries(fingerprint, kind="op")}
    exp_op, log_op = ops["op Exp"], ops["op Log"]
    store_record_under(exp_op.key, log_op.key)
    for entry in context.store.entries(fingerprint):
        if entry.kind in ("graph", "rewrite"):
            context.store.remove(fingerprint, entry.key)
    planted = run_python(OP_PLANT.format(values=VALUES.tolist(), verify=False))
    np.testing.assert_allclose(planted["value"], np.log(VALUES))  # exp's graph calls log's code
    verified = run_python(OP_PLANT.format(values=VALUES.tolist(), verify=True))
    np.testing.assert_allclose(verified["value"], np.exp(VALUES))
    # Two: the op kernel, and the graph kernel, whose stored code called log's kernel.
    assert verified["stats"]["collision"] == 2 and verified["stats"]["graph.hit"] == 1
    assert any(exp_op.key[:12] in message for message in verified["warnings"])


RANDOM_DRAWS = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import settings
settings.configure(verify_hits={verify})
rng = pytensor.shared(np.random.default_rng(123), name="rng")
mu = pt.vector("mu")
next_rng, draws = pt.random.normal(mu, 1.0, rng=rng).owner.outputs
function = pytensor.function([mu], draws, updates={{rng: next_rng}}, mode="NUMBA_CACHE")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    values = [function(np.arange(3.0)).tolist() for _ in range(2)]
print(json.dumps({{"values": values, "stats": dict(numba_cache.session_stats()),
                  "warnings": [str(w.message) for w in caught]}}))
"""


def test_random_draws_verify_clean_in_another_process():
    """A random variable's kernel embeds its empty core shape, whose stride PyTensor
    leaves at 0 and an unpickled (restored) copy has at 8: embedded, both must give
    the same code, or every verified hit of a random graph is a false collision."""
    cold = run_python(RANDOM_DRAWS.format(verify=0))
    verified = run_python(RANDOM_DRAWS.format(verify=1))
    assert verified["values"] == cold["values"]
    stats = verified["stats"]
    assert stats.get("rewrite.hit") == 1 and stats.get("graph.hit") == 1, stats
    assert stats.get("collision", 0) == 0, verified["warnings"]
    assert stats["verify.same"] == 2, stats


def test_code_is_another_only_where_both_stages_differ():
    """Process history changes a compile's IR at one stage (final, or before numba's
    module passes), not at both; code that differs, differs at both. A compile with
    no digest before the module passes (a graph function optimised lightly, an entry
    stored before there was one) is compared by its final digest."""
    stored = CodeDigests("final", "before")
    assert CodeDigests("final", "before").same_code(stored)
    assert CodeDigests("final", "other before").same_code(stored)
    assert CodeDigests("other final", "before").same_code(stored)
    assert not CodeDigests("other final", "other before").same_code(stored)
    assert not CodeDigests("other final", None).same_code(CodeDigests("final", None))
    assert not CodeDigests("other final", "before").same_code(CodeDigests("final", None))


def test_both_digests_are_recorded_and_read_back_per_signature():
    blobs = entry_layout.encode_code_digests("(float64,)", "ab" * 32, "cd" * 32)
    blobs |= entry_layout.encode_code_digests("(int64,)", "ef" * 32, None)
    assert entry_layout.decode_code_digests(blobs, "(float64,)") == ("ab" * 32, "cd" * 32)
    assert entry_layout.decode_code_digests(blobs, "(int64,)") == ("ef" * 32, None)
    assert entry_layout.decode_code_digests(blobs, "(int32,)") is None


def test_a_compile_records_its_digest_before_the_module_passes():
    """numba_cache's compiles digest their module before numba's module passes; a graph
    function optimised lightly has no such stage and records none."""
    x = pt.vector("x")
    function = pytensor.function([x], pt.exp(x) * 2 + 1, mode="NUMBA_CACHE")
    function(VALUES)
    store, fingerprint = current_context().store, current_context().fingerprint.digest
    recorded = {}
    for entry in store.entries():
        full = store.read(fingerprint, entry.key)
        for name in full.blobs:
            if name.startswith("kernel:"):
                signature = name.removeprefix("kernel:")
                recorded[full.kind] = entry_layout.decode_code_digests(full.blobs, signature)
    assert recorded["op"][1] is not None and recorded["op"][1] != recorded["op"][0], recorded
    assert recorded["graph"] is not None and recorded["graph"][1] is None, recorded

