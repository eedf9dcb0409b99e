"""Settings of numba_cache: where the store lives and how it may be used.

Every setting has three sources, highest priority first:

1. Python: ``numba_cache.settings.configure(root=..., max_size="2G", ...)``;
2. the environment (``NBCACHE_...``);
3. its default.

Each setting is defined once, as a row of :data:`SETTINGS` (name, environment
variable, parser, default, documentation); :func:`configure`, :func:`current`,
the :class:`Settings` record and the settings pages of the docs are all made
from that table. The environment is read on every call of :func:`current`, so a
subprocess or a test that changes it sees the change. numba's own
``NUMBA_CACHE_DIR`` is deliberately not used: it belongs to numba's (and
PyTensor's) cache.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass, replace
from pathlib import Path

import platformdirs

from numba_cache import cpu_target, session

APP_NAME = "numba_cache"

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


def _parse_target(text: str, what: str) -> str:
    value = text.strip().lower()
    if value not in cpu_target.TARGETS:
        raise SettingsError(f"{what}: {text!r} is not a target; use one of "
                            f"{', '.join(cpu_target.TARGETS)}")
    return value


def _parse_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{what}: cannot read {text!r} as a number of seconds") from None
    # nan passes any comparison, and an endless wait is never what a compile should do.
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{what} must be a positive number of seconds, got {text!r}")
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


#: URL schemes of the remote tier: a Redis server, or a bucket of an object store.
REDIS_SCHEMES = ("redis", "rediss", "unix")
OBJECT_SCHEMES = ("s3", "gs", "az")
_REMOTE_FORMS = ("redis://host:port/db (rediss:// for TLS, unix:///path/to/socket), "
                 "or a bucket: s3://bucket/path, gs://bucket/path, az://container/path")


def _parse_remote_url(text: str, what: str) -> str:
    url = text.strip()
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in REDIS_SCHEMES + OBJECT_SCHEMES:
        named = f"its scheme {scheme + '://'!r} is not one" if separator else "it has no scheme"
        raise SettingsError(
            f"{what}: {text!r} is not a remote cache URL ({named} of ours); use {_REMOTE_FORMS}"
        )
    if scheme.lower() in ("redis", "rediss"):
        _check_server_address(url, text, what)
    elif scheme.lower() == "unix":  # the path is the socket's
        _check_databases([], urllib.parse.urlsplit(url).query, text, what)
    bucket = rest.split("/", 1)[0]
    if scheme.lower() in OBJECT_SCHEMES and not _BUCKET_RE.fullmatch(bucket):
        named = f"{bucket!r} is not a bucket name" if bucket else "it names no bucket"
        raise SettingsError(
            f"{what}: {text!r}: {named}; use {scheme}://bucket/path (the path is optional; "
            "bucket names are letters, digits, dots, dashes and underscores)"
        )
    return url


def _check_server_address(url: str, text: str, what: str) -> None:
    """A Redis URL's port and bracketed host, read as its client reads them: reading them
    raises for a port that is no number from 0 to 65535, or an unclosed bracket. Its
    database, the path or a ``db`` query: redis-py takes a path that is no number for
    database 0, and drops the slashes of one with several (``/1/2`` is database 12)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port
    except ValueError as problem:
        raise SettingsError(f"{what}: {text!r} is not a server address ({problem}); use "
                            "redis://host:port/db, for example redis://cache-host:6379/0") from None
    _check_databases([urllib.parse.unquote(parts.path).removeprefix("/")] if parts.path else [],
                     parts.query, text, what)


def _check_databases(databases: list, query: str, text: str, what: str) -> None:
    for database in [*databases, *urllib.parse.parse_qs(query).get("db", [])]:
        if database and not (database.isascii() and database.isdigit()):
            raise SettingsError(f"{what}: {text!r}: {database!r} is not a database number; "
                                "name one by its number, for example redis://cache-host:6379/0 "
                                "or unix:///path/to/socket?db=0")


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
_BUCKET_RE = re.compile(r"[A-Za-z0-9._-]+")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdwSMHDW]?)\s*$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}



def _several_cores() -> bool:
    """Whether this process may run on two cores or more (a helper then runs beside it)."""
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except AttributeError:  # no affinity on this platform
        return (os.cpu_count() or 1) >= 2


def default_root() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def _parse_root(text: str, what: str) -> Path:
    # Absolute: a relative root would break the index's file URI (and mean another
    # store after a chdir).
    return Path(text).expanduser().absolute()


@dataclass(frozen=True)
class Setting:
    """One setting: how it is named, read, defaulted and documented."""

    name: str  #: keyword of :func:`configure`, field of :class:`Settings`
    variable: str  #: its environment variable
    parse: Callable[[str, str], object]  #: text (and the name to blame) to value
    default: object  #: the value when unset; a callable computes it
    doc: str  #: what it does, one line (the docs' table)
    example: str  #: a value for the docs' table
    default_doc: str  #: the default, as the docs show it
    group: str = "store"  #: "store", or "remote": the page documenting it
    python: str | None = None  #: how Python sets it, when not with configure()
    secret: bool = False  #: never printed

    def default_value(self):
        return self.default() if callable(self.default) else self.default


SETTINGS: tuple[Setting, ...] = (
    Setting("root", "NBCACHE_DIR", _parse_root, default_root, "store root",
            "~/nbcache", '`platformdirs.user_cache_dir("numba_cache")`'),
    Setting("disabled", "NBCACHE_DISABLE", parse_bool, False, "turn the cache off", "1", "off"),
    Setting("readonly", "NBCACHE_READONLY", parse_bool, False, "never write", "1", "off"),
    Setting("max_size", "NBCACHE_MAX_SIZE", parse_size, 2 * 1024**3,
            "size limit (least recently used entries are evicted)", "2G", "2 GiB"),
    Setting("lock_timeout", "NBCACHE_LOCK_TIMEOUT", _parse_float, 600.0,
            "how long to wait for another process compiling the same kernel", "600", "600 s"),
    Setting("verify_hits", "NBCACHE_VERIFY_HITS", parse_fraction, 0.0,
            "recompile this fraction of hits and compare (the collision detector)", "1", "0: off"),
    Setting("verify_hits_limit", "NBCACHE_VERIFY_LIMIT", parse_count, 0,
            "at most this many of them per process", "100", "0: no limit"),
    Setting("link_op_kernels", "NBCACHE_LINK_OPS", parse_bool, False,
            "link op kernels into each graph kernel, as numba does, instead of calling "
            "them by symbol: a new graph made of stored op kernels then compiles them all "
            "again (see [Separate compilation](how-it-works.md#separate-compilation))",
            "1", "off"),
    Setting("link_in_background", "NBCACHE_LINK_BACKGROUND", parse_bool, False,
            "after a graph kernel calling its op kernels by symbol is served, build it with "
            "them linked in, in a background process, for later processes to use: their "
            "calls are faster, their results may differ from the first process's in the "
            "last bits (see [The linked build](how-it-works.md#the-linked-build))",
            "1", "off"),
    Setting("compile_ahead", "NBCACHE_COMPILE_AHEAD", parse_bool, _several_cores,
            "on a compile, fork a helper process that compiles op kernels from the graph's "
            "end while the graph is typed from its start (see [Separate compilation]"
            "(how-it-works.md#op-kernels-compiled-ahead))",
            "0", "on with 2 cores or more"),
    Setting("target", "NBCACHE_TARGET", _parse_target, cpu_target.HOST,
            "the CPU kernels are compiled for: `host` (this machine's model and features), "
            "`portable` (a baseline of the architecture, `x86-64-v3` on x86-64: machines "
            "of different CPU models share entries) or a baseline's name (`x86-64-v2`, "
            "`x86-64-v4`); read once per process, before its first compile (see "
            "[Machines of several CPU models](ci.md#machines-of-several-cpu-models))",
            "portable", "`host`"),
    Setting("activate", "NBCACHE_ACTIVATE", parse_bool, False,
            "route every numba compile of PyTensor through the cache (obeyed as soon as "
            "PyTensor is imported; see [Use with PyMC](usage.md#use-with-pymc))",
            "1", "off", python="numba_cache.activate()"),
    Setting("remote", "NBCACHE_REMOTE", _parse_remote_url, None,
            "Redis server (`redis://`, `rediss://`, `unix://`) or bucket (`s3://`, `gs://`, "
            "`az://`)", "redis://cache-host:6379/0",
            "none: local only", group="remote"),
    Setting("remote_secret", "NBCACHE_REMOTE_SECRET", lambda text, what: text, None,
            "shared secret (16 bytes or more)", "...", "none: the tier does not start",
            group="remote", secret=True),
    Setting("remote_secret_file", "NBCACHE_REMOTE_SECRET_FILE",
            lambda text, what: Path(text).expanduser(), None,
            "a file holding the shared secret", "~/.nbcache-secret",
            "none: the tier does not start", group="remote"),
    Setting("remote_prefix", "NBCACHE_REMOTE_PREFIX", _parse_prefix, "nbcache",
            "key prefix (namespace)", "team-a", "`nbcache`", group="remote"),
    Setting("remote_readonly", "NBCACHE_REMOTE_READONLY", parse_bool, False,
            "never write (untrusted jobs)", "1", "off", group="remote"),
    Setting("remote_ttl", "NBCACHE_REMOTE_TTL", parse_duration, 30 * 86400.0,
            "expiry on Redis, renewed by each hit (`0`: never); buckets have none", "30d",
            "30 days", group="remote"),
    Setting("remote_max_size", "NBCACHE_REMOTE_MAX_SIZE", parse_size, 64 * 1024**2,
            "largest entry sent (larger ones stay local)", "64M", "64 MiB", group="remote"),
    # A compile must never wait for a slow or vanished server for long, and one slow
    # answer must not cost the tier: a failure keeps it out for the back-off, so what
    # is compiled meanwhile is neither loaded nor published. A loopback server under
    # load once took over 0.5 s to answer; a bucket in another region takes a few round
    # trips to connect (TLS). ccache waits 10 s, obstore's own defaults 5 s and 30 s.
    Setting("remote_connect_timeout", "NBCACHE_REMOTE_CONNECT_TIMEOUT", _parse_float, 1.0,
            "connect timeout", "1", "1 s", group="remote"),
    Setting("remote_timeout", "NBCACHE_REMOTE_TIMEOUT", _parse_float, 2.0,
            "operation timeout", "2", "2 s", group="remote"),
    Setting("remote_backoff", "NBCACHE_REMOTE_BACKOFF", _parse_float, 60.0,
            "local only after a failure, for", "60", "60 s", group="remote"),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
#: Environment variable of each setting.
ENVIRONMENT = {setting.name: setting.variable for setting in SETTINGS}


def _source_of(self, name: str) -> str:
    return self.sources[name]


#: The settings in force, and where each came from (``sources``): a field per setting.
Settings = make_dataclass(
    "Settings",
    [(setting.name, object, field(repr=not setting.secret)) for setting in SETTINGS]
    + [("sources", dict, field(compare=False))],
    frozen=True,
    namespace={"source_of": _source_of},
    module=__name__,
)


def read(name: str):
    """The value of one setting from the environment (or its default), parsed.

    Raises :class:`SettingsError` if its variable holds something unusable; other
    settings are not read (an import must not fail for a setting it does not use).
    """
    setting = BY_NAME[name]
    text = os.environ.get(setting.variable, "")
    return setting.parse(text, setting.variable) if text.strip() else setting.default_value()


def markdown_table(group: str) -> str:
    """The docs' table of the settings of `group` (made by the docs build, never typed)."""
    rows = ["| setting | environment | Python | default |", "|---|---|---|---|"]
    for setting in SETTINGS:
        if setting.group != group:
            continue
        python = setting.python or f"configure({setting.name}=...)"
        rows.append(f"| {setting.doc} | `{setting.variable}={setting.example}` | `{python}` "
                    f"| {setting.default_doc} |")
    return "\n".join(rows)


def configure(**overrides) -> Settings:
    """Set settings from Python; they take precedence over the environment.

    Pass ``None`` for a setting to drop its override. Returns the new settings.
    """
    made = session.current().settings_overrides
    for name, value in overrides.items():
        setting = BY_NAME.get(name)
        if setting is None:
            raise SettingsError(
                f"unknown setting {name!r}; known settings: {', '.join(BY_NAME)}"
            )
        if value is None:
            made.pop(name, None)
        else:
            # Checked as the environment's text is: 5 is no fraction, -1 s no timeout.
            made[name] = setting.parse(_as_text(value), name)
    return current()


def _as_text(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def adopt(settings: Settings) -> None:
    """Use exactly `settings` in this process, as if each were configured from Python (a
    helper spawned for a process that has them, :mod:`numba_cache.kernels.helpers.spawned_helper`)."""
    session.current().settings_overrides.update(
        (setting.name, getattr(settings, setting.name)) for setting in SETTINGS)


def current() -> Settings:
    """The settings in force now (Python overrides, then environment, then defaults)."""
    overrides = session.current().settings_overrides
    values, sources = {}, {}
    for setting in SETTINGS:
        name, variable = setting.name, setting.variable
        if name in overrides:
            values[name], sources[name] = overrides[name], "python"
        elif os.environ.get(variable, "").strip():
            values[name] = setting.parse(os.environ[variable], variable)
            sources[name] = f"env {variable}"
        else:
            values[name], sources[name] = setting.default_value(), "default"
    return Settings(**values, sources=sources)


def defaults() -> Settings:
    """Every setting at its default, whatever Python or the environment says."""
    return Settings(**{setting.name: setting.default_value() for setting in SETTINGS},
                    sources={setting.name: "default" for setting in SETTINGS})


def override(settings: Settings, **changes) -> Settings:
    """A copy of `settings` with some values changed (used by tests and the CLI)."""
    return replace(settings, **changes)
