"""The complete rewrite-registry digest of a partial one, shared through the remote tier.

A rewrite key holds the digest of PyTensor's rewrite registry as if the modules
that register rewrites on import were imported (:func:`numba_cache.keys.rewrites.
complete_rewrites_digest`); a process that has not imported them learns the
complete digest from a note beside its store's entries, or imports them (about
0.17 s: ``scipy.sparse``). A fresh local store has no such note, so the note is
also published to the remote tier, as an entry under a reserved key of its own,
signed like any entry: a fresh machine on a warm tier imports nothing to key its
graphs. The same PyTensor, pinned by the fingerprint the note is filed under,
registers the same rewrites.
"""

from __future__ import annotations

import hashlib
import json

from .record import CorruptEntry

_FORMAT = "numba_cache completed registry 1"


def key(partial: str) -> str:
    """The address of the note for the registry digest `partial` (no kernel's key)."""
    return hashlib.sha256(f"numba_cache: the registry {partial} completed".encode()).hexdigest()


def encode(partial: str, complete: str) -> bytes:
    return json.dumps({"format": _FORMAT, "partial": partial, "complete": complete},
                      sort_keys=True).encode()


def decode(partial: str, data: bytes) -> str:
    """The complete digest a note for `partial` gives; raises :class:`CorruptEntry` for
    anything else (the tier then counts it as damaged)."""
    try:
        note = json.loads(data)
    except ValueError as error:
        raise CorruptEntry(f"not a registry note: {error}") from None
    if not (isinstance(note, dict) and note.get("format") == _FORMAT
            and note.get("partial") == partial and isinstance(note.get("complete"), str)):
        raise CorruptEntry("not a registry note for this digest")
    return note["complete"]
