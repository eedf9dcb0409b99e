"""The keys of cache levels 2 and 3: a whole-graph kernel, and one kernel per op.

Both are salted with the environment fingerprint and the codegen version. An op
kernel's key also carries PyTensor's own per-op cache key (which versions the
dispatch implementation) and the types of the node's inputs and outputs as far
as the kernel's code can depend on them (dtype, rank, dimensions known to be 1:
:func:`.ops.kernel_level_types`). Neither the other static lengths nor the
values of constant inputs are part of an op key: a kernel receives constants as
arguments, and PyTensor's numba dispatch generates code from the op and the
types, putting whatever else it reads into its own key, so one kernel serves
every node that differs only in its constants or lengths (a model with a
thousand terms has a few dozen kernels, not a thousand). In the graph key, large
array constants are kernel arguments and enter by type and shape only (see
:mod:`.constants`), and so do the constants lifted out of fused kernels, which the
graph kernel passes to them from a pack (see
:mod:`numba_cache.codegen.lifted_constants`): a model whose prior scale changed
finds its graph kernel stored.
"""

from __future__ import annotations

from numba_cache import versions
from numba_cache.keys.canonical import digest, qualified_name
from numba_cache.keys.graph import (
    constant_digest,
    describe_graph,
    describe_op,
    describe_type,
    graph_summary,
    kernel_level_types,
)
from numba_cache.keys.key import Key
from numba_cache.keys.order import execution_order
from numba_cache.store.entry_layout import BLOCK_COMPONENT

#: How a graph kernel calls its op kernels (the ``op_calls`` component of its key):
#: by symbol (:mod:`numba_cache.kernels.assembly.symbol_calls`), or linked in as numba links them.
BY_SYMBOL, LINKED = "symbol", "linked"
#: How a graph kernel with its op kernels linked in is summarized (``numba-cache list``).
LINKED_SUMMARY = ", op kernels linked in"


def op_calls_setting(settings) -> str:
    """How graph kernels call their op kernels under `settings`: :data:`BY_SYMBOL` or :data:`LINKED`."""
    return LINKED if settings.link_op_kernels else BY_SYMBOL


def graph_kernel_key(fgraph, fingerprint, order=None, op_calls: str = BY_SYMBOL) -> Key:
    """The whole-graph kernel key; its node list follows `order`, the kernel's node order.

    `order` defaults to :func:`.order.execution_order`, the order the generated
    source evaluates nodes in, so a key names one source. `op_calls` is
    :data:`BY_SYMBOL` or :data:`LINKED`: the same source compiles to other code.
    """
    description = describe_graph(fgraph, hide_constants=True, lift_constants=True,
                                 order=execution_order(fgraph) if order is None else order)
    key = Key.from_components(
        "graph",
        graph_summary(fgraph),
        {
            "fingerprint": fingerprint.digest,
            "codegen": versions.CODEGEN,
            "body": versions.GRAPH_BODY,
            "op_calls": BY_SYMBOL,
            "graph": description.digest,
            "inputs": description.inputs,
            "outputs": description.outputs,
            "nodes": description.nodes,
        },
    )
    return linked_key(key) if op_calls == LINKED else key


def linked_key(key: Key) -> Key:
    """The key of graph kernel `key` (calling its op kernels by symbol) with them linked in:
    what :func:`graph_kernel_key` gives the same graph under :data:`LINKED`. Its body is
    versioned apart (:data:`numba_cache.versions.LINKED_BODY`)."""
    return Key.from_components(key.kind, key.summary + LINKED_SUMMARY,
                               key.components | {"op_calls": LINKED,
                                                 "linked_body": versions.LINKED_BODY})


def graph_code_key(graph_key: Key, generated, op_kernel_keys: list[str]) -> Key:
    """The key of a graph kernel by its code: what numba compiles, once its ops are converted.

    A graph key describes the graph, static lengths included, so the same model on
    data of other lengths is another graph key, though its graph function is the
    same code: the same generated source (but for the function's name, which is
    its graph key's), calling the same op kernels (`op_kernel_keys`, in the order of
    `generated.steps`) with the same embedded constants. This key is made of those,
    after the conversion that gives the op kernel keys; numba's types of the
    arguments are the entry's signatures, as for every kernel.
    """
    source = generated.source.replace(generated.function_name, "graph_function", 1)
    return Key.from_components(
        "graph",
        f"{graph_key.summary}, by its code",
        {
            **{name: graph_key.components[name]
               for name in ("fingerprint", "codegen", "body", "op_calls")},
            "by": "code",
            "source": digest(source),
            "op_kernels": list(op_kernel_keys),
            "constants": {name: constant_digest(constant)
                          for name, constant in sorted(generated.constants.items())},
        },
    )


def lengths_free_key(graph_key: Key, fgraph, order: list) -> Key:
    """`graph_key`'s graph (nodes in `order`) described at kernel level: without its static
    lengths other than 1, nor its hidden constants' (:func:`kernel_level_types`), and its
    one-element constants by type, as the graph kernel passes them in packs.

    The same model on data of other lengths has this key. It names the op kernels
    its steps call (:mod:`numba_cache.kernels.assembly.remembered_op_keys`) when each
    of their conversions was found to read no length; with those, the graph
    kernel's code key is made without converting an op.
    """
    with kernel_level_types():
        description = describe_graph(fgraph, hide_constants=True, lift_constants=True,
                                     pack_constants=True, order=order)
    return Key.from_components(
        "graph",
        f"{graph_key.summary}, of any static lengths",
        {
            **{name: graph_key.components[name]
               for name in ("fingerprint", "codegen", "body", "op_calls")},
            "by": "kernel-level types",
            "graph": description.digest,
            "inputs": description.inputs,
            "outputs": description.outputs,
            "nodes": [node["node"] for node in description.nodes],
        },
    )


def op_kernel_key(node, pytensor_key: str, fingerprint) -> Key:
    op = node.op
    with kernel_level_types():
        op_digest = digest(describe_op(op))
        inputs = [describe_type(variable.type) for variable in node.inputs]
        outputs = [describe_type(variable.type) for variable in node.outputs]
    return Key.from_components(
        "op",
        f"op {str(op)[:60]}",
        {
            "fingerprint": fingerprint.digest,
            "codegen": versions.CODEGEN,
            "op_type": qualified_name(type(op)),
            "op": op_digest,
            "pytensor_key": pytensor_key,
            "inputs": inputs,
            "outputs": outputs,
        },
    )


def object_mode_key(block_uuid: str, function: str, signature: str, fingerprint) -> Key:
    """The key of an object-mode block's compiled code (see :mod:`numba_cache.kernels.runtime.objmode`).

    `block_uuid` is the uuid numba gave the block's dispatcher when it compiled
    the kernel holding it; `function` names the function holding the block.
    """
    return Key.from_components(
        "objmode",
        f"object-mode block in {function}",
        {
            "fingerprint": fingerprint.digest,
            "codegen": versions.CODEGEN,
            "block_format": versions.OBJMODE_BLOCK,
            BLOCK_COMPONENT: block_uuid,
            "function": function,
            "signature": signature,
        },
    )
