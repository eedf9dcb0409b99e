"""nutpie's code that :mod:`numba_cache.integration.nutpie` recognises, and its check.

The recogniser runs the check itself, once per process, the first time it sees
one of nutpie's wrappers (importing nutpie costs about a second, too much for the
self-test of every process).
"""

from __future__ import annotations

from numba_cache._compat import require, seam

MODULE = "nutpie.compile_pymc"
#: nutpie versions (major.minor) whose wrappers the recogniser was written against.
SUPPORTED_VERSIONS = ("0.16",)
#: The wrappers, by qualified name, with the free variables of their closures.
WRAPPERS = {
    "_make_c_logp_func.<locals>.logp_numba": ("extract", "n_dim", "numba"),
    "_make_c_expand_func.<locals>.expand_numba": ("extract", "n_dim", "n_expanded", "numba"),
}
EXTRACT = "make_extraction_fn.<locals>.extract_shared"
EXTRACT_SHARED = ("extract_array", "indices", "inner", "literal_unroll", "numba", "record_dtype",
                  "shared_tuple", "tuple_setitem_literal")
EXTRACT_ARRAY = "make_extraction_fn.<locals>.extract_array"
IMPL_EXTRACT_ARRAY = "make_extraction_fn.<locals>.impl_extract_array"
SETITEM = "make_extraction_fn.<locals>.tuple_setitem_literal"


@seam("compile_pymc wrappers", "nutpie", SUPPORTED_VERSIONS, "integration/nutpie.py")
def wrappers() -> None:
    from nutpie import compile_pymc

    def nested(function) -> dict:
        return {c.co_qualname: c for c in function.__code__.co_consts if hasattr(c, "co_qualname")}

    for qualname, free in WRAPPERS.items():
        maker = getattr(compile_pymc, qualname.split(".")[0], None)
        require(maker is not None, f"{qualname} is gone")
        code = nested(maker).get(qualname)
        require(code is not None and code.co_freevars == free, f"{qualname} changed its closure")
    extraction = nested(compile_pymc.make_extraction_fn)
    require(extraction.get(EXTRACT) is not None
            and extraction[EXTRACT].co_freevars in {("inner",), EXTRACT_SHARED},
            f"{EXTRACT} changed its closure")
    for name in (EXTRACT_ARRAY, IMPL_EXTRACT_ARRAY, SETITEM):
        require(name in extraction, f"{name} is gone")
