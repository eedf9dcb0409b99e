"""How numba_cache shows it works: real models, compile counts, like-with-like comparisons, the demo.

- :mod:`.models`: the PyTensor models of the demo, the tests and the benchmarks;
- :mod:`.compile_events`: numba compilations counted with numba's event API;
- :mod:`.compare`: results compared bit for bit, or in units in the last place;
- :mod:`.demo`: ``numba-cache demo``.
"""
