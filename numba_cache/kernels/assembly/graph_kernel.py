"""The whole-graph kernel: level 2 of the cache.

The graph's key and generated source are computed from the graph alone, without
converting any op. Only when the store misses does ``prepare`` convert each node
into an op kernel (level 3) and bind it, with the graph's constants, into
the generated function's globals, right before numba compiles.

The graph kernel calls each stored op kernel by its symbol
(:mod:`.symbol_calls`), so compiling it compiles only the code between the
calls, emitted by one intrinsic (:mod:`.graph_body`); its entry lists those op
kernels (:mod:`.op_links`). Op kernels that
are not stored (uncacheable, or a disabled cache) are linked in, as numba links
them, and so is every op kernel under the ``link_op_kernels`` setting. A graph
kernel that only calls is optimised lightly (:mod:`.glue`). Under the
``link_in_background`` setting, a helper builds it again with its op kernels
linked in, for later processes (:mod:`.linked_build`).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from numba_cache._compat import numba_internals
from numba_cache.codegen.lifted_constants import lifted
from numba_cache.codegen.module import compile_function
from numba_cache.codegen.sources import GRAPH_BODY, graph_kernel_name, graph_source
from numba_cache.kernels.assembly import op_links
from numba_cache.kernels.outcomes import replay, report
from numba_cache.kernels.protocol.graph_cache import GraphKernelCache
from numba_cache.kernels.helpers.compile_ahead import CompileAhead
from numba_cache.kernels.assembly import remembered_op_keys
from numba_cache.kernels.assembly.conversion import op_kernel, pytensor_key_of
from numba_cache.kernels.protocol.dispatcher import cached_dispatcher
from numba_cache.kernels.assembly.glue import GlueCompiler
from numba_cache.kernels.assembly.graph_body import graph_body, types_of_arguments
from numba_cache.kernels.helpers.linked_build import LinkedBuild
from numba_cache.kernels.outcomes.uncacheable import Uncacheable, unkeyed
from numba_cache.keys.constants import embedded_value, hidden_constants, hidden_value
from numba_cache.keys.graph import graph_summary
from numba_cache.keys.kernels import (
    BY_SYMBOL,
    LINKED,
    graph_code_key,
    graph_kernel_key,
    lengths_free_key,
    op_calls_setting,
)
from numba_cache.keys.order import execution_order
from numba_cache.store import entry_layout


class GraphKernel(NamedTuple):
    """A graph's numba dispatcher, and the values of its trailing hidden arguments: its
    hidden constants, then its packs of lifted constants."""

    dispatcher: object
    hidden_values: list


def graph_kernel(fgraph, context, storage_map: dict | None = None, known=None,
                 order: list | None = None) -> GraphKernel:
    """The kernel evaluating `fgraph`, loaded from the store when possible.

    `known` is the graph's :class:`numba_cache.rewritten.rewrite_cache.KnownGraphKernel`
    when the rewrite cache already computed its key and generated its source. The
    nodes run in `order` (:func:`.order.execution_order` if None), or `known`'s.
    """
    from pytensor import config

    verdict = None
    op_calls = op_calls_setting(context.settings)
    if known is not None and known.key.components.get("op_calls") == op_calls:
        key, generated, order = known.key, known.generated, known.order
    else:
        order = execution_order(fgraph) if order is None else order
        try:
            key = graph_kernel_key(fgraph, context.fingerprint, order, op_calls)
        except Exception as exc:  # keying never fails a compile: the kernel is not persisted
            key, verdict = unkeyed("graph", graph_summary(fgraph), exc)
        generated = graph_source(fgraph, graph_kernel_name(key), hidden_constants(fgraph), order)
    _register_argument_types(fgraph)
    name = generated.function_name
    function = compile_function(generated.source, name, context.source_label(key, verdict))
    storage_map = {} if storage_map is None else storage_map
    called_by_symbol: list = []
    remembering = _may_remember(context, op_calls, verdict)
    lengths_free: list = []  # its lengths-free key, once made

    def lengths_free_key_of_graph():
        if not lengths_free:
            lengths_free.append(lengths_free_key(key, fgraph, order))
        return lengths_free[0]

    def prepare() -> Uncacheable | None:
        from pytensor.link.numba.dispatch.basic import numba_typify

        namespace = function.__globals__
        for global_name, constant in generated.constants.items():
            namespace[global_name] = embedded_value(
                numba_typify(constant.data, variable=constant))
        uncacheable_ops = []
        ofg_memo: dict = {}
        converted: dict = {}
        servers: dict = {}  # op kernel dispatcher id -> its serve function
        kernel_servers: dict = {}  # global name of a step's kernel -> its serve function
        kernel_nodes: dict = {}  # global name of a step's kernel -> the node it computes
        kernel_keys: dict = {}  # global name of a step's kernel -> its key digest, if stored
        kernel_caches: dict = {}  # the same -> its op kernel cache
        stored_kernels: dict = {}  # the same -> its node, its key, PyTensor's key of its node
        steps = []
        for step in generated.steps:
            node, step, as_written = _computed(generated.kernels[step.kernel], step)
            if not as_written:
                uncacheable_ops.append(f"{node.op} (its constants could not be lifted)")
            dispatcher, op_verdict = op_kernel(node, context, storage_map, ofg_memo, converted)
            if id(dispatcher) not in servers:
                servers[id(dispatcher)] = _server(dispatcher, context, op_calls, called_by_symbol)
            kernel_servers[step.kernel] = servers[id(dispatcher)]
            kernel_nodes[step.kernel] = node
            op_cache = numba_internals.dispatcher_cache(dispatcher)
            if op_verdict is None and op_cache.verdict is None:
                kernel_keys[step.kernel] = op_cache.key.digest
                kernel_caches[step.kernel] = op_cache
                stored_kernels[step.kernel] = (node, op_cache.key,
                                               op_cache.key.components["pytensor_key"])
            steps.append(step)
            if op_verdict is not None:
                uncacheable_ops.append(f"{node.op} ({op_verdict.reason})")
        embedded = {name: namespace[name] for name in generated.embedded}
        lifted = {name: (pack.name, position, generated.lifted[name].data)
                  for pack in generated.packs for position, name in enumerate(pack.members)}

        def serve(kernel, signature):
            return kernel_servers[kernel](signature)

        ahead = _compile_ahead(context, steps, kernel_nodes, kernel_keys, kernel_caches, serve)
        namespace[GRAPH_BODY] = graph_body(
            generated.arguments, embedded, steps, generated.returned, serve, lifted, ahead,
            whole=op_calls == LINKED)
        if ahead is not None:  # started before numba's compile of the function, not in it
            def begin_ahead(sig):
                try:
                    value_types = types_of_arguments(sig, generated.arguments, namespace,
                                                     embedded, lifted)
                except Exception:  # a prediction only: the typing begins it then
                    return
                ahead.begin(value_types)

            cache.compiles_with(begin_ahead, lambda: ahead.finish({}))
        if uncacheable_ops:
            return Uncacheable(
                "contains-uncacheable",
                "it links uncacheable op kernels: " + ", ".join(uncacheable_ops[:5]),
            )
        code_key = _code_key(key, generated, op_calls, steps, kernel_keys)
        cache.also_by_code(code_key)
        if code_key is not None and remembering and not context.store.readonly:
            try:
                remembered_op_keys.remember(
                    context, lengths_free_key_of_graph(), steps, stored_kernels,
                    lambda node: pytensor_key_of(node, context))
            except Exception as exc:  # it only saves later conversions: never fail a compile
                report.logger.debug("graph %s: op kernel keys not remembered: %r", key.short, exc)
        return None

    def found_by_remembered_op_keys():
        """The stored graph kernel of this graph's code, its op kernel keys remembered, or None."""
        try:
            code_key = remembered_op_keys.remembered_code_key(
                context, lengths_free_key_of_graph(), key, generated)
        except Exception as exc:  # keying never fails a compile: the ops are converted
            report.logger.debug("graph %s: no remembered op kernel keys: %r", key.short, exc)
            return None
        return None if code_key is None else cache.found_by_code(code_key)

    linked = None
    if context.settings.link_in_background and op_calls == BY_SYMBOL and verdict is None:
        linked = LinkedBuild(context, fgraph, order, key)
    cache = GraphKernelCache(context, key, generated.source, prepare=prepare, verdict=verdict,
                             op_calls=called_by_symbol, function_name=name, linked=linked)
    dispatcher = cached_dispatcher(
        function, cache, called_from_python=True, fastmath=config.numba__fastmath,
        pipeline_class=GlueCompiler,
    )
    _tell_what_conversion_tells(cache, found_by_remembered_op_keys if remembering else None)
    return GraphKernel(dispatcher, [*(hidden_value(constant) for constant in generated.hidden),
                                    *generated.pack_values()])


def _computed(kernel_node, step):
    """The node a step's op kernel computes, the step calling it, and whether as the
    graph's source says.

    That node is the graph's, or the one taking its `trailing` constants
    (:mod:`numba_cache.codegen.lifted_constants`). If PyTensor will not build that
    one, the step calls the graph's node without them: the graph then runs other
    code than its source says, and must not be stored.
    """
    node = kernel_node.node
    if not kernel_node.trailing:
        return node, step, True
    computed = lifted(node, kernel_node.trailing)
    if computed is None:
        return node, step._replace(inputs=step.inputs[:len(node.inputs)]), False
    return computed, step, True


def _code_key(key, generated, op_calls: str, steps: list, kernel_keys: dict):
    """The graph kernel's key by its code (:func:`graph_code_key`), or None: for a graph
    that calls stored op kernels only, by symbol, as its source says."""
    if op_calls != BY_SYMBOL or steps != generated.steps:
        return None
    if any(step.kernel not in kernel_keys for step in steps):
        return None
    try:
        return graph_code_key(key, generated, [kernel_keys[step.kernel] for step in steps])
    except Exception as exc:  # keying never fails a compile: the graph key alone serves it
        report.logger.debug("graph %s has no code key: %r", key.short, exc)
        return None


def _server(dispatcher, context, op_calls: str, called: list):
    """How the graph calls the op kernel `dispatcher`, per numba signature of its arguments:
    the compile result, and whether by symbol (if it is stored, under :data:`BY_SYMBOL`).

    Serving a signature compiles (or loads) the kernel for it. The code called
    is the one serving this process for that op kernel (:func:`.op_links.compiled`):
    the one loaded for a stored graph kernel, even when the collision detector
    compiled it again to compare. Each op kernel called by symbol is added to
    `called` as ``(key digest, signature, symbol)``, what the graph's entry must list.
    """
    cache = numba_internals.dispatcher_cache(dispatcher)
    served: dict = {}

    def serve(signature: tuple) -> tuple:
        if signature not in served:
            with numba_internals.full_refresh():  # numba's whole registries for op kernels
                dispatcher.compile(signature)
            compiled = dispatcher.overloads[signature]
            if op_calls != BY_SYMBOL or not context.enabled or cache.verdict is not None:
                served[signature] = compiled, False
            else:
                compiled = op_links.compiled(cache.key.digest, signature) or compiled
                called.append((cache.key.digest, signature, compiled.fndesc.mangled_name))
                served[signature] = compiled, True
        return served[signature]

    return serve


def _compile_ahead(context, steps: list, nodes: dict, keys: dict, caches: dict,
                   serve) -> CompileAhead | None:
    """A helper compiling the graph's op kernels ahead of its typing, under the setting
    (:mod:`.compile_ahead`), when this process may write the store."""
    if not (context.settings.compile_ahead and context.enabled and not context.store.readonly):
        return None
    return CompileAhead(steps, {kernel: node.outputs for kernel, node in nodes.items()}, serve,
                        keys.get, lambda kernel, signature: caches[kernel].holds(signature),
                        lambda counter, n: report.record(context, counter, n), context.settings)


def _may_remember(context, op_calls: str, verdict) -> bool:
    """Whether a graph's op kernel keys may be remembered, and a graph served by them
    (:mod:`.remembered_op_keys`): a keyed graph calling stored op kernels by symbol,
    and no hit compiled again to compare (the collision detector converts)."""
    return (context.enabled and op_calls == BY_SYMBOL and verdict is None
            and not context.settings.verify_hits)


def _tell_what_conversion_tells(cache: GraphKernelCache, remembered) -> None:
    """Warn or raise now, inside ``pytensor.function()``, as PyTensor's ``NUMBA`` does.

    On a miss the graph is converted now (numba still compiles at the first
    call, as with ``NUMBA``), so its warnings and conversion errors reach the
    user here; on a hit, the stored warnings of that conversion are told again
    (:mod:`.replay`) and nothing is converted: a hit of its own key, or of a graph
    of its code found by ``remembered()`` (:mod:`.remembered_op_keys`), if given.
    """
    entry = cache.prefetch()
    if entry is None and remembered is not None:
        entry = remembered()
    if entry is not None and entry.cacheable:
        if said := entry_layout.decode_warnings(entry.blobs.get(entry_layout.WARNINGS_BLOB)):
            replay.emit(said)
    else:
        cache.prepare_now()


def _register_argument_types(fgraph) -> None:
    """Teach numba the sparse types of the graph's inputs and outputs.

    numba types the arguments of a call before it asks the cache, and it knows
    scipy's CSR and CSC matrices only once PyTensor's sparse dispatch has
    registered them (typeof, unbox, box); a hit imports no dispatch by itself.
    """
    sparse_types = sys.modules.get("pytensor.sparse.type")
    if sparse_types is None:  # no sparse variable exists yet in this process
        return
    if any(isinstance(variable.type, sparse_types.SparseTensorType)
           for variable in [*fgraph.inputs, *fgraph.outputs]):
        import pytensor.link.numba.dispatch.sparse  # noqa: F401
