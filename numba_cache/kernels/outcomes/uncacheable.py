"""Deciding which kernels must never be persisted, and why.

A persisted kernel runs in another process. Anything the machine code holds
that is only valid in the compiling process (a function pointer, a ctypes or
cython address, a dynamic global) makes it crash or misbehave there; numba
caches an integer address frozen into a kernel without any warning. Detection
is layered, cheapest first:

Before compiling
  - op types registered with :func:`register_uncacheable`;
  - PyTensor's dispatch returned no cache key (legacy registrations, object-mode
    fallbacks, explicit opt-outs);
  - the op cannot be described by content (see :mod:`numba_cache.keys`).
After compiling, before writing (:func:`inspect_compile_result`)
  - numba's own criteria: object mode (but for object-mode blocks, see
    :mod:`.objmode`), lifted code that cannot be cached,
    dynamic globals (ctypes pointers, constants too large or non-contiguous to
    freeze), an environment without a module;
  - code that is not self-contained (see :mod:`.self_contained`): a later
    process would run other code than the compiling one;
  - a scan of the final LLVM IR for integer constants that are addresses mapped
    in this process (``/proc/self/maps``), i.e. a baked pointer.

Kernels that look their BLAS/LAPACK pointers up at run time (PyTensor's
``_call_cached_ptr`` keeps them in a null-initialised global) hold no address
and stay cacheable.
"""

from __future__ import annotations

import bisect
import re
import sys
import uuid
from collections.abc import Iterator
from typing import NamedTuple

from numba_cache.kernels.protocol.self_contained import is_self_contained
from numba_cache.keys.key import Key

_registry: dict[type, str] = {}

# Integer literals of pointer size in LLVM IR; small values cannot be addresses. The
# literal leads, so that the search skips to each "i64 " (a leading \b had it try every
# position: 70 ms of a large graph kernel's 4 MB of IR); the word boundary before it is
# checked on each match (:func:`_pointer_sized_integers`).
_IR_INTEGER = re.compile(r"i64 (-?\d{7,20})\b")
_WORD_CHARACTER = re.compile(r"\w")
_MIN_ADDRESS = 1 << 16


class Uncacheable(NamedTuple):
    """Why a kernel is not persisted: a short `reason` code and a human `detail`."""

    reason: str
    detail: str


def register_uncacheable(op_type: type, detail: str) -> None:
    """Never persist kernels of `op_type` (and its subclasses); `detail` says why."""
    _registry[op_type] = detail


def registered_reason(op) -> Uncacheable | None:
    for op_type in type(op).__mro__:
        if op_type in _registry:
            return Uncacheable("registered", f"{op_type.__qualname__}: {_registry[op_type]}")
    return None


def inspect_compile_result(cres, llvm_ir: str, object_mode: bool = False,
                           self_contained_only: bool = True) -> Uncacheable | None:
    """The reason a freshly compiled kernel must not be persisted, or None.

    `llvm_ir` is ``cres.library.get_llvm_str()``. `object_mode` allows
    object-mode code: that of an object-mode block (see :mod:`.objmode`), whose
    environment is stored with it. Without `self_contained_only`, code that may call
    other modules' copies of what it links is stored too: numba's implementations,
    which kernels link in rather than call (:mod:`.overload_cache`).
    """
    if cres.objectmode and not object_mode:
        return Uncacheable("object-mode", "compiled in numba object mode")
    if any(not lifted.can_cache for lifted in cres.lifted):
        return Uncacheable("lifted-code", "contains lifted loops that numba cannot cache")
    if cres.library.has_dynamic_globals:
        return Uncacheable(
            "dynamic-globals",
            "uses dynamic globals (ctypes/cython pointers, or a constant too large "
            "or non-contiguous to freeze into machine code)",
        )
    if not cres.environment.can_cache():
        return Uncacheable("dynamic-environment", "its environment has no module to rebuild from")
    if not object_mode and self_contained_only and not is_self_contained(cres.library):
        return Uncacheable(
            "not-self-contained",
            "its machine code may call other modules' copies of the functions it links, "
            "so a process loading it would run other code than the one compiling it",
        )
    address = baked_address(llvm_ir)
    if address is not None:
        return Uncacheable(
            "baked-address",
            f"machine code holds the address {address:#x} of this process "
            "(a function pointer or buffer frozen into the kernel)",
        )
    return None


def baked_address(llvm_ir: str) -> int | None:
    """The first integer in `llvm_ir` that points into memory mapped in this process.

    The mappings are read only when an integer is large enough to be an address:
    most kernels hold none, and reading them costs about 1 ms."""
    candidates = [value for value in _pointer_sized_integers(llvm_ir) if value >= _MIN_ADDRESS]
    if not candidates:
        return None
    regions = _mapped_regions()
    starts = [start for start, _ in regions]
    for value in candidates:
        index = bisect.bisect_right(starts, value) - 1
        if index >= 0 and value < regions[index][1]:
            return value
    return None


def _pointer_sized_integers(llvm_ir: str) -> Iterator[int]:
    """The values of the matches of ``\\bi64 (-?\\d{7,20})\\b`` in `llvm_ir`, as unsigned."""
    for match in _IR_INTEGER.finditer(llvm_ir):
        start = match.start()
        if start == 0 or _WORD_CHARACTER.match(llvm_ir, start - 1) is None:
            yield int(match.group(1)) & 0xFFFFFFFFFFFFFFFF


#: Where a user-space address may lie, on a system that does not list its mappings.
_ADDRESS_SPACE = (1 << 32, 1 << 48)


def _mapped_regions() -> list[tuple[int, int]]:
    """This process's mapped memory; without ``/proc/self/maps``, the whole range an
    address may lie in (failing closed: a large integer may then be taken for one)."""
    if not sys.platform.startswith("linux"):
        return [_ADDRESS_SPACE]
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            start, end = line.split(" ", 1)[0].split("-")
            regions.append((int(start, 16), int(end, 16)))
    regions.sort()
    return regions


def unkeyed(kind: str, summary: str, error: Exception) -> tuple[Key, Uncacheable]:
    """A placeholder key for something that cannot be keyed, and the verdict saying so.

    The key is unique to this call and never stored or looked up; it only names
    the kernel in reports.
    """
    components = {"unkeyable": str(error), "nonce": uuid.uuid4().hex}
    return Key.from_components(kind, summary, components), Uncacheable("unkeyable", str(error))
