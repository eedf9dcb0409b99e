"""A stored kernel's code library, loaded without parsing the module kept for linking it.

numba stores a kernel as its object code and a second copy of it as bitcode,
the module a later compile links in to inline it. numba's loader
(``CPUCodeLibrary._unserialize``) parses that bitcode at every load and walks
it to list the symbols the library defines, one FFI call per function: about
0.6 ms of the 1 ms an op kernel takes to load, though only a compile that links
the kernel in (an uncacheable graph, ``NBCACHE_LINK_OPS``) reads the module.

So numba_cache records the defined symbols when it stores a kernel
(:func:`defined_symbols`) and loads it as a :class:`StoredLibrary`: the object
code is loaded as numba loads it, the symbols are registered from the record,
and the bitcode is parsed the first time a compile asks for it. An entry
without the record loads through numba's own loader.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from numba.core.codegen import JITCodeLibrary

from numba_cache._compat import numba_internals
from numba_cache.store import entry_layout


class StoredLibrary(JITCodeLibrary):
    """numba's JIT code library of stored object code, its linking module parsed on demand."""

    def __init__(self, codegen, name: str, linking_bitcode: bytes):
        super().__init__(codegen, name)
        self._linking_bitcode = linking_bitcode

    def _get_module_for_linking(self):
        if self._shared_module is None:
            self._shared_module = llvm.parse_bitcode(self._linking_bitcode)
        return self._shared_module

    @property
    def linking_module_parsed(self) -> bool:
        return self._shared_module is not None


def defined_symbols(library) -> bytes:
    """The symbols `library` defines, as numba's loader lists them, for :func:`load`."""
    module = numba_internals.module_for_linking(library)
    names = sorted({value.name for value in (*module.functions, *module.global_variables)
                    if not value.is_declaration})
    return entry_layout.encode_symbols(names)


def load(codegen, library_state: tuple, symbols: bytes) -> StoredLibrary:
    """The library numba serialized as `library_state` (object code kind), defining `symbols`."""
    name, kind, (object_code, linking_bitcode) = library_state
    if kind != "object":
        raise ValueError(f"a stored kernel's library is {kind!r} code, not object code")
    library = StoredLibrary(codegen, name, linking_bitcode)
    numba_internals.load_object_code(library, object_code, entry_layout.decode_symbols(symbols))
    return library
