"""The shared tier on a Redis server or in a bucket of an object store, behind the local store.

:mod:`.envelope` signs and compresses records for the wire, :mod:`.redis_backend`
(Redis) or :mod:`.object_backend` (S3, GCS, Azure) moves them, :mod:`.breaker` keeps
a failing server out of the compile path, and :mod:`.tier` puts these together for the
:class:`~numba_cache.store.Store`.
"""

from .tier import (RemoteConfigError, RemoteTier, display_url, open_tier, open_tier_for_store,
                   read_secret, secret_configured)

__all__ = ["RemoteConfigError", "RemoteTier", "display_url", "open_tier", "open_tier_for_store",
           "read_secret", "secret_configured"]
