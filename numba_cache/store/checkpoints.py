"""Named points in the store's write path where a test can pause or fail a writer.

Crash and race tests need a writer stopped at an exact step of a write, to kill
it there (SIGKILL) or to let a competing process run first. The write path calls
:func:`reached` at each step:

``before-temp-write``
    ``LocalBackend.put`` has started; nothing of the entry is written yet.
``after-temp-write``
    the record's temp file is written but not yet fsync'ed.
``before-rename``
    the record's temp file is complete and fsync'ed, not yet renamed into place.
``after-rename``
    the record is in place; its ``.py`` copy is written next.
``before-index``
    ``Store.save``: the record is in place, its index row is not written yet.

Nothing happens unless the process was started with one of these variables:

``NBCACHE_TEST_CHECKPOINT=<name>:<path>``
    at checkpoint `name`, create ``<path>.reached`` (holding the pid), then wait
    until ``<path>.release`` exists (polled, at most :data:`MAX_WAIT` seconds).
    Once released, later passes go straight through.
``NBCACHE_TEST_FAULT=<name>:<errno name>``
    at checkpoint `name`, raise the ``OSError`` a failing disk would (``ENOSPC``,
    ``EIO``...), every time. Meant for the steps where I/O really can fail:
    ``before-temp-write``, ``after-temp-write``, ``before-rename``.

The variables are read once, at import; a malformed value raises there, since a
test that believes it paused a writer must not run unpaused. Disabled, a
checkpoint costs one dict lookup, and only on the write path: reads have none.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

PAUSE_VARIABLE = "NBCACHE_TEST_CHECKPOINT"
FAULT_VARIABLE = "NBCACHE_TEST_FAULT"
NAMES = ("before-temp-write", "after-temp-write", "before-rename", "after-rename", "before-index")
#: A paused writer goes on by itself after this long, so a test that dies cannot
#: leave a process waiting forever.
MAX_WAIT = 120.0
_POLL_INTERVAL = 0.01


def reached(name: str) -> None:
    """Pass checkpoint `name`: pause or fail here if a test asked for it."""
    action = _actions.get(name)
    if action is not None:
        action()


def _pause(marker: Path) -> Callable[[], None]:
    def pause() -> None:
        release = Path(f"{marker}.release")
        if release.exists():
            return
        Path(f"{marker}.reached").write_text(str(os.getpid()))
        deadline = time.monotonic() + MAX_WAIT
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(_POLL_INTERVAL)

    return pause


def _fault(code: int, name: str) -> Callable[[], None]:
    def fail() -> None:
        raise OSError(code, f"{os.strerror(code)} (injected at {name})")

    return fail


def _parse(name_and_argument: str, variable: str) -> tuple[str, str]:
    name, separator, argument = name_and_argument.partition(":")
    if name not in NAMES or not separator or not argument:
        raise ValueError(
            f"{variable}={name_and_argument!r}: expected <checkpoint>:<argument> with a "
            f"checkpoint among {', '.join(NAMES)}"
        )
    return name, argument


def _armed() -> dict[str, Callable[[], None]]:
    actions: dict[str, Callable[[], None]] = {}
    if pause := os.environ.get(PAUSE_VARIABLE):
        name, path = _parse(pause, PAUSE_VARIABLE)
        actions[name] = _pause(Path(path))
    if fault := os.environ.get(FAULT_VARIABLE):
        name, code_name = _parse(fault, FAULT_VARIABLE)
        code = getattr(errno, code_name, None)
        if not isinstance(code, int):
            raise ValueError(f"{FAULT_VARIABLE}={fault!r}: {code_name!r} is not an errno name")
        actions[name] = _fault(code, name)
    return actions


_actions = _armed()
