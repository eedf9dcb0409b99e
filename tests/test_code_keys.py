"""Graph functions found by their code: graphs whose generated function is the same code
(other static lengths, other one-element constants) share one compiled graph function.

Each graph is compiled in a fresh process against one store, and again alone in a
store of its own: a graph served by code gives the bits of its own cold compile,
and ``NUMBA``'s within ``NUMBA_ULP_BOUND``. A graph whose code differs (a constant
the function embeds) is compiled, never served another's.
"""

from __future__ import annotations

import numpy as np
import pytest
import store_states
from helpers import run_python

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

pytestmark = pytest.mark.slow

# `length` is a static length of the input and the length an Alloc makes: both reach
# the graph function in a pack, so every length is one code. `weights` is embedded.
COMPILE = """
import json
import numpy as np
import pytest
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles

length, weights = {length}, np.array({weights})
x = pt.vector("x", shape=(length,))
outputs = [pt.exp(x) * pt.constant(weights), pt.alloc(pt.cumsum(x)[-1], length + 1)]
with count_numba_compiles() as compiles:
    function = pytensor.function([x], outputs, mode={mode!r})
    values = function(np.linspace(-1.0, 1.0, length))
print(json.dumps({{"compiles": [name.split("_")[0] for name in compiles],
                   "stats": dict(numba_cache.session_stats()),
                   "values": [value.tolist() for value in values]}}))
"""


def compile_graph(length: int, weights: list, mode: str = "NUMBA_CACHE",
                  env: dict | None = None) -> dict:
    return run_python(COMPILE.format(length=length, weights=weights, mode=mode), env)


def assert_like_numba(report: dict, length: int, weights: list) -> None:
    reference = compile_graph(length, weights, mode="NUMBA")
    assert max_ulp_distance([np.asarray(value) for value in report["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND


def test_other_lengths_are_served_the_graph_function_compiled_for_the_first(tmp_path):
    compile_graph(5, [2.0])
    served = compile_graph(7, [2.0])
    assert served["stats"]["graph_by_code.hit"] == 1 and "graph.miss" not in served["stats"]
    assert served["compiles"] == [] and served["stats"].get("op.miss", 0) == 0
    assert [len(value) for value in served["values"]] == [7, 8]
    # Its own graph key now holds the function: no conversion, no code key needed.
    again = compile_graph(7, [2.0])
    assert again["stats"]["graph.hit"] == 1 and "graph_by_code.hit" not in again["stats"]
    alone = compile_graph(7, [2.0], env={"NBCACHE_DIR": str(tmp_path / "alone")})
    assert alone["stats"]["graph.miss"] == 1 and alone["compiles"].count("graph") == 1
    assert served["values"] == again["values"] == alone["values"]
    assert_like_numba(served, 7, [2.0])


def test_a_constant_the_graph_function_embeds_is_its_code(tmp_path):
    """Five elements: embedded, not passed in a pack. Other values are other code."""
    compile_graph(5, [2.0, 3.0, 4.0, 5.0, 6.0])
    other = compile_graph(5, [6.0, 5.0, 4.0, 3.0, 2.0])
    np.testing.assert_allclose(other["values"][0],
                               np.exp(np.linspace(-1.0, 1.0, 5)) * [6.0, 5.0, 4.0, 3.0, 2.0])
    alone = compile_graph(5, [6.0, 5.0, 4.0, 3.0, 2.0],
                          env={"NBCACHE_DIR": str(tmp_path / "alone")})
    assert other["values"] == alone["values"]
    assert "graph_by_code.hit" not in other["stats"] and other["stats"]["graph.miss"] == 1
    assert other["compiles"].count("graph") == 1


def test_a_code_index_naming_an_entry_gone_or_a_damaged_index_is_a_miss(private_store):
    """The code index (a side file per code key) names the graph kernel that holds the
    code: if that entry is gone, or the index file is damaged, the graph compiles."""
    compile_graph(5, [2.0])
    [(fingerprint, key)] = store_states.entries_of(private_store, {"graph"})
    [index_file] = (private_store / fingerprint / "by_code").iterdir()
    assert index_file.read_text() == key
    store_states.record_path(private_store, fingerprint, key).unlink()
    gone = compile_graph(7, [2.0])
    assert gone["stats"]["graph.miss"] == 1 and "graph_by_code.hit" not in gone["stats"]
    assert gone["compiles"].count("graph") == 1 and [len(v) for v in gone["values"]] == [7, 8]
    index_file.write_bytes(b"\x00garbage")
    damaged = compile_graph(9, [2.0])
    assert damaged["stats"]["graph.miss"] == 1 and "graph_by_code.hit" not in damaged["stats"]
    assert [len(v) for v in damaged["values"]] == [9, 10]
    assert index_file.read_text() != "\x00garbage"  # rewritten by the compile
    served = compile_graph(11, [2.0])
    assert served["stats"]["graph_by_code.hit"] == 1 and served["compiles"] == []
