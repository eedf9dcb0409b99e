"""The pre-rewrite cache: same graph as rewriting gives, invalidated by anything that matters."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from helpers import run_python
from pytensor import config
from pytensor.compile.io import In, Out
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar.basic import exp as scalar_exp
from pytensor.tensor.elemwise import Elemwise

from numba_cache import numba_cache_mode
from numba_cache.keys.fingerprint import Fingerprint, current_fingerprint
from numba_cache.keys.order import execution_order, restored_order
from numba_cache.keys.rewrites import complete_rewrites_digest, rewrite_key


def key_of(output_builder=lambda x: pt.exp(x) * 2, mode=None, inputs=None, fingerprint=None):
    x = pt.vector("x")
    fgraph = FunctionGraph([x], [output_builder(x)], clone=True)
    mode = mode or numba_cache_mode()
    rewrites = complete_rewrites_digest(mode.optdb, known=lambda *_: None, remember=lambda *_: None)
    return rewrite_key(
        fgraph,
        inputs or [In(fgraph.inputs[0])],
        [Out(fgraph.outputs[0])],
        mode,
        fingerprint or current_fingerprint(),
        rewrites,
    ).digest


def test_key_is_stable():
    assert key_of() == key_of()


def test_key_changes_with_the_graph():
    assert key_of(lambda x: pt.exp(x) * 3) != key_of()


def test_key_changes_with_input_specs():
    x = pt.vector("x")
    mutable = key_of(inputs=[In(x, mutable=True)])
    assert mutable != key_of(inputs=[In(x)])


def test_key_changes_with_the_rewrite_query():
    excluding = numba_cache_mode().excluding("fusion")
    including = numba_cache_mode().including("local_remove_all_assert")
    assert len({key_of(), key_of(mode=excluding), key_of(mode=including)}) == 3


def test_key_changes_when_a_rewrite_is_registered():
    from pytensor.graph.rewriting.db import EquilibriumDB

    database = EquilibriumDB()
    mode = numba_cache_mode()
    mode.optdb = database

    @node_rewriter([pt.exp])
    def first_rewrite(fgraph, node):
        return None

    @node_rewriter([pt.exp])
    def second_rewrite(fgraph, node):
        return None

    database.register("first_rewrite", first_rewrite, "fast_run")
    before = key_of(mode=mode)
    database.register("second_rewrite", second_rewrite, "fast_run")
    assert key_of(mode=mode) != before


USER_REWRITE = """
import json, sys
import numpy as np, pytensor, pytensor.tensor as pt
from pytensor.graph.rewriting.basic import GraphRewriter, node_rewriter
from pytensor.tensor.rewriting.basic import register_specialize
import numba_cache

{how}

x = pt.vector("x")
function = pytensor.function([x], pt.sinh(x) * 2, mode=mode)
print(json.dumps({{"values": function(np.array([0.0, 1.0, 2.0])).tolist(),
                  "stats": dict(numba_cache.session_stats())}}))
"""

#: Two scripts' rewrites of one name and class, whose code differs: sinh(x) -> x, or the
#: exact sinh written out. The second must not be served the first's rewritten graph.
REGISTERED = """
@register_specialize
@node_rewriter([pt.sinh])
def local_my_sinh(fgraph, node):
    return [{body}]
mode = "NUMBA_CACHE"
"""
ON_THE_MODE = """
class MyRewriter(GraphRewriter):
    def apply(self, fgraph):
        for node in list(fgraph.toposort()):
            if type(getattr(node.op, "scalar_op", None)).__name__ == "Sinh":
                fgraph.replace(node.outputs[0], {body}, reason="mine")
mode = pytensor.compile.mode.get_mode("NUMBA_CACHE").register((MyRewriter(), 0.5))
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", [REGISTERED, ON_THE_MODE], ids=["registered", "on the mode"])
def test_a_users_rewrite_of_the_same_name_with_other_code_is_not_served(how, private_store):
    approximate = run_python(USER_REWRITE.format(how=how.format(body="node.inputs[0]")))
    assert approximate["values"] == [0.0, 2.0, 4.0]
    exact_code = "(pt.exp(node.inputs[0]) - pt.exp(-node.inputs[0])) / 2"
    exact = run_python(USER_REWRITE.format(how=how.format(body=exact_code)))
    assert exact["stats"].get("rewrite.miss") == 1, exact["stats"]
    assert exact["values"] == pytest.approx([0.0, 2 * np.sinh(1.0), 2 * np.sinh(2.0)])
    again = run_python(USER_REWRITE.format(how=how.format(body=exact_code)))
    assert again["stats"].get("rewrite.hit") == 1 and again["values"] == exact["values"]


def test_pytensors_own_rewrites_are_described_by_class_alone():
    """PyTensor's version, in the fingerprint, pins their code: describing it would
    cost every warm compile a walk through it."""
    import pytensor.sparse.rewriting  # noqa: F401 - registers its rewrites
    import pytensor.typed_list.rewriting  # noqa: F401
    from pytensor.compile.mode import optdb

    from numba_cache.keys.foreign_code import foreign_code_digest

    seen, foreign = set(), []

    def walk(database):
        for name, rewrites in database.__db__.items():
            for rewrite in rewrites:
                if id(rewrite) not in seen:
                    seen.add(id(rewrite))
                    if foreign_code_digest(rewrite) is not None:
                        foreign.append(name)
                    if hasattr(rewrite, "__db__"):
                        walk(rewrite)

    walk(optdb)
    assert len(seen) > 300 and foreign == []


CODE_DIGEST = """
import json
from pytensor.graph.rewriting.basic import node_rewriter
import pytensor.tensor as pt
from numba_cache.keys.foreign_code import foreign_code_digest

def helper(x):
    return x in {"a", "b", "c", "d"}  # a frozenset constant: its order follows the seed

@node_rewriter([pt.exp])
def local_mine(fgraph, node, scale=(1, 2.5, "x")):
    return [node.inputs[0]] if helper("a") else None

print(json.dumps({"digest": foreign_code_digest(local_mine)}))
"""


def test_a_rewrites_code_digest_is_the_same_in_every_process():
    digests = {run_python(CODE_DIGEST, {"PYTHONHASHSEED": seed})["digest"] for seed in "012"}
    assert len(digests) == 1 and None not in digests
    changed = CODE_DIGEST.replace('"a", "b"', '"a", "z"')
    assert run_python(changed)["digest"] not in digests  # the helper's code is the rewrite's


def test_key_changes_with_rewrite_flags():
    before = key_of()
    with config.change_flags(optdb__max_use_ratio=4.0):
        assert key_of() != before


def test_key_changes_with_whether_a_compiler_is_set_not_with_its_path():
    """Without a C++ compiler (``cxx=""``, which PyTensor sets where it finds none) fusion
    makes kernels of at most 32 operands, else 1024: another graph, other bits."""
    with config.change_flags(cxx="/usr/bin/g++"):
        one_path = key_of()
    with config.change_flags(cxx="g++"):
        assert key_of() == one_path
    with config.change_flags(cxx=""):
        assert key_of() != one_path


def test_every_flag_pytensors_rewrites_read_is_keyed_or_steers_nothing_numba_runs():
    """Each PyTensor flag named in PyTensor's rewriting modules is in the rewrite key (by
    value or by the fact rewrites read), in the fingerprint, or listed here with why it
    changes no rewritten graph in a numba mode: a new flag read fails here first."""
    import re
    from pathlib import Path

    import pytensor

    from numba_cache.keys.fingerprint import PYTENSOR_FLAGS
    from numba_cache.keys.rewrites import REWRITE_FLAG_FACTS, REWRITE_FLAGS

    steers_nothing = {
        "optimizer_verbose": "prints rewrites", "optimizer_verbose_ignore": "the same",
        "mode": "the mode compiling, keyed by its query (get_active_mode's fallback)",
        "blas__ldflags": "read by cxx_only rewrites, which numba modes exclude",
    }
    root = Path(pytensor.__file__).parent
    read = {match.group(1)
            for path in root.rglob("*.py")
            if "rewriting" in (*path.parts[:-1], path.stem) and "tests" not in path.parts
            for match in re.finditer(r"\bconfig\.(\w+)", path.read_text())}
    assert read, "no flag read found: has PyTensor moved its rewrites?"
    keyed = {*REWRITE_FLAGS, *REWRITE_FLAG_FACTS, *PYTENSOR_FLAGS}
    assert read - keyed - set(steers_nothing) == set()


@pytest.mark.parametrize("tag", ["symmetric", "lower_triangular", "psd", "indestructible"])
def test_key_changes_with_a_tag_rewriting_reads(tag):
    def tagged(x):
        setattr(x.tag, tag, True)
        return pt.exp(x) * 2

    assert key_of(tagged) != key_of()


def test_a_graph_rewritten_under_a_tag_is_not_served_without_it(private_store):
    """``A.tag.symmetric = True`` lets PyTensor rewrite ``A.T @ b`` to ``A @ b``. The
    same graph without the tag used to get that graph from the cache: ``A @ b`` for a
    matrix that is not symmetric."""
    import numpy as np
    import pytensor

    matrix = np.arange(9.0).reshape(3, 3)
    first = np.array([1.0, 0.0, 0.0])

    def compiled(symmetric: bool, mode: str):
        a, b = pt.matrix("A"), pt.vector("b")
        if symmetric:
            a.tag.symmetric = True
        return pytensor.function([a, b], a.T @ b, mode=mode)

    symmetric = matrix + matrix.T
    assert np.array_equal(compiled(True, "NUMBA_CACHE")(symmetric, first), symmetric[0])
    ours = compiled(False, "NUMBA_CACHE")(matrix, first)
    assert np.array_equal(ours, compiled(False, "NUMBA")(matrix, first))
    assert np.array_equal(ours, matrix.T @ first)


def test_every_tag_pytensor_reads_is_keyed_or_its_own():
    """PyTensor's rewrites read some tags of a graph's variables; those a user may set
    are part of the rewrite key (``REWRITE_TAGS``). Every tag PyTensor's code names must be
    one of those, a fact it caches on constants (set aside while rewriting is watched),
    or one it sets itself on what it makes: a new tag read fails here first."""
    import re
    from pathlib import Path

    import pytensor

    from numba_cache._compat.tensor_constant_data import CACHED_TAG_FACTS
    from numba_cache.keys.graph import REWRITE_TAGS

    pytensors_own = {
        "trace": "where a variable was made",
        "values_eq_approx": "DebugMode's comparison of values",
        "removed_by": "FunctionGraph's bookkeeping", "imported_by": "the same",
        "used": "a random generator consumed, warned about",
        "ufunc": "an Elemwise node's numpy ufunc", "gufunc": "a Blockwise node's",
        "fake_node": "Elemwise's scalar node", "sig": "Elemwise's signature",
        "connection_pattern": "Scan's cache on its node",
        "local_log_erfc_applied": "a rewrite's mark on the node it made",
        "local_grad_log_erfc_neg": "the same",
        "test_value": "test values (not a rewrite's input)",
    }
    read = re.compile(r'(?:getattr|hasattr|setattr)\(\s*[\w.\[\]]+\.tag,\s*["\'](\w+)["\']'
                      r'|\.tag\.(\w+)')
    root = Path(pytensor.__file__).parent
    names = {match.group(1) or match.group(2)
             for path in root.rglob("*.py") if "tests" not in path.parts
             for match in read.finditer(path.read_text())}
    assert names, "no tag read found: has the pattern stopped matching PyTensor's code?"
    unknown = names - set(REWRITE_TAGS) - CACHED_TAG_FACTS - pytensors_own.keys()
    assert not unknown, f"tags PyTensor reads that are neither keyed nor known: {unknown}"


def test_key_changes_with_the_fingerprint():
    fingerprint = current_fingerprint()
    other = Fingerprint.from_components(fingerprint.components | {"pytensor": "9.9.9"})
    assert key_of(fingerprint=other) != key_of()


RESTORED_GRAPH = """
import json, numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.keys.graph import describe_graph
from numba_cache.evaluation.models import radon_model
model = radon_model()
function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
values = function(*model.point)
print(json.dumps({
    "graph": describe_graph(function.maker.fgraph).digest,
    "values": [np.asarray(v).tolist() for v in values],
    "stats": dict(numba_cache.session_stats()),
}))
"""


def test_restored_graph_is_the_graph_rewriting_produces():
    cold = run_python(RESTORED_GRAPH)
    warm = run_python(RESTORED_GRAPH)
    assert cold["stats"]["rewrite.miss"] == 1 and warm["stats"]["rewrite.hit"] == 1
    assert warm["graph"] == cold["graph"]
    assert warm["values"] == cold["values"]



def test_a_stored_node_order_is_restored_only_if_the_graph_allows_it():
    """The rewrite cache restores a graph in its stored order, checked: each node after
    its inputs' nodes and after the readers of the buffer it overwrites."""
    exp_inplace = Elemwise(scalar_exp, inplace_pattern={0: 0})
    x = pt.vector("x")
    fgraph = FunctionGraph([x], [exp_inplace(x), x * 2], clone=True)
    order = execution_order(fgraph)
    expand, multiply, exp = order
    assert exp.op == exp_inplace  # after Mul, which reads the x it overwrites
    assert restored_order(fgraph, order) == order
    for wrong in ([expand, exp, multiply], [multiply, expand, exp], [expand, multiply]):
        with pytest.raises(ValueError, match="stored node order"):
            restored_order(fgraph, wrong)


UPDATES_COPY_PICKLE = """
import json, pickle, numpy as np, pytensor, pytensor.tensor as pt
import numba_cache

def exercise(mode):
    counter = pytensor.shared(np.float64(0.0), name="counter")
    x = pt.scalar("x")
    f = pytensor.function([x], counter * x, updates={counter: counter + 1}, mode=mode)
    calls = [float(f(2.0)) for _ in range(3)]
    calls.append(float(f.copy()(2.0)))
    calls.append(float(pickle.loads(pickle.dumps(f))(2.0)))
    calls.append(float(f(2.0)))
    return calls + [float(counter.get_value())]

ours = exercise("NUMBA_CACHE")
print(json.dumps({"ours": ours, "builtin": exercise("NUMBA"), "stats": dict(numba_cache.session_stats())}))
"""


@pytest.mark.parametrize("run", ["cold", "warm"])
def test_updates_copies_and_pickles_behave_as_pytensors_numba_mode(run, private_store):
    if run == "warm":
        run_python(UPDATES_COPY_PICKLE)
    result = run_python(UPDATES_COPY_PICKLE)
    assert result["ours"] == result["builtin"]
    assert result["ours"][:3] == [0.0, 2.0, 4.0]
    assert result["stats"]["rewrite.hit" if run == "warm" else "rewrite.miss"] >= 1


REWRITES_DIGEST = """
import json, os, sys
from pytensor.compile.mode import optdb
from numba_cache.kernels.context import current_context
from numba_cache.rewritten.rewrite_cache import rewrites_digest
from numba_cache import numba_cache_mode
if os.environ.get("CONVERT_FIRST"):
    import pytensor.link.numba.dispatch  # what a miss imports, and a warm process does not
digest = rewrites_digest(current_context(), numba_cache_mode())
print(json.dumps({"digest": digest, "imported": "pytensor.sparse.rewriting" in sys.modules}))
"""


def test_rewrites_digest_does_not_depend_on_whether_ops_were_converted(private_store):
    """One digest whether or not the lazily registering modules are imported, and the
    import (about 0.1 s) is paid once per fingerprint, not by every warm process."""
    first = run_python(REWRITES_DIGEST)
    warm = run_python(REWRITES_DIGEST)
    converted = run_python(REWRITES_DIGEST, {"CONVERT_FIRST": "1"})
    assert first["imported"] and not warm["imported"] and converted["imported"]
    assert first["digest"] == warm["digest"] == converted["digest"]

    registries = next(private_store.glob("*/registries.json"))
    registries.write_text("{damaged")
    repaired = run_python(REWRITES_DIGEST)
    assert repaired["digest"] == first["digest"] and repaired["imported"]
    assert not run_python(REWRITES_DIGEST)["imported"]


FUSION_UNDER_FILTERS = """
import json, sys, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
mode, action = sys.argv[1:]
warnings.simplefilter(action)
xs = [pt.dvector(f"x{i}") for i in range(40)]
y = pt.dvector("y")
# Without a compiler fusion stops at 32 operands and warns: under "error" the warning
# fails PyTensor's fusion pass, which is skipped, leaving the second output unfused too.
outputs = [pt.exp(sum(pt.sin(x) for x in xs)), pt.exp(y) * 2 + pt.cos(y)]
with pytensor.config.change_flags(cxx=""):
    f = pytensor.function([*xs, y], outputs, mode=mode)
values = f(*[np.full(2, 0.01 * i) for i in range(41)])
print(json.dumps({"nodes": len(f.maker.fgraph.apply_nodes),
                  "bits": [v.tobytes().hex() for v in values],
                  "stats": dict(numba_cache.session_stats())}))
"""


def _fusion_under(mode: str, action: str) -> dict:
    return run_python(f"import sys; sys.argv = ['child', {mode!r}, {action!r}]\n"
                      + FUSION_UNDER_FILTERS)


@pytest.mark.slow
def test_a_graph_whose_rewrite_failed_is_not_stored_nor_served_where_it_succeeds(private_store):
    """Warnings as errors make a warning rewrite fail, as in NUMBA (the graph built, its
    fusion skipped); that graph is not stored, so a process with other filters gets the
    graph PyTensor gives there, and stores it."""
    numba_error, numba_default = _fusion_under("NUMBA", "error"), _fusion_under("NUMBA", "default")
    assert numba_error["nodes"] > numba_default["nodes"]  # the case is worth something
    for _ in ("cold", "again"):
        failed = _fusion_under("NUMBA_CACHE", "error")
        assert (failed["nodes"], failed["bits"]) == (numba_error["nodes"], numba_error["bits"])
        assert failed["stats"].get("uncacheable:rewrite-failed") == 1, failed["stats"]
    cold = _fusion_under("NUMBA_CACHE", "default")
    assert cold["stats"].get("rewrite.miss") == 1, cold["stats"]
    warm = _fusion_under("NUMBA_CACHE", "default")
    assert warm["stats"].get("rewrite.hit") == 1, warm["stats"]
    for ours in (cold, warm):
        assert (ours["nodes"], ours["bits"]) == (numba_default["nodes"], numba_default["bits"])
