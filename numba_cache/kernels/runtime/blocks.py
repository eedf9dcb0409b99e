"""Which object-mode blocks the stored kernels hold, and which of them this process compiled.

Shared by :mod:`.cache` (a kernel saved or loaded names its blocks) and
:mod:`.objmode` (a block compiled through the store); see :mod:`.objmode` for
why blocks are stored at all and how they are keyed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from numba.core.dispatcher import ObjModeLiftedWith

from numba_cache import session
from numba_cache._compat import numba_internals
from numba_cache.keys.kernels import object_mode_key

#: Blocks compiled through the store: those of functions defined in these packages.
CACHED_PACKAGES = ("pytensor.",)

# A dispatcher uuid, as pickled (in plain text) into the IR of the kernels holding it:
# ``[0-9a-f]{8}`` then this. Searched for from its first "-", the search skips to each
# "-"; from its first hex digit, it tried every position (60 ms of 4 MB of IR).
_UUID_AFTER_FIRST_PART = re.compile(r"-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID_FIRST_PART = re.compile(r"[0-9a-f]{8}")


def named_blocks(*texts: str) -> list[str]:
    """The uuids of the blocks named in `texts` (a kernel's LLVM IR, or their list),
    sorted: the list a kernel's entry keeps, so that a process loading the kernel
    knows its blocks too."""
    return sorted({uuid for text in texts for uuid in _uuids(text)})


def _uuids(text: str) -> Iterator[str]:
    """What ``re.findall`` of the whole uuid pattern finds in `text`: the eight digits
    just before each rest of one, where they do not overlap the uuid found before."""
    found_until = 0
    for rest in _UUID_AFTER_FIRST_PART.finditer(text):
        start = rest.start() - 8
        if start >= found_until and _UUID_FIRST_PART.fullmatch(text, start, rest.start()):
            found_until = rest.end()
            yield text[start:found_until]


def note_blocks(blocks: list[str]) -> None:
    """Remember `blocks` as held by a kernel in the store."""
    session.current().blocks_of_stored_kernels.update(blocks)


def held_by_a_stored_kernel(dispatcher) -> bool:
    return numba_internals.dispatcher_uuid(dispatcher) in session.current().blocks_of_stored_kernels


def compiled_here_unstored(blocks: list[str]) -> Iterator[tuple]:
    """``(dispatcher, signature, compile result)`` of the blocks among `blocks` compiled
    in this process and not yet stored by it; each is yielded once per process.

    numba compiles a block while typing the function holding it, so the process
    storing a kernel has its blocks compiled, whether or not the kernel ever
    runs here (``numba-cache warm`` compiles kernels without running them).
    """
    stored_here = session.current().blocks_stored_here
    for block in blocks:
        dispatcher = numba_internals.block_dispatcher(block)
        if dispatcher is None or not is_cached_block(dispatcher):
            continue
        for signature, compiled in list(dispatcher.overloads.items()):
            if (block, signature) not in stored_here:
                stored_here.add((block, signature))
                yield dispatcher, signature, compiled


def block_key(context, dispatcher, signature):
    function = dispatcher.func_ir.func_id
    return object_mode_key(numba_internals.dispatcher_uuid(dispatcher),
                           f"{_module_of(dispatcher)}.{function.func_qualname}",
                           str(signature), context.fingerprint)


def environment_reads(dispatcher) -> list[str]:
    """The globals the block's code reads from its environment at run time."""
    return sorted(numba_internals.ir_global_names(dispatcher.func_ir))


def is_cached_block(dispatcher) -> bool:
    return isinstance(dispatcher, ObjModeLiftedWith) and _module_of(dispatcher).startswith(
        CACHED_PACKAGES)


def _module_of(dispatcher) -> str:
    """The module of the function holding the block, by the name the function carries:
    numba's ``func_id.modname`` reads ``<dynamic>`` for a function unpickled while its
    module is not imported (:mod:`.detached`)."""
    return numba_internals.block_function(dispatcher).__module__ or ""
