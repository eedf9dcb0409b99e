"""The :class:`Entry` data type and the validation of the names that address it."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

#: The kinds of thing an entry can hold: a whole-graph kernel, an op kernel, a
#: rewritten graph (keyed before rewriting), an object-mode block, a C callback,
#: numba's runtime functions, or numba's implementation of a function kernels call
#: (an ``@overload`` of numba's own, for one signature).
KINDS = ("graph", "op", "rewrite", "objmode", "cfunc", "runtime", "overload")

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(text: str) -> bool:
    """Whether `text` is a lower-case 64-digit hex string, the form of keys and fingerprints."""
    return _SHA256_HEX.fullmatch(text) is not None


def check_name(what: str, value: str) -> None:
    """Raise ValueError naming `what` unless `value` is a 64-hex sha256 string.

    Keys and fingerprints become path components, so anything else (``..``, ``/``,
    upper case that would alias on case-insensitive filesystems) is refused before
    it reaches the disk.
    """
    if not isinstance(value, str) or not is_sha256_hex(value):
        raise ValueError(f"{what} must be a lower-case 64-digit hex sha256, got {value!r}")


def check_address(fingerprint: str, key: str) -> None:
    """Raise ValueError unless `fingerprint` and `key` are both valid (see :func:`check_name`)."""
    check_name("fingerprint", fingerprint)
    check_name("key", key)


@dataclass(kw_only=True)
class Entry:
    """One cached compilation result, or a marker saying the thing cannot be cached.

    ``blobs`` maps names (``"kernel"``, ``"source"``...) to bytes; it is empty in
    listings. ``size``, ``last_used`` and ``hits`` are filled in listings only
    (``size`` counts the record and its ``.py`` copy, the bytes the entry occupies).
    ``tool_version`` is the numba_cache version that wrote the record, filled on load.
    """

    key: str
    fingerprint: str
    kind: str
    summary: str = ""
    components: dict = field(default_factory=dict)
    cacheable: bool = True
    reason: str | None = None
    created: float = field(default_factory=time.time)
    blobs: dict[str, bytes] = field(default_factory=dict)
    tool_version: str = ""
    size: int = 0
    last_used: float = 0.0
    hits: int = 0

    @classmethod
    def uncacheable(
        cls, *, fingerprint: str, key: str, kind: str, reason: str, summary: str = ""
    ) -> Entry:
        """A marker recording that `key` cannot be cached and why, so it is not retried."""
        return cls(
            fingerprint=fingerprint,
            key=key,
            kind=kind,
            summary=summary,
            cacheable=False,
            reason=reason,
        )
