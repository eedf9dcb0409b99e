"""Op and type descriptions: everything about an op that can change its kernel.

An op is described by its class and ``__props__`` (nested scalar ops and the
inner graphs of ``Composite``, ``Scan`` and ``OpFromGraph`` included, by the
content digest of the inner graph), plus its destroy and view maps, which decide
inplace behaviour. Ops without ``__props__`` get a registered description, or
fall back to their public attributes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable

from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.graph.type import Type
from pytensor.tensor.type import TensorType

from numba_cache.keys.canonical import canonical, props_description, qualified_name


def describe_op(op) -> list:
    """JSON description of an op, including its inplace (destroy/view) maps."""
    return [
        canonical(op),
        canonical(getattr(op, "destroy_map", {})),
        canonical(getattr(op, "view_map", {})),
    ]


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
    reduced = KERNEL_LEVEL_PROPS.get(type(pytensor_type)) if _KERNEL_LEVEL_TYPES.get() else None
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
    # Imported here: graph.py imports this module.
    from numba_cache.keys.graph import describe_graph

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


_register_pytensor_descriptions()
