"""The order a graph kernel evaluates its nodes in: a function of the graph alone.

``FunctionGraph.toposort`` depends on more than the graph: its tie-breaking on
the order nodes were imported, and its *extra orderings* on the features
attached to the graph. An inplace op must run after every other reader of the
buffer it overwrites, and only a ``DestroyHandler`` feature says so. Rewriting
attaches one; a graph swapped in from the rewrite cache used to have none, so
its toposort was free to run an inplace reduction before the nodes still
reading its input, and the kernel compiled from it returned a wrong gradient
under the original graph's key.

:func:`execution_order` derives the order from the graph's structure (outputs
in order, node inputs in order) and its destroy orderings, which it computes
with a ``DestroyHandler`` as PyTensor does for any graph with inplace ops. Two
graphs with the same structure and the same ops get the same order, hence the
same generated source, whatever features or import history they carry.
"""

from __future__ import annotations


def ensure_destroy_handler(fgraph) -> None:
    """Attach a ``DestroyHandler`` to `fgraph` if it has inplace ops and none is attached.

    PyTensor does the same (``add_supervisor_to_fgraph``, the ``add_destroy_handler``
    rewrite) for every graph it compiles with inplace ops; without it, nothing
    orders the readers of a buffer before the op that overwrites it. Raises
    ``InconsistencyError`` for a graph whose inplace ops cannot all be honoured.
    """
    from pytensor.graph.destroyhandler import DestroyHandler

    if hasattr(fgraph, "destroy_handler"):
        return
    if any(getattr(node.op, "destroy_map", None) for node in fgraph.apply_nodes):
        fgraph.attach_feature(DestroyHandler())


def execution_order(fgraph) -> list:
    """`fgraph`'s nodes in a topological order that honours its destroy orderings.

    A depth-first post-order from the outputs (in output order), visiting a
    node's inputs in input order, then the nodes that must run before it
    because it overwrites what they read, in the order of a first pass that
    ignores those. Nothing here depends on toposort tie-breaking, creation order
    or object ids.
    """
    ensure_destroy_handler(fgraph)
    structural = _post_order(fgraph.outputs, {})
    position = {node: index for index, node in enumerate(structural)}
    before = {
        node: sorted(prerequisites, key=position.__getitem__)
        for node, prerequisites in fgraph.orderings().items()
        if prerequisites
    }
    order = _post_order(fgraph.outputs, before)
    if len(order) != len(fgraph.apply_nodes):
        raise ValueError(f"{len(fgraph.apply_nodes) - len(order)} nodes are not reachable from "
                         "the outputs")
    return order


def _post_order(outputs, before: dict) -> list:
    """Nodes computing `outputs`, each after its inputs' owners and its `before` nodes."""
    order: list = []
    state: dict = {}  # node -> False while its prerequisites are visited, True once emitted
    for output in outputs:
        if output.owner is None or output.owner in state:
            continue
        stack = [(output.owner, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                state[node] = True
                order.append(node)
                continue
            if node in state:
                if state[node] is False:
                    raise ValueError(f"the orderings of {node} form a cycle")
                continue
            state[node] = False
            stack.append((node, True))
            prerequisites = [variable.owner for variable in node.inputs if variable.owner is not None]
            prerequisites += before.get(node, [])
            # Pushed in reverse, so that they are visited in order.
            stack.extend((prerequisite, False) for prerequisite in reversed(prerequisites)
                         if state.get(prerequisite) is not True)
    return order
