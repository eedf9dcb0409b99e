"""What an entry holds: the name of each blob, how each is encoded, and the components
by which one entry names another.

:mod:`.record` frames an entry's blobs as bytes on disk; this module says what the
blobs are. A blob written by one module and read by another (a kernel's cache and
its collision detector, a rewrite entry and ``verify``) is named and encoded here
only, so the format of an entry can be read, and changed, in one place. Changing a
name or an encoding is a format change: existing stores would stop loading, so it
goes with a new key format version (:mod:`numba_cache.versions`).

Encodings that need numba or PyTensor stay with the code that makes them, named here
with the module that encodes them: a kernel's compile result
(:mod:`numba_cache.kernels.protocol.serialize`), a rewritten graph's outputs
(:mod:`numba_cache.rewritten.rewrite_cache`), numba's runtime library (its object
code and bitcode, as numba gives them).

Entries by kind:

- a **kernel** (``graph``, ``op``, ``objmode``, ``cfunc``): per numba signature, its
  compile result (:func:`overload_blob_name`), the symbols its code defines
  (:func:`symbols_blob_name`), the op kernels it calls by symbol
  (:func:`op_links_blob_name`) and the digest of its IR (:func:`ir_digest_blob_name`);
  once per entry, its object-mode blocks (:data:`BLOCKS_BLOB`) and what they read of
  PyTensor's dispatch (:data:`DETACHED_BLOB`), the warnings of its
  conversion (:data:`WARNINGS_BLOB`) and, for a C callback, the symbols its code needs
  (:data:`CFUNC_LINKS_BLOB`);
- the **runtime**: :data:`RUNTIME_OBJECT_BLOB`, :data:`RUNTIME_BITCODE_BLOB`,
  :data:`RUNTIME_SYMBOLS_BLOB`;
- a **rewrite**: :data:`REWRITE_BLOBS`, :data:`REWRITE_DATA_BLOB` when it is keyed
  by its data's type and shape, and :data:`WARNINGS_BLOB` when rewriting warned;
- any entry may hold :data:`SOURCE_BLOB`, the source a store keeps a ``.py`` copy of.
"""

from __future__ import annotations

import json
import pickle

from .entry import is_sha256_hex

# -- Kernel entries: one blob of each kind per numba signature -------------------------

_OVERLOAD_PREFIX = "kernel:"
_SYMBOLS_PREFIX = "symbols:"
_OP_LINKS_PREFIX = "op-links:"
#: "ir3:" digests leave out what differs with the process's history (pickled constants
#: and their lengths, local names, ``freeze``: :mod:`numba_cache.kernels.outcomes.collisions`);
#: the "ir:" and "ir2:" digests of older entries (ir2 counted the lengths) are not
#: compared, rather than seen as collisions.
_IR_DIGEST_PREFIX = "ir3:"
#: The digest of the same code as its module stood before numba's module passes.
_MODULE_DIGEST_PREFIX = "ir-before-module-passes:"


def overload_blob_name(signature) -> str:
    """The blob of the compile result for `signature` (:mod:`numba_cache.kernels.protocol.serialize`)."""
    return f"{_OVERLOAD_PREFIX}{signature}"


def symbols_blob_name(signature) -> str:
    """The blob listing the symbols the code for `signature` defines (:func:`encode_symbols`)."""
    return f"{_SYMBOLS_PREFIX}{signature}"


def op_links_blob_name(signature) -> str:
    """The blob listing the op kernels the code for `signature` calls (:func:`encode_op_links`)."""
    return f"{_OP_LINKS_PREFIX}{signature}"


def is_op_links_blob(name: str) -> bool:
    """Whether the blob `name` is one of :func:`op_links_blob_name`'s."""
    return name.startswith(_OP_LINKS_PREFIX)


def ir_digest_blob_name(signature) -> str:
    """The blob holding the digest of the IR compiled for `signature` (:func:`encode_digest`)."""
    return f"{_IR_DIGEST_PREFIX}{signature}"


def module_digest_blob_name(signature) -> str:
    """The blob holding the digest of the code compiled for `signature` as it stood
    before numba's module passes (:func:`encode_digest`); kernels optimised lightly
    have none."""
    return f"{_MODULE_DIGEST_PREFIX}{signature}"


def overload_blob_names(signature) -> tuple[str, ...]:
    """The blobs that serve one signature's overload: its own, and the entry's
    object-mode blocks (which may name any signature's)."""
    return (overload_blob_name(signature), symbols_blob_name(signature),
            op_links_blob_name(signature), ir_digest_blob_name(signature),
            module_digest_blob_name(signature), BLOCKS_BLOB, DETACHED_BLOB)


# -- Kernel entries: one blob of each kind per entry ------------------------------------

#: The uuids of the object-mode blocks a kernel's code holds (:func:`encode_blocks`).
BLOCKS_BLOB = "objmode_blocks"
#: The namespaces those blocks read of PyTensor's dispatch, a pickle made and read by
#: :mod:`numba_cache.kernels.runtime.detached`.
DETACHED_BLOB = "objmode_namespaces"
#: The warnings of a graph's conversion, told again on a hit (:func:`encode_warnings`).
WARNINGS_BLOB = "warnings"
#: What a C callback's code needs its process to define (:func:`encode_cfunc_links`).
CFUNC_LINKS_BLOB = "links"

# -- The runtime entry: numba's runtime library ----------------------------------------

RUNTIME_OBJECT_BLOB = "object"
RUNTIME_BITCODE_BLOB = "bitcode"
#: The symbols the runtime library defines (:func:`encode_symbols`).
RUNTIME_SYMBOLS_BLOB = "symbols"

# -- Rewrite entries --------------------------------------------------------------------

#: The rewritten graph's outputs (:mod:`numba_cache.rewritten.rewrite_cache`).
REWRITTEN_GRAPH_BLOB = "graph"
#: The whole key of the graph kernel the rewritten graph compiles to (:func:`encode_graph_key`).
GRAPH_KEY_BLOB = "graph_key"
#: The digest of the graph kernel's generated source (:func:`encode_digest`).
KERNEL_SOURCE_BLOB = "kernel_source"
#: The blobs a cacheable rewrite entry cannot be restored without.
REWRITE_BLOBS = (REWRITTEN_GRAPH_BLOB, GRAPH_KEY_BLOB, KERNEL_SOURCE_BLOB)
#: What the rewrite asked of its data, for a rewrite keyed by data type and shape
#: (:func:`encode_rewrite_data`).
REWRITE_DATA_BLOB = "data"

# -- Any entry --------------------------------------------------------------------------

#: The source a store keeps a readable ``.py`` copy of.
SOURCE_BLOB = "source"

# -- Components by which an entry names another -----------------------------------------

#: A rewrite entry's component naming the digest of its graph kernel.
GRAPH_KERNEL_COMPONENT = "graph_kernel"
#: An object-mode block entry's component holding the block's uuid.
BLOCK_COMPONENT = "block"


# -- Encodings --------------------------------------------------------------------------

def encode_symbols(names: list[str]) -> bytes:
    """A list of symbol names, one a line."""
    return "\n".join(names).encode()


def decode_symbols(blob: bytes) -> list[str]:
    return [name for name in blob.decode().split("\n") if name]


def encode_op_links(calls) -> bytes:
    """``(op key digest, pickled numba signature, symbol)`` per op kernel called: sorted
    JSON rows, the signature in hex."""
    rows = sorted({(key, signature.hex(), symbol) for key, signature, symbol in calls})
    return json.dumps(rows).encode()


def decode_op_links(blob: bytes) -> list[tuple[str, bytes, str]]:
    return [(key, bytes.fromhex(signature), symbol)
            for key, signature, symbol in json.loads(blob)]


def encode_code_digests(signature, final: str, before_module_passes: str | None) -> dict:
    """The blobs recording the digests of the code compiled for `signature`: of its final
    IR, and of its module before numba's module passes if there is one."""
    blobs = {ir_digest_blob_name(signature): encode_digest(final)}
    if before_module_passes is not None:
        blobs[module_digest_blob_name(signature)] = encode_digest(before_module_passes)
    return blobs


def decode_code_digests(blobs: dict, signature) -> tuple[str, str | None] | None:
    """The digests :func:`encode_code_digests` recorded in `blobs`, or None if none were."""
    final = blobs.get(ir_digest_blob_name(signature))
    if final is None:
        return None
    before = blobs.get(module_digest_blob_name(signature))
    return decode_digest(final), None if before is None else decode_digest(before)


def encode_digest(hex_digest: str) -> bytes:
    """A hex digest, as ASCII (an IR digest, a kernel source's)."""
    return hex_digest.encode()


def decode_digest(blob: bytes) -> str:
    return blob.decode()


def encode_blocks(uuids: list[str]) -> bytes:
    """Object-mode block uuids, one a line."""
    return "\n".join(uuids).encode()


def decode_blocks(blob: bytes | None, errors: str = "strict") -> list[str]:
    """The uuids in a blocks blob; none for an entry without one. `errors` as for
    :meth:`bytes.decode`: ``verify`` reads what it can of a damaged blob."""
    return [] if blob is None else blob.decode(errors=errors).split()


def encode_warnings(recorded: list[dict]) -> bytes:
    """Recorded warnings (:mod:`numba_cache.kernels.outcomes.replay`), as a JSON list."""
    return json.dumps(recorded).encode()


def decode_warnings(blob: bytes | None) -> list[dict]:
    """The warnings stored in `blob`; none for an entry stored without any."""
    if not blob:
        return []
    return json.loads(blob)


def encode_cfunc_links(fields: dict) -> bytes:
    """A C callback's links (:mod:`numba_cache.kernels.callbacks.links`), as JSON with sorted keys."""
    return json.dumps(fields, sort_keys=True).encode()


def decode_cfunc_links(blob: bytes) -> dict:
    return json.loads(blob)


def encode_graph_key(kind: str, summary: str, components: dict, digest: str) -> bytes:
    """A graph kernel's whole key, as JSON with sorted keys."""
    fields = {"kind": kind, "summary": summary, "components": components, "digest": digest}
    return json.dumps(fields, sort_keys=True).encode()


def decode_graph_key(blob: bytes):
    """The fields :func:`encode_graph_key` wrote; raises ValueError (or TypeError) when
    `blob` is not JSON."""
    return json.loads(blob)


def graph_key_fields(entry) -> dict:
    """The graph kernel key a rewrite `entry` (an :class:`~.entry.Entry`) promises, as stored (``kind``, ``summary``,
    ``components``, ``digest``); raises ValueError when the promise cannot be honoured."""
    missing = [name for name in REWRITE_BLOBS if name not in entry.blobs]
    if missing:
        raise ValueError(f"rewrite entry without its {', '.join(missing)} blob")
    try:
        fields = decode_graph_key(entry.blobs[GRAPH_KEY_BLOB])
        kind, digest, components = fields["kind"], fields["digest"], fields["components"]
    except (ValueError, TypeError, KeyError):
        raise ValueError("unreadable graph key (not the JSON this version writes)") from None
    if kind != "graph":
        raise ValueError(f"its graph key is of kind {kind!r}, not 'graph'")
    if digest != entry.components.get(GRAPH_KERNEL_COMPONENT) or not is_sha256_hex(digest):
        raise ValueError(f"its graph key {str(digest)[:12]} is not the graph kernel it names")
    if components.get("fingerprint", entry.fingerprint) != entry.fingerprint:
        raise ValueError("its graph key is of another environment fingerprint")
    return fields


def encode_rewrite_data(fields: dict) -> bytes:
    """What a rewrite asked of its data (``questions``, ``answers``, ``folds``, ``slots``,
    ``equalities``),
    pickled: the slots hold PyTensor types."""
    return pickle.dumps(fields)


def decode_rewrite_data(blob: bytes) -> dict:
    return pickle.loads(blob)
