"""Content descriptions of ops, types and whole graphs, and the graph keys made of them.

One module, because the two recurse into each other: an op is described by its
class and ``__props__`` (nested scalar ops and the inner graphs of
``Composite``, ``Scan`` and ``OpFromGraph`` included, by the content digest of
the inner graph), plus its destroy and view maps, which decide inplace
behaviour; ops without ``__props__`` get a registered description, or fall back
to their public attributes.

A graph is a content hash of a FunctionGraph, independent of names and order.
Each variable is referred to by what it is, not by name or id: an input by its
position, a constant by its type and content, a node output by the digest of the
node that computes it (its op description, the references of its inputs, and
its output types). This Merkle construction makes the key independent of
variable names, object ids, creation order, toposort tie-breaking and
``PYTHONHASHSEED``, while any change to an op, a property, a constant, a type or
an edge changes it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from dataclasses import dataclass

from pytensor.graph.basic import Constant
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.graph.type import Type
from pytensor.tensor.type import TensorType

from numba_cache.codegen.lifted_constants import lifted_positions, summary
from numba_cache.codegen.sources import passed_in_pack
from numba_cache.keys.canonical import canonical, digest, props_description, qualified_name
from numba_cache.keys.constants import hidden_constants
from numba_cache.keys.foreign_code import conversion_code_digest


#: Op classes converted by code of ours that reads only part of the op, with what it
#: reads (``reads(op)``): under :func:`kernel_level_types`, such an op is described by
#: that part, so that its op kernel's key and a lengths-free graph key do not hold the
#: rest (an inner graph built for one length). Registered by the conversions
#: (:mod:`numba_cache.kernels.assembly.length_generic`).
KERNEL_LEVEL_OPS: dict[type, Callable] = {}


def describe_op(op) -> list:
    """JSON description of an op, including its inplace (destroy/view) maps, and the
    code from outside PyTensor that converts it (a user's op), if any."""
    reads = KERNEL_LEVEL_OPS.get(type(op)) if _KERNEL_LEVEL_TYPES.get() else None
    description = [
        ["kernel-level", qualified_name(type(op)), reads(op)] if reads else canonical(op),
        canonical(getattr(op, "destroy_map", {})),
        canonical(getattr(op, "view_map", {})),
    ]
    conversion = conversion_code_digest(op)
    return description if conversion is None else [*description, conversion]


def describe_type(pytensor_type: Type) -> list:
    """JSON description of a PyTensor type (dtype, static shape, ...)."""
    return canonical(pytensor_type)


_KERNEL_LEVEL_TYPES = contextvars.ContextVar("numba_cache_kernel_level_types", default=False)


@contextlib.contextmanager
def kernel_level_types(enabled: bool = True):
    """Within the block, types in :data:`KERNEL_LEVEL_PROPS` are described only as far as
    kernel code depends on them; every other type stays described in full.

    For a plain ``TensorType`` that is its dtype, rank and which dimensions are
    known to be 1, not the other static lengths; inner graphs (Composite,
    FusedElemwise, Scan...) included. numba compiles per dtype, rank and layout,
    and PyTensor's numba dispatch contract (``register_funcify_and_cache_key``)
    is that a conversion reading anything else of a node, such as a static
    length, puts it in its own cache key, which the op key carries. Used for op
    keys; graph keys describe types in full. ``enabled=False`` restores full
    descriptions inside the block.
    """
    token = _KERNEL_LEVEL_TYPES.set(enabled)
    try:
        yield
    finally:
        _KERNEL_LEVEL_TYPES.reset(token)


def _known_to_be_one(shape) -> list:
    return [length == 1 for length in shape]


#: The only types an op key reduces, by exact class (a subclass may add what its
#: code depends on, as ``SparseTensorType`` adds ``format``), with the props reduced
#: and how. Every prop not named here is described in full, so a prop PyTensor adds
#: later, a subclass or a new type costs misses, never a shared key. Add a type
#: only with its numba dispatch read to the end.
KERNEL_LEVEL_PROPS: dict[type, dict[str, Callable]] = {
    TensorType: {"shape": _known_to_be_one},
}


@canonical.register(Type)
def _(pytensor_type):
    if not _KERNEL_LEVEL_TYPES.get():  # graph keys: every type in full
        return _full_type_description(pytensor_type)
    reduced = KERNEL_LEVEL_PROPS.get(type(pytensor_type))
    if reduced is None:
        # Nested types (a typed list's element type) are part of this type's code too.
        with kernel_level_types(enabled=False):
            return _full_type_description(pytensor_type)
    props = {
        name: reduced.get(name, canonical)(getattr(pytensor_type, name))
        for name in pytensor_type.__props__
    }
    return ["kernel-level", qualified_name(type(pytensor_type)), props]


def _full_type_description(pytensor_type) -> list:
    if hasattr(pytensor_type, "__props__"):
        return props_description(pytensor_type)
    if hasattr(pytensor_type, "__dict__"):
        # Private attributes included: without props, nothing says which state is code.
        return ["state", qualified_name(type(pytensor_type)), canonical(vars(pytensor_type))]
    return canonical.dispatch(object)(pytensor_type)


@canonical.register(AbstractFunctionGraph)
def _(fgraph):
    return ["fgraph", describe_graph(fgraph).digest]


def _public_state(obj) -> list:
    state = {name: value for name, value in vars(obj).items() if not name.startswith("_")}
    return ["state", qualified_name(type(obj)), canonical(state)]


def _register_pytensor_descriptions() -> None:
    from pytensor.compile.builders import OpFromGraph
    from pytensor.scalar.basic import ScalarOp
    from pytensor.scan.op import Scan

    @canonical.register(ScalarOp)
    def _(op):
        if hasattr(op, "__props__"):
            return props_description(op)
        return _public_state(op)

    @canonical.register(Scan)
    def _(op):
        return [
            "scan",
            canonical(op.info),
            canonical(op.fgraph),
            canonical(op.truncate_gradient),
            canonical(getattr(op, "as_while", False)),
        ]

    @canonical.register(OpFromGraph)
    def _(op):
        return ["op_from_graph", qualified_name(type(op)), canonical(op.fgraph)]


_SUMMARY_WIDTH = 60


@dataclass(frozen=True)
class GraphDescription:
    """The content digest of a graph, with per-node details for explanations."""

    digest: str
    inputs: list
    outputs: list
    nodes: list


#: The tags of a graph's variables that PyTensor's rewrites read: assumptions its
#: user may state (``A.tag.symmetric = True`` rewrites ``A.T`` to ``A``), and which
#: inputs must not be destroyed. Part of a graph's description where set, so that a
#: graph rewritten under them is not served without them
#: (``tests/test_rewrite_cache.py`` checks that PyTensor reads no other tag a user could set).
REWRITE_TAGS = ("indestructible", "lower_triangular", "nan_guard_mode_check", "psd",
                "symmetric", "upper_triangular")


def rewrite_tags(variable) -> list:
    """``[name, value]`` of each of :data:`REWRITE_TAGS` `variable` carries."""
    tag = vars(variable.tag)
    return [[name, canonical(tag[name])] for name in REWRITE_TAGS if name in tag]


def _tagged(description, variable):
    """`description`, with `variable`'s :func:`rewrite_tags` if it has any."""
    tags = rewrite_tags(variable)
    return [description, tags] if tags else description


def hidden_description(constant) -> list:
    """A hidden constant's type without its content: dtype, shape and layout flags (within
    :func:`kernel_level_types`, which of its lengths are 1 instead of its shape)."""
    data = constant.data
    shape = _known_to_be_one(data.shape) if _KERNEL_LEVEL_TYPES.get() else list(data.shape)
    return ["hidden", describe_type(constant.type), data.dtype.str, shape,
            bool(data.flags.writeable)]


def constant_digest(constant: Constant) -> str:
    return digest([describe_type(constant.type), canonical(constant.data)])


#: The graph whose lifted constants are described by position, and ``{id(constant):
#: position}`` of them (:func:`numba_cache.codegen.lifted_constants.lifted_positions`).
_LIFTED = contextvars.ContextVar("numba_cache_lifted_constants", default=(None, {}))


def _op_digest(op, lifted: tuple) -> str:
    """The digest of `op`'s description, its `lifted` constants described by position and
    type (their values reach its kernel as arguments)."""
    token = _LIFTED.set(lifted)
    try:
        return digest(describe_op(op))
    finally:
        _LIFTED.reset(token)


def describe_graph(fgraph, hide_constants: bool = False, order=None,
                   lift_constants: bool = False, pack_constants: bool = False
                   ) -> GraphDescription:
    """Describe `fgraph` by content (see the module docstring).

    With `hide_constants`, constants passed to kernels as arguments are described
    by type and shape, not content (see :mod:`.constants`). With `lift_constants`,
    so are the constants lifted out of fused kernels, which a graph kernel passes
    to them at run time (see :mod:`numba_cache.codegen.lifted_constants`): by their
    type and position among their node's. Only for graph kernel keys: rewriting
    reads those values. With `pack_constants`, so are the one-element constants a
    graph kernel passes in packs (:func:`numba_cache.codegen.sources.passed_in_pack`),
    by their type. `order` is the node order of the per-node details (a
    topological order; ``fgraph.toposort()`` by default): the digest does not
    depend on it.
    """
    references: dict = {}
    lifted_graph, lifted = _LIFTED.get()
    lifted = lifted if fgraph is lifted_graph else {}
    for position, variable in enumerate(fgraph.inputs):
        references[variable] = ["input", position]
    if hide_constants:
        for position, constant in enumerate(hidden_constants(fgraph)):
            references[constant] = _tagged(
                ["hidden", digest(hidden_description(constant)), position], constant)

    def reference(variable):
        if variable not in references:
            if not isinstance(variable, Constant):
                raise ValueError(f"{variable} is neither an input, a constant nor computed")
            position = lifted.get(id(variable))
            if position is not None:
                described = ["lifted", digest(describe_type(variable.type)), position]
            elif pack_constants and passed_in_pack(variable):
                described = ["packed", digest(describe_type(variable.type))]
            else:
                described = ["constant", constant_digest(variable)]
            references[variable] = _tagged(described, variable)
        return references[variable]

    op_digests: dict = {}
    summaries: dict = {}
    nodes = []
    for node in fgraph.toposort() if order is None else order:
        op = node.op
        if op not in op_digests:
            positions = lifted_positions(node) if lift_constants else (None, {})
            op_digests[op] = (_op_digest(op, positions) if lift_constants
                              else digest(describe_op(op)))  # nested: in its op's lifting
            # A summary is part of the key too: it must not spell lifted values.
            summaries[op] = summary(node, bool(positions[1]), _SUMMARY_WIDTH)
        inputs = [reference(variable) for variable in node.inputs]
        node_digest = digest(
            [op_digests[op], inputs, [_tagged(describe_type(out.type), out)
                                      for out in node.outputs]]
        )
        for position, output in enumerate(node.outputs):
            references[output] = ["node", node_digest, position]
        nodes.append(
            {
                "op": summaries[op],
                "op_digest": op_digests[op],
                "inputs": [_short(ref) for ref in inputs],
                "node": node_digest,
            }
        )

    inputs = [_tagged(describe_type(variable.type), variable) for variable in fgraph.inputs]
    outputs = [reference(variable) for variable in fgraph.outputs]
    graph_digest = digest([inputs, outputs, sorted(node["node"] for node in nodes)])
    return GraphDescription(graph_digest, inputs, [_short(o) for o in outputs], nodes)


def _short(reference: list) -> str:
    """A compact text form of a variable reference, for explanations."""
    if isinstance(reference[0], list):  # [reference, its tags]
        inner, tags = reference
        return f"{_short(inner)} ({', '.join(f'{name}={value}' for name, value in tags)})"
    kind, *rest = reference
    if kind == "input":
        return f"input[{rest[0]}]"
    if kind == "constant":
        return f"constant:{rest[0][:12]}"
    if kind == "hidden":
        return f"hidden[{rest[1]}]:{rest[0][:12]}"
    if kind == "lifted":
        return f"lifted[{rest[1]}]:{rest[0][:12]}"
    if kind == "packed":
        return f"packed:{rest[0][:12]}"
    return f"node:{rest[0][:12]}[{rest[1]}]"


def graph_summary(fgraph) -> str:
    """A short human description such as ``"graph: 42 nodes, 3 inputs, 2 outputs"``."""
    counts = (
        (len(fgraph.apply_nodes), "node"),
        (len(fgraph.inputs), "input"),
        (len(fgraph.outputs), "output"),
    )
    return "graph: " + ", ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts)


_register_pytensor_descriptions()
