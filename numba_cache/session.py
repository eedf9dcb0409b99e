"""This process's mutable state, in one place: :func:`current` gives its one :class:`Session`.

What a process accumulates (its counters, the kernels it loaded, its settings made in
Python, whether it is a helper of another process...) is a field of the session, not a
module's global, so that all of it is listed, and documented, here. Each field says
which module reads and writes it; no other module touches it.

The session is made once, at this module's import, and never replaced: a forked child
inherits a copy of its parent's, as it would inherit globals (its counters start from
the parent's, the kernels the parent loaded are loaded in it too). Module-level state
outside it is only what :mod:`tests.test_session` allows, each for a reason it gives.

This module imports only a few modules of the standard library: every module of the
package may import it, and importing numba_cache, which imports it, stays cheap.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections import Counter, OrderedDict

from numba_cache._compat.counted_patch import CountedPatch


class RecentlyUsed:
    """The values made for the `size` keys used last (what ``functools.lru_cache`` keeps,
    held by the session instead of by a function)."""

    def __init__(self, size: int):
        self._size = size
        self._values = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make):
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
    #: kernels/context: a context is being made (its self-test compiles probes, uncached).
    making_context = False
    #: kernels/protocol/cache: the kinds of numba_cache's kernels being compiled in this
    #: thread, innermost last (overload_cache serves numba's implementations some call).
    kernel_compiles = ()


class Session:
    """The state of one process, grouped by concern."""

    def __init__(self):
        # -- The cache as this process configured it --
        #: settings: the settings made from Python (``configure``, or adopted by a helper), by name.
        self.settings_overrides = {}
        #: kernels/context: ``CacheContext`` by (settings, environment fingerprint digest).
        self.contexts = RecentlyUsed(16)
        #: kernels/context: the opened store by settings.
        self.stores = RecentlyUsed(8)
        #: cpu_target: the CPU target kernels are compiled for, once decided (numba makes its
        #: code generator once per process).
        self.cpu_target = None
        #: logs: the handler printing numba_cache's records on stderr, once one was asked for.
        self.stderr_handler = None  # a logging.Handler
        #: collector: whether a compile phase of this process froze its older objects (asking
        #: ``gc.get_freeze_count`` instead walks every frozen object).
        self.older_objects_frozen = False
        #: collector: whether a rewrite of this process holds full collections off.
        self.full_collections_held = False

        # -- What happened: counters, notices, observers --
        #: kernels/outcomes/report: counters of this process (``session_stats``).
        self.counters = Counter()
        #: kernels/outcomes/report: whether lookups are also counted in the store (not in a
        #: helper: the process it helps counts what it compiles).
        self.counts_in_store = True
        #: kernels/outcomes/report: (op or kernel kind, reason) of uncacheable kernels logged.
        self.logged_uncacheable = set()
        #: kernels/outcomes/report: callbacks given each lookup (``observe_lookups``).
        self.lookup_observers = []
        #: kernels/outcomes/collisions: hits sampled for verification.
        self.hits_sampled = 0
        #: kernels/outcomes/collisions: the collisions found (``numba-cache warm`` reports them).
        self.collisions = []
        #: kernels/outcomes/replaced_numba: the jit entry points last probed, and their verdict.
        self.numba_entry_points_probed = (None, None)
        #: store/notices: topics of the store's warnings given (each once per process).
        self.warnings_given = set()

        # -- Code loaded in this process --
        #: kernels/assembly/op_links: op kernels by (key digest, numba signature), compiled or
        #: loaded, so that none is loaded twice (its symbols would be defined twice).
        self.op_kernels = {}
        #: kernels/assembly/op_links: the addresses of `op_kernels` loaded from the store.
        self.op_kernels_from_store = set()
        #: kernels/assembly/op_links: guards `op_kernels` and `op_kernels_from_store`.
        self.op_kernels_lock = threading.Lock()
        #: kernels/protocol/overload_cache: numba's implementations by (key digest, signature
        #: text), compiled or loaded, so that none is loaded twice.
        self.overloads = {}
        #: kernels/runtime/blocks: uuids of the object-mode blocks stored kernels hold.
        self.blocks_of_stored_kernels = set()
        #: kernels/runtime/blocks: (block, signature) of the blocks this process stored.
        self.blocks_stored_here = set()
        #: kernels/runtime/detached: pickled namespaces of loaded kernels' blocks, unread.
        self.detached_pending = []
        #: kernels/runtime/detached: the namespaces read, by module name.
        self.detached_namespaces = {}
        #: kernels/callbacks/hidden_symbols: the buffer registered under each LLVM symbol
        #: (kept for the process's life: a symbol never dangles).
        self.hidden_buffers = {}
        #: kernels/callbacks/entry_point: the entry points made in this process.
        self.entry_points = weakref.WeakSet()
        #: kernels/assembly/conversion: PyTensor's generated source, for a store not writable
        #: (made at first use, removed at exit).
        self.private_source_dir = None  # a pathlib.Path

        # -- Helper processes: this process's, or this process as one --
        #: kernels/helpers/compile_ahead: this process helps another (it starts no helper).
        self.is_helper = False
        #: kernels/helpers/compile_ahead: in a helper, the pipe telling what it stores.
        self.announce = None
        #: kernels/helpers/compile_ahead: the helper of the graph being typed, if any.
        self.compile_ahead_running = []
        #: kernels/helpers/compile_ahead: (key digest, signature text) of the op kernels the
        #: helper of this typing stored, and those of them the typing loaded.
        self.announced_op_kernels = set()
        self.loaded_op_kernels = set()
        #: kernels/helpers/compile_ahead: (key digest, signature text) of object-mode blocks
        #: helpers stored, until the first call of their graph loads them.
        self.blocks_ahead = set()
        #: kernels/helpers/linked_build: the linking helper, by process id (a forked child
        #: starts its own).
        self.linking_helpers = {}
        #: kernels/helpers/linked_build: (linked key digest, signature) asked for.
        self.linked_builds_requested = set()

        # -- PyTensor, and what numba_cache changed of it --
        #: integration/activation: what ``activate`` replaced, to be put back (None: inactive).
        self.activation_originals = None
        #: integration/when_pytensor: functions waiting for PyTensor's import.
        self.waiting_for_pytensor = []
        #: integration/linker: callbacks given each graph kernel a linker builds.
        self.graph_kernel_observers = []
        #: rewritten/rewrite_cache -> integration/linker: the ``KnownGraphKernel`` of a
        #: FunctionGraph whose rewrite was cached, for its linker.
        self.known_graph_kernels = weakref.WeakKeyDictionary()
        #: _compat/tensor_constant_data: the property on ``TensorConstant.data``.
        self.tensor_constant_patch = CountedPatch()
        #: _compat/destroy_handler_cycles: ours standing in for PyTensor's ``_contains_cycle``.
        self.cycle_check_patch = CountedPatch()
        #: _compat/sparse_import: constant digging's code, with its sparse import deferred.
        self.sparse_import_patch = CountedPatch()
        #: _compat/sparse_import: the deferred body of each upstream code object (None:
        #: none), as made or loaded from the store once in this process.
        self.sparse_import_bodies = {}
        #: rewritten/cycle_check: the ``AddedEdges`` of each FunctionGraph being rewritten.
        self.added_edges = weakref.WeakKeyDictionary()
        #: rewritten/data_reads: the ``DataReads`` recording the current rewrite's reads.
        self.data_reads_watching = contextvars.ContextVar("numba_cache_data_reads", default=None)
        #: rewritten/data_reads: held through a watched rewrite, one thread's at a time: the
        #: facts it sets aside on shared data constants must be recomputed where it sees them.
        self.watched_rewrite_lock = threading.RLock()

        # -- The store's files --
        #: store/index: SQLite connections a forked child inherited, kept unused until it exits.
        self.inherited_connections = []

        # -- Each thread's own --
        self.this_thread = ThisThread()

    def become_helper(self, announce: int | None = None) -> None:
        """This process helps another (:mod:`numba_cache.kernels.helpers`): it starts no
        helper, counts nothing in the store (the process it helps counts its work), and
        tells through the pipe `announce`, if given, what it stores. The settings and
        PyTensor flags it compiles with are the helped process's
        (:func:`numba_cache.kernels.context.helper_state`, ``adopt_state``)."""
        self.is_helper = True
        self.counts_in_store = False
        self.announce = announce

    def may_load_work_ahead(self, kind: str) -> bool:
        """Whether a load of a kernel of `kind` may be of a helper's work
        (:func:`numba_cache.kernels.helpers.compile_ahead.compiled_ahead` tells): an op
        kernel while a helper runs, an object-mode block until those helpers stored are
        loaded. Not on a warm hit, which then asks no helper."""
        if kind == "op":
            return bool(self.compile_ahead_running)
        return kind == "objmode" and bool(self.compile_ahead_running or self.blocks_ahead)


_session = Session()


def current() -> Session:
    """This process's session."""
    return _session
