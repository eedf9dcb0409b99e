"""PyTensor's inplace cycle check answered from the gained edges (rewritten/cycle_check.py): the
same answer as PyTensor's own check on random graphs, random rewirings and random
orderings, cycles included; the same rewritten graphs as rewriting without it; and
PyTensor's check asked only where nothing is known."""

from __future__ import annotations

import contextlib
import io
import random

import graph_families
import pytensor.tensor as pt
import pytest
from pytensor.compile.maker import FunctionMaker
from pytensor.compile.mode import get_mode
from pytensor.compile.rebuild import construct_function_ins_and_outs
from pytensor.graph import destroyhandler
from pytensor.graph.fg import FunctionGraph
from pytensor.printing import debugprint

from numba_cache import session
from numba_cache._compat import destroy_handler_cycles
from numba_cache.evaluation import models
from numba_cache.rewritten import cycle_check

ROUNDS = 60
CHANGES_PER_ROUND = 12


def _random_graph(rng: random.Random, size: int) -> FunctionGraph:
    """A graph of `size` binary elemwise nodes over three vectors, each of two earlier values."""
    inputs = [pt.vector(f"x{i}", shape=(3,)) for i in range(3)]
    values = list(inputs)
    for _ in range(size):
        a, b = rng.sample(values, 2)
        values.append(rng.choice((pt.add, pt.mul, pt.sub))(a, b))
    return FunctionGraph(inputs, values[-4:], clone=False)


def _random_change(rng: random.Random, fgraph: FunctionGraph, orderings: dict,
                   seen: list) -> None:
    """One random change: an input rewired to any variable of the graph (a cycle or not), to
    one of a node pruned before (imported again) or to a new node (imported); or an
    ordering between two nodes added or dropped. `seen` holds every variable the graph had."""
    nodes = list(fgraph.apply_nodes)
    node = rng.choice(nodes)
    kind = rng.random()
    if kind < 0.6:
        same_type = [v for v in fgraph.variables if v.type == node.inputs[0].type]
        if kind < 0.35:
            target = rng.choice(same_type)
        elif kind < 0.45:
            target = rng.choice(seen)
        else:
            target = rng.choice((pt.add, pt.mul, pt.sub))(*rng.sample(same_type, 2))
        fgraph.change_node_input(node, rng.randrange(len(node.inputs)), target,
                                 reason="test", import_missing=True)
    elif kind < 0.85:
        orderings.setdefault(node, set()).add(rng.choice(nodes))
    elif orderings:
        head = rng.choice(list(orderings))
        orderings[head].discard(rng.choice(list(orderings[head]) or [None]))
    seen.extend(v for v in fgraph.variables if v.owner is not None and v not in seen)
    for head in list(orderings):  # orderings name nodes in the graph, as a destroy handler's do
        orderings[head] = {n for n in orderings[head] if n in fgraph.apply_nodes and n is not head}
        if head not in fgraph.apply_nodes or not orderings[head]:
            del orderings[head]


def test_answers_are_pytensors_on_random_rewirings_and_orderings():
    """Random graphs changed at random (cycles made and undone, nodes pruned and imported
    again, new nodes, orderings added and dropped): after each change, the answer is
    PyTensor's, and most answers come from the gained edges alone."""
    rng = random.Random(20261201)
    answers = {True: 0, False: 0}
    by_gained_edges = 0
    for _ in range(ROUNDS):
        fgraph = _random_graph(rng, rng.randrange(4, 24))
        orderings: dict = {}
        seen = [v for v in fgraph.variables if v.owner is not None]
        with cycle_check.watched(fgraph):
            added = session.current().added_edges[fgraph]
            for _ in range(CHANGES_PER_ROUND):
                _random_change(rng, fgraph, orderings, seen)
                expected = destroy_handler_cycles.pytensor_answer(fgraph, orderings)
                known = added.last_orderings is not None
                assert cycle_check.contains_cycle(fgraph, orderings) == expected
                answers[expected] += 1
                by_gained_edges += known
    assert answers[True] > 50 and answers[False] > 50, answers  # both answers were tested
    assert by_gained_edges > ROUNDS * CHANGES_PER_ROUND / 2


def test_a_graph_not_watched_gets_pytensors_check():
    fgraph = _random_graph(random.Random(1), 6)
    orderings = {node: {other} for node, other in zip(fgraph.apply_nodes,
                                                      list(fgraph.apply_nodes)[1:])}
    assert cycle_check.contains_cycle(fgraph, orderings) == destroyhandler._contains_cycle(
        fgraph, orderings)
    assert fgraph not in session.current().added_edges


def test_pytensors_check_is_back_after_the_watch():
    before = destroyhandler._contains_cycle
    fgraph = _random_graph(random.Random(2), 5)
    with cycle_check.watched(fgraph):
        assert destroyhandler._contains_cycle is cycle_check.contains_cycle
        with cycle_check.watched(_random_graph(random.Random(3), 5)):
            pass
        assert destroyhandler._contains_cycle is cycle_check.contains_cycle
    assert destroyhandler._contains_cycle is before
    assert cycle_check.AddedEdges not in {type(f) for f in fgraph._features}


def _rewritten(outputs_of, inputs_of, watched: bool):
    inputs, outputs = construct_function_ins_and_outs(inputs_of, outputs_of)
    fgraph, _ = FunctionMaker.create_fgraph(inputs, [FunctionMaker.wrap_out(o) for o in outputs])
    asked = []
    pytensors = destroy_handler_cycles.pytensor_answer

    def counted(graph, orderings):
        added = session.current().added_edges.get(graph)
        asked.append(added is not None and added.last_orderings is not None)
        return pytensors(graph, orderings)

    destroy_handler_cycles.pytensor_answer = counted
    try:
        with cycle_check.watched(fgraph) if watched else contextlib.nullcontext():
            get_mode("NUMBA").optimizer.rewrite(fgraph)
    finally:
        destroy_handler_cycles.pytensor_answer = pytensors
    text = io.StringIO()
    debugprint(fgraph, file=text, print_type=True, print_destroy_map=True, print_view_map=True)
    return text.getvalue(), sum(asked)


def _model(name: str, **kwargs):
    def build():
        model = getattr(models, f"{name}_model")(**kwargs)
        return model.outputs, model.inputs
    return build


def _family(name: str):
    def build():
        inputs, outputs = getattr(graph_families, name)()[:2]
        return outputs, inputs
    return build


_large = _model("large", terms=12)
GRAPHS = {
    "radon": _model("radon"),
    "large, 12 terms": _large,
    "ar1": _model("ar1", observations=12),
    **{name: _family(name) for name in ("inplace", "inc_set_subtensor", "join_split_concat",
                                        "scan_with_gradient", "linalg")},
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_rewriting_makes_the_same_graph_asking_pytensor_only_while_nothing_is_known(name):
    """The rewritten graph, inplace maps included, is the one rewriting without the
    watch makes; PyTensor's check is asked only until a check first finds no cycle."""
    outputs, inputs = GRAPHS[name]()
    plain, _ = _rewritten(outputs, inputs, watched=False)
    outputs, inputs = GRAPHS[name]()
    watched, asked_while_known = _rewritten(outputs, inputs, watched=True)
    assert watched == plain
    assert asked_while_known == 0


def test_a_failure_of_ours_leaves_the_answer_to_pytensor(monkeypatch):
    """A bug in the gained edges never changes an answer (PyTensor's rewriters would take a
    raised error for a failed rewrite, and skip it)."""
    def broken(self, fgraph, orderings):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(cycle_check.AddedEdges, "gained", broken)
    outputs, inputs = _large()
    plain, _ = _rewritten(outputs, inputs, watched=False)
    outputs, inputs = _large()
    watched, _ = _rewritten(outputs, inputs, watched=True)
    assert watched == plain
