"""Object-mode blocks inside kernels: compiled once, then loaded in every process.

PyTensor's kernels look BLAS/LAPACK and ``scipy.special`` pointers up at run
time, through a nopython getter holding a ``numba.objmode`` block, so that no
address is baked into cached code. numba holds such a block in the kernel as a
pickled dispatcher, and compiles it the first time the machine code runs it, in
every process: 25-40 ms a routine plus the compiler's set-up (0.33 s for the six
routines of the GP benchmark model), more than the rest of a warm compile.

The machine code gets that compile by unpickling a reference to numba's
``ObjModeUtils._call_objmode_dispatcher`` by name. :func:`install` puts
:func:`_compile_through_store` there (under numba's names, so code compiled
meanwhile, PyTensor's own cache included, still refers to numba's function):
blocks of PyTensor's numba dispatch are looked up in the store first, and
stored after compiling, through a :class:`.cache.BlockCache`, a kernel cache as every
kernel has (locks, checksums, counters ``objmode.hit``/``objmode.miss``). Any other
block is compiled by numba as before. The process that stores a kernel stores
its blocks with it (:func:`.blocks.compiled_here_unstored`): numba compiled them while
typing the kernel, even if it never runs here.

The key is the block's dispatcher uuid, which numba draws at random when the
block's kernel is compiled and pickles with it, so every process loading that
kernel sees the same uuid, and no other block has it; plus the function holding
the block, the argument types and the environment fingerprint. A block is
looked up and stored only if a kernel in the store holds it (its uuid is in the
kernel's IR, listed in the kernel's entry, see :func:`.blocks.named_blocks`; this
process knows the kernels it loaded or stored): blocks of kernels compiled afresh
in every process (PyTensor's ``NUMBA`` mode with its cache off) would only fill the
store, and blocks of kernels from PyTensor's own cache cannot be in it.
"""

from __future__ import annotations


from numba.core import pythonapi, types

from numba_cache import logs
from numba_cache.kernels.runtime import detached
from numba_cache.kernels.runtime.blocks import (
    block_key,
    environment_reads,
    held_by_a_stored_kernel,
    is_cached_block,
)
from numba_cache.kernels.protocol.cache import BlockCache
from numba_cache.kernels.context import current_context
from numba_cache.store import StoreWarning

_numba_compile = pythonapi.ObjModeUtils._call_objmode_dispatcher


def install() -> None:
    """Compile PyTensor's object-mode blocks through the store from now on, and unpickle
    them without importing PyTensor's dispatch where :mod:`.detached` can (idempotent)."""
    pythonapi.ObjModeUtils._call_objmode_dispatcher = staticmethod(_compile_through_store)
    detached.install()


def _compile_through_store(compile_args):
    """numba's ``_call_objmode_dispatcher``: the entry point of a block, loaded or compiled."""
    dispatcher, argument_types = compile_args
    signature = (types.ffi_forced_object,) * len(argument_types)
    if not is_cached_block(dispatcher) or signature in dispatcher.overloads:
        return _numba_compile(compile_args)
    try:
        return _load_or_compile(compile_args, signature)
    except Exception as exc:  # the cache must never make a compile fail
        logs.warn(f"numba_cache: object-mode block {dispatcher.func_ir.func_id.func_qualname} "
                  f"compiled without the cache ({exc!r})", StoreWarning, stacklevel=2)
        return _numba_compile(compile_args)


# Pickled by reference under numba's names: see the module docstring.
_compile_through_store.__module__ = _numba_compile.__module__
_compile_through_store.__qualname__ = _numba_compile.__qualname__


def _load_or_compile(compile_args, signature):
    """The block from the store, or compiled (and stored, if a stored kernel holds it).

    A block no stored kernel holds is not looked up: its uuid was drawn by a compile
    the store never saw (PyTensor's own cache, or its cache off), so no entry can
    have it, and a lookup would only count a miss.
    """
    dispatcher, _ = compile_args
    context = current_context()
    if not context.enabled or not held_by_a_stored_kernel(dispatcher):
        return _numba_compile(compile_args)
    cache = BlockCache(context, block_key(context, dispatcher, signature),
                       environment_reads(dispatcher))
    with cache.compiling():
        stored = cache.load_overload(signature, dispatcher.targetctx)
        if stored is not None:
            dispatcher.add_overload(stored)
            return stored.entry_point
        entry_point = _numba_compile(compile_args)
        cache.save_overload(signature, dispatcher.overloads[signature])
        return entry_point


