"""How PyTensor compiles through numba_cache.

- :mod:`.linker`: the ``NUMBA_CACHE`` linker and mode, and the function maker that keeps the
  rewrite level in every ``Mode`` built on that linker;
- :mod:`.rewrite_cache`: the rewritten graph, cached by the pre-rewrite key;
- :mod:`.activation`: one switch that points PyTensor's ``"numba"``/``"NUMBA"`` at numba_cache;
- :mod:`.startup`: the ``.pth`` hook that activates it in processes nobody starts by hand.
"""
