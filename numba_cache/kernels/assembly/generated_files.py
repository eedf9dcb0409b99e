"""PyTensor's generated source files, which numba reads back: a damaged one is written again.

PyTensor writes the source it generates to a file named by the digest of its content
(``m<sha256>.py``; in the store, see :func:`.conversion.generated_source_dir`), reuses
a file of the right size without reading it, compiles from the source in memory and
keeps that source on the function (``__source__``). numba reads the file back: the
type annotation pickled with a compiled function holds its source lines, so a file
that is not the source (damaged in the store) made its kernel unserializable, compiled
again in every process.
"""

from __future__ import annotations

import contextlib
import hashlib
import linecache
import os
import secrets
from pathlib import Path

from numba_cache.store.local import GENERATED_SOURCE_FILE


def restore_source_file(function) -> None:
    """Write the file of `function`'s generated source again if it holds anything else.

    Only a file named by the digest of that very source is written: the name says what
    its content must be. A file that cannot be written is left (the kernel is then not
    stored, as before).
    """
    source = getattr(function, "__source__", None)
    filename = getattr(getattr(function, "__code__", None), "co_filename", "")
    named = GENERATED_SOURCE_FILE.fullmatch(os.path.basename(filename))
    if not isinstance(source, str) or named is None:
        return
    data = source.encode()
    if hashlib.sha256(data).hexdigest() != named[1]:
        return
    path = Path(filename)
    # PyTensor's cleanup of generated source removes a temp file of this name left behind.
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        if path.read_bytes() == data:
            return
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError:
        return
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    linecache.checkcache(filename)
