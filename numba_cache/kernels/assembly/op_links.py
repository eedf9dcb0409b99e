"""The op kernels a graph kernel calls by symbol: recorded when it is stored, loaded before it is.

A graph kernel calls each op kernel by its symbol (:mod:`.symbol_calls`), so
its object code can be loaded only once every op kernel it calls is loaded in
the process under the symbol it had when the graph was compiled (loading code
with an undefined symbol ends the process). The graph's entry therefore lists,
per numba signature, each op kernel's key, signature and symbol
(:func:`encode`), and :func:`meet` loads them from the store before the graph,
without converting a single op.

This process's op kernels are kept by key and signature (:func:`note`,
:func:`compiled`), whether compiled here or loaded, so that no kernel is loaded
twice (a second copy would define its symbols twice) and a dispatcher made
later for the same op reuses the code already loaded.

A graph whose op kernels cannot all be met (an op entry evicted, damaged, or
replaced by a compile under another symbol) is a miss: it is compiled again,
against the op kernels as they are now, and its entry replaced.
"""

from __future__ import annotations

from numba_cache import session
from numba_cache.store import entry_layout


def note(key_digest: str, signature: tuple, compiled, from_store: bool = False,
         replace: bool = False):
    """Serve `compiled` as the op kernel of `key_digest` for `signature` in this process,
    unless one already is (or `replace`: the one served was found to be another op's);
    the one served."""
    address = (key_digest, tuple(signature))
    state = session.current()
    with state.op_kernels_lock:
        if replace or address not in state.op_kernels:
            state.op_kernels[address] = compiled
            if from_store:
                state.op_kernels_from_store.add(address)
            else:
                state.op_kernels_from_store.discard(address)
        return state.op_kernels[address]


def loaded_from_store(key_digest: str, signature: tuple) -> bool:
    """True if the op kernel :func:`compiled` gives was loaded from the store, not compiled here."""
    state = session.current()
    with state.op_kernels_lock:
        return (key_digest, tuple(signature)) in state.op_kernels_from_store


def compiled(key_digest: str, signature: tuple):
    """The op kernel of `key_digest` for `signature` loaded in this process, or None.

    It comes without the compile's metadata, as a kernel loaded from a cache does:
    numba records a compile's timings in it once, and refuses to do it twice.
    """
    state = session.current()
    with state.op_kernels_lock:
        kernel = state.op_kernels.get((key_digest, tuple(signature)))
    return None if kernel is None else kernel._replace(metadata=None)


def encode(calls: list[tuple[str, tuple, str]]) -> bytes:
    """The links blob of a graph kernel: ``(op key digest, signature, symbol)`` per op kernel."""
    from numba.core import serialize

    return entry_layout.encode_op_links(
        (key, serialize.dumps(signature), symbol) for key, signature, symbol in calls)


def meet(context, payload: bytes, target_context, load_op) -> str | None:
    """Load the op kernels `payload` (:func:`encode`) lists; why they cannot be met, or None.

    `load_op(entry, signature, target_context)` rebuilds a signature's kernel from an
    op entry (the kernel cache's own loading, with its reports and repairs).
    """
    from numba.core import serialize

    for key_digest, pickled_signature, symbol in entry_layout.decode_op_links(payload):
        signature = serialize.loads(pickled_signature)
        kernel = compiled(key_digest, signature)
        if kernel is None:
            entry = context.store.load(context.fingerprint.digest, key_digest)
            kernel = None if entry is None else load_op(entry, signature, target_context)
            if kernel is None:
                return f"op kernel {key_digest[:12]} is not in the store"
            kernel = note(key_digest, signature, kernel, from_store=True)
        if kernel.fndesc.mangled_name != symbol:
            return f"op kernel {key_digest[:12]} was compiled again under another symbol"
    return None
