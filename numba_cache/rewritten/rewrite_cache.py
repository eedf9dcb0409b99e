"""Skipping graph rewriting on a hit: the rewritten graph, cached by the pre-rewrite key.

:class:`CachedRewriteFunctionMaker` is PyTensor's ``FunctionMaker`` with one step
replaced, ``prepare_fgraph`` (rewriting, then deep copies for the memory
interface), through the supported seam ``Mode.function_maker``. On a miss it
rewrites as usual and stores the result; on a hit it swaps the stored rewritten
graph into the function graph, attached to this graph's own input variables,
and hands the linker the whole-graph key stored with it (through the session's
``known_graph_kernels``, :mod:`numba_cache.session`), so neither rewriting nor
keying the rewritten graph is repeated.

The stored graph is a pickle of the outputs, and of the nodes in the order the
kernel runs them (:mod:`numba_cache.keys.order`), in which every input variable is
a *persistent id* (its position): inputs, shared variables and their values are
never stored, and unpickling wires the nodes straight to the new inputs.

Observed data (large constants) would make every new data set a new rewrite.
Rewriting a graph with data constants therefore records the questions it asks
of the data (:mod:`numba_cache.rewritten.data_reads`), and the rewritten graph is
stored with data slots instead of values, under a key that describes data by
type and shape. New data that answers the questions the same way fills the
slots and skips rewriting; the values reaching the kernel are the new data's.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import time
from typing import NamedTuple

from pytensor.compile.maker import FunctionMaker

from numba_cache import session
from numba_cache._compat import sparse_import
from numba_cache.collector import full_collections_held, older_objects_frozen
from numba_cache.codegen.sources import GraphSource, graph_kernel_name, graph_source
from numba_cache.kernels.outcomes import replay, report
from numba_cache.kernels.outcomes.uncacheable import unkeyed
from numba_cache.keys.canonical import digest
from numba_cache.keys.constants import hidden_constants
from numba_cache.rewritten import cycle_check, rewrite_failures
from numba_cache.rewritten.data_reads import DataReads, answers_for, derive, equal_pairs, watch
from numba_cache.keys.kernels import graph_kernel_key, op_calls_setting
from numba_cache.keys.key import Key
from numba_cache.keys.order import execution_order, restored_order
from numba_cache.keys.rewrites import complete_rewrites_digest, content_key_from, rewrite_key
from numba_cache.store import Entry, entry_layout
from numba_cache.store.entry_layout import graph_key_fields

#: The reason counted (``uncacheable:<reason>``) for a rewrite whose key could not be made.
UNKEYABLE_REWRITE = "unkeyable-rewrite"

class KnownGraphKernel(NamedTuple):
    """A graph's whole-graph key and generated kernel source, known before the linker runs.

    The rewrite cache generates the source anyway (a restore must reproduce it),
    so the linker takes it from here instead of generating it again.
    """

    key: Key
    generated: GraphSource
    order: list


def known_graph_kernel(fgraph, graph_key, order: list | None = None) -> KnownGraphKernel:
    """`fgraph`'s kernel source under `graph_key`, in its execution `order` (computed if None)."""
    order = execution_order(fgraph) if order is None else order
    name = graph_kernel_name(graph_key)
    return KnownGraphKernel(graph_key, graph_source(fgraph, name, hidden_constants(fgraph), order),
                            order)


class CachedRewriteFunctionMaker(FunctionMaker):
    """A FunctionMaker that loads the rewritten graph instead of rewriting, when it can."""

    def prepare_fgraph(self, inputs, outputs, additional_outputs, fgraph, mode, profile):
        from numba_cache.kernels.context import current_context

        with older_objects_frozen():
            context = current_context()
            with context.store.bookkeeping_together():
                self._prepare_fgraph(context, inputs, outputs, additional_outputs, fgraph, mode,
                                     profile)

    def _prepare_fgraph(self, context, inputs, outputs, additional_outputs, fgraph, mode,
                        profile):
        lookup = None
        if context.enabled:
            try:
                lookup = RewriteLookup(context, fgraph, inputs, outputs + additional_outputs, mode)
            except Exception as exc:  # describing a graph, mode or query never fails a compile
                report_unkeyable(context, fgraph, exc)
        with contextlib.ExitStack() as held:
            if lookup is not None and lookup.restore(held):
                return
            reads = lookup.before_rewrite() if lookup is not None else None
            # Under filters that raise, warnings are left to act as without numba_cache
            # (a rewrite they fail is then not stored, below), and none is kept.
            recorded = (contextlib.nullcontext([]) if replay.filters_raise()
                        else replay.recording())
            with (watch(reads) if reads is not None else contextlib.nullcontext(),
                  cycle_check.watched(fgraph) if context.enabled else contextlib.nullcontext(),
                  _sparse_import_deferred(context) if context.enabled
                  else contextlib.nullcontext(),
                  full_collections_held(), recorded as said,
                  rewrite_failures.watched() as failed):
                FunctionMaker.prepare_fgraph(
                    inputs, outputs, additional_outputs, fgraph, mode, profile)
            if lookup is not None and failed.first is not None:
                lookup.not_stored(failed.first)
            elif lookup is not None:
                lookup.save(reads, replay.about_the_graph(said))


def _sparse_import_deferred(context):
    """:func:`.sparse_import.deferred`, its derivation remembered in the store."""
    store, fingerprint = context.store, context.fingerprint.digest
    return sparse_import.deferred(
        known=lambda key: store.derived_code(fingerprint, key),
        remember=lambda key, body: store.record_derived_code(fingerprint, key, body))


def report_unkeyable(context, fgraph, error: Exception) -> None:
    """A graph, mode or query that cannot be keyed: rewritten as usual, counted and explained."""
    key, verdict = unkeyed("rewrite", f"rewrite of a graph of {len(fgraph.apply_nodes)} nodes", error)
    report.record(context, f"uncacheable:{UNKEYABLE_REWRITE}")
    report.lookup(context, key, f"uncacheable ({UNKEYABLE_REWRITE}: {verdict.detail})")
    report.logger.debug("rewrite not cached, its key could not be made: %r", error)


def rewrites_digest(context, mode) -> str:
    """The complete rewrite-registry digest of `mode`, remembered in the store."""
    fingerprint = context.fingerprint.digest
    return complete_rewrites_digest(
        mode.optdb,
        known=lambda partial, far: context.store.completed_registry(fingerprint, partial, far),
        remember=lambda partial, complete, far: context.store.record_completed_registry(
            fingerprint, partial, complete, far),
    )


class RewriteLookup:
    """The rewrite-cache lookup of one graph, then the save of its rewrite on a miss.

    A graph with data constants is looked up first by its *data key* (data by
    type and shape). The entry there holds the questions rewriting asked of the
    data, their answers, and a graph valid for any data giving the same answers;
    or it marks the graph data-bound. Otherwise, and for graphs without data
    constants, the *content key* (data by content) is used.
    """

    def __init__(self, context, fgraph, inputs, outputs, mode):
        self.context = context
        self.fgraph = fgraph
        registry = rewrites_digest(context, mode)  # one walk of the registry for both keys
        self._key_of = lambda hide: rewrite_key(
            fgraph, inputs, outputs, mode, context.fingerprint, registry, hide_constants=hide)
        self.originals = hidden_constants(fgraph)
        self.data_key = self._key_of(True) if self.originals else None
        self._content_key = None
        self._content_unkeyable = False
        self._data_entry_found = False

    @property
    def first_key(self):
        """The key looked up first: the data key, or the content key without data constants."""
        return self.data_key if self.data_key is not None else self.content_key

    @property
    def content_key(self):
        """The key by content; None (reported once) when the graph cannot be keyed so."""
        if self._content_key is None and not self._content_unkeyable:
            try:
                self._content_key = (self._key_of(False) if self.data_key is None
                                     else content_key_from(self.data_key, self.originals))
            except Exception as exc:  # a miss with a reason, never a failed compile
                self._content_unkeyable = True
                report_unkeyable(self.context, self.fgraph, exc)
        return self._content_key

    def restore(self, held: contextlib.ExitStack) -> bool:
        """Swap the stored rewritten graph in; True on a hit.

        On a miss, the lock of the key to be saved is entered into `held` and the
        store looked up again: one process rewrites a graph while the others wait
        for its entry, as for kernels. Counted once, hit or miss.
        """
        found, looked_up = self._find()
        if found is None and looked_up is not None:
            report.logger.debug("rewrite %s not stored: taking its lock", looked_up.short)
            held.enter_context(
                self.context.store.lock(self.context.fingerprint.digest, looked_up.digest))
            found, looked_up = self._find()  # another process may have saved it meanwhile
        if found is not None:
            report.record(self.context, "rewrite.hit")
            report.lookup(self.context, found, "hit")
            return True
        if looked_up is not None:
            report.record(self.context, "rewrite.miss")
            report.lookup(self.context, looked_up, "miss")
        return False

    def _find(self) -> tuple[Key | None, Key | None]:
        """(the key restored from, or None; the last key looked up, None if none could be)."""
        if self.data_key is not None:
            entry = self._load(self.data_key)
            self._data_entry_found = entry is not None
            if entry is None:
                return None, self.data_key
            if entry.cacheable and self._restore_for_data(entry):
                return self.data_key, self.data_key
        if self.content_key is None:
            return None, None
        entry = self._load(self.content_key)
        if entry is not None and self._restore_graph(self.content_key, entry, []):
            return self.content_key, self.content_key
        return None, self.content_key

    def _restore_for_data(self, entry) -> bool:
        try:
            data = entry_layout.decode_rewrite_data(entry.blobs[entry_layout.REWRITE_DATA_BLOB])
        except Exception as exc:  # an unusable entry is a miss, never a failed compile
            return self._discard(self.data_key, exc)
        try:
            answers = answers_for(self.originals, data["questions"], data["folds"])
            equalities = data["equalities"]
            slots = (_slot_constants(data["slots"], self.originals, data["folds"])
                     if answers == data["answers"] and equal_pairs(
                         self.originals, equalities["origins"], data["folds"])
                     == equalities["equal"] else None)
        except Exception as exc:  # this data does not fit the stored graph: rewrite it
            report.logger.debug("rewrite %s: data does not fit (%r)", self.data_key.short, exc)
            return False
        if slots is None:
            report.logger.debug("rewrite %s: this data answers its questions differently",
                                self.data_key.short)
        return slots is not None and self._restore_graph(self.data_key, entry, slots)

    def _restore_graph(self, key, entry, slots) -> bool:
        """Swap the stored graph in, if it compiles to the source the rewritten graph did.

        The check makes a restored graph that differs from the one rewriting
        produced in anything the kernel depends on (node order, wiring, which
        inputs are overwritten in place) a miss instead of a wrong kernel stored
        under the original's key.
        """
        given = list(self.fgraph.outputs)
        try:
            graph_key = Key(**graph_key_fields(entry))
            outputs, order = _unpickle_outputs(entry.blobs[entry_layout.REWRITTEN_GRAPH_BLOB],
                                               self.fgraph.inputs, slots)
            expected_source = entry_layout.decode_digest(
                entry.blobs[entry_layout.KERNEL_SOURCE_BLOB])
            said = entry_layout.decode_warnings(entry.blobs.get(entry_layout.WARNINGS_BLOB))
            _replace_outputs(self.fgraph, outputs)
            known = known_graph_kernel(self.fgraph, graph_key, restored_order(self.fgraph, order))
            restored_source = digest(known.generated.source)
        except Exception as exc:  # an unusable entry is a miss, never a failed compile
            self._put_back(given)
            return self._discard(key, exc)
        if restored_source != expected_source:
            self._put_back(given)
            return self._discard(key, ValueError(
                "the restored graph generates other kernel source than the rewritten graph"))
        session.current().known_graph_kernels[self.fgraph] = known
        replay.emit(said)  # what rewriting this graph told, told again
        return True

    def _put_back(self, outputs) -> None:
        """Give the function graph its outputs as given, to be rewritten after a failed restore."""
        if list(self.fgraph.outputs) != outputs:
            _replace_outputs(self.fgraph, outputs)

    def _load(self, key):
        return self.context.store.load(self.context.fingerprint.digest, key.digest)

    def _discard(self, key, exc) -> bool:
        report.remove_corrupt(self.context, key.digest, f"rewritten graph {key.short}, it could not be "
                              f"restored ({exc!r}); rewriting again", stacklevel=7)
        return False

    def before_rewrite(self) -> DataReads | None:
        """Key the graph as given; the data reads to watch if its data key is still free."""
        self.content_key  # noqa: B018 - keyed now: rewriting changes the graph in place
        if self.data_key is None or self._data_entry_found:
            return None
        return DataReads(self.originals)

    def not_stored(self, failure: str) -> None:
        """A rewrite failed while rewriting this graph: counted, explained, nothing stored
        (:mod:`.rewrite_failures`)."""
        reason = rewrite_failures.REWRITE_FAILED
        report.record(self.context, f"uncacheable:{reason}")
        if self.first_key is not None:
            report.lookup(self.context, self.first_key, f"uncacheable ({reason}: {failure})")
        report.logger.debug("rewritten graph not stored, a rewrite failed: %s", failure)

    def save(self, reads: DataReads | None, said: list[dict]) -> None:
        """Store the rewritten graph, and the warnings rewriting `said`: by data key when it
        is valid for other data."""
        if reads is not None:
            recipe = reads.recipe(self.fgraph)
            if not reads.bound_by:
                self._save(self.data_key, recipe, reads, said)
                return
            report.logger.debug("rewrite %s is data-bound: %s", self.data_key.short,
                                "; ".join(reads.bound_by))
            self.context.store.save(Entry.uncacheable(
                fingerprint=self.context.fingerprint.digest, key=self.data_key.digest,
                kind="rewrite", summary=self.data_key.summary,
                reason=f"data-bound: {reads.bound_by[0]}"))
        if self.content_key is not None:
            self._save(self.content_key, [], None, said)

    def _save(self, key, recipe, reads, said: list[dict]) -> None:
        hidden = hidden_constants(self.fgraph) if recipe else []
        slotted = [(constant, origin) for constant, origin in zip(hidden, recipe) if origin]
        try:
            order = execution_order(self.fgraph)
            graph_key = graph_kernel_key(self.fgraph, self.context.fingerprint, order,
                                         op_calls_setting(self.context.settings))
            known = known_graph_kernel(self.fgraph, graph_key, order)
            blobs = {
                entry_layout.REWRITTEN_GRAPH_BLOB: _pickle_outputs(
                    self.fgraph, order, [c for c, _ in slotted]),
                entry_layout.GRAPH_KEY_BLOB: entry_layout.encode_graph_key(
                    graph_key.kind, graph_key.summary, graph_key.components, graph_key.digest),
                entry_layout.KERNEL_SOURCE_BLOB: entry_layout.encode_digest(
                    digest(known.generated.source)),
            }
            if said:
                blobs[entry_layout.WARNINGS_BLOB] = entry_layout.encode_warnings(said)
            if reads is not None:
                blobs[entry_layout.REWRITE_DATA_BLOB] = entry_layout.encode_rewrite_data({
                    "questions": reads.questions(),
                    "answers": reads.answer_list(),
                    "folds": reads.folds,
                    "slots": [_describe_slot(constant, origin) for constant, origin in slotted],
                    "equalities": reads.equal_origins(recipe),
                })
        except Exception as exc:  # not storing a rewrite never fails the compile
            report.logger.debug("rewritten graph not stored: %r", exc)
            return
        session.current().known_graph_kernels[self.fgraph] = known
        self.context.store.save(Entry(
            key=key.digest,
            fingerprint=self.context.fingerprint.digest,
            kind="rewrite",
            summary=key.summary,
            components=key.components | {entry_layout.GRAPH_KERNEL_COMPONENT: graph_key.digest},
            created=time.time(),
            blobs=blobs,
        ))


def _describe_slot(constant, origin) -> dict:
    return {"position": origin.position, "steps": origin.steps, "type": constant.type,
            "writeable": bool(constant.data.flags.writeable)}


def _slot_constants(slots: list, originals: list, folds: list) -> list | None:
    """The constants standing for the data slots of a stored graph, from this graph's data.

    Each slot's data is derived from this graph's data constants by the steps
    the first rewrite took (casts, folds). None when a cast would lose values:
    then the stored graph is not valid for this data.
    """
    from pytensor.tensor.variable import TensorConstant

    constants = []
    for slot in slots:
        original = originals[slot["position"]]
        data = derive(original.data, slot["steps"], folds)
        if data is None:
            return None
        if data is original.data and data.flags.writeable == slot["writeable"]:
            constants.append(original)
            continue
        if data is original.data or (slot["writeable"] and not data.flags.writeable):
            data = data.copy()  # never change the flags of this graph's own data
        data.setflags(write=slot["writeable"])
        constants.append(TensorConstant(slot["type"], data))
    return constants


class _VariablesAsPositions(pickle.Pickler):
    """Pickles inputs and data slots as their positions, never their values."""

    def __init__(self, file, inputs, slots):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._ids = {id(variable): ("input", position) for position, variable in enumerate(inputs)}
        self._ids |= {id(constant): ("slot", position) for position, constant in enumerate(slots)}

    def persistent_id(self, obj):
        return self._ids.get(id(obj))


class _PositionsAsVariables(pickle.Unpickler):
    def __init__(self, file, inputs, slots):
        super().__init__(file)
        self._variables = {"input": inputs, "slot": slots}

    def persistent_load(self, pid):
        kind, position = pid
        if kind not in self._variables:
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self._variables[kind][position]


def _pickle_outputs(fgraph, order: list, slots: list) -> bytes:
    """`fgraph`'s outputs and its nodes in `order`, in one pickle: unpickled, the
    order lists the very nodes the outputs are computed by."""
    buffer = io.BytesIO()
    _VariablesAsPositions(buffer, fgraph.inputs, slots).dump(
        (len(fgraph.inputs), len(slots), list(fgraph.outputs), list(order)))
    return buffer.getvalue()


def _unpickle_outputs(data: bytes, inputs, slots) -> tuple[list, list]:
    """The stored outputs, wired to `inputs` and `slots`, and the stored node order."""
    n_inputs, n_slots, outputs, order = _PositionsAsVariables(
        io.BytesIO(data), inputs, slots).load()
    if (n_inputs, n_slots) != (len(inputs), len(slots)):
        raise ValueError(f"stored graph has {n_inputs} inputs and {n_slots} data slots, "
                         f"this one {len(inputs)} and {len(slots)}")
    return outputs, order


def _replace_outputs(fgraph, outputs) -> None:
    if len(outputs) != len(fgraph.outputs):
        raise ValueError(f"stored graph has {len(outputs)} outputs, this one {len(fgraph.outputs)}")
    for position, output in enumerate(outputs):
        node, index = fgraph.get_output_client(position)
        fgraph.change_node_input(node, index, output, reason="numba_cache", import_missing=False)
