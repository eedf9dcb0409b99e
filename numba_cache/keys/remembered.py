"""This environment's fingerprint without importing numba or PyTensor, once it has been computed.

:func:`.fingerprint.current_fingerprint` reads numba's codegen settings and
PyTensor's flags, so it imports both: a second and more. Commands that only
read the store (``numba-cache stats``, ``prune --stale``, ``export``) need the
fingerprint but not the compiler, so they ask :func:`this_environment`. It
keeps the fingerprint in a small file under the user's state directory, filed
under a token made of everything that decides it and can be read cheaply: the
interpreter, the versions of the packages in the fingerprint (from their
installed metadata), every ``NUMBA_*`` variable and numba's config file in the
working directory, ``PYTENSOR_FLAGS`` and PyTensor's config files, and the
CPU (its model and flags). When the token is new, the fingerprint is computed
the long way, once, and remembered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

import platformdirs

from numba_cache import versions
from numba_cache.keys.fingerprint import _VERSIONED_PACKAGES, Fingerprint

MEMO_NAME = "fingerprints.json"
#: Tokens kept; the oldest go first (a few virtual environments, a few CPU settings).
MEMO_SIZE = 32
_NUMBA_CONFIG_FILE = ".numba_config.yaml"


def this_environment() -> Fingerprint:
    """The fingerprint :func:`.fingerprint.current_fingerprint` gives in this environment."""
    token = environment_token()
    memo = _read_memo()
    known = memo.get(token)
    if isinstance(known, dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            fingerprint = Fingerprint.from_components(known["components"])
            if fingerprint.digest == known["digest"]:
                return fingerprint
    from numba_cache.keys.fingerprint import current_fingerprint

    fingerprint = current_fingerprint()
    remember(token, fingerprint, memo)
    return fingerprint


def remember(token: str, fingerprint: Fingerprint, memo: dict | None = None) -> None:
    """File `fingerprint` under `token`; silent on failure (it only saves time)."""
    memo = dict(_read_memo() if memo is None else memo)
    memo.pop(token, None)
    memo[token] = {"digest": fingerprint.digest, "components": fingerprint.components}
    while len(memo) > MEMO_SIZE:
        memo.pop(next(iter(memo)))
    path = memo_path()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(memo))
        temporary.replace(path)


def memo_path() -> Path:
    return Path(platformdirs.user_state_dir("numba_cache", appauthor=False)) / MEMO_NAME


def environment_token() -> str:
    """A digest of everything the fingerprint is computed from that can be read cheaply."""
    parts = {
        "format_version": versions.KEY_FORMAT,
        "executable": sys.executable,
        "python": sys.version,
        "packages": {name: _installed_version(name) for name in _VERSIONED_PACKAGES},
        "numba_environment": sorted((k, v) for k, v in os.environ.items() if k.startswith("NUMBA_")),
        "target": os.environ.get("NBCACHE_TARGET"),
        "numba_config_file": _file_digest(Path.cwd() / _NUMBA_CONFIG_FILE),
        "pytensor_flags": os.environ.get("PYTENSOR_FLAGS"),
        "pytensor_config_files": {
            str(path): _file_digest(path) for path in _pytensor_config_files()},
        "machine": platform.machine(),
        "cpu": _cpu_description(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _installed_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _pytensor_config_files() -> list[Path]:
    """The files PyTensor reads its flags from (``configparser.config_files_from_pytensorrc``)."""
    paths = [Path(text).expanduser()
             for text in os.environ.get("PYTENSORRC", "~/.pytensorrc").split(os.pathsep)]
    if os.environ.get("PYTENSORRC") is None and sys.platform == "win32":
        paths.append(Path("~/.pytensorrc.txt").expanduser())
    return paths


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _cpu_description() -> list:
    """The CPU's model and feature flags (Linux), else what the platform module knows of it."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            wanted = {"model name", "flags", "Features", "CPU part", "CPU implementer"}
            lines = []
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor describes them all
                name = line.split(":", 1)[0].strip()
                if name in wanted:
                    lines.append(line.strip())
            return lines
    except OSError:
        return [platform.processor(), platform.node(), platform.platform()]


def _read_memo() -> dict:
    try:
        memo = json.loads(memo_path().read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}
