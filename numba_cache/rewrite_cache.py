"""Skipping graph rewriting on a hit: the rewritten graph, cached by the pre-rewrite key.

:class:`CachedRewriteFunctionMaker` is PyTensor's ``FunctionMaker`` with one step
replaced, ``prepare_fgraph`` (rewriting, then deep copies for the memory
interface), through the supported seam ``Mode.function_maker``. On a miss it
rewrites as usual and stores the result; on a hit it swaps the stored rewritten
graph into the function graph, attached to this graph's own input variables,
and hands the linker the whole-graph key stored with it, so neither rewriting
nor keying the rewritten graph is repeated.

The stored graph is a pickle of the outputs in which every input variable is a
*persistent id* (its position): inputs, shared variables and their values are
never stored, and unpickling wires the nodes straight to the new inputs.
"""

from __future__ import annotations

import io
import pickle
import time
import warnings

from pytensor.compile.maker import FunctionMaker

from numba_cache.keys.canonical import UnkeyableValue
from numba_cache.keys.kernels import graph_kernel_key
from numba_cache.keys.rewrites import complete_rewrites_digest, rewrite_key
from numba_cache.kernels import report
from numba_cache.store import Entry, StoreWarning

#: Attribute of a FunctionGraph carrying its whole-graph key, set on a rewrite hit.
GRAPH_KEY_ATTRIBUTE = "numba_cache_graph_key"


class CachedRewriteFunctionMaker(FunctionMaker):
    """A FunctionMaker that loads the rewritten graph instead of rewriting, when it can."""

    def prepare_fgraph(self, inputs, outputs, additional_outputs, fgraph, mode, profile):
        from numba_cache.kernels.context import current_context

        context = current_context()
        key = None
        if context.enabled:
            try:
                key = rewrite_key(fgraph, inputs, outputs + additional_outputs, mode,
                                  context.fingerprint, rewrites_digest(context, mode))
            except UnkeyableValue as exc:
                report.logger.debug("graph not keyable before rewriting: %s", exc)
        if key is not None and _restore(context, key, fgraph):
            return
        FunctionMaker.prepare_fgraph(inputs, outputs, additional_outputs, fgraph, mode, profile)
        if key is not None:
            _save(context, key, fgraph)


def rewrites_digest(context, mode) -> str:
    """The complete rewrite-registry digest of `mode`, remembered in the store."""
    fingerprint = context.fingerprint.digest
    return complete_rewrites_digest(
        mode.optdb,
        known=lambda partial: context.store.completed_registry(fingerprint, partial),
        remember=lambda partial, complete: context.store.record_completed_registry(
            fingerprint, partial, complete),
    )


def _restore(context, key, fgraph) -> bool:
    fingerprint = context.fingerprint.digest
    entry = context.store.load(fingerprint, key.digest)
    if entry is None or not entry.cacheable:
        report.record(context, "rewrite.miss")
        report.lookup(context, key, "miss")
        return False
    try:
        outputs = _unpickle_outputs(entry.blobs["graph"], fgraph.inputs)
        graph_key = pickle.loads(entry.blobs["graph_key"])
        _replace_outputs(fgraph, outputs)
    except Exception as exc:  # an unusable entry is a miss, never a failed compile
        warnings.warn(
            f"numba_cache: removing rewritten graph {key.short}, it could not be restored "
            f"({exc!r}); rewriting again",
            StoreWarning,
            stacklevel=4,
        )
        report.record(context, "corrupt")
        context.store.remove(fingerprint, key.digest)
        return False
    setattr(fgraph, GRAPH_KEY_ATTRIBUTE, graph_key)
    report.record(context, "rewrite.hit")
    report.lookup(context, key, "hit")
    return True


def _save(context, key, fgraph) -> None:
    try:
        graph_key = graph_kernel_key(fgraph, context.fingerprint)
        blobs = {"graph": _pickle_outputs(fgraph), "graph_key": pickle.dumps(graph_key)}
    except (UnkeyableValue, pickle.PicklingError, TypeError, AttributeError) as exc:
        report.logger.debug("rewritten graph not stored: %r", exc)
        return
    setattr(fgraph, GRAPH_KEY_ATTRIBUTE, graph_key)
    entry = Entry(
        key=key.digest,
        fingerprint=context.fingerprint.digest,
        kind="rewrite",
        summary=key.summary,
        components=key.components | {"graph_kernel": graph_key.digest},
        created=time.time(),
        blobs=blobs,
    )
    context.store.save(entry)


class _InputsAsPositions(pickle.Pickler):
    def __init__(self, file, inputs):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._positions = {id(variable): position for position, variable in enumerate(inputs)}

    def persistent_id(self, obj):
        position = self._positions.get(id(obj))
        return None if position is None else ("input", position)


class _PositionsAsInputs(pickle.Unpickler):
    def __init__(self, file, inputs):
        super().__init__(file)
        self._inputs = inputs

    def persistent_load(self, pid):
        kind, position = pid
        if kind != "input":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self._inputs[position]


def _pickle_outputs(fgraph) -> bytes:
    buffer = io.BytesIO()
    _InputsAsPositions(buffer, fgraph.inputs).dump((len(fgraph.inputs), list(fgraph.outputs)))
    return buffer.getvalue()


def _unpickle_outputs(data: bytes, inputs) -> list:
    n_inputs, outputs = _PositionsAsInputs(io.BytesIO(data), inputs).load()
    if n_inputs != len(inputs):
        raise ValueError(f"stored graph has {n_inputs} inputs, this one {len(inputs)}")
    return outputs


def _replace_outputs(fgraph, outputs) -> None:
    if len(outputs) != len(fgraph.outputs):
        raise ValueError(f"stored graph has {len(outputs)} outputs, this one {len(fgraph.outputs)}")
    for position, output in enumerate(outputs):
        node, index = fgraph.get_output_client(position)
        fgraph.change_node_input(node, index, output, reason="numba_cache", import_missing=False)
