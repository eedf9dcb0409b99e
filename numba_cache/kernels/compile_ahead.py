"""Op kernels compiled ahead, by a forked helper process, while a graph is typed.

numba types a graph kernel's body in the graph's order, compiling each op kernel
the first time it meets it (:mod:`.graph_body`): on a cold compile, one op kernel
after another, on one core. When the typing meets the first op kernel the store
does not hold, this process forks a helper. The helper compiles the op kernels
from the graph's end backwards, for the numba types it predicts their arguments
have, and stores them; the typing, going forwards, loads what the helper stored
(the store's entry lock makes it wait for a kernel the helper is compiling), and
the two meet in the middle. The helper stops there, or is stopped when the typing
ends (SIGKILL: the store survives a writer killed at any point).

The helper changes no result: what the typing loads is the kernel it would have
compiled, for the same signature, from the same process image, as a later
process would load it. A prediction can be wrong (how numba lays out a view, the
result of a kernel that chooses its layout): the typing then compiles that
kernel itself, and the helper's compile is an unused overload in the entry.

A helper is forked only from a process running one Python thread (another
thread could hold a lock the child would wait for forever), never from a helper,
and only under the ``compile_ahead`` setting. What the helper compiles is counted
in this process, as the misses they are (``op.miss``) and as ``op.compiled_ahead``.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import mmap
import os
import signal
import struct
import sys
import threading
import warnings
from collections.abc import Callable

#: Where the typing is (the index of the step it serves), shared with the helper.
_POSITION = struct.Struct("q")
#: prctl's option naming the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1
#: A threshold of the oldest generation no count reaches.
_NO_FULL_COLLECTION = 2**31 - 1

_active: list[CompileAhead] = []  # the helper of the graph being typed, if any
_in_helper = False
_announce: int | None = None  # in a helper: where it tells what it stores
_announced: set = set()  # (key digest, signature text) the helper of this typing stored
_loaded: set = set()  # those of them the typing loaded


class CompileAhead:
    """Typing help for one graph body: :meth:`before_step` before each step is served,
    :meth:`finish` when the typing ends.

    `steps` are the body's steps; `outputs` maps a step's kernel to the PyTensor
    variables it computes; ``serve(kernel, signature)`` compiles (or loads) a step's
    op kernel, as the typing does; ``key_of(kernel)`` is the key digest of a step's
    op kernel when it is stored, else None; ``stored(digest)`` tells whether the
    store holds it; ``record(counter, n)`` counts a helper started
    (``compiled_ahead:helper``), each op kernel it stored that the typing did not
    load (``compiled_ahead:unused``), and each value of the graph whose type would
    have been predicted wrongly (``compiled_ahead:mispredicted``, checked when a
    helper ran).
    """

    def __init__(self, steps: list, outputs: dict, serve: Callable, key_of: Callable,
                 stored: Callable, record: Callable):
        self._steps, self._outputs = steps, outputs
        self._serve, self._key_of, self._stored, self._record = serve, key_of, stored, record
        self._tried = False
        self._found_stored: set = set()
        self._pid: int | None = None
        self._position: mmap.mmap | None = None
        self._announcements: int | None = None
        self._pending = b""
        self._thresholds: tuple | None = None

    def before_step(self, index: int, value_types: dict) -> None:
        """The typing is about to serve step `index`; `value_types` holds the numba type of
        every value typed so far."""
        if self._pid is not None:
            _POSITION.pack_into(self._position, 0, index)
            self.read_announcements()
        elif not self._tried and self._will_compile(self._steps[index].kernel):
            self._tried = True
            with contextlib.suppress(Exception):  # no helper then: the typing goes on alone
                self._start(index, value_types)

    def finish(self, value_types: dict) -> None:
        """The typing has ended, having typed `value_types`: count the values whose type
        was mispredicted, stop the helper, and count what it stored in vain."""
        if self._pid is None:
            return
        self._resume_full_collections()
        with contextlib.suppress(Exception):  # a diagnostic: it must not fail the compile
            wrong = mispredicted(self._steps, self._outputs, value_types)
            if wrong:
                self._record("compiled_ahead:mispredicted", len(wrong))
        self.read_announcements()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)
        os.close(self._announcements)
        self._position.close()
        self._pid = None
        _active.remove(self)
        unused = len(_announced - _loaded)
        if unused:
            self._record("compiled_ahead:unused", unused)
        _announced.clear()
        _loaded.clear()

    def read_announcements(self) -> None:
        """Note the kernels the helper has announced (:func:`compiled_ahead`)."""
        while True:
            try:
                data = os.read(self._announcements, 65536)
            except BlockingIOError:
                return
            if not data:
                return
            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                digest, _, signature = line.decode().partition(" ")
                _announced.add((digest, signature))

    def _will_compile(self, kernel: str) -> bool:
        """Whether a step's op kernel is stored by key, not yet in the store. A kernel
        found stored is not asked about again: a graph of stored ops (a new model) has
        far more steps than kernels."""
        digest = self._key_of(kernel)
        if digest is None or digest in self._found_stored:
            return False
        if self._stored(digest):
            self._found_stored.add(digest)
            return False
        return True

    def _start(self, index: int, value_types: dict) -> None:
        if (_in_helper or _active or not hasattr(os, "fork") or threading.active_count() > 1
                or len(self._steps) - index < 2):
            return
        position = mmap.mmap(-1, _POSITION.size)
        _POSITION.pack_into(position, 0, index)
        read_end, write_end = os.pipe()
        parent = os.getpid()
        with warnings.catch_warnings():
            # Python warns of a fork from a process with other OS threads. Those here are
            # native pools (BLAS) that take no lock of ours; a Python thread stops us above.
            warnings.simplefilter("ignore", DeprecationWarning)
            self._hold_full_collections()
            try:
                pid = os.fork()
            except OSError:
                pid = None
        if pid == 0:
            os.close(read_end)
            try:
                self._help(index, dict(value_types), position, write_end, parent)
            finally:
                os._exit(0)
        os.close(write_end)
        if pid is None:
            self._resume_full_collections()
            os.close(read_end)
            position.close()
            return
        os.set_blocking(read_end, False)
        self._pid, self._position, self._announcements = pid, position, read_end
        _active.append(self)
        self._record("compiled_ahead:helper", 1)

    def _hold_full_collections(self) -> None:
        """Keep this process's garbage collector off the objects the helper shares.

        The helper shares this process's memory until either writes a page. A full
        collection writes into every object it scans, so that every page of objects
        would be copied while the helper lives (40 MiB on the large benchmark model, a
        third of the helper's memory). Until the helper is gone, only the young
        generations are collected: the objects made since, in pages of this process's
        own. (``gc.freeze`` would do as well, but ``gc.unfreeze`` thaws every frozen
        object, some of them not ours to thaw.)
        """
        self._thresholds = gc.get_threshold()
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, _NO_FULL_COLLECTION)

    def _resume_full_collections(self) -> None:
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def _help(self, index: int, value_types: dict, position: mmap.mmap, announce: int,
              parent: int) -> None:
        """The helper's work: the steps after `index`, from the last, until the typing
        reaches them, or the process it helps (`parent`) is gone."""
        global _in_helper, _announce
        _in_helper, _announce = True, announce
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _die_with_parent()
        # Nothing of the helper's reaches the user: the process it helps tells what its
        # own typing tells. (A stream object may belong to a thread of the parent, as
        # a notebook's does: the helper writes to none.)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the helper's own)
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)
        from numba_cache.kernels import report

        report.count_in_store(False)  # the typing counts what the helper compiles
        predicted = predict(self._steps, self._outputs, value_types, index)
        for first, kernel, signature in reversed(self._work(index, predicted)):
            if first <= _POSITION.unpack_from(position, 0)[0] or os.getppid() != parent:
                return
            if self._will_compile(kernel):
                with contextlib.suppress(Exception):  # the typing compiles what failed here
                    self._serve(kernel, signature)

    def _work(self, index: int, predicted: dict) -> list:
        """``(step index, kernel, signature)`` of each stored op kernel and predicted
        signature the steps after `index` call, at the step that first calls it (where
        the typing will need it)."""
        work: dict = {}
        for later in range(index + 1, len(self._steps)):
            step = self._steps[later]
            digest = self._key_of(step.kernel)
            signature = tuple(predicted.get(name) for name in step.inputs)
            if digest is not None and None not in signature:
                work.setdefault((digest, signature), (later, step.kernel, signature))
        return list(work.values())


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), so that a helper
    whose process was killed does not compile on alone, holding an entry's lock."""
    with contextlib.suppress(Exception):  # elsewhere: the helper checks between kernels
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def note_save(key_digest: str, signature) -> None:
    """In a helper, tell the process it helps that it stores this op kernel (before the
    entry can be read there: a load of it is then known to be a miss of this compile)."""
    if _announce is not None:
        os.write(_announce, f"{key_digest} {signature_text(signature)}\n".encode())


def signature_text(signature) -> str:
    """A short name of a numba signature (an announcement's line stays short)."""
    return hashlib.blake2b(repr(tuple(signature)).encode(), digest_size=8).hexdigest()


def compiled_ahead(key_digest: str, signature) -> bool:
    """Whether the op kernel of `key_digest` for `signature` was compiled and stored by the
    helper of the graph being typed (a load of it is then a miss of this compile)."""
    if not _active:
        return False
    for helper in _active:
        helper.read_announcements()
    address = (key_digest, signature_text(signature))
    if address not in _announced:
        return False
    _loaded.add(address)
    return True


def predict(steps: list, outputs: dict, value_types: dict, index: int) -> dict:
    """The numba types of the values of `steps` from `index` on, as predicted from their
    PyTensor types, with `value_types` (those typed so far); a value that cannot be
    predicted is left out."""
    predicted = dict(value_types)
    for step in steps[index:]:
        variables = outputs[step.kernel]
        node = variables[0].owner if variables else None
        for position, (name, variable) in enumerate(zip(step.outputs, variables, strict=True)):
            if name not in predicted:
                type_ = _predicted_type(node, position, variable, step, predicted)
                if type_ is not None:
                    predicted[name] = type_
    return predicted


def mispredicted(steps: list, outputs: dict, value_types: dict) -> list:
    """The names of the values of `steps` whose type, predicted from the types their step
    read, is not the type `value_types` gives them (what the typing found)."""
    wrong = []
    for step in steps:
        variables = outputs[step.kernel]
        for position, (name, variable) in enumerate(zip(step.outputs, variables, strict=True)):
            if name in value_types:
                type_ = _predicted_type(variable.owner, position, variable, step, value_types)
                if type_ is not None and type_ != value_types[name]:
                    wrong.append(name)
    return wrong


def _predicted_type(node, position: int, variable, step, predicted: dict):
    """numba's type of `variable`, output `position` of `node`: an output written into an
    input (``destroy_map``) has that input's type, unless it is read-only (then the op
    copies it); a new array has the layout :func:`_new_layout` predicts, a view
    (``view_map``) the one :func:`_view_layout` predicts."""
    import numba
    import numpy as np
    from numba.core import types
    from pytensor.scalar import ScalarType
    from pytensor.tensor import TensorType

    if isinstance(variable.type, ScalarType):
        return numba.from_dtype(np.dtype(variable.type.dtype))
    if not isinstance(variable.type, TensorType):
        return None
    dtype = numba.from_dtype(variable.type.numpy_dtype)
    op = node.op
    if _is_scan(op):  # slices of its own buffers, whatever its maps say
        return types.Array(dtype, variable.type.ndim, "A" if variable.type.ndim else "C")
    destroyed = getattr(op, "destroy_map", {}).get(position)
    if destroyed:
        written = predicted.get(step.inputs[destroyed[0]])
        if not isinstance(written, types.Array) or written.mutable:
            return written
    viewed = getattr(op, "view_map", {}).get(position)
    if not viewed:
        return types.Array(dtype, variable.type.ndim, _new_layout(op, position))
    source = predicted.get(step.inputs[viewed[0]])
    if not isinstance(source, types.Array):
        return None
    return types.Array(dtype, variable.type.ndim, _view_layout(op, source),
                       readonly=not source.mutable)


def _is_scan(op) -> bool:
    scan = sys.modules.get("pytensor.scan.op")  # not imported by graphs without one
    return scan is not None and isinstance(op, scan.Scan)


def _new_layout(op, position: int) -> str:
    """The layout of a new array: C, but for a fused reduction over other than the
    leading axes (its result is indexed out of the array kept with the reduced axes)."""
    reduced = getattr(op, "reduced_outputs", None)
    spec = reduced[position] if reduced and position < len(reduced) else None
    if spec is not None and tuple(spec[1]) != tuple(range(len(spec[1]))):
        return "A"
    return "C"


def _view_layout(op, source) -> str:
    """The layout of PyTensor's numba view of a `source` array (as seen of its kernels):
    a transpose swaps C and F; adding or dropping broadcastable axes keeps the layout
    (not to or from a 0-d array); a leading slice or integer index keeps C; a
    diagonal is a copy; any other view is of any layout."""
    from pytensor.tensor.basic import ExtractDiag
    from pytensor.tensor.elemwise import DimShuffle
    from pytensor.tensor.subtensor import Subtensor

    if isinstance(op, ExtractDiag):
        return "C"
    if isinstance(op, DimShuffle) and source.ndim > 0 and op.new_order:
        kept = [axis for axis in op.new_order if axis != "x"]
        if kept == sorted(kept):
            return source.layout
        if tuple(op.new_order) == (1, 0) and source.layout in "CF":
            return {"C": "F", "F": "C"}[source.layout]
    if isinstance(op, Subtensor) and source.layout == "C" and _leading_index(op.idx_list):
        return "C"
    return "A"


def _leading_index(entries) -> bool:
    """Whether Subtensor entries are integers only, or one slice without a step."""
    if len(entries) == 1 and isinstance(entries[0], slice):
        return entries[0].step is None
    return not any(isinstance(entry, slice) for entry in entries)
