"""``numba-cache warm``: compile ahead of time what a project will compile.

Each target runs in a fresh child process (:mod:`numba_cache.portable.warm_target`), at
most `jobs` at a time, against the store of the settings in force. A child that
crashes (a segfault in a compile) is one failed target, not a failed warm. The
parent counts the children's kernel lookups as they stream in: a miss is a
kernel compiled and stored, a hit one already cached, ``uncacheable (<reason>)``
one compiled but never stored.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

#: Lines of a failed child's stderr kept in its report.
STDERR_TAIL_LINES = 20


@dataclass
class Failure:
    target: str
    graph: str | None  # None: the target itself failed
    error: str
    details: str = ""


@dataclass
class Tally:
    """What warming did, for one target or all of them."""

    compiled: int = 0
    cached: int = 0
    uncacheable: Counter = field(default_factory=Counter)  # reason to kernels
    failures: list[Failure] = field(default_factory=list)
    write_errors: int = 0
    # With verification (numba-cache verify --recompile): hits compared, hits with
    # nothing to compare, and the collisions found (as warm_target reports them).
    verified: int = 0
    unrecorded: int = 0
    collisions: list[dict] = field(default_factory=list)

    def add_lookup(self, decision: str) -> None:
        if decision == "miss":
            self.compiled += 1
        elif decision == "hit":
            self.cached += 1
        else:
            self.uncacheable[decision.removeprefix("uncacheable (").removesuffix(")")] += 1

    def add(self, other: Tally) -> None:
        self.compiled += other.compiled
        self.cached += other.cached
        self.uncacheable.update(other.uncacheable)
        self.failures.extend(other.failures)
        self.write_errors += other.write_errors
        self.verified += other.verified
        self.unrecorded += other.unrecorded
        self.collisions.extend(other.collisions)


@dataclass
class Progress:
    """Shared between the threads watching the children.

    `changed` is called under the lock after each event, with the target and its
    tally when a target has just finished, else None.
    """

    targets: int
    changed: Callable[[Progress, tuple[str, Tally] | None], None]
    started: float = field(default_factory=time.monotonic)
    finished: int = 0
    tally: Tally = field(default_factory=Tally)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def warm(targets: list[str], jobs: int, progress: Progress) -> dict[str, Tally]:
    """Warm each target in a child process, `jobs` at a time, reporting to `progress`;
    each target's tally."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        tallies = list(pool.map(lambda target: _warm_one(target, progress), targets))
    return dict(zip(targets, tallies))


def verify(targets: list[str], hits: int, progress: Progress) -> list[tuple[str, Tally | None]]:
    """Run each target in turn in a child process verifying its hits, at most `hits`
    in all; each target with its tally (None: not run, every hit to verify was verified)."""
    tallies: list[tuple[str, Tally | None]] = []
    left = hits
    for target in targets:
        tally = None if left <= 0 else _warm_one(target, progress, verify=left)
        tallies.append((target, tally))
        if tally is not None:
            left -= tally.verified + tally.unrecorded
    return tallies


def _warm_one(target: str, progress: Progress, verify: int | None = None) -> Tally:
    tally = Tally()
    done = False
    option = [] if verify is None else ["--verify", str(verify)]
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "numba_cache.portable.warm_target", *option, target],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
        )
        for line in child.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with progress.lock:
                done = _apply(event, target, tally, progress.tally) or done
                progress.changed(progress, None)
        status = child.wait()
        if not done:
            stderr.seek(0)
            tail = "".join(stderr.readlines()[-STDERR_TAIL_LINES:])
            failure = Failure(target, None, _death(status), tail)
            tally.failures.append(failure)
            with progress.lock:
                progress.tally.failures.append(failure)
    with progress.lock:
        progress.finished += 1
        progress.changed(progress, (target, tally))
    return tally


def _apply(event: dict, target: str, tally: Tally, total: Tally) -> bool:
    """Add one child event to both tallies; True for the last event of a child."""
    kind = event.get("event")
    if kind == "lookup":
        for each in (tally, total):
            each.add_lookup(str(event.get("decision")))
    elif kind == "failure":
        failure = Failure(target, event.get("graph"), str(event.get("error")), str(event.get("details", "")))
        tally.failures.append(failure)
        total.failures.append(failure)
    elif kind == "done":
        tally.write_errors = int(event.get("write_errors", 0))
        tally.verified = int(event.get("verified", 0))
        tally.unrecorded = int(event.get("unrecorded", 0))
        tally.collisions = list(event.get("collisions", []))
        total.write_errors += tally.write_errors
        total.verified += tally.verified
        total.unrecorded += tally.unrecorded
        total.collisions.extend(tally.collisions)
        return True
    return False


def _death(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the process warming it died ({name})"
    return f"the process warming it ended early (exit status {status})"

