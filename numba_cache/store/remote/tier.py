"""The remote tier: signed, compressed entries on a shared server or bucket, behind the local store.

:class:`RemoteTier` is what the :class:`~numba_cache.store.Store` consults after a
local miss and publishes to after a local save. It never raises for the server's
sake: a failure or a timeout (:mod:`.failures`) is counted, warned once per
process, and trips the :class:`~.breaker.Breaker`, so the following lookups go
local-only until the back-off period is over. Nor for its own: any other
exception is a bug in numba_cache, counted as ``remote:bug`` and reported as one,
and the tier steps aside the same way. Counters (per fingerprint, in the local store):

``remote:hit`` / ``remote:miss``
    lookups the server answered with a usable entry / keys it did not have;
``remote:error`` / ``remote:timeout``
    calls the server failed / did not answer in time;
``remote:bug``
    calls that failed in numba_cache's own code (please report them);
``remote:rejected``
    entries refused for a signature that is not ours (another secret, a forgery,
    an entry moved to another address); never loaded, never deleted;
``remote:damaged``
    entries that fail their checksums; deleted unless the tier is read-only;
``remote:published`` / ``remote:too_large``
    entries sent / kept local because their envelope exceeds ``remote_max_size``;
``remote:bytes_in`` / ``remote:bytes_out``
    envelope bytes fetched / sent.

Misses, rejections and damage are counted once per process and key: a compile
looks its key up again once it holds the key's lock, and that is not a second event.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...settings import OBJECT_SCHEMES, Settings
from ..notices import warn_once
from . import envelope
from .breaker import Breaker
from .failures import RemoteFailure

#: Shorter secrets are refused: an HMAC is only as strong as its key.
MIN_SECRET_BYTES = 16
#: Reads and conditional writes one publish tries before leaving a busy entry to the
#: next publisher of the key.
MERGE_ATTEMPTS = 3

_Decoded = TypeVar("_Decoded")


class RemoteConfigError(Exception):
    """The remote tier is configured but cannot start; the message says what to do."""


def display_url(url: str) -> str:
    """`url` without its password, for messages and listings."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def secret_configured(settings: Settings) -> bool:
    """Whether a shared secret is set (``remote_secret`` or ``remote_secret_file``)."""
    return settings.remote_secret is not None or settings.remote_secret_file is not None


def read_secret(settings: Settings, refused: str | None = None) -> bytes:
    """The shared secret from ``remote_secret`` or ``remote_secret_file``.

    Raises :class:`RemoteConfigError` when there is none, it cannot be read, or it
    is shorter than :data:`MIN_SECRET_BYTES`; its message starts with `refused`, what
    is not done then (by default: the remote tier is not used).
    """
    refused = refused or f"the remote cache {display_url(settings.remote)} is not used"
    if settings.remote_secret is not None:
        secret, origin = settings.remote_secret.encode(), "NBCACHE_REMOTE_SECRET"
    elif settings.remote_secret_file is not None:
        origin = f"the secret file {settings.remote_secret_file}"
        try:
            # A trailing newline is what editors and `echo` add, not part of the secret.
            secret = Path(settings.remote_secret_file).read_bytes().rstrip(b"\r\n")
        except OSError as error:
            raise RemoteConfigError(
                f"{refused}: cannot read {origin} ({error.strerror or error})"
            ) from None
    else:
        raise RemoteConfigError(
            f"{refused}: it needs a shared secret to sign and "
            "check entries (they are pickles: loading one runs code). Set "
            "NBCACHE_REMOTE_SECRET or NBCACHE_REMOTE_SECRET_FILE, the same on every machine."
        )
    if len(secret) < MIN_SECRET_BYTES:
        raise RemoteConfigError(
            f"{refused}: the secret from {origin} is "
            f"{len(secret)} bytes; use at least {MIN_SECRET_BYTES} random ones "
            "(for example: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    return secret


def open_tier(settings: Settings, count: Callable[[str, str, int], None]) -> RemoteTier:
    """The remote tier of `settings` (which must name a server); `count` bumps a counter.

    Connects lazily: nothing goes over the network until the first lookup. Raises
    :class:`RemoteConfigError` when the tier cannot start (no secret, no client).
    """
    secret = read_secret(settings)
    scheme = urllib.parse.urlsplit(settings.remote).scheme.lower()
    options = {"connect_timeout": settings.remote_connect_timeout,
               "timeout": settings.remote_timeout, "readonly": settings.remote_readonly}
    make = _object_backend if scheme in OBJECT_SCHEMES else _redis_backend
    return RemoteTier(settings, secret, make(settings, options), count)


def _redis_backend(settings: Settings, options: dict):
    try:
        from .redis_backend import RedisBackend
    except ModuleNotFoundError as error:
        raise _missing_client(settings, error, "redis", "remote") from None
    try:
        return RedisBackend(settings.remote, settings.remote_prefix, ttl=settings.remote_ttl,
                            **options)
    except ValueError as problem:  # redis-py refused the URL
        raise RemoteConfigError(
            f"the remote cache {display_url(settings.remote)} is not used: {problem}"
        ) from None


def _object_backend(settings: Settings, options: dict):
    try:
        from .object_backend import ObjectBackend
    except ModuleNotFoundError as error:
        raise _missing_client(settings, error, "obstore", "s3") from None
    try:
        return ObjectBackend(settings.remote, settings.remote_prefix, **options)
    # obstore refused the URL (ValueError) or its configuration (its errors, or ours
    # about an environment variable: SettingsError is a ValueError).
    except (RemoteFailure, ValueError) as problem:
        raise RemoteConfigError(
            f"the remote cache {display_url(settings.remote)} is not used: {problem}"
        ) from None


def _missing_client(
    settings: Settings, error: ModuleNotFoundError, package: str, extra: str
) -> RemoteConfigError:
    where = display_url(settings.remote)
    if error.name is None or error.name.partition(".")[0] != package:
        # Another module is missing: not the user's to install, but a broken installation.
        return RemoteConfigError(f"the remote cache {where} is not used: {error} "
                                 "(numba_cache is installed incompletely; please report it)")
    return RemoteConfigError(f"the remote cache {where} is not used: the {package} package "
                             f"is not installed (pip install 'numba_cache[{extra}]')")


def open_tier_for_store(settings: Settings, count: Callable[[str, str, int], None]) -> RemoteTier | None:
    """The store's remote tier: None if `settings` name no server, or if the tier cannot
    start (warned once: a cache without its remote tier still works)."""
    if settings.remote is None:
        return None
    try:
        return open_tier(settings, count)
    except RemoteConfigError as problem:
        warn_once(("remote config", settings.remote), f"numba_cache: {problem}")
        return None


class RemoteTier:
    """Entries of the local store's fingerprints on a shared server (see the module docstring).

    `backend` moves envelopes (:class:`.redis_backend.RedisBackend` or
    :class:`.object_backend.ObjectBackend`); `count(fingerprint,
    name, n)` records counters.
    """

    def __init__(self, settings: Settings, secret: bytes, backend, count):
        self.url = display_url(settings.remote)
        self.readonly = settings.remote_readonly
        self.max_size = settings.remote_max_size
        self.backend = backend
        self._secret = secret
        self._count = count
        self._breaker = Breaker(settings.remote_backoff)
        self._counted: set[tuple[str, str, str]] = set()
        self._opened_in = os.getpid()

    @property
    def survives_fork(self) -> bool:
        """Whether a child forked from this process can use the tier (its client's own
        threads are not copied by a fork: obstore's calls would wait forever there)."""
        return self.backend.survives_fork

    @property
    def backing_off(self) -> bool:
        """Whether the tier would publish from here but leaves the server alone for now,
        after a failure (:class:`~.breaker.Breaker`)."""
        return not self.readonly and self._usable_here() and not self._breaker.allows()

    def _usable_here(self) -> bool:
        return self.survives_fork or os.getpid() == self._opened_in

    def fetch(
        self, fingerprint: str, key: str, decode: Callable[[bytes], _Decoded]
    ) -> tuple[_Decoded, bytes, bytes] | None:
        """``(decode(record), record, source)`` of the entry, or None on a miss.

        The envelope's checksum and signature are verified first, then `decode`
        must accept the record (it raises :class:`~numba_cache.store.CorruptEntry`
        otherwise). Anything else is a miss, counted as such.
        """
        if not (self._usable_here() and self._breaker.allows()):
            return None
        try:
            sealed = self.backend.get(fingerprint, key)
        except Exception as error:  # a server failure, or our bug: never the compile's
            self._failed(fingerprint, error)
            return None
        if sealed is None:
            self._count_once(fingerprint, key, "remote:miss")
            return None
        self._count(fingerprint, "remote:bytes_in", len(sealed))
        try:
            data, source = envelope.open_envelope(sealed, fingerprint, key, self._secret)
            decoded = decode(data)
        except envelope.BadSignature as problem:
            self._reject(fingerprint, key, problem)
        except envelope.TooLarge:  # not damage: left for the readers it fits
            self._count_once(fingerprint, key, "remote:too_large")
        except Exception as problem:  # a damaged envelope, or CorruptEntry
            self._discard_damaged(fingerprint, key, problem)
        else:
            self._count(fingerprint, "remote:hit", 1)
            return decoded, data, source
        return None

    def publish(self, fingerprint: str, key: str, record: bytes, source: str | None,
                merge: Callable[[bytes, bytes], bytes | None] | None = None) -> bool:
        """Send the entry to the server unless read-only, too large or unreachable; True if
        the server has it (``remote:published`` counts what was sent).

        On a server that never replaces an entry (a bucket's create-if-absent writes),
        ``merge(stored record, record)`` gives the record to replace a stored one with
        (None: the stored one has all of it), as :meth:`_merge_into` does.
        """
        if self.readonly or not (self._usable_here() and self._breaker.allows()):
            return False
        sealed = self._sealed(fingerprint, key, record, source)
        if sealed is None:
            return False
        try:
            if not self.backend.put(fingerprint, key, sealed):
                sealed = None if merge is None else self._merge_into(
                    fingerprint, key, record, source, merge)
        except Exception as error:  # a server failure, or our bug: never the compile's
            self._failed(fingerprint, error)
            return False
        if sealed is not None:
            self._count(fingerprint, "remote:published", 1)
            self._count(fingerprint, "remote:bytes_out", len(sealed))
        return True

    def _sealed(self, fingerprint: str, key: str, record: bytes, source: str | None
                ) -> bytes | None:
        sealed = envelope.seal(fingerprint, key, record, (source or "").encode(), self._secret)
        if len(sealed) > self.max_size:
            self._count(fingerprint, "remote:too_large", 1)
            return None
        return sealed

    def _merge_into(self, fingerprint: str, key: str, record: bytes, source: str | None,
                    merge: Callable[[bytes, bytes], bytes | None]) -> bytes | None:
        """The key has an entry already: replace it with ``merge(its record, record)``, if
        that adds anything, and only if it is still the version read. The envelope sent,
        or None if nothing was. An entry signed otherwise is left alone (:meth:`_reject`
        tells readers), a damaged one replaced."""
        for _ in range(MERGE_ATTEMPTS):
            found = self.backend.get_version(fingerprint, key)
            if found is None:  # removed meanwhile
                sealed = self._sealed(fingerprint, key, record, source)
                if sealed is None or self.backend.put(fingerprint, key, sealed):
                    return sealed
                continue
            stored, version = found
            try:
                theirs, _ = envelope.open_envelope(stored, fingerprint, key, self._secret)
            except (envelope.BadSignature, envelope.TooLarge):
                return None
            except Exception:  # damaged: ours replaces it
                merged = record
            else:
                merged = merge(theirs, record)
            if merged is None:
                return None
            sealed = self._sealed(fingerprint, key, merged, source)
            if sealed is None or self.backend.replace(fingerprint, key, sealed, version):
                return sealed
        return None

    def entries(self, fingerprint: str | None = None) -> list[tuple[str, str, int, float]]:
        """``(fingerprint, key, size, written)`` of every entry on the server, oldest first.

        For the command line: raises the client's error when the server fails.
        """
        return sorted(self.backend.list(fingerprint), key=lambda row: (row[3], row[1]))

    def remove(self, fingerprint: str, key: str) -> None:
        """Delete one entry; for the command line, which checked :attr:`readonly` first."""
        self.backend.remove(fingerprint, key)

    def _count_once(self, fingerprint: str, key: str, name: str) -> None:
        if (fingerprint, key, name) not in self._counted:
            self._counted.add((fingerprint, key, name))
            self._count(fingerprint, name, 1)

    def _failed(self, fingerprint: str, error: Exception) -> None:
        self._breaker.trip()
        if isinstance(error, RemoteFailure):
            self._count(fingerprint, error.counter, 1)
            what = f"the remote cache {self.url} failed ({error})"
        else:
            self._count(fingerprint, "remote:bug", 1)
            what = (f"a bug in numba_cache's remote tier ({type(error).__name__}: {error}; "
                    "please report it)")
        warn_once(
            ("remote", self.url),
            f"numba_cache: {what}; using the local cache only, retrying after "
            f"{self._breaker.backoff:g} s (what is compiled meanwhile is published then; "
            "`numba-cache publish` sends what a process did not).",
        )

    def _reject(self, fingerprint: str, key: str, problem: Exception) -> None:
        # Not deleted: it may belong to a colleague with another secret. On Redis our
        # next compile of the key overwrites it; a bucket keeps the first object
        # (create-if-absent), so it stays until `numba-cache clear --remote`.
        self._count_once(fingerprint, key, "remote:rejected")
        warn_once(
            ("remote rejected", self.url),
            f"numba_cache: refused entry {key[:12]} from the remote cache {self.url}: "
            f"{problem}. Entries signed with another secret are never loaded; do all "
            "machines sharing this server and prefix use the same NBCACHE_REMOTE_SECRET?",
        )

    def _discard_damaged(self, fingerprint: str, key: str, problem: Exception) -> None:
        self._count_once(fingerprint, key, "remote:damaged")
        warn_once(
            ("remote damaged", self.url, fingerprint, key),
            f"numba_cache: ignoring the damaged entry {key[:12]} in the remote cache "
            f"{self.url} ({problem}); it will be compiled again.",
        )
        if self.readonly:
            return
        try:
            self.backend.remove(fingerprint, key)
        except Exception as error:  # a server failure, or our bug: never the compile's
            self._failed(fingerprint, error)
