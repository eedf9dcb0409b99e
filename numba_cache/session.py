"""This process's mutable state, in one place: :func:`current` gives its one :class:`Session`.

What a process accumulates (its counters, the kernels it loaded, its settings made in
Python, whether it is a helper of another process...) is a field of the session, not a
module's global, so that all of it is listed, and documented, here. Each field says
which module reads and writes it; no other module touches it.

The session is made once, at this module's import, and never replaced: a forked child
inherits a copy of its parent's, as it would inherit globals (its counters start from
the parent's, the kernels the parent loaded are loaded in it too). Module-level state
outside it is only what :mod:`tests.test_session` allows, each for a reason it gives.

This module imports only the standard library: every module of the package may import it.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path


class RecentlyUsed:
    """The values made for the `size` keys used last (what ``functools.lru_cache`` keeps,
    held by the session instead of by a function)."""

    def __init__(self, size: int):
        self._size = size
        self._values: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], object]):
        """The value kept for `key`, else ``make()``, kept."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        made = make()  # outside the lock: making a context may compile (the self-test)
        with self._lock:
            value = self._values.setdefault(key, made)  # another thread's, if it was first
            self._values.move_to_end(key)
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)


class ThisThread(threading.local):
    """The session's state of one thread: each attribute is the thread's own, its default
    until the thread sets it."""

    #: _compat/numba_internals: refreshing numba's contexts installs only what a lean
    #: compile needs (inside ``lean_refresh``).
    lean_refresh = False
    #: _compat/numba_internals: full refreshes of numba's contexts that failed in this thread.
    refresh_failures = 0
    #: integration/when_pytensor: modules of numba_cache (or pytensor) executing their import.
    imports_executing = 0


@dataclass(eq=False)
class Session:
    """The state of one process, grouped by concern."""

    # -- The cache as this process configured it --
    #: settings: the settings made from Python (``configure``, or adopted by a helper), by name.
    settings_overrides: dict = field(default_factory=dict)
    #: kernels/context: ``CacheContext`` by (settings, environment fingerprint digest).
    contexts: RecentlyUsed = field(default_factory=lambda: RecentlyUsed(16))
    #: kernels/context: the opened store by settings.
    stores: RecentlyUsed = field(default_factory=lambda: RecentlyUsed(8))
    #: cpu_target: the CPU target kernels are compiled for, once decided (numba makes its
    #: code generator once per process).
    cpu_target: str | None = None
    #: logs: the handler printing numba_cache's records on stderr, once one was asked for.
    stderr_handler: object | None = None

    # -- What happened: counters, notices, observers --
    #: kernels/outcomes/report: counters of this process (``session_stats``).
    counters: Counter = field(default_factory=Counter)
    #: kernels/outcomes/report: whether lookups are also counted in the store (not in a
    #: helper: the process it helps counts what it compiles).
    counts_in_store: bool = True
    #: kernels/outcomes/report: (op or kernel kind, reason) of uncacheable kernels logged.
    logged_uncacheable: set = field(default_factory=set)
    #: kernels/outcomes/report: callbacks given each lookup (``observe_lookups``).
    lookup_observers: list = field(default_factory=list)
    #: kernels/outcomes/collisions: hits sampled for verification.
    hits_sampled: int = 0
    #: kernels/outcomes/collisions: the collisions found (``numba-cache warm`` reports them).
    collisions: list = field(default_factory=list)
    #: kernels/outcomes/replaced_numba: the jit entry points last probed, and their verdict.
    numba_entry_points_probed: tuple = (None, None)
    #: store/notices: topics of the store's warnings given (each once per process).
    warnings_given: set = field(default_factory=set)

    # -- Code loaded in this process --
    #: kernels/assembly/op_links: op kernels by (key digest, numba signature), compiled or
    #: loaded, so that none is loaded twice (its symbols would be defined twice).
    op_kernels: dict = field(default_factory=dict)
    #: kernels/assembly/op_links: the addresses of `op_kernels` loaded from the store.
    op_kernels_from_store: set = field(default_factory=set)
    #: kernels/assembly/op_links: guards `op_kernels` and `op_kernels_from_store`.
    op_kernels_lock: threading.Lock = field(default_factory=threading.Lock)
    #: kernels/runtime/blocks: uuids of the object-mode blocks stored kernels hold.
    blocks_of_stored_kernels: set = field(default_factory=set)
    #: kernels/runtime/blocks: (block, signature) of the blocks this process stored.
    blocks_stored_here: set = field(default_factory=set)
    #: kernels/callbacks/hidden_symbols: the buffer registered under each LLVM symbol
    #: (kept for the process's life: a symbol never dangles).
    hidden_buffers: dict = field(default_factory=dict)
    #: kernels/callbacks/entry_point: the entry points made in this process.
    entry_points: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    #: kernels/assembly/conversion: PyTensor's generated source, for a store not writable
    #: (made at first use, removed at exit).
    private_source_dir: Path | None = None

    # -- Helper processes: this process's, or this process as one --
    #: kernels/helpers/compile_ahead: this process helps another (it starts no helper).
    is_helper: bool = False
    #: kernels/helpers/compile_ahead: in a helper, the pipe telling what it stores.
    announce: int | None = None
    #: kernels/helpers/compile_ahead: the helper of the graph being typed, if any.
    compile_ahead_running: list = field(default_factory=list)
    #: kernels/helpers/compile_ahead: (key digest, signature text) of the op kernels the
    #: helper of this typing stored, and those of them the typing loaded.
    announced_op_kernels: set = field(default_factory=set)
    loaded_op_kernels: set = field(default_factory=set)
    #: kernels/helpers/compile_ahead: (key digest, signature text) of object-mode blocks
    #: helpers stored, until the first call of their graph loads them.
    blocks_ahead: set = field(default_factory=set)
    #: kernels/helpers/linked_build: the linking helper, by process id (a forked child
    #: starts its own).
    linking_helpers: dict = field(default_factory=dict)
    #: kernels/helpers/linked_build: (linked key digest, signature) asked for.
    linked_builds_requested: set = field(default_factory=set)

    # -- PyTensor, and what numba_cache changed of it --
    #: integration/activation: what ``activate`` replaced, to be put back (None: inactive).
    activation_originals: list | None = None
    #: integration/when_pytensor: functions waiting for PyTensor's import.
    waiting_for_pytensor: list = field(default_factory=list)
    #: integration/linker: callbacks given each graph kernel a linker builds.
    graph_kernel_observers: list = field(default_factory=list)
    #: rewritten/rewrite_cache -> integration/linker: the ``KnownGraphKernel`` of a
    #: FunctionGraph whose rewrite was cached, for its linker.
    known_graph_kernels: weakref.WeakKeyDictionary = field(
        default_factory=weakref.WeakKeyDictionary)
    #: _compat/tensor_constant_data: watches of ``TensorConstant.data`` begun, not ended.
    tensor_constant_watches: int = 0
    #: _compat/tensor_constant_data: guards `tensor_constant_watches`.
    tensor_constant_lock: threading.Lock = field(default_factory=threading.Lock)
    #: rewritten/data_reads: the ``DataReads`` recording the current rewrite's reads.
    data_reads_watching: contextvars.ContextVar = field(
        default_factory=lambda: contextvars.ContextVar("numba_cache_data_reads", default=None))

    # -- The store's files --
    #: store/index: SQLite connections a forked child inherited, kept unused until it exits.
    inherited_connections: list = field(default_factory=list)

    #: State of each thread.
    this_thread: ThisThread = field(default_factory=ThisThread)

    def become_helper(self, announce: int | None = None) -> None:
        """This process helps another (:mod:`numba_cache.kernels.helpers`): it starts no
        helper, counts nothing in the store (the process it helps counts its work), and
        tells through the pipe `announce`, if given, what it stores."""
        self.is_helper = True
        self.counts_in_store = False
        self.announce = announce


_session = Session()


def current() -> Session:
    """This process's session."""
    return _session
