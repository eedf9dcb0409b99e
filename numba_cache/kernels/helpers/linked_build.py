"""The linked build: graph kernels rebuilt with their op kernels linked in, in the background.

A graph kernel that calls its op kernels by symbol (the by-symbol build, :mod:`.symbol_calls`)
compiles only its glue, but its calls are not inlined. Under the
``link_in_background`` setting, once a by-symbol graph kernel is served for a numba
signature (loaded, or compiled and stored), a helper process builds the same
graph with its op kernels linked in, under the key ``link_op_kernels`` gives it
(:func:`numba_cache.keys.kernels.linked_key`), and stores it; later processes
load that kernel (the linked build) instead, for that signature. A process does not swap
kernels while it runs: the kernel it called first is the one it keeps.

Why it is a setting, off by default: once inlined, the op kernels' code is
optimised again under PyTensor's fastmath flags (reassociation, contraction), so
the linked build's results can differ from the by-symbol build's in the last bits. A process before the
build and one after it can then disagree in the last bits, which numba_cache
otherwise never lets happen. The linked build gives the bits ``link_op_kernels`` gives,
within the same ULP bound of ``NUMBA``.

The helper (:mod:`.linking_helper`) is one new interpreter per process, started
at its first request, at a lower priority and in a session of its own. This
process writes each job to a file and sends its path; the helper ends once this
process has ended (its input closes) and its jobs are done. Each build is
claimed in the store (a side file), so that processes sharing a store build a
kernel once, and a failed build is not tried again for a day
(:meth:`numba_cache.store.Store.claim_linking`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from numba_cache import session
from numba_cache.kernels.helpers import interpreter
from numba_cache.kernels.outcomes import report
from numba_cache.keys.kernels import linked_key

#: The helper's program: the import path, then :func:`.linking_helper.main` on its input.

class LinkedBuild:
    """The way from a by-symbol graph kernel (`key`, of `fgraph` run in `order`) to its
    linked build."""

    def __init__(self, context, fgraph, order: list, key):
        self._context = context
        self._fgraph = fgraph
        self._order = order
        self.key = linked_key(key)

    def request(self, signature) -> None:
        """Have the linked kernel built for `signature`, which the store does not hold,
        unless it is being built, failed lately, or this process asked for it already."""
        context, digest = self._context, self.key.digest
        fingerprint = context.fingerprint.digest
        requested = session.current().linked_builds_requested
        if (digest, signature) in requested:
            return
        requested.add((digest, signature))
        if not context.enabled or context.store.readonly:
            return
        if not context.store.claim_linking(fingerprint, digest, context.settings.lock_timeout):
            return
        try:
            path = _job_file(context, self._fgraph, self._order, signature, digest)
            _send(path)
        except Exception as exc:  # the linked build only saves call time: never fail a compile
            context.store.release_linking(fingerprint, digest, f"not sent to the helper: {exc!r}")
            report.record(context, "linking:failed")
            report.logger.debug("linked build of %s not started: %r", self.key.short, exc)
            return
        report.record(context, "linking:requested")


def _job_file(context, fgraph, order: list, signature, digest: str) -> str:
    """A file holding the job for the helper: the graph, its node order (its source's,
    which the helper's own graph of these nodes need not toposort to), the signature,
    what to check."""
    import cloudpickle

    from numba_cache.kernels.context import helper_state

    job = cloudpickle.dumps({
        **helper_state(context.settings),
        "fingerprint": context.fingerprint.digest,
        "key": digest,
        "inputs": fgraph.inputs,
        "outputs": fgraph.outputs,
        "order": order,
        "signature": signature,
    })
    handle, path = tempfile.mkstemp(prefix="nbcache-link-", suffix=".job")
    with os.fdopen(handle, "wb") as file:
        file.write(job)
    return path


def _send(path: str) -> None:
    """Give the job file `path` to this process's helper, started if need be."""
    helpers = session.current().linking_helpers  # by process id: a forked child starts its own
    for attempt in range(2):
        process = helpers.get(os.getpid())
        if process is None or process.poll() is not None:
            process = helpers[os.getpid()] = _start_helper()
        try:
            process.stdin.write(f"{path}\n".encode())
            process.stdin.flush()
            return
        except BrokenPipeError:  # the helper died: start another, once
            if attempt:
                raise
            helpers.pop(os.getpid(), None)


def _start_helper() -> subprocess.Popen:
    return interpreter.start("numba_cache.kernels.helpers.linking_helper", [],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)


def running_builds(store, stale_after: float) -> list[dict]:
    """The claims of builds running in `store` (those not stale after `stale_after` s)."""
    now = time.time()
    return [claim for claim in store.linking_claims()
            if claim["state"] == "building" and now - claim["since"] < stale_after]


def wait_for_builds(store, stale_after: float, poll: float = 0.2) -> list[dict]:
    """Wait until no build runs in `store` (at most `stale_after` s, when claims go
    stale); the claims of failed builds then."""
    while running_builds(store, stale_after):
        time.sleep(poll)
    return [claim for claim in store.linking_claims() if claim["state"] == "failed"]
