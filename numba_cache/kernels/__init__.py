"""Where a numba compile turns into a cache lookup.

:class:`.cache.KernelCache` is the cache object numba consults on every compile;
the rest of this package builds what it looks up, loads and stores. The modules
by role (one day, perhaps, one sub-package each):

**numba's cache protocol, and serialization**

- :mod:`.cache`: :class:`~.cache.KernelCache`, one store entry per kernel key, one
  overload per numba signature, locks taken on a miss;
- :mod:`.dispatcher`: numba dispatchers whose compiles go through it;
- :mod:`.context`: the per-process state (settings, store, fingerprint, self-test);
- :mod:`.serialize`: compile results to bytes and back, as numba's own cache does;
- :mod:`.stored_library`: a stored code library, loaded without parsing its bitcode;
- :mod:`.self_contained`: kernels whose machine code calls only its own copies of
  what it links.

What an entry holds, blob by blob, is :mod:`numba_cache.store.entry_layout`'s.

**Graph assembly**

- :mod:`.graph`: the whole-graph kernel, the first cache level;
- :mod:`.conversion`: PyTensor ops converted to op kernels, on a miss only;
- :mod:`.graph_body`: a graph kernel's body, its op kernel calls emitted as one
  intrinsic, with the types :mod:`.predicted_types` predicts;
- :mod:`.symbol_calls`: calls from one numba function to another's code by symbol;
- :mod:`.op_links`: the op kernels a graph kernel calls, recorded and loaded first;
- :mod:`.glue`: the short LLVM pipeline of graph kernels that only call op kernels.

**Helper processes**

- :mod:`.compile_ahead`: op kernels compiled ahead by a forked helper, or by one
  spawned as a new interpreter (:mod:`.spawned_helper`);
- :mod:`.linked_tier`: graph kernels rebuilt with their op kernels linked in, by a
  helper in the background (:mod:`.linking_helper`).

**C callbacks and entry points**

- :mod:`.entry_point`: a graph kernel as other numba code calls it, by symbol;
- :mod:`.cfunc`: ``numba.cfunc`` callbacks around entry points, stored like kernels;
- :mod:`.links`: the symbols such code needs its process to define;
- :mod:`.hidden_symbols`: hidden constant arrays as symbols machine code can name.

**numba's runtime, and object-mode blocks**

- :mod:`.runtime`: numba's runtime functions, loaded from the store;
- :mod:`.objmode`: object-mode blocks compiled once, then loaded in every process;
- :mod:`.blocks`: which blocks the stored kernels hold.

**Verdicts, collisions and reports**

- :mod:`.uncacheable`: which kernels are never stored, and why;
- :mod:`.collisions`: hits recompiled and compared with what the store served;
- :mod:`.replay`: a conversion's warnings, told again on a hit;
- :mod:`.replaced_numba`: stepping aside when test doubles replace numba's compiler;
- :mod:`.report`: counters, the log and observers of each lookup.
"""
