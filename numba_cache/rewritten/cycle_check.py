"""PyTensor's inplace cycle check, answered from the edges a graph gained since it was last acyclic.

Each candidate inplace replacement is validated by PyTensor's ``DestroyHandler``,
which asks whether the graph, with the orderings its destroyers impose, still has
an order: a walk of every variable and node of the graph, once per candidate. On a
graph of a thousand nodes that is seconds of rewriting (``benchmarks/PHASES.md``,
*inplace checks*), paid by every mode.

The answer needs far less. A graph that had no cycle when last checked can only
have one now through an edge it gained since, and every node of such a cycle is
reached from the gained edge's head and reaches its tail. :class:`AddedEdges`, a
feature of the graph, records from the graph's own callbacks what each node
touched since the last check depended on then; the edges gained are the data
edges each such node has now and had not then, and the orderings not in force
then. :func:`contains_cycle` walks forward from their heads and back from their
tails within that, and looks for a cycle among the nodes found (most often none,
or a handful). Where nothing is known yet (the first check of a rewrite), or
anything of ours fails, PyTensor's own check answers. Either way the answer is
the one PyTensor's walk gives, so rewriting makes the same graph, faster.

Only the graphs numba_cache rewrites carry the feature (:func:`watched`); any other
graph checked meanwhile, in any thread, gets PyTensor's check.
"""

from __future__ import annotations

import contextlib

from pytensor.graph.features import Feature

from numba_cache import session
from numba_cache._compat import destroy_handler_cycles


class AddedEdges(Feature):
    """What a function graph gained since its last check found no cycle.

    For each node touched since then (imported, pruned, or an input changed) it
    keeps the nodes the node depended on then (none, for a node not in the graph
    then). A change reverted gains nothing, so a rejected candidate leaves no trace.
    """

    def __init__(self):
        self.tails_then: dict = {}  # node touched since the last check -> its tails then
        self.last_orderings: dict | None = None  # those of the last check; None: none yet

    def clone(self):
        return Feature()  # nothing to record: a clone is checked by PyTensor

    def on_import(self, fgraph, node, reason):
        self.tails_then.setdefault(node, set())

    def on_prune(self, fgraph, node, reason):
        if node not in self.tails_then:
            self.tails_then[node] = _tails(node.inputs)

    def on_change_input(self, fgraph, node, i, var, new_var, reason=None):
        if node not in self.tails_then:
            inputs = list(node.inputs)
            inputs[i] = var  # the change has been made: this is the input as it was
            self.tails_then[node] = _tails(inputs)

    def gained(self, fgraph, orderings: dict) -> dict:
        """The edges gained since the last check: head -> its new tails."""
        apply_nodes = fgraph.apply_nodes
        gained: dict = {}
        for head, then in self.tails_then.items():
            if head in apply_nodes and (new := _tails(head.inputs) - then):
                gained[head] = new
        for head, before in orderings.items():
            if new := before.difference(self.last_orderings.get(head, ())):
                gained.setdefault(head, set()).update(new)
        return gained

    def checked(self, orderings: dict) -> None:
        """The graph as it is now has no cycle under `orderings`."""
        self.tails_then.clear()
        self.last_orderings = {node: set(before) for node, before in orderings.items()}


def _tails(inputs) -> set:
    return {var.owner for var in inputs if var.owner is not None}


def cycle_through(fgraph, gained: dict, orderings: dict) -> bool:
    """Whether `fgraph` under `orderings` has a cycle through one of the `gained` edges
    (head -> tails); on a graph that had none without them, whether it has one at all."""
    later: dict = {}
    for node, before in orderings.items():
        for earlier in before:
            later.setdefault(earlier, []).append(node)
    clients = fgraph.clients

    def successors(node):
        for output in node.outputs:
            for client, _ in clients.get(output, ()):
                yield client
        yield from later.get(node, ())

    def predecessors(node):
        yield from _tails(node.inputs)
        yield from orderings.get(node, ())

    reached = _closure(gained, successors, lambda node: True)
    tails = [tail for new in gained.values() for tail in new if tail in reached]
    between = _closure(tails, predecessors, reached.__contains__)
    return _has_cycle(between, predecessors)


def _closure(start, neighbours, allowed) -> set:
    found = set(start)
    stack = list(found)
    while stack:
        for neighbour in neighbours(stack.pop()):
            if neighbour not in found and allowed(neighbour):
                found.add(neighbour)
                stack.append(neighbour)
    return found


def _has_cycle(nodes: set, predecessors) -> bool:
    """Whether the subgraph of `nodes` (edges from `predecessors`, within it) has a cycle."""
    waiting = {node: {p for p in predecessors(node) if p in nodes} for node in nodes}
    ready = [node for node, before in waiting.items() if not before]
    followers: dict = {}
    for node, before in waiting.items():
        for earlier in before:
            followers.setdefault(earlier, []).append(node)
    ordered = 0
    while ready:
        node = ready.pop()
        ordered += 1
        for follower in followers.get(node, ()):
            waiting[follower].discard(node)
            if not waiting[follower]:
                ready.append(follower)
    return ordered != len(nodes)


def contains_cycle(fgraph, orderings: dict) -> bool:
    """PyTensor's ``_contains_cycle``, answered from the gained edges where `fgraph` has them."""
    added = session.current().added_edges.get(fgraph)
    if added is None:
        return destroy_handler_cycles.pytensor_answer(fgraph, orderings)
    cycle = None
    if added.last_orderings is not None:
        try:
            cycle = cycle_through(fgraph, added.gained(fgraph, orderings), orderings)
        except Exception:  # ours failing never changes an answer: PyTensor's is asked
            cycle = None
    if cycle is None:
        cycle = destroy_handler_cycles.pytensor_answer(fgraph, orderings)
    if not cycle:
        added.checked(orderings)
    return cycle


@contextlib.contextmanager
def watched(fgraph):
    """Within the block, `fgraph`'s inplace cycle checks are answered by :func:`contains_cycle`."""
    added = AddedEdges()
    edges = session.current().added_edges
    with destroy_handler_cycles.answered_by(contains_cycle):
        fgraph.attach_feature(added)
        edges[fgraph] = added
        try:
            yield
        finally:
            edges.pop(fgraph, None)
            fgraph.remove_feature(added)
