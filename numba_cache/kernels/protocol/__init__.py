"""numba's cache protocol, and serialization.

- :mod:`.cache`: :class:`~.cache.KernelCache`, the cache object numba consults on every
  compile of a dispatcher;
- :mod:`.dispatcher`: numba dispatchers whose compiles go through it;
- :mod:`.serialize`: compile results to bytes and back, as numba's own cache does;
- :mod:`.stored_library`: a stored code library, loaded without parsing its bitcode;
- :mod:`.self_contained`: kernels whose machine code calls only its own copies of
  what it links.
"""
