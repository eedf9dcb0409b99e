"""A helper compiling op kernels ahead, spawned as a new interpreter.

:mod:`.compile_ahead` forks its helper from a process running one Python thread.
Beside other threads (a notebook's kernel runs several) a fork could copy a lock
another thread holds, never to be released: the helper is a new interpreter
(:mod:`.interpreter`), which runs :func:`main` with the file descriptors it shares with it, its process
id, and (pickled with cloudpickle) its settings and work: for each op kernel, the
step that first calls it, its key digest, and, pickled, its node and the
predicted numba signature.

The helper takes the PyTensor flags of the fingerprint from the process it
helps (a notebook may set ``floatX`` in Python), converts each node as that
process did, and compiles the op kernel only if it finds the same key: a node
that pickled to something else, a numba setting changed in Python that the
helper does not have (its fingerprint then differs), cost only its time. The
store's entry lock, the announcements and the meeting point are
:mod:`.compile_ahead`'s, as for a forked helper.
"""
from __future__ import annotations

import mmap
import os


def main(argv: list[str], given) -> None:
    """Help the process `argv` names (``POSITION ANNOUNCE PARENT``) with the settings and
    work pickled in the stream `given` (:mod:`.interpreter`)."""
    from numba_cache.kernels.helpers import compile_ahead

    position_fd, announce, parent = (int(argument) for argument in argv)
    compile_ahead.become_helper(announce)
    if os.getppid() != parent:  # gone before this process could ask to die with it
        return
    import cloudpickle

    from numba_cache._compat import numba_internals
    from numba_cache.kernels.context import adopt_state
    from numba_cache.kernels.assembly.conversion import op_kernel

    payload = cloudpickle.loads(given.read())
    context = adopt_state(payload)
    if not context.enabled:
        return

    def compile_one(item: tuple) -> None:
        digest, pickled = item
        node, signature = cloudpickle.loads(pickled)
        dispatcher, verdict = op_kernel(node, context, {}, {}, {})
        cache = numba_internals.dispatcher_cache(dispatcher)
        if (verdict is None and cache.verdict is None and cache.key.digest == digest
                and not cache.holds(signature)):
            with numba_internals.full_refresh():
                dispatcher.compile(signature)

    position = mmap.mmap(position_fd, compile_ahead.POSITION.size)
    compile_ahead.work_until_met(payload["work"], position, parent, compile_one)
