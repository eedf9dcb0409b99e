"""Opening the store for a command, and finding entries and fingerprints by prefix."""

from __future__ import annotations

import os
import re
import sys

from numba_cache import settings as settings_module
from numba_cache.store import Entry, Store
from numba_cache.store.local import make_private_dirs, unusable_root

_HEX = re.compile(r"[0-9a-f]+")


class CliError(Exception):
    """A request that cannot be carried out; the message is the one line shown."""


def open_store(*, write: bool = False, create: bool = False) -> Store:
    """The store of the settings in force, checked to exist and to be usable.

    Without `write` the store is opened read-only, so that looking never changes
    anything (not even an entry's last use). With `create` (and `write`), a missing
    store is created, private to the user. The cache being disabled does not keep
    the command line from managing the store.
    """
    current = settings_module.current()
    root = current.root
    where = f"{root} ({current.source_of('root')})"
    if (problem := unusable_root(root)) is not None:
        raise CliError(f"the store {where} is {problem}: name a directory")
    if write and create and not os.path.lexists(root):
        try:
            make_private_dirs(root)
        except OSError as error:
            raise CliError(f"cannot create the store {where}: {error.strerror or error}") from None
    try:
        root.stat()
    except FileNotFoundError:
        raise CliError(f"no store at {where}: nothing has been cached there") from None
    except PermissionError:
        raise CliError(f"cannot read the store {where}: permission denied") from None
    if not os.access(root, os.R_OK | os.X_OK):
        raise CliError(f"cannot read the store {where}: permission denied")
    readonly = current.readonly or not write
    store = Store(settings_module.override(current, disabled=False, readonly=readonly))
    if write and store.readonly:
        why = "NBCACHE_READONLY is set" if current.readonly else "permission denied"
        raise CliError(f"cannot change the store {where}: {why}")
    return store


def find_entry(store: Store, prefix: str) -> Entry:
    """The listed entry whose key starts with `prefix`; CliError unless there is exactly one."""
    prefix = _hex_prefix(prefix, "key")
    matches = [entry for entry in store.entries() if entry.key.startswith(prefix)]
    if not matches:
        raise CliError(f"no entry with a key starting with {prefix} (see numba-cache list)")
    if len(matches) > 1:
        shown = ", ".join(entry.key[: len(prefix) + 4] for entry in matches[:4])
        more = ", ..." if len(matches) > 4 else ""
        raise CliError(
            f"the key prefix {prefix} is ambiguous: {len(matches)} entries match "
            f"({shown}{more}); give more digits"
        )
    return matches[0]


def find_fingerprint(store: Store, prefix: str) -> str:
    """The fingerprint with entries that starts with `prefix`; CliError unless exactly one."""
    prefix = _hex_prefix(prefix, "fingerprint")
    known = sorted({entry.fingerprint for entry in store.entries()})
    matches = [fingerprint for fingerprint in known if fingerprint.startswith(prefix)]
    if not matches:
        raise CliError(f"no entries under a fingerprint starting with {prefix} (see numba-cache stats)")
    if len(matches) > 1:
        raise CliError(f"the fingerprint prefix {prefix} is ambiguous: {len(matches)} fingerprints match")
    return matches[0]


def fingerprint_prefix(text: str) -> str:
    """A fingerprint prefix given as a filter, checked to be hex."""
    return _hex_prefix(text, "fingerprint")


def confirm(question: str) -> bool:
    """Ask `question` on the terminal; only "y" or "yes" is a yes.

    Raises CliError when stdin is not a terminal: deleting needs a human, or --yes.
    """
    if not sys.stdin or not sys.stdin.isatty():
        raise CliError("refusing to delete without confirmation: stdin is not a terminal; pass --yes")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _hex_prefix(text: str, what: str) -> str:
    prefix = text.strip().lower()
    if not _HEX.fullmatch(prefix):
        raise CliError(f"not a {what}: {text!r} (a {what} is hex digits; a prefix will do)")
    return prefix
