"""Settings of numba_cache: where the store lives and how it may be used.

Every setting has three sources, highest priority first:

1. Python: ``numba_cache.settings.configure(root=..., max_size="2G", ...)``;
2. the environment: ``NBCACHE_DIR``, ``NBCACHE_DISABLE``, ``NBCACHE_READONLY``,
   ``NBCACHE_MAX_SIZE``, ``NBCACHE_LOCK_TIMEOUT``, ``NBCACHE_VERIFY_HITS`` and
   ``NBCACHE_VERIFY_LIMIT`` (see :mod:`numba_cache.kernels.collisions`), and ``NBCACHE_REMOTE...`` for the shared
   tier on Redis (see :mod:`numba_cache.store.remote`);
3. the defaults in :data:`DEFAULTS`.

The environment is read on every call of :func:`current`, so a subprocess or a
test that changes it sees the change. numba's own ``NUMBA_CACHE_DIR`` is
deliberately not used: it belongs to numba's (and PyTensor's) cache.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import platformdirs

APP_NAME = "numba_cache"

#: Default values, by setting name.
DEFAULTS = {
    "max_size": 2 * 1024**3,
    "disabled": False,
    "readonly": False,
    "lock_timeout": 600.0,
    # Fraction of hits recompiled and compared with what the store served (collision detector).
    "verify_hits": 0.0,
    # At most this many of them per process (0: no limit).
    "verify_hits_limit": 0,
    # Route every numba compile of PyTensor through numba_cache when it is imported.
    "activate": False,
    # The shared tier on Redis: off unless a URL is given.
    "remote": None,
    "remote_prefix": "nbcache",
    "remote_readonly": False,
    "remote_secret": None,
    "remote_secret_file": None,
    "remote_ttl": 30 * 86400.0,
    "remote_max_size": 64 * 1024**2,
    # A compile must never wait for a slow or vanished server for long.
    "remote_connect_timeout": 0.25,
    "remote_timeout": 0.5,
    "remote_backoff": 60.0,
}

#: Environment variable of each setting.
ENVIRONMENT = {
    "root": "NBCACHE_DIR",
    "disabled": "NBCACHE_DISABLE",
    "readonly": "NBCACHE_READONLY",
    "max_size": "NBCACHE_MAX_SIZE",
    "lock_timeout": "NBCACHE_LOCK_TIMEOUT",
    "verify_hits": "NBCACHE_VERIFY_HITS",
    "verify_hits_limit": "NBCACHE_VERIFY_LIMIT",
    "activate": "NBCACHE_ACTIVATE",
    "remote": "NBCACHE_REMOTE",
    "remote_prefix": "NBCACHE_REMOTE_PREFIX",
    "remote_readonly": "NBCACHE_REMOTE_READONLY",
    "remote_secret": "NBCACHE_REMOTE_SECRET",
    "remote_secret_file": "NBCACHE_REMOTE_SECRET_FILE",
    "remote_ttl": "NBCACHE_REMOTE_TTL",
    "remote_max_size": "NBCACHE_REMOTE_MAX_SIZE",
    "remote_connect_timeout": "NBCACHE_REMOTE_CONNECT_TIMEOUT",
    "remote_timeout": "NBCACHE_REMOTE_TIMEOUT",
    "remote_backoff": "NBCACHE_REMOTE_BACKOFF",
}

_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message says which and why."""


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse a byte count such as ``"2G"``, ``"500M"``, ``"1.5GiB"`` or ``1024``.

    Units are powers of 1024. Raises :class:`SettingsError` naming `what`.
    """
    if isinstance(text, int):
        if text < 0:
            raise SettingsError(f"{what} must not be negative, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise SettingsError(
            f"{what}: cannot read {text!r} as a size; use a number with an optional "
            "unit K, M, G or T (powers of 1024), for example 500M or 2G"
        )
    number, unit = match.groups()
    return int(float(number) * _SIZE_UNITS[unit.upper()])


def parse_bool(text: str, what: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{what}: cannot read {text!r} as a boolean; use 1 or 0")


def _parse_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{what}: cannot read {text!r} as a number of seconds") from None
    if value <= 0:
        raise SettingsError(f"{what} must be positive, got {text!r}")
    return value


def parse_fraction(text: str | float, what: str) -> float:
    """A fraction from 0 to 1 (``"1"``: all, ``"0.05"``: one in twenty)."""
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{what}: cannot read {text!r} as a fraction; use 0 to 1") from None
    if not 0.0 <= value <= 1.0:
        raise SettingsError(f"{what} must be from 0 to 1, got {text!r}")
    return value


def parse_count(text: str | int, what: str) -> int:
    """A whole number, 0 or more."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SettingsError(f"{what}: cannot read {text!r} as a whole number") from None
    if value < 0:
        raise SettingsError(f"{what} must not be negative, got {text!r}")
    return value


def _parse_remote_url(text: str, what: str) -> str:
    url = text.strip()
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise SettingsError(
            f"{what}: {text!r} is not a Redis URL; use redis://host:port/db "
            "(rediss:// for TLS, unix:///path/to/socket)"
        )
    return url


def _parse_prefix(text: str, what: str) -> str:
    if not _PREFIX_RE.fullmatch(text):
        raise SettingsError(
            f"{what}: {text!r} cannot be a key prefix; use letters, digits and . _ - / only"
        )
    return text


def parse_duration(text: str, what: str = "duration", kind: str = "a duration") -> float:
    """Seconds in a duration such as ``30``, ``30s``, ``30m``, ``12h``, ``7d``, ``2w`` or ``1.5h``.

    A bare number is seconds. Raises :class:`SettingsError` naming `what`, and what
    the text was read as (`kind`, for example "an age").
    """
    match = _DURATION_RE.match(text)
    if not match:
        raise SettingsError(
            f"{what}: cannot read {text!r} as {kind}; use seconds or a number with a unit "
            "s, m, h, d or w (seconds, minutes, hours, days, weeks), for example 7d or 12h"
        )
    number, unit = match.groups()
    return float(number) * _DURATION_UNITS[unit.lower()]


_PREFIX_RE = re.compile(r"[A-Za-z0-9._/-]+")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdwSMHDW]?)\s*$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

_PARSERS = {
    # Absolute: a relative root would break the index's file URI (and mean another
    # store after a chdir).
    "root": lambda text, what: Path(text).expanduser().absolute(),
    "disabled": parse_bool,
    "readonly": parse_bool,
    "max_size": parse_size,
    "lock_timeout": _parse_float,
    "verify_hits": parse_fraction,
    "verify_hits_limit": parse_count,
    "activate": parse_bool,
    "remote": _parse_remote_url,
    "remote_prefix": _parse_prefix,
    "remote_readonly": parse_bool,
    "remote_secret": lambda text, what: text,
    "remote_secret_file": lambda text, what: Path(text).expanduser(),
    "remote_ttl": parse_duration,
    "remote_max_size": parse_size,
    "remote_connect_timeout": _parse_float,
    "remote_timeout": _parse_float,
    "remote_backoff": _parse_float,
}


@dataclass(frozen=True)
class Settings:
    """The settings in force, and where each came from (``sources``)."""

    root: Path
    disabled: bool
    readonly: bool
    max_size: int
    lock_timeout: float
    verify_hits: float
    verify_hits_limit: int
    activate: bool
    remote: str | None
    remote_prefix: str
    remote_readonly: bool
    remote_secret: str | None = field(repr=False)  # never printed by accident
    remote_secret_file: Path | None
    remote_ttl: float
    remote_max_size: int
    remote_connect_timeout: float
    remote_timeout: float
    remote_backoff: float
    sources: dict = field(compare=False)

    def source_of(self, name: str) -> str:
        return self.sources[name]


_overrides: dict = {}


def default_root() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def configure(**overrides) -> Settings:
    """Set settings from Python; they take precedence over the environment.

    Pass ``None`` for a setting to drop its override. Returns the new settings.
    """
    for name, value in overrides.items():
        if name not in ENVIRONMENT:
            raise SettingsError(
                f"unknown setting {name!r}; known settings: {', '.join(ENVIRONMENT)}"
            )
        if value is None:
            _overrides.pop(name, None)
        elif isinstance(value, (str, Path)) or DEFAULTS.get(name) is None:
            # Settings without a typed default (root, remote URL, secret) are text or paths.
            _overrides[name] = _PARSERS[name](str(value), name)
        else:
            _overrides[name] = type(DEFAULTS[name])(value)
    return current()


def current() -> Settings:
    """The settings in force now (Python overrides, then environment, then defaults)."""
    values, sources = {}, {}
    for name, variable in ENVIRONMENT.items():
        if name in _overrides:
            values[name], sources[name] = _overrides[name], "python"
        elif os.environ.get(variable, "").strip():
            values[name] = _PARSERS[name](os.environ[variable], variable)
            sources[name] = f"env {variable}"
        else:
            values[name] = default_root() if name == "root" else DEFAULTS[name]
            sources[name] = "default"
    return Settings(**values, sources=sources)


def override(settings: Settings, **changes) -> Settings:
    """A copy of `settings` with some values changed (used by tests and the CLI)."""
    return replace(settings, **changes)
