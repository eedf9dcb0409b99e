"""Where a numba compile turns into a cache lookup (levels 2 and 3 of the cache).

:class:`~.protocol.cache.KernelCache` is the cache object numba consults on every
compile; the rest of this package builds what it looks up, loads and stores. Each
sub-package says what it holds:

- :mod:`.protocol`: numba's cache protocol, and serialization;
- :mod:`.assembly`: graph kernels assembled from op kernels they call by symbol;
- :mod:`.helpers`: helper processes compiling in the background;
- :mod:`.callbacks`: entry points and C callbacks other machine code calls;
- :mod:`.runtime`: numba's runtime and object-mode blocks, loaded from the store;
- :mod:`.outcomes`: verdicts, collisions and reports of each lookup.

:mod:`.context` is what a compile needs to consult the cache (settings, store,
fingerprint, self-test verdict); the self-test's costly checks are :mod:`.probes`. What an entry holds, blob by blob, is
:mod:`numba_cache.store.entry_layout`'s; level 1, the rewritten graph, is
:mod:`numba_cache.rewritten`'s.
"""
