"""numba's cache protocol, and serialization.

- :mod:`.cache`: :class:`~.cache.KernelCache`, the cache object numba consults on every
  compile of a dispatcher, and an object-mode block's kind of it;
- :mod:`.op_cache`: an op kernel's, which serves first what this process serves for it;
- :mod:`.graph_cache`: a graph kernel's, which loads the op kernels it calls first, and
  tries its linked build and the graphs of its code;
- :mod:`.overload_cache`: numba's implementations (``@overload``) its kernels call, one
  per signature and flags of the compile calling them;
- :mod:`.lookup`: its lookup, of a kernel's sources in order (``load_overload``);
- :mod:`.storing`: its storing of what numba compiled (``save_overload``);
- :mod:`.verification`: the hits the collision detector compiles again to compare;
- :mod:`.ir_digest`: the digests of a compile's code it compares, the same in every
  process compiling that code;
- :mod:`.dispatcher`: numba dispatchers whose compiles go through a kernel cache;
- :mod:`.serialize`: compile results to bytes and back, as numba's own cache does;
- :mod:`.stored_library`: a stored code library, loaded without parsing its bitcode;
- :mod:`.self_contained`: kernels whose machine code calls only its own copies of
  what it links.
"""
