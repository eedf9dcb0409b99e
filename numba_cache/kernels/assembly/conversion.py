"""Converting PyTensor ops to numba kernels, on a miss only.

Each op goes through PyTensor's own numba dispatch (``numba_funcify_and_cache_key``),
so every op PyTensor supports is supported, and third-party ops registered with
``register_funcify_and_cache_key`` work unchanged. The returned implementation
becomes an op kernel with its own key and cache entry (compiled itself, or called
from a generated wrapper: :mod:`.op_function`): the level 3 of the cache, which
lets a new graph made of known ops skip their compiles.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import tempfile
from pathlib import Path

from numba_cache import session
from numba_cache.codegen.sources import identifier
from numba_cache.kernels.assembly.length_generic import length_generic
from numba_cache.kernels.assembly.op_function import op_function
from numba_cache.kernels.outcomes import replay
from numba_cache.kernels.protocol.op_cache import OpKernelCache
from numba_cache.kernels.outcomes.report import record_reuse
from numba_cache.kernels.outcomes.uncacheable import Uncacheable, registered_reason, unkeyed
from numba_cache.keys.kernels import op_kernel_key
from numba_cache.store.local import GENERATED_SOURCE_DIR

#: How PyTensor's warning that an op falls back to its perform method begins.
OBJECT_MODE_FALLBACK = "Numba will use object mode"


def op_kernel(node, context, storage_map: dict, ofg_memo: dict, converted: dict):
    """A cached numba dispatcher computing `node`, and its uncacheable verdict if any.

    `converted` remembers, over one graph, which op kernel served a node (by
    :func:`_conversion_inputs`) and what its conversion warned: a node like one
    before it is not converted again, its warnings are told again.
    """
    from pytensor import config

    like = _conversion_inputs(node)
    if like in converted:
        digest, said = converted[like]
        replay.emit(said)
        record_reuse("op")
        return context.op_kernels[digest], None
    op = node.op
    with replay.recording() as said:
        impl, pytensor_key = _converted(node, context, storage_map, ofg_memo)
    verdict = registered_reason(op)
    if verdict is None and pytensor_key is None:
        verdict = _no_key_verdict(op, said)
    try:
        key = op_kernel_key(node, str(pytensor_key), context.fingerprint)
    except Exception as exc:  # keying never fails a compile: the kernel is not persisted
        key, verdict = unkeyed("op", f"op {str(op)[:60]}", exc)
    if verdict is None and key.digest in context.op_kernels:
        _remember(converted, like, key, said)
        record_reuse("op")
        return context.op_kernels[key.digest], None

    made = op_function(impl, len(node.inputs), f"{identifier(type(op).__name__)}_{key.short}",
                       context.source_label(key, verdict))
    cache = OpKernelCache(context, key, made.source, verdict=verdict)
    dispatcher = made.dispatcher(cache, config.numba__fastmath)
    if verdict is None:
        context.op_kernels[key.digest] = dispatcher
        _remember(converted, like, key, said)
    return dispatcher, verdict


def _remember(converted: dict, like: tuple | None, key, said: list[dict]) -> None:
    if like is not None:
        converted[like] = (key.digest, said)


def _conversion_inputs(node) -> tuple | None:
    """All that PyTensor's conversion of `node` reads: its op, the types of its inputs
    and outputs, and its constant inputs. Two nodes alike in these get the same
    implementation and key; None when that cannot be told by hashing.

    Constants are compared as objects, not by value: PyTensor's own comparison of
    values holds 0.0 and -0.0 equal, and its rewrites already merged equal constants
    into one object (on the large benchmark model, as many nodes are found alike)."""
    from pytensor.graph.basic import Constant

    like = (node.op,
            tuple(("constant", variable) if isinstance(variable, Constant)
                  else variable.type for variable in node.inputs),
            tuple(variable.type for variable in node.outputs))
    try:
        hash(like)
    except TypeError:
        return None
    return like


def _no_key_verdict(op, said: list[dict]) -> Uncacheable:
    """Why PyTensor gave `op` no cache key: object mode when its conversion said so."""
    if any(warning["message"].startswith(OBJECT_MODE_FALLBACK) for warning in said):
        return Uncacheable(
            "object-mode-op",
            f"PyTensor runs {type(op).__qualname__} in object mode (its perform method, "
            "at Python speed, on every call)",
        )
    return Uncacheable(
        "no-pytensor-key",
        f"PyTensor's numba conversion of {type(op).__qualname__} gives no cache key "
        "(a legacy registration or an explicit opt-out)",
    )


def pytensor_key_of(node, context):
    """The cache key of converting `node` on its own (an op kernel's, to compare)."""
    return _converted(node, context, {}, {})[1]


def _converted(node, context, storage_map: dict, ofg_memo: dict) -> tuple:
    """`node`'s numba implementation and its cache key: ours for an op whose PyTensor
    conversion bakes a length in (:mod:`.length_generic`), else PyTensor's."""
    if (generic := length_generic(node.op, node)) is not None:
        return generic
    return _funcify(node, context, storage_map, ofg_memo)


def _funcify(node, context, storage_map: dict, ofg_memo: dict):
    """PyTensor's numba implementation of `node` and its cache key.

    PyTensor writes the source it generates to a file (see
    :func:`generated_source_dir`). When that fails in the store (a full disk, an I/O
    error), the conversion is done again with a private directory, and the store's
    one write warning given: the cache must never make a compile fail.
    """
    from pytensor import config
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    directory = generated_source_dir(context)
    try:
        with config.change_flags(generated_src_dir=str(directory)):
            return numba_funcify_and_cache_key(
                node.op, node=node, storage_map=storage_map, ofg_memo=ofg_memo
            )
    except OSError as error:
        if directory == _private_source_dir():
            raise
        context.store.report_write_error(context.fingerprint.digest, error)
    with config.change_flags(generated_src_dir=str(_private_source_dir())):
        return numba_funcify_and_cache_key(
            node.op, node=node, storage_map=storage_map, ofg_memo=ofg_memo
        )


def generated_source_dir(context) -> Path:
    """Where PyTensor's own generated source goes while we convert ops.

    PyTensor writes the source of some conversions (Scan, OpFromGraph, inner
    graphs) to a new file in the system temp directory unless
    ``config.generated_src_dir`` is set; we point it into the store (content-
    addressed, shared, pruned by PyTensor's age-based cleanup), or, for a store
    we may not write, into a private directory removed at exit.
    """
    if context.enabled and not context.settings.readonly:
        directory = context.store.root / context.fingerprint.digest / GENERATED_SOURCE_DIR
        with contextlib.suppress(OSError):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            return directory
    return _private_source_dir()


def _private_source_dir() -> Path:
    state = session.current()
    if state.private_source_dir is None:
        state.private_source_dir = Path(tempfile.mkdtemp(prefix="numba_cache_src_"))
        atexit.register(shutil.rmtree, state.private_source_dir, ignore_errors=True)
    return state.private_source_dir
