"""The Redis backend: the :class:`~numba_cache.store.backend.Backend` interface on a server.

Each entry is one Redis hash, ``<prefix>:<fingerprint>:<key>``, with the fields
``envelope`` (the opaque bytes given to :meth:`RedisBackend.put`) and ``written``
(when, in seconds since the epoch, for listings). One ``HSET`` writes both, so a
reader sees the old entry or the new one, never a mix. Entries expire after the
TTL; a hit renews it, so what a fleet uses stays and the rest ages out.

Every method raises :class:`~.failures.RemoteTimeout` when the server does not
answer in time and :class:`~.failures.RemoteFailure` when it fails otherwise (the
client's ``RedisError`` or an ``OSError``, chained); deciding what that means is
the tier's business (:mod:`.tier`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..entry import is_sha256_hex
from .failures import RemoteFailure, RemoteTimeout, typed_failures

ENVELOPE_FIELD = "envelope"
WRITTEN_FIELD = "written"
#: Keys asked for per SCAN round trip when listing.
SCAN_BATCH = 500


@contextlib.contextmanager
def _server_failures() -> Iterator[None]:
    try:
        yield
    except (TimeoutError, redis.exceptions.TimeoutError) as error:
        raise RemoteTimeout(f"{type(error).__name__}: {error}") from error
    except (redis.exceptions.RedisError, OSError) as error:
        raise RemoteFailure(f"{type(error).__name__}: {error}") from error


_typed_failures = typed_failures(_server_failures)


class RedisBackend:
    """Entries on the Redis server at `url`, under the key prefix `prefix`.

    `ttl` is in seconds (0: entries never expire); `readonly` skips renewing TTLs on
    reads (writes are refused by the tier before they get here).
    """

    #: redis-py's connection pool opens new connections in a forked child.
    survives_fork = True

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        ttl: float,
        connect_timeout: float,
        timeout: float,
        readonly: bool,
    ):
        self.prefix = prefix
        self.ttl = int(ttl)
        self.readonly = readonly
        # No retries: a failed call opens the tier's circuit breaker instead. Said outright:
        # redis-py's default policy changed in 6.0 (retry_on_timeout is deprecated since).
        # RESP2, as redis-py 5 speaks it by default: redis-py 8 would open each connection
        # with HELLO (RESP3), which servers before Redis 6 refuse.
        self.client = redis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            protocol=2,
        )

    def name(self, fingerprint: str, key: str) -> str:
        return f"{self.prefix}:{fingerprint}:{key}"

    @_typed_failures
    def ping(self) -> None:
        self.client.ping()

    @_typed_failures
    def get(self, fingerprint: str, key: str) -> bytes | None:
        """The envelope at the entry's name; ``b""`` (not an envelope: damaged) when
        something other than an entry's hash is stored there."""
        name = self.name(fingerprint, key)
        pipeline = self.client.pipeline(transaction=False)
        pipeline.hget(name, ENVELOPE_FIELD)
        if not (self.readonly or not self.ttl):
            pipeline.expire(name, self.ttl)
        envelope, *_ = pipeline.execute(raise_on_error=False)
        if _wrong_type(envelope):
            return b""
        if isinstance(envelope, Exception):
            raise envelope
        return envelope

    @_typed_failures
    def put(self, fingerprint: str, key: str, record: bytes, source: str | None = None) -> bool:
        """Store the envelope `record`, replacing the entry's (one HSET: a reader sees one or
        the other); `source` is unused, the envelope carries it. True: it was written."""
        name = self.name(fingerprint, key)
        pipeline = self.client.pipeline(transaction=True)
        pipeline.hset(name, mapping={ENVELOPE_FIELD: record, WRITTEN_FIELD: repr(time.time())})
        if self.ttl:
            pipeline.expire(name, self.ttl)
        pipeline.execute()
        return True

    @_typed_failures
    def remove(self, fingerprint: str, key: str) -> None:
        self.client.delete(self.name(fingerprint, key))

    def list(self, fingerprint: str | None = None) -> Iterator[tuple[str, str, int, float]]:
        with _server_failures():
            yield from self._list(fingerprint)

    def _list(self, fingerprint: str | None) -> Iterator[tuple[str, str, int, float]]:
        # Prefixes are letters, digits and ._/- (see settings): no glob characters to escape.
        pattern = f"{self.prefix}:{fingerprint or '*'}:*"
        addresses = []
        for name in self.client.scan_iter(match=pattern, count=SCAN_BATCH):
            fingerprint_, _, key = name.decode()[len(self.prefix) + 1 :].partition(":")
            if is_sha256_hex(fingerprint_) and is_sha256_hex(key):  # else not ours
                addresses.append((fingerprint_, key))
        for start in range(0, len(addresses), SCAN_BATCH):
            batch = addresses[start : start + SCAN_BATCH]
            pipeline = self.client.pipeline(transaction=False)
            for fingerprint_, key in batch:
                pipeline.hstrlen(self.name(fingerprint_, key), ENVELOPE_FIELD)
                pipeline.hget(self.name(fingerprint_, key), WRITTEN_FIELD)
            answers = pipeline.execute(raise_on_error=False)
            for (fingerprint_, key), size, written in zip(batch, answers[::2], answers[1::2],
                                                          strict=True):
                if _wrong_type(size):
                    continue  # a value of another kind at an entry's name: not an entry
                if isinstance(size, Exception):
                    raise size
                if size:  # else expired between SCAN and now
                    yield fingerprint_, key, size, _seconds(written)


def _wrong_type(answer) -> bool:
    """Whether `answer` is the server's refusal of a hash command on a value of another kind."""
    return (isinstance(answer, redis.exceptions.ResponseError)
            and str(answer).startswith("WRONGTYPE"))


def _seconds(written: bytes | None) -> float:
    try:
        return float(written)
    except (TypeError, ValueError):
        return 0.0
