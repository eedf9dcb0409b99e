"""Hidden constant arrays as process-wide symbols that machine code can name.

Code that must survive its process (a cached ``numba.cfunc`` around an entry
point, :mod:`.cfunc`) cannot hold the address of a buffer: it names the buffer
by a symbol made of the array's content digest, and each process registers the
symbol (``llvmlite.binding.add_symbol``) for its own buffer of that content
before such code is loaded.

A registered symbol is never moved: the first buffer registered under a digest
stays referenced (by the session) for the life of the process, so a symbol never dangles and
never switches to another buffer under code that uses it. Buffers are PyTensor
constants' data, which PyTensor never mutates.
"""

from __future__ import annotations

import hashlib

import numpy as np

from numba_cache import session

PREFIX = "numba_cache_hidden_"


def symbol_for(value: np.ndarray) -> str:
    """The symbol naming `value`'s content, registered in this process for a buffer of it."""
    import llvmlite.binding as llvm

    if not value.flags.c_contiguous:
        raise ValueError("hidden values are C-contiguous arrays")
    content = hashlib.sha256(f"{value.dtype.str}{value.shape}".encode())
    content.update(value)
    name = PREFIX + content.hexdigest()
    buffers = session.current().hidden_buffers
    if name not in buffers:
        buffers[name] = value
        llvm.add_symbol(name, value.ctypes.data)
    return name


def is_registered(name: str) -> bool:
    return name in session.current().hidden_buffers
