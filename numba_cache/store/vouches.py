"""Vouches: the word of the shared tier that the self-test passed for a fingerprint.

The self-test (:mod:`numba_cache.kernels.context`) compiles probe kernels once per
fingerprint and local store; a CI job starting with an empty store would pay it
every time. A process whose self-test passed publishes a vouch to the remote
tier: the fingerprint's components under the reserved key :data:`KEY`, sent
through :meth:`~.remote.RemoteTier.publish` like any entry, so it is signed with
the shared secret over the fingerprint and the key. A new store whose tier
holds a vouch for the exact fingerprint digest (every package version, the CPU,
numba's and PyTensor's settings) skips the checks that compile: they would
compile the same code with the same numba and give the same answer.
"""

from __future__ import annotations

import hashlib
import json

from .record import CorruptEntry

#: The address of a fingerprint's vouch on the tier: no kernel's key (a SHA-256 of
#: its components) is this one.
KEY = hashlib.sha256(b"numba_cache: the self-test passed for this fingerprint").hexdigest()
_FORMAT = "numba_cache vouch 1"


def encode(fingerprint: str, components: dict) -> bytes:
    return json.dumps({"format": _FORMAT, "fingerprint": fingerprint, "components": components},
                      sort_keys=True).encode()


def decode(fingerprint: str, data: bytes) -> dict:
    """The components a vouch for `fingerprint` carries; raises :class:`CorruptEntry` for
    anything else (the tier then counts it as damaged and deletes it)."""
    try:
        vouch = json.loads(data)
    except ValueError as error:
        raise CorruptEntry(f"not a vouch: {error}") from None
    if not (isinstance(vouch, dict) and vouch.get("format") == _FORMAT
            and vouch.get("fingerprint") == fingerprint
            and isinstance(vouch.get("components"), dict)):
        raise CorruptEntry("not a vouch for this fingerprint")
    return vouch["components"]
