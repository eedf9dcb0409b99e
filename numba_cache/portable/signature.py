"""Signed archives: an archive made where a shared secret is set carries the HMAC of its
manifest, and an import where one is set refuses any archive without the right one.

The manifest lists the SHA-256 of every file of the archive, and import checks every
file against it, so signing the manifest signs the whole archive. The secret is the
remote tier's (``NBCACHE_REMOTE_SECRET`` or ``NBCACHE_REMOTE_SECRET_FILE``), the key
that machines sharing a cache hold: a CI cache (an Actions cache, a bucket) that someone
else can write can then hand a job no code of theirs. Without a secret, archives are
neither signed nor checked: importing one trusts whoever could write it, as installing
a package does.
"""

from __future__ import annotations

import hashlib
import hmac

from numba_cache.settings import Settings
from numba_cache.store.remote import RemoteConfigError, read_secret, secret_configured

#: The archive member holding the signature, written after the manifest.
NAME = "manifest.sig"
#: What the signature is of, besides the manifest: no other HMAC of this secret (the
#: tier's envelopes) can pass for an archive's.
_DOMAIN = b"numba_cache archive manifest\0"


class SignatureError(Exception):
    """The archive's signature is missing or wrong, or the secret cannot be read."""


def secret(settings: Settings) -> bytes | None:
    """The secret archives are signed and checked with, or None if none is set."""
    if not secret_configured(settings):
        return None
    try:
        return read_secret(settings, "archives are not signed or checked")
    except RemoteConfigError as problem:
        raise SignatureError(str(problem)) from None


def sign(key: bytes, manifest: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + manifest, hashlib.sha256).hexdigest().encode()


def check(key: bytes, manifest: bytes, signature: bytes | None, where: str) -> None:
    """Raise :class:`SignatureError` unless `signature` is the manifest's, with `key`."""
    if signature is None:
        raise SignatureError(
            f"{where} is not signed, and a shared secret is set (NBCACHE_REMOTE_SECRET or "
            "NBCACHE_REMOTE_SECRET_FILE): only archives exported with it are imported; "
            "nothing imported")
    if not hmac.compare_digest(signature.strip(), sign(key, manifest)):
        raise SignatureError(
            f"{where} is signed with another secret, or was altered after it was signed; "
            "nothing imported")
