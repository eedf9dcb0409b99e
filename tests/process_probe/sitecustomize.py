"""Records every numba compile of every Python process that starts with this folder on its path.

Put on ``PYTHONPATH`` by tests/test_pymc.py, with ``NBCACHE_TEST_COMPILE_LOG`` naming a
folder: each process (and each child it forks) writes ``<pid>.jsonl`` there, one
``started`` line, then one line for each function numba compiles. Samplers start
their workers themselves, so this is how a test sees inside them.
"""

import json
import os

_folder = os.environ.get("NBCACHE_TEST_COMPILE_LOG")


def _write(record: dict) -> None:
    with open(os.path.join(_folder, f"{os.getpid()}.jsonl"), "a") as log:
        log.write(json.dumps(record) + "\n")


def _install() -> None:
    from numba.core import event

    class CompileLog(event.Listener):
        def on_start(self, ev):
            function = ev.data["dispatcher"].py_func
            _write({"module": function.__module__, "name": function.__qualname__})

        def on_end(self, ev):
            pass

    event.register("numba:compile", CompileLog())
    _write({"started": os.getppid()})
    os.register_at_fork(after_in_child=lambda: _write({"started": os.getppid()}))


if _folder:
    _install()
