"""LAPACK's and BLAS's addresses without importing scipy.linalg
(numba_cache/kernels/runtime/cython_addresses.py): numba's addresses, and scipy.linalg
imported afterwards as usual.

Each check runs in a fresh process, where nothing of scipy.linalg is imported yet.
If scipy's self-contained modules start importing their package, or Cython stops
exporting ``__pyx_capi__`` capsules, these fail.
"""

from __future__ import annotations

import pytest
from helpers import run_python

from numba_cache.kernels.runtime.cython_addresses import SELF_CONTAINED

ADDRESSES = """
import json, sys
import numba
from numba_cache.kernels.runtime.cython_addresses import cython_function_address

MODULE, NAMES = {module!r}, {names!r}
package = MODULE.rpartition(".")[0]
before = set(sys.modules)
ours = [cython_function_address(MODULE, name) for name in NAMES]
imported = sorted(set(sys.modules) - before)

from numba.core.extending import get_cython_function_address
numbas = [get_cython_function_address(MODULE, name) for name in NAMES]
import importlib
loaded_by_import = importlib.import_module(MODULE)
print(json.dumps({{
    "ours": ours, "numbas": numbas, "imported": imported,
    "package_imported_first": package in before,
    "bound_to_package": getattr(sys.modules[package], MODULE.rpartition(".")[2], None)
        is loaded_by_import,
    "again": [cython_function_address(MODULE, name) for name in NAMES],
}}))
"""

FUNCTIONS = {
    "scipy.linalg.cython_lapack": ["dpotrf", "dtrtrs", "dgetrf", "spotrf", "zgetrs"],
    "scipy.linalg.cython_blas": ["dgemm", "dgemv", "sdot", "zgemm"],
}


@pytest.mark.parametrize("module", sorted(SELF_CONTAINED))
def test_self_contained_modules_give_numbas_addresses_without_importing_their_package(module):
    result = run_python(ADDRESSES.format(module=module, names=FUNCTIONS[module]))

    assert not result["package_imported_first"]
    assert result["ours"] == result["numbas"]
    assert result["again"] == result["ours"]
    package = module.rpartition(".")[0]
    assert not [name for name in result["imported"] if name.startswith(package)], result["imported"]
    # imported later, the package finds the same module and binds it
    assert result["bound_to_package"]


def test_any_other_module_is_numbas_way():
    module = "scipy.special.cython_special"
    result = run_python(ADDRESSES.format(module=module, names=["__pyx_fuse_1erf"]))
    assert result["ours"] == result["numbas"]
    assert "scipy.special" in result["imported"]
