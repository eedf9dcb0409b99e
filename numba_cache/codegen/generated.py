"""The module that generated kernels claim to belong to.

numba pickles a compiled function's ``Environment`` as the *name* of its module
plus constants, and re-imports that module to rebuild it in another process
(``numba.core.environment._rebuild_env``). Generated code therefore runs with
``__name__`` set to this importable, intentionally empty module.
"""
