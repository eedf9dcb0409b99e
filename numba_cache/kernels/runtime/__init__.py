"""What stored kernels need at run time beside their own code.

- :mod:`.numba_runtime`: numba's runtime functions (NRT), loaded from the store;
- :mod:`.objmode`: object-mode blocks compiled once, then loaded in every process;
- :mod:`.blocks`: which blocks the stored kernels hold;
- :mod:`.detached`: PyTensor's blocks run without importing PyTensor's numba dispatch;
- :mod:`.cython_addresses`: their LAPACK functions found without importing ``scipy.linalg``.
"""
