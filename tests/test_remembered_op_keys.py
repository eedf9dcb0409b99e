"""A graph of other static lengths served without converting its ops
(numba_cache/kernels/assembly/remembered_op_keys.py).

Each graph is compiled in a fresh process after another of other lengths, then
alone in a store of its own: served from remembered op kernel keys, it gives the
bits of its own cold compile, and ``NUMBA``'s within ``NUMBA_ULP_BOUND``, under
the host CPU target and another. An op whose conversion reads a static length
(PyTensor's ``Convolve1d``) is converted every time, and a record that is missing,
damaged or names other kernels converts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import store_states
from helpers import run_python

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

pytestmark = pytest.mark.slow

DISPATCH = "pytensor.link.numba.dispatch"

# `length` is a static length of the input and the length an Alloc makes (a constant
# the graph function passes in a pack); `kernel` the static length of a convolution's
# kernel, which PyTensor's conversion of Convolve1d reads in "valid" mode.
COMPILE = """
import json, sys
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles

length, kernel = {length}, {kernel}
x = pt.vector("x", shape=(length,))
outputs = [pt.exp(x) * 2.0, pt.alloc(pt.cumsum(x)[-1], length + 1)]
inputs, values = [x], [np.linspace(-1.0, 1.0, length)]
if kernel:
    from pytensor.tensor.signal import convolve1d
    y = pt.vector("y", shape=(kernel,))
    outputs.append(convolve1d(x, y, mode="valid"))
    inputs.append(y)
    values.append(np.linspace(0.5, 2.0, kernel))
with count_numba_compiles() as compiles:
    function = pytensor.function(inputs, outputs, mode={mode!r})
    results = function(*values)
print(json.dumps({{"compiles": [name.split("_")[0] for name in compiles],
                   "stats": dict(numba_cache.session_stats()),
                   "converted": {DISPATCH!r} in sys.modules,
                   "sparse_imported": "scipy.sparse" in sys.modules,
                   "values": [result.tolist() for result in results]}}))
"""

#: The host CPU target, and another one (the results must not depend on it).
TARGETS = {"host": {}, "haswell": {"NUMBA_CPU_NAME": "haswell"}}


def compile_graph(length: int, kernel: int = 0, mode: str = "NUMBA_CACHE",
                  env: dict | None = None) -> dict:
    return run_python(COMPILE.format(length=length, kernel=kernel, mode=mode,
                                     DISPATCH=DISPATCH), env)


def assert_like_numba(report: dict, length: int, kernel: int = 0, env: dict | None = None):
    reference = compile_graph(length, kernel, mode="NUMBA", env=env)
    assert max_ulp_distance([np.asarray(value) for value in report["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND


@pytest.mark.parametrize("target", TARGETS)
def test_other_lengths_are_served_without_converting_an_op(tmp_path, target):
    env = TARGETS[target]
    first = compile_graph(5, env=env)
    assert first["converted"] and first["stats"]["graph.miss"] == 1
    served = compile_graph(7, env=env)
    assert served["stats"]["op_keys.remembered"] == 1
    assert served["stats"]["graph_by_code.hit"] == 1 and not served["converted"]
    assert first["sparse_imported"] and not served["sparse_imported"]  # _compat/sparse_import
    assert served["compiles"] == [] and [len(value) for value in served["values"]] == [7, 8]
    alone = compile_graph(7, env={**env, "NBCACHE_DIR": str(tmp_path / "alone")})
    assert alone["stats"]["graph.miss"] == 1 and alone["converted"]
    assert served["values"] == alone["values"]
    assert_like_numba(served, 7, env=env)


def test_an_op_whose_conversion_reads_a_length_is_converted(tmp_path, private_store):
    """PyTensor's Convolve1d bakes its kernel's static length into its code (and key): a
    graph of another kernel length converts, and compiles that op kernel anew."""
    compile_graph(6, kernel=3)
    assert not store_states.side_files(private_store, "op_keys")
    other = compile_graph(6, kernel=4)
    assert "op_keys.remembered" not in other["stats"] and other["converted"]
    assert other["compiles"].count("Convolve1d") == 1
    alone = compile_graph(6, kernel=4, env={"NBCACHE_DIR": str(tmp_path / "alone")})
    assert other["values"] == alone["values"]
    assert_like_numba(other, 6, kernel=4)


def test_each_op_kernel_is_checked_once_and_its_verdict_kept(private_store):
    """The verdicts (does the conversion read a length?) are kept beside the entries, by op
    kernel key: Convolve1d's is True, those of the steps before it False (the check stops
    there). A damaged record reads as empty: the kernels are checked again."""
    compile_graph(6, kernel=3)
    [record] = store_states.side_files(private_store, "lengths_read.json", directory=False)
    verdicts = json.loads(record.read_text())["reads"]
    assert list(verdicts.values()).count(True) == 1 and list(verdicts.values()).count(False) >= 1
    record.write_bytes(b"{garbage")
    other = compile_graph(6, kernel=4)
    assert other["converted"] and "op_keys.remembered" not in other["stats"]
    rewritten = json.loads(record.read_text())["reads"]  # the new Convolve1d kernel's verdict
    assert list(rewritten.values()).count(True) == 1 and rewritten.keys() != verdicts.keys()


def test_a_missing_damaged_or_foreign_record_converts(private_store):
    """The record (a side file per lengths-free key) names the op kernels of the graph's
    steps. Without it, damaged, or naming other kernels, the ops are converted and the
    graph is found by the code their conversion tells, or compiled."""
    compile_graph(5)
    [record] = store_states.side_files(private_store, "op_keys")
    kept = record.read_bytes()
    record.unlink()
    missing = compile_graph(7)
    assert missing["converted"] and "op_keys.remembered" not in missing["stats"]
    assert missing["stats"]["graph_by_code.hit"] == 1 and missing["compiles"] == []
    assert record.read_bytes() == kept  # its conversion recorded it again
    record.write_bytes(b"\x00garbage")
    damaged = compile_graph(9)
    assert damaged["converted"] and damaged["stats"]["graph_by_code.hit"] == 1
    record.write_bytes(b"\n".join([b"ab" * 32] * len(kept.split())))
    foreign = compile_graph(11)
    assert foreign["converted"] and foreign["stats"]["graph_by_code.hit"] == 1
    served = compile_graph(13)  # the conversions recorded it right again
    assert served["stats"]["op_keys.remembered"] == 1 and not served["converted"]
    assert [len(value) for value in served["values"]] == [13, 14]
    np.testing.assert_array_equal(served["values"][0], np.exp(np.linspace(-1.0, 1.0, 13)) * 2.0)


def test_a_graph_kernel_gone_since_converts(private_store):
    compile_graph(5)
    [(fingerprint, key)] = store_states.entries_of(private_store, {"graph"})
    store_states.record_path(private_store, fingerprint, key).unlink()
    gone = compile_graph(7)
    assert gone["converted"] and gone["stats"]["graph.miss"] == 1
    assert gone["compiles"].count("graph") == 1 and [len(v) for v in gone["values"]] == [7, 8]
