"""Op kernels compiled ahead, by a helper process, while a graph is typed.

numba types a graph kernel's body in the graph's order, compiling each op kernel
the first time it meets it (:mod:`.graph_body`): on a cold compile, one op kernel
after another, on one core. When the graph function's lookup misses, before numba
compiles it, this process predicts the numba types of the graph's values and, if the
store lacks an op kernel for the types predicted (by key, or for those types),
starts a helper; the typing meanwhile loads the stored kernels before it. Otherwise
the helper is started when the typing meets an op kernel to compile (a
misprediction). The helper compiles the op kernels from the graph's end backwards,
for the numba types it predicts their arguments have, and stores them; the typing,
going forwards, loads what the helper stored (the store's entry lock makes it wait
for a kernel the helper is compiling), and the two meet in the middle. The helper
stops there, or is stopped when the typing ends (SIGKILL: the store survives a
writer killed at any point).

The helper changes no result: what the typing loads is the kernel it would have
compiled, for the same signature, as a later process would load it. A prediction
can be wrong (how numba lays out a view, the result of a kernel that chooses its
layout): the typing then compiles that kernel itself, and the helper's compile is
an unused overload in the entry.

The helper is forked from a process running one Python thread; beside other
threads (one could hold a lock the child would wait for forever) it is spawned,
a new interpreter (:mod:`.spawned_helper`). Never from a helper, and only under
the ``compile_ahead`` setting. What the helper compiles is counted
in this process, as the misses they are (``op.miss``) and as ``op.compiled_ahead``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable

from numba_cache import session
from numba_cache._compat import numba_internals
from numba_cache.kernels.helpers import interpreter
from numba_cache.kernels.assembly.predicted_types import mispredicted, predict

#: Where the typing is (the index of the step it serves), shared with the helper.
POSITION = struct.Struct("q")
#: prctl's option naming the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1
#: A spawned helper's program: the import path, then :func:`.spawned_helper.main`.
#: A threshold of the oldest generation no count reaches.
_NO_FULL_COLLECTION = 2**31 - 1

class CompileAhead:
    """Typing help for one graph body: :meth:`before_step` before each step is served,
    :meth:`finish` when the typing ends.

    `steps` are the body's steps; `outputs` maps a step's kernel to the PyTensor
    variables it computes; ``serve(kernel, signature)`` compiles (or loads) a step's
    op kernel, as the typing does; ``key_of(kernel)`` is the key digest of a step's
    op kernel when it is stored, else None; ``stored(kernel, signature)`` tells whether
    serving a step's kernel for that signature will load it (from this process or the
    store), not compile it; ``record(counter, n)`` counts a helper started
    (``compiled_ahead:helper``; ``compiled_ahead:spawned`` too if spawned), each op
    kernel it stored that the typing did not load (``compiled_ahead:unused``), and
    each value of the graph whose type would have been predicted wrongly
    (``compiled_ahead:mispredicted``, checked when a helper ran); `settings` are
    those a spawned helper adopts.
    """

    def __init__(self, steps: list, outputs: dict, serve: Callable, key_of: Callable,
                 stored: Callable, record: Callable, settings):
        self._steps, self._outputs = steps, outputs
        self._serve, self._key_of, self._stored, self._record = serve, key_of, stored, record
        self._settings = settings
        self._begun = self._tried = False
        self._found_stored: set = set()
        self._stop: Callable | None = None  # kills and reaps the helper, once one runs
        self._position: mmap.mmap | None = None
        self._position_file = None
        self._announcements: int | None = None
        self._pending = b""
        self._thresholds: tuple | None = None

    def before_step(self, index: int, value_types: dict) -> None:
        """The typing is about to serve step `index`; `value_types` holds the numba type of
        every value typed so far."""
        if index == 0:
            self.begin(value_types)
        if self._stop is not None:
            POSITION.pack_into(self._position, 0, index)
            self.read_announcements()
            return
        if self._tried:
            return
        if self._will_compile(self._steps[index].kernel,
                              tuple(value_types[name] for name in self._steps[index].inputs)):
            self._tried = True
            with contextlib.suppress(Exception):  # no helper then: the typing goes on alone
                self._start(index, predict(self._steps, self._outputs, value_types, index))

    def begin(self, value_types: dict) -> None:
        """The typing is about to begin, `value_types` holding the numba types of what the
        steps read first (the body's arguments and constants): start the helper if an op
        kernel will be compiled for the types predicted. Once per body; the typing calls
        it too, if numba's compile did not."""
        if self._begun:
            return
        self._begun = True
        with contextlib.suppress(Exception):  # else the typing starts it when it meets one
            predicted = predict(self._steps, self._outputs, value_types, 0)
            first = self._first_compiled(predicted)
            if first is not None:
                self._tried = True
                self._start(first, predicted)

    def finish(self, value_types: dict) -> None:
        """The typing has ended, having typed `value_types`: count the values whose type
        was mispredicted, stop the helper, and count what it stored in vain."""
        if self._stop is None:
            return
        self._resume_full_collections()
        with contextlib.suppress(Exception):  # a diagnostic: it must not fail the compile
            wrong = mispredicted(self._steps, self._outputs, value_types)
            if wrong:
                self._record("compiled_ahead:mispredicted", len(wrong))
        self.read_announcements()
        self._stop()
        os.close(self._announcements)
        self._position.close()
        self._position_file.close()
        self._stop = None
        state = session.current()
        state.compile_ahead_running.remove(self)
        unused = len(state.announced_op_kernels - state.loaded_op_kernels)
        if unused:
            self._record("compiled_ahead:unused", unused)
        state.announced_op_kernels.clear()
        state.loaded_op_kernels.clear()

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
            state = session.current()
            for line in lines:
                kind, digest, signature = line.decode().split(" ")
                announced = state.announced_op_kernels if kind == "op" else state.blocks_ahead
                announced.add((digest, signature))

    def _will_compile(self, kernel: str, signature: tuple) -> bool:
        """Whether a step's op kernel, stored by key, will be compiled for `signature`: a
        new kernel, or a stored one lacking that signature (a view of another layout).
        What is found loadable is not asked about again: a graph of stored ops (a new
        model) has far more steps than kernels."""
        digest = self._key_of(kernel)
        if digest is None or (digest, signature) in self._found_stored:
            return False
        if self._stored(kernel, signature):
            self._found_stored.add((digest, signature))
            return False
        return True

    def _first_compiled(self, predicted: dict) -> int | None:
        """The first step whose op kernel will be compiled for the types `predicted`, if any."""
        for index, step in enumerate(self._steps):
            signature = tuple(predicted.get(name) for name in step.inputs)
            if None not in signature and self._will_compile(step.kernel, signature):
                return index
        return None

    def _start(self, index: int, predicted: dict) -> None:
        """Start a helper for the steps after `index`, for the types `predicted`: forked
        from a process running one Python thread, else spawned (:meth:`_spawn`)."""
        state = session.current()
        if state.is_helper or state.compile_ahead_running or len(self._steps) - index < 2:
            return
        # The work is found here, not in a forked helper: walking the graph's steps and
        # values there would write into their pages (reference counts) and copy them,
        # 14 MiB of the large benchmark model's, for 10 ms here.
        work = self._work(index, predicted)
        if not work:
            return
        position_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed in finish)
        position_file.truncate(POSITION.size)
        position = mmap.mmap(position_file.fileno(), POSITION.size)
        POSITION.pack_into(position, 0, index)
        read_end, write_end = os.pipe()
        stop = None
        try:
            if hasattr(os, "fork") and threading.active_count() == 1:
                stop = self._fork(work, position, write_end)
            else:
                stop = self._spawn(work, position_file.fileno(), write_end)
        finally:
            os.close(write_end)
            if stop is None:
                os.close(read_end)
                position.close()
                position_file.close()
        if stop is None:
            return
        os.set_blocking(read_end, False)
        self._stop, self._position, self._position_file = stop, position, position_file
        self._announcements = read_end
        state.compile_ahead_running.append(self)
        self._record("compiled_ahead:helper", 1)

    def _fork(self, work: list, position: mmap.mmap, announce: int) -> Callable | None:
        """Fork the helper for `work` (:meth:`_work`): a copy of this process, typed values
        and op kernels included. Only beside no other Python thread: a lock another
        thread held would never be released in the child."""
        parent = os.getpid()
        work = [(first, (kernel, signature)) for first, kernel, signature in work]
        # The typing compiles the kernel of this step next, whose set-up installs numba's
        # implementations (a process's first, about 0.07 s): installed before the fork, the
        # helper has them too, and its first kernel is stored that much sooner.
        with contextlib.suppress(Exception):  # else each compile's set-up installs them
            numba_internals.refresh_cpu_contexts()
        with warnings.catch_warnings():
            # Python warns of a fork from a process with other OS threads. Those here are
            # native pools (BLAS) that take no lock of ours; a Python thread stops us above.
            warnings.simplefilter("ignore", DeprecationWarning)
            self._hold_full_collections()
            try:
                pid = os.fork()
            except OSError:
                self._resume_full_collections()
                return None
        if pid == 0:
            try:
                # The helper collects its own garbage (numba's compiles make cycles), but
                # never scans what it shares with the process: that would copy its pages.
                gc.freeze()
                gc.set_threshold(*self._thresholds)
                become_helper(announce)
                work_until_met(work, position, parent, self._compile_forked)
            finally:
                os._exit(0)
        return functools.partial(_kill_forked, pid)

    def _compile_forked(self, item: tuple) -> None:
        kernel, signature = item
        if self._will_compile(kernel, signature):
            self._serve(kernel, signature)

    def _spawn(self, work: list, position: int, announce: int) -> Callable | None:
        """Spawn the helper for `work` (:meth:`_work`): a new interpreter
        (:mod:`.spawned_helper`), given this process's settings and, for each op kernel
        to compile, its key digest, its node on inputs of its own (:func:`standalone`)
        and the predicted signature. It compiles once its imports are done (seconds),
        so it helps long compiles only."""
        import cloudpickle

        from numba_cache.kernels.context import helper_state

        pickled = []
        for first, kernel, signature in work:
            node = self._outputs[kernel][0].owner if self._outputs[kernel] else None
            with contextlib.suppress(Exception):  # what does not pickle, the typing compiles
                pickled.append((first, (self._key_of(kernel),
                                        cloudpickle.dumps((standalone(node), signature)))))
        if not pickled:
            return None
        process = interpreter.start(
            "numba_cache.kernels.helpers.spawned_helper",
            [str(position), str(announce), str(os.getpid())],
            cloudpickle.dumps({**helper_state(self._settings), "work": pickled}),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(position, announce))
        self._record("compiled_ahead:spawned", 1)
        return functools.partial(_kill_spawned, process)

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


def standalone(node):
    """`node` on inputs of its own, its constants kept: what is pickled of it is the node,
    not the graph above it."""
    from pytensor.graph.basic import Constant

    inputs = [variable if isinstance(variable, Constant) else variable.type()
              for variable in node.inputs]
    return node.clone_with_new_inputs(inputs)


def _kill_forked(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _kill_spawned(process) -> None:
    process.kill()
    process.wait()


def become_helper(announce: int) -> None:
    """Make this process a helper telling what it stores through `announce`: it dies with
    its parent, writes nothing the user sees, and counts nothing in the store."""
    session.current().become_helper(announce)
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


def work_until_met(work: list, position: mmap.mmap, parent: int, compile_one: Callable) -> None:
    """The helper's loop: ``compile_one(item)`` for each ``(step index, item)`` of `work`,
    from the last, until the typing has reached its step (`position`), or the process
    it helps (`parent`) is gone. What fails here, the typing compiles itself."""
    for first, item in reversed(work):
        if first <= POSITION.unpack_from(position, 0)[0] or os.getppid() != parent:
            return
        with contextlib.suppress(Exception):
            compile_one(item)


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux), so that a helper
    whose process was killed does not compile on alone, holding an entry's lock."""
    with contextlib.suppress(Exception):  # elsewhere: the helper checks between kernels
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: The kinds of kernel whose loads the helped process tells from hits (:func:`compiled_ahead`).
ANNOUNCED_KINDS = ("op", "objmode")


def note_save(kind: str, key_digest: str, signature) -> None:
    """In a helper, tell the process it helps that it stores this kernel (an op kernel, or
    an object-mode block of one) before the entry can be read there: a load of it is
    then known to be this compile's work, not a hit."""
    announce = session.current().announce
    if announce is not None and kind in ANNOUNCED_KINDS:
        os.write(announce, f"{kind} {key_digest} {signature_text(signature)}\n".encode())


def signature_text(signature) -> str:
    """A short name of a numba signature (an announcement's line stays short)."""
    return hashlib.blake2b(repr(tuple(signature)).encode(), digest_size=8).hexdigest()


def compiled_ahead(kind: str, key_digest: str, signature) -> bool:
    """Whether the kernel of `kind` and `key_digest` for `signature` was compiled and stored
    by a helper of this process's compile (a load of it is then a miss of that compile):
    an op kernel, by the helper of the graph being typed; an object-mode block, by the
    helper of the graph whose first call loads it. Ask only where
    :meth:`~numba_cache.session.Session.may_load_work_ahead`."""
    state = session.current()
    blocks_ahead = state.blocks_ahead
    for helper in state.compile_ahead_running:
        helper.read_announcements()
    announced = state.announced_op_kernels if kind == "op" else blocks_ahead
    address = (key_digest, signature_text(signature))
    if address not in announced:
        return False
    if kind == "objmode":
        blocks_ahead.discard(address)
    else:
        state.loaded_op_kernels.add(address)
    return True
