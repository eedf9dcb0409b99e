"""The order a graph kernel evaluates its nodes in: the order PyTensor's linker uses.

Which node runs first is visible when a call raises: the first check that fails
names the exception (a gradient's broadcast ``Assert`` raises ``AssertionError``
where the ``Sub`` it guards raises ``ValueError``), and an inplace update that
ran before the failure has changed its shared variable. ``NUMBA`` runs the nodes
in ``FunctionGraph.toposort()`` order (``JITLinker.schedule``), so the generated
source does too (:func:`execution_order`).

That order depends on more than the graph: on the orderings the graph's features
add (an inplace op runs after every other reader of the buffer it overwrites,
and only a ``DestroyHandler`` says so), and, among those, on the order their
nodes were imported. So a graph key lists the nodes in this order (a key names
one source), a graph with inplace ops and no ``DestroyHandler`` gets one as
PyTensor gives every graph it compiles, and the rewrite cache stores the order
of the graph it rewrote with it and restores that (:func:`restored_order`): the
order ``NUMBA`` would run the rewritten graph in, whatever the history of the
graph it is swapped into.
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
    """`fgraph`'s nodes in the order PyTensor's linker runs them, destroy orderings honoured."""
    ensure_destroy_handler(fgraph)
    return list(fgraph.toposort())


def restored_order(fgraph, order: list) -> list:
    """`order`, the stored order of a graph restored into `fgraph`, checked against it.

    Raises ``ValueError`` unless `order` lists each of `fgraph`'s nodes once, each
    after the nodes computing its inputs and after those its destroy orderings
    say must run first.
    """
    ensure_destroy_handler(fgraph)
    if len(order) != len(fgraph.apply_nodes) or set(order) != set(fgraph.apply_nodes):
        raise ValueError("the stored node order does not list the restored graph's nodes")
    position = {node: index for index, node in enumerate(order)}
    orderings = fgraph.orderings()
    for node in order:
        before = [variable.owner for variable in node.inputs if variable.owner is not None]
        before += orderings.get(node, [])
        if any(position[earlier] > position[node] for earlier in before):
            raise ValueError(f"the stored node order runs {node} before what it needs")
    return list(order)
