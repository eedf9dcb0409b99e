"""A BLAS or LAPACK function's address without importing ``scipy.linalg``.

PyTensor's linear algebra kernels find their LAPACK functions in object-mode blocks,
through numba's ``get_cython_function_address("scipy.linalg.cython_lapack", name)``.
Importing that module imports its package first: all of ``scipy.linalg`` (about
0.03 s, most of what a warm start of a model holding a Cholesky factor still imports).
The module itself is a self-contained extension: loaded on its own from the package's
folder, it gives the same capsules, so the same addresses.

:func:`cython_function_address` loads the modules of :data:`SELF_CONTAINED` so, where
their package is not imported; any other module, or one already imported, is numba's
way. The module loaded is left out of ``sys.modules``: a later import of the package
finds the extension initialised and takes the same module object (Cython keeps one
per process), bound to its package as usual.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types

from numba.extending import get_cython_function_address

#: Cython modules whose initialisation imports nothing of their package (checked by
#: ``tests/test_cython_addresses.py``), so they are loaded without it.
SELF_CONTAINED = frozenset({"scipy.linalg.cython_lapack", "scipy.linalg.cython_blas"})


def cython_function_address(module_name: str, function_name: str) -> int:
    """The address of `function_name` exported by the Cython module `module_name`, as
    numba's ``get_cython_function_address`` gives it."""
    package = module_name.rpartition(".")[0]
    module = (_module_alone(module_name)
              if module_name in SELF_CONTAINED and package not in sys.modules else None)
    if module is None:  # numba's import is as cheap, or the only way
        return get_cython_function_address(module_name, function_name)
    return _capsule_address(module.__pyx_capi__[function_name])


@functools.cache
def _module_alone(module_name: str) -> types.ModuleType | None:
    """The extension module `module_name`, loaded from its package's folder without
    importing the package; None if it cannot be (numba's import then reports why)."""
    try:
        return _load_alone(module_name)
    except Exception:  # noqa: BLE001 - numba's way, which gives the same or says what is wrong
        return None


def _load_alone(module_name: str) -> types.ModuleType:
    top, _, rest = module_name.rpartition(".")[0].partition(".")
    folders = list(importlib.import_module(top).__path__)
    for part in rest.split(".") if rest else ():
        folders = [f"{folder}/{part}" for folder in folders]
    spec = importlib.machinery.PathFinder.find_spec(module_name, folders)
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        raise ImportError(f"{module_name} is not an extension module in {folders}")
    module = importlib.util.module_from_spec(spec)
    already = sys.modules.get(module_name)
    spec.loader.exec_module(module)
    if already is None and sys.modules.get(module_name) is module:
        # Cython's initialisation registers the module; left there, a later import of
        # the package would not bind it as the package's attribute.
        del sys.modules[module_name]
    return module


def _capsule_address(capsule) -> int:
    """The pointer a Cython ``__pyx_capi__`` capsule holds, under the capsule's own name."""
    name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi))
    pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    return pointer(capsule, name(capsule))
