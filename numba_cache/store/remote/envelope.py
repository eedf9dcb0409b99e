"""What travels to and from the shared server: a record, compressed and signed.

An envelope is::

    b"NBREMOT1" | HMAC-SHA256 (32 bytes) | SHA-256 of the payload (32 bytes) | payload

where the payload is zlib of ``record length (8 bytes, big-endian) | record | source``
(``source`` is the entry's readable copy, possibly empty). The HMAC, keyed with the
shared secret, covers the magic, the fingerprint, the key and the payload: an entry
moved to another key or fingerprint fails it like a forged one. The plain SHA-256
tells damage (a bit flip, a truncated write) from a wrong signature (another secret,
or a forgery): damaged entries may be deleted, wrongly signed ones are only refused.

Entries are pickles, so the signature is checked before anything is decompressed or
decoded; :func:`open_envelope` raises rather than return anything unverified.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

from ... import versions

MAGIC = b"NBREMOT%d" % versions.REMOTE_ENVELOPE
_LENGTH = struct.Struct(">Q")
_DIGEST_SIZE = 32
_HEADER_SIZE = len(MAGIC) + 2 * _DIGEST_SIZE
#: zlib level 6 (its default) gets most of level 9's ratio on kernels at a third of the time.
COMPRESSION_LEVEL = 6


class DamagedEnvelope(Exception):
    """The envelope is not intact (truncated, bit-flipped, not an envelope at all)."""


class BadSignature(Exception):
    """The envelope is intact but not signed with our secret, or not for this address."""


class TooLarge(Exception):
    """The envelope is intact and ours, but its payload inflates past the limit given."""


#: How many times its envelope's size a payload may inflate to: records of object code and
#: pickles shrink to a third or so, text of one repeated line a few hundred times; zlib's
#: limit is about a thousand, which only a stream made to inflate (a bomb) comes near.
INFLATION_LIMIT = 512


def seal(fingerprint: str, key: str, record: bytes, source: bytes, secret: bytes) -> bytes:
    """The envelope of `record` (and its readable `source`) at (`fingerprint`, `key`)."""
    payload = zlib.compress(_LENGTH.pack(len(record)) + record + source, COMPRESSION_LEVEL)
    signature = _sign(secret, fingerprint, key, payload)
    return MAGIC + signature + hashlib.sha256(payload).digest() + payload


def open_envelope(
    envelope: bytes, fingerprint: str, key: str, secret: bytes
) -> tuple[bytes, bytes]:
    """``(record, source)`` from a verified envelope of (`fingerprint`, `key`).

    Raises :class:`DamagedEnvelope` for damage, :class:`BadSignature` when the HMAC
    does not match, :class:`TooLarge` for a payload that would inflate past
    :data:`INFLATION_LIMIT` times the envelope's size. A limit of the reader's own
    ``remote_max_size`` would refuse what a writer with the same setting may send,
    since that bounds the envelope, not what it inflates to.
    """
    if len(envelope) < _HEADER_SIZE or not envelope.startswith(MAGIC):
        raise DamagedEnvelope("not a numba_cache envelope (bad magic or too short)")
    signature = envelope[len(MAGIC) : len(MAGIC) + _DIGEST_SIZE]
    checksum = envelope[len(MAGIC) + _DIGEST_SIZE : _HEADER_SIZE]
    payload = envelope[_HEADER_SIZE:]
    if hashlib.sha256(payload).digest() != checksum:
        raise DamagedEnvelope("the payload fails its checksum")
    if not hmac.compare_digest(signature, _sign(secret, fingerprint, key, payload)):
        raise BadSignature("the signature does not match this server's shared secret")
    limit = INFLATION_LIMIT * len(envelope)
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(payload, limit + _LENGTH.size)
    except zlib.error as error:
        raise DamagedEnvelope(f"the payload does not decompress: {error}") from None
    if inflater.unconsumed_tail:
        raise TooLarge(f"the payload inflates past {limit} bytes")
    if not inflater.eof:
        raise DamagedEnvelope("the payload is truncated")
    if len(data) < _LENGTH.size:
        raise DamagedEnvelope("the payload is too short")
    (record_size,) = _LENGTH.unpack_from(data)
    if _LENGTH.size + record_size > len(data):
        raise DamagedEnvelope("the record is truncated")
    record_end = _LENGTH.size + record_size
    return data[_LENGTH.size : record_end], data[record_end:]


def _sign(secret: bytes, fingerprint: str, key: str, payload: bytes) -> bytes:
    # Fingerprint and key are fixed-length hex, so the concatenation is unambiguous.
    message = MAGIC + fingerprint.encode() + key.encode() + payload
    return hmac.new(secret, message, hashlib.sha256).digest()
