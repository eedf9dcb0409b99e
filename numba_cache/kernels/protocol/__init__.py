"""numba's cache protocol, and serialization.

- :mod:`.cache`: :class:`~.cache.KernelCache`, the cache object numba consults on every
  compile of a dispatcher (its lookup, its store), and the object-mode blocks' kind of it;
- :mod:`.op_cache`: an op kernel's, which serves first what this process serves for it;
- :mod:`.graph_cache`: a graph kernel's, which loads the op kernels it calls first, and
  tries its linked build and the graphs of its code;
- :mod:`.lookup`: what a lookup is made of, the sources of a kernel, in order, and a hit;
- :mod:`.verification`: the hits the collision detector compiles again to compare;
- :mod:`.dispatcher`: numba dispatchers whose compiles go through a kernel cache;
- :mod:`.serialize`: compile results to bytes and back, as numba's own cache does;
- :mod:`.stored_library`: a stored code library, loaded without parsing its bitcode;
- :mod:`.self_contained`: kernels whose machine code calls only its own copies of
  what it links.
"""
