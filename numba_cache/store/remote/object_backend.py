"""The object-storage backend: entries as objects in an S3, GCS or Azure bucket, via obstore.

Each entry is one object, ``<prefix>/<fingerprint>/<key>`` under the URL's path, whose
body is the envelope given to :meth:`ObjectBackend.put`; listings take its size and
its "written" time from the store's metadata (``last_modified``). obstore is one
small Rust-backed package without dependencies of its own that speaks S3, GCS and
Azure, where fsspec's s3fs would bring aiobotocore and botocore.

Writes are create-if-absent (a conditional PUT, ``If-None-Match: *`` on S3): when
two machines publish one key the first object stays and the second write is refused
by the store, never torn or replaced. An entry holds a kernel's overloads, one per
numba signature, so the second may hold one the first lacks: the tier then adds it
to the stored entry with a compare-and-swap (``If-Match`` on the version it read),
which a third writer in between makes it read and merge again. Object stores have no per-object TTL: ``remote_ttl`` does not apply
here; ``numba-cache prune --remote`` or a bucket lifecycle rule bounds the size.

Every method raises :class:`~.failures.RemoteTimeout` when the store does not
answer in time and :class:`~.failures.RemoteFailure` when it fails otherwise
(obstore's errors and ``OSError``, chained), as :mod:`.redis_backend` does.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import urllib.parse
from collections.abc import Iterator

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import from_url

from ...settings import parse_bool
from ..entry import is_sha256_hex
from .failures import RemoteFailure, RemoteTimeout, typed_failures

#: The variable allowing plain HTTP for each scheme (a local S3-compatible server).
#: obstore reads it only when given no client options, and we give some: the timeouts.
ALLOW_HTTP = {"s3": "AWS_ALLOW_HTTP", "gs": "GOOGLE_ALLOW_HTTP", "az": "AZURE_ALLOW_HTTP"}
#: Objects asked for per list request.
LIST_BATCH = 1000
#: What a store says when the bucket itself is missing, on a read that would
#: otherwise be a miss (S3, Azure, GCS): a fault to report, not an empty cache.
_NO_BUCKET = ("NoSuchBucket", "ContainerNotFound", "bucket does not exist")
_URL_PATH = re.compile(r"(https?://[^/\s]+)/\S*")


def _summary(error: BaseException) -> str:
    """The first line of obstore's message, without the server's XML body or the object's
    path in URLs (the host says which store): a warning's worth."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return _URL_PATH.sub(r"\1/...", text.split(": <", 1)[0])[:300]


def _missing_bucket(error: BaseException) -> bool:
    return any(marker in str(error) for marker in _NO_BUCKET)


def _is_timeout(error: BaseException) -> bool:
    # obstore raises GenericError for a refused connection and for a timeout alike; only
    # its debug text (the Rust error chain) tells them apart.
    text = str(error)
    return isinstance(error, TimeoutError) or "kind: Timeout" in text or "TimedOut" in text


@contextlib.contextmanager
def _store_failures() -> Iterator[None]:
    try:
        yield
    except (obstore.exceptions.BaseError, OSError) as error:
        if _missing_bucket(error):
            what = "the bucket does not exist: create it, or correct NBCACHE_REMOTE"
        else:
            what = f"{type(error).__name__}: {_summary(error)}"
        raise (RemoteTimeout if _is_timeout(error) else RemoteFailure)(what) from error


_typed_failures = typed_failures(_store_failures)


class ObjectBackend:
    """Entries in the bucket at `url` (``s3://bucket/path``...), under `prefix` in it.

    Credentials, region and endpoint come from the client's usual environment
    (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``GOOGLE_SERVICE_ACCOUNT``,
    ``AZURE_STORAGE_ACCOUNT_NAME``...). `readonly` is the tier's (reads here never
    write anyway: there is no TTL to renew).
    """

    #: obstore's client runs on threads of its own, which a forked child lacks: any call
    #: there waits forever. The tier is not used in a forked child (see RemoteTier).
    survives_fork = False

    def __init__(
        self, url: str, prefix: str, *, connect_timeout: float, timeout: float, readonly: bool
    ):
        self.prefix = prefix
        self.readonly = readonly
        scheme = urllib.parse.urlsplit(url).scheme
        client_options = {
            "connect_timeout": datetime.timedelta(seconds=connect_timeout),
            "timeout": datetime.timedelta(seconds=timeout),
        }
        allow_http = os.environ.get(ALLOW_HTTP.get(scheme, ""), "").strip()
        if allow_http:
            client_options["allow_http"] = parse_bool(allow_http, ALLOW_HTTP[scheme])
        with _store_failures():
            # No retries: a failed call opens the tier's circuit breaker instead.
            self.store = from_url(
                url, client_options=client_options, retry_config={"max_retries": 0}
            )

    def name(self, fingerprint: str, key: str) -> str:
        return f"{self.prefix}/{fingerprint}/{key}"

    @_typed_failures
    def ping(self) -> None:
        # A listing of at most one object: the bucket exists and the credentials may read it.
        next(iter(obstore.list(self.store, self.prefix + "/", chunk_size=1)), None)

    @_typed_failures
    def get(self, fingerprint: str, key: str) -> bytes | None:
        try:
            return obstore.get(self.store, self.name(fingerprint, key)).bytes().to_bytes()
        except FileNotFoundError as error:
            if _missing_bucket(error):
                raise
            return None

    @_typed_failures
    def put(self, fingerprint: str, key: str, record: bytes, source: str | None = None) -> bool:
        """Store the envelope `record` unless the key has an object already; False then
        (the tier may merge into it: :meth:`get_version`, :meth:`replace`). `source` is in
        the envelope."""
        try:
            obstore.put(self.store, self.name(fingerprint, key), record, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    @_typed_failures
    def get_version(self, fingerprint: str, key: str) -> tuple[bytes, str] | None:
        """The envelope of the entry and the version it is (its ETag), or None if none."""
        try:
            found = obstore.get(self.store, self.name(fingerprint, key))
        except FileNotFoundError as error:
            if _missing_bucket(error):
                raise
            return None
        return found.bytes().to_bytes(), found.meta["e_tag"]

    @_typed_failures
    def replace(self, fingerprint: str, key: str, record: bytes, version: str) -> bool:
        """Replace the entry by the envelope `record` if it still is `version` (a
        conditional PUT, ``If-Match``); False if another writer replaced it since."""
        try:
            obstore.put(self.store, self.name(fingerprint, key), record,
                        mode={"e_tag": version})
        except (PreconditionError, FileNotFoundError):
            return False
        return True

    @_typed_failures
    def remove(self, fingerprint: str, key: str) -> None:
        obstore.delete(self.store, self.name(fingerprint, key))

    def list(self, fingerprint: str | None = None) -> Iterator[tuple[str, str, int, float]]:
        with _store_failures():
            yield from self._list(fingerprint)

    def _list(self, fingerprint: str | None) -> Iterator[tuple[str, str, int, float]]:
        under = f"{self.prefix}/{fingerprint}/" if fingerprint else f"{self.prefix}/"
        for batch in obstore.list(self.store, under, chunk_size=LIST_BATCH):
            for meta in batch:
                fingerprint_, _, key = meta["path"][len(self.prefix) + 1 :].partition("/")
                if not (is_sha256_hex(fingerprint_) and is_sha256_hex(key)):
                    continue  # not ours
                yield fingerprint_, key, meta["size"], meta["last_modified"].timestamp()
