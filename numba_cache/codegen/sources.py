"""Python source of the generated functions: op kernel wrappers and graph functions.

Names in generated code are positional (``i0`` for input 0, ``v3_1`` for output
1 of node 3, ``c2`` for constant 2, ``l3_0`` for the first constant lifted out of
node 3's kernel, ``a3_1`` for node 3's input 1 passed in a pack, ``p0`` for a pack
of such constants, ``k3`` for the kernel of node 3), so the source depends only on
the graph's structure, never on variable names or ids.

Constants of one element that a node reads as inputs (a length, an axis, a
scalar parameter) are passed in packs too, not embedded: an op kernel takes them
as arguments either way, so its code is the same, and a graph function then
serves every value of them. The same model on a dataset of other sizes (the
lengths of ``Alloc``, of a ``Scan``) is then the same graph function
(:func:`numba_cache.keys.kernels.graph_code_key`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from textwrap import indent
from typing import NamedTuple

import numpy as np
from pytensor.graph.basic import Constant

from numba_cache.codegen.lifted_constants import summary, trailing_constants

_IDENTIFIER_UNSAFE = re.compile(r"\W+")


def identifier(text: str, limit: int = 40) -> str:
    """A Python identifier made from `text` (e.g. an op's class name)."""
    name = _IDENTIFIER_UNSAFE.sub("_", text).strip("_")[:limit] or "op"
    return name if not name[0].isdigit() else f"_{name}"


def kernel_source(function_name: str, n_inputs: int) -> str:
    """Source of an op kernel: a wrapper calling the hoisted global ``impl``."""
    args = ", ".join(f"i{i}" for i in range(n_inputs))
    return f"def {function_name}({args}):\n    return impl({args})\n"


#: The global the graph function calls: its body, made from its steps at compile time.
GRAPH_BODY = "graph_body"

#: The most arguments a generated call, or tuple of arguments, has. CPython compiles a
#: call of more than 30 positional arguments into a call with a star argument, which
#: numba lowers by building one tuple, element by element: IR text quadratic in the
#: number of arguments (9 MB for the large benchmark model's 900 constants).
ARGUMENTS_PER_CALL = 16


class Step(NamedTuple):
    """One node of a graph function: ``outputs = kernel(*inputs)``, all by generated name."""

    kernel: str
    inputs: tuple
    outputs: tuple


class KernelNode(NamedTuple):
    """What the kernel of one step computes: `node`, taking the `trailing` constants
    after its own inputs (:mod:`.lifted_constants`; none for most nodes)."""

    node: object
    trailing: tuple


class Pack(NamedTuple):
    """The constants lifted out of fused kernels (:mod:`.lifted_constants`) or passed to
    nodes (:func:`passed_in_pack`) of one dtype, passed to the graph function as one array
    argument, `name`, in the order of `members`."""

    name: str
    dtype: str
    members: tuple


@dataclass
class GraphSource:
    """Generated source of a graph function and the globals it expects.

    The function is one call of its body (:data:`GRAPH_BODY`) with `arguments`,
    grouped by :func:`grouped`: its parameters, then the constants numba must
    type as Python globals. The body runs `steps` in order and returns the
    values named in `returned` as a tuple (None if there are none); the source
    lists them as comments. The `embedded` constants (tensors and scalars) are
    not arguments: the body embeds them itself, as numba embeds a global.

    `kernels` maps global names to the :class:`KernelNode` each op kernel computes;
    `constants` maps global names to constants frozen into the kernel;
    `hidden` lists the constants passed as trailing arguments ``h0, h1, ...``;
    `lifted` maps names to the constants lifted out of fused kernels and the
    one-element constants nodes read (:func:`passed_in_pack`), which are passed
    after those in the `packs` (:meth:`pack_values`), one value per step reading
    it: the graph kernel serves every value of them.
    """

    function_name: str
    source: str
    kernels: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    hidden: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    arguments: list = field(default_factory=list)
    embedded: list = field(default_factory=list)
    returned: list = field(default_factory=list)
    lifted: dict = field(default_factory=dict)
    packs: list = field(default_factory=list)

    def pack_values(self) -> list[np.ndarray]:
        """The arrays passed for `packs`: each lifted constant's value, in its dtype."""
        return [np.array([np.asarray(self.lifted[name].data).reshape(-1)[0]
                          for name in pack.members], dtype=pack.dtype)
                for pack in self.packs]


def grouped(items: list, limit: int = ARGUMENTS_PER_CALL) -> list:
    """`items` as at most `limit` entries, each an item or a list of entries (nested as
    deep as needed, each list of at most `limit`)."""
    while len(items) > limit:
        items = [items[start:start + limit] for start in range(0, len(items), limit)]
    return list(items)


def _spelled(entries: list) -> str:
    return ", ".join(f"({_spelled(entry)},)" if isinstance(entry, list) else entry
                     for entry in entries)


def graph_kernel_name(graph_key) -> str:
    """The generated function's name for the graph kernel of `graph_key`."""
    return f"graph_{graph_key.short}"


def graph_source(fgraph, function_name: str, hidden: list, order: list) -> GraphSource:
    """Generate the Python function that evaluates `fgraph`'s nodes in `order`.

    `order` is :func:`numba_cache.keys.order.execution_order`: it must honour the
    graph's destroy orderings (an inplace op after every reader of its input).
    The `hidden` constants become trailing parameters, in that order.
    """
    names: dict = {}
    constants: dict = {}
    kernels: dict = {}
    for position, variable in enumerate(fgraph.inputs):
        names[variable] = f"i{position}"
    for position, constant in enumerate(hidden):
        names[constant] = f"h{position}"

    def name_of(variable):
        if variable not in names:
            if not isinstance(variable, Constant):
                raise ValueError(f"{variable} is not computed before it is used")
            names[variable] = f"c{len(constants)}"
            constants[names[variable]] = variable
        return names[variable]

    lifted: dict = {}
    lines = []
    steps = []
    for index, node in enumerate(order):
        trailing = trailing_constants(node)
        lifted_names = [f"l{index}_{position}" for position in range(len(trailing))]
        lifted.update(zip(lifted_names, trailing, strict=True))
        node_inputs = []
        for position, variable in enumerate(node.inputs):
            if passed_in_pack(variable):
                node_inputs.append(f"a{index}_{position}")
                lifted[node_inputs[-1]] = variable
            else:
                node_inputs.append(name_of(variable))
        inputs = (*node_inputs, *lifted_names)
        outputs = []
        for position, output in enumerate(node.outputs):
            names[output] = f"v{index}_{position}"
            outputs.append(names[output])
        kernel = f"k{index}"
        kernels[kernel] = KernelNode(node, trailing)
        steps.append(Step(kernel, inputs, tuple(outputs)))
        # The op only: printing the node would print its constants, slowly.
        lines.append(indent(summary(node, bool(trailing)), "# "))
        lines.append(f"# {', '.join(outputs)} = {kernel}({', '.join(inputs)})")

    returned = [name_of(variable) for variable in fgraph.outputs]
    lines.append(f"# return ({', '.join(returned)},)" if returned else "# return None")
    packs = _packs(lifted)
    parameters = [names[variable] for variable in fgraph.inputs]
    parameters += [names[constant] for constant in hidden]
    parameters += [pack.name for pack in packs]
    for pack in packs:
        lines.append(f"# {pack.name}: {pack.dtype} [{', '.join(pack.members)}]")
    embedded = [name for name, constant in constants.items() if _embeddable(constant)]
    arguments = [*parameters, *(name for name in constants if name not in embedded)]
    lines.append(f"return {GRAPH_BODY}({_spelled(grouped(arguments))})")
    body = indent("\n".join(lines), "    ")
    source = f"def {function_name}({', '.join(parameters)}):\n{body}\n"
    return GraphSource(function_name, source, kernels, constants, list(hidden), steps,
                       arguments, embedded, returned, lifted, packs)


#: The dtypes of constants passed in packs: the ones a pack array holds as the
#: graph body reads them (:mod:`numba_cache.kernels.assembly.graph_body`).
PACKED_DTYPES = frozenset(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                           "uint64", "float32", "float64"))


def passed_in_pack(variable) -> bool:
    """Whether the graph function passes `variable`, a node's input, in a pack: a
    tensor or scalar constant of one element, of a :data:`PACKED_DTYPES` dtype."""
    from pytensor.scalar import ScalarType
    from pytensor.tensor import TensorType

    if not isinstance(variable, Constant) or not isinstance(variable.type,
                                                             TensorType | ScalarType):
        return False
    data = np.asarray(variable.data)
    return data.size == 1 and str(data.dtype) in PACKED_DTYPES


def _packs(lifted: dict) -> list[Pack]:
    """The lifted constants `lifted` (names to constants, in order) packed by dtype, the
    packs in the order their dtypes first appear."""
    members: dict = {}
    for name, constant in lifted.items():
        members.setdefault(constant.type.dtype, []).append(name)
    return [Pack(f"p{position}", dtype, tuple(names))
            for position, (dtype, names) in enumerate(members.items())]


def _embeddable(constant) -> bool:
    """Whether the graph body embeds `constant` itself: tensors and scalars, which numba
    types as an array or a number. Other constants are typed by numba, as globals."""
    from pytensor.scalar import ScalarType
    from pytensor.tensor import TensorType

    return isinstance(constant.type, TensorType | ScalarType)
