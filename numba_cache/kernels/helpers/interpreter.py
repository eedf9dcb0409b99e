"""Helper interpreters: a new Python process running one helper module's ``main``.

Both helpers that are new interpreters (:mod:`.spawned_helper`, :mod:`.linking_helper`)
start the one way :func:`start` starts them. The first line of a helper's input is
this process's import path, as multiprocessing's spawn gives it: the helper imports
the numba_cache (and PyTensor) this process imported, which ``python -m`` could not
find before the path is set. The rest of the input is the helper's own, read by
``main(arguments, stream)`` of its module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

#: What the helper interpreter runs first: the import path, then the module's main.
_BOOTSTRAP = ("import importlib, json, sys\n"
              "sys.path[:] = json.loads(sys.stdin.buffer.readline())\n"
              "importlib.import_module(sys.argv[1]).main(sys.argv[2:], sys.stdin.buffer)\n")


def start(module: str, arguments: list[str], given: bytes | None = None,
          **options) -> subprocess.Popen:
    """Start a helper interpreter running ``module.main(arguments, stream)``, with the
    other `options` of :class:`subprocess.Popen`. Its input is `given`, read from a file,
    or else a pipe, the process's ``stdin``, to write to."""
    command = [sys.executable, "-c", _BOOTSTRAP, module, *arguments]
    import_path = (json.dumps(sys.path) + "\n").encode()
    if given is None:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, **options)
        process.stdin.write(import_path)
        process.stdin.flush()
        return process
    with tempfile.TemporaryFile() as stream:
        stream.write(import_path + given)
        stream.seek(0)
        return subprocess.Popen(command, stdin=stream, **options)
