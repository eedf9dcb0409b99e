"""Graph keys: a content hash of a FunctionGraph, independent of names and order.

Each variable is referred to by what it is, not by name or id: an input by its
position, a constant by its type and content, a node output by the digest of the
node that computes it (its op description, the references of its inputs, and
its output types). This Merkle construction makes the key independent of
variable names, object ids, creation order, toposort tie-breaking and
``PYTHONHASHSEED``, while any change to an op, a property, a constant, a type or
an edge changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytensor.graph.basic import Constant

from numba_cache.keys.canonical import canonical, digest
from numba_cache.keys.constants import hidden_constants, hidden_description
from numba_cache.keys.ops import describe_op, describe_type

_SUMMARY_WIDTH = 60


@dataclass(frozen=True)
class GraphDescription:
    """The content digest of a graph, with per-node details for explanations."""

    digest: str
    inputs: list
    outputs: list
    nodes: list


def constant_digest(constant: Constant) -> str:
    return digest([describe_type(constant.type), canonical(constant.data)])


def describe_graph(fgraph, hide_constants: bool = False, order=None) -> GraphDescription:
    """Describe `fgraph` by content (see the module docstring).

    With `hide_constants`, constants passed to kernels as arguments are described
    by type and shape, not content (see :mod:`.constants`). `order` is the node
    order of the per-node details (a topological order; ``fgraph.toposort()``
    by default): the digest does not depend on it.
    """
    references: dict = {}
    for position, variable in enumerate(fgraph.inputs):
        references[variable] = ["input", position]
    if hide_constants:
        for position, constant in enumerate(hidden_constants(fgraph)):
            references[constant] = ["hidden", digest(hidden_description(constant)), position]

    def reference(variable):
        if variable not in references:
            if not isinstance(variable, Constant):
                raise ValueError(f"{variable} is neither an input, a constant nor computed")
            references[variable] = ["constant", constant_digest(variable)]
        return references[variable]

    op_digests: dict = {}
    nodes = []
    for node in fgraph.toposort() if order is None else order:
        op = node.op
        if op not in op_digests:
            op_digests[op] = digest(describe_op(op))
        inputs = [reference(variable) for variable in node.inputs]
        node_digest = digest(
            [op_digests[op], inputs, [describe_type(out.type) for out in node.outputs]]
        )
        for position, output in enumerate(node.outputs):
            references[output] = ["node", node_digest, position]
        nodes.append(
            {
                "op": str(op)[:_SUMMARY_WIDTH],
                "op_digest": op_digests[op],
                "inputs": [_short(ref) for ref in inputs],
                "node": node_digest,
            }
        )

    inputs = [describe_type(variable.type) for variable in fgraph.inputs]
    outputs = [reference(variable) for variable in fgraph.outputs]
    graph_digest = digest([inputs, outputs, sorted(node["node"] for node in nodes)])
    return GraphDescription(graph_digest, inputs, [_short(o) for o in outputs], nodes)


def _short(reference: list) -> str:
    """A compact text form of a variable reference, for explanations."""
    kind, *rest = reference
    if kind == "input":
        return f"input[{rest[0]}]"
    if kind == "constant":
        return f"constant:{rest[0][:12]}"
    if kind == "hidden":
        return f"hidden[{rest[1]}]:{rest[0][:12]}"
    return f"node:{rest[0][:12]}[{rest[1]}]"


def graph_summary(fgraph) -> str:
    """A short human description such as ``"graph: 42 nodes, 3 inputs, 2 outputs"``."""
    counts = (
        (len(fgraph.apply_nodes), "node"),
        (len(fgraph.inputs), "input"),
        (len(fgraph.outputs), "output"),
    )
    return "graph: " + ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)
