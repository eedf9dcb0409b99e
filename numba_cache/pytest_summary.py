"""What numba_cache did in one session of several processes (a test run): figures each
process gathers, sums of them, and the lines that report them.

A process's :class:`Figures` are plain numbers and text, so that they travel between
processes as they are (pytest-xdist's ``workeroutput``, :mod:`numba_cache.pytest_plugin`)
and add up (:meth:`Figures.add`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from numba_cache.cli.formatting import human_size, plural
from numba_cache.cli.info import lookups as hits_and_misses
from numba_cache.diagnostics.explain import explain_lookups
from numba_cache.kernels.outcomes.report import Lookup
from numba_cache.keys.components import DIGEST_DIGITS
from numba_cache.store import Store

#: How many differences a miss's line names; the rest are counted.
DIFFERENCES_SHOWN = 3


class Figures:
    """The counters (``session_stats()``), compiles, compile time and explained misses
    (key digest to line) of one process, or the sum of several."""

    def __init__(self, counters=None, compiles=0, seconds=0.0, misses=None):
        self.counters = Counter(counters or {})
        self.compiles = compiles
        self.seconds = seconds
        self.misses: dict[str, str] = dict(misses or {})

    def to_dict(self) -> dict:
        return {"counters": dict(self.counters), "compiles": self.compiles,
                "seconds": self.seconds, "misses": self.misses}

    def add(self, other: Figures) -> None:
        self.counters.update(other.counters)
        self.compiles += other.compiles
        self.seconds += other.seconds
        for digest, line in other.misses.items():  # a kernel two processes missed, once
            self.misses.setdefault(digest, line)


def summary_line(figures: Figures, root: str, store_stats: dict | None) -> str:
    """``numba_cache: 12 hits, 3 misses, 5 compiles in 4.2 s, 1 uncacheable (objmode 1);
    store ROOT: 42 entries, 1.3 MiB``."""
    counters = figures.counters
    hits, misses = hits_and_misses(counters)
    # Kernels compiled by compile-ahead helpers (other processes) are loaded here, counted.
    ahead = sum(value for name, value in counters.items() if name.endswith(".compiled_ahead"))
    compiles = plural(figures.compiles + ahead, "compile")
    if ahead:
        compiles += f" ({ahead} ahead, in helpers)"
    uncacheable = {name.removeprefix("uncacheable:"): value for name, value in
                   sorted(counters.items()) if name.startswith("uncacheable:") and value}
    reasons = ", ".join(f"{reason} {count}" for reason, count in uncacheable.items())
    text = (f"numba_cache: {plural(hits, 'hit')}, {plural(misses, 'miss')}, {compiles} in "
            f"{figures.seconds:.1f} s, {sum(uncacheable.values())} uncacheable"
            + (f" ({reasons})" if reasons else ""))
    if store_stats is None:
        return f"{text}; store {root}: none yet"
    return (f"{text}; store {root}: {plural(store_stats['entries'], 'entry')}, "
            f"{human_size(store_stats['bytes'])}")


def stored_keys(store: Store | None) -> set[str]:
    """The keys of the entries `store` holds now (what a session's misses are compared with)."""
    return set() if store is None else {entry.key for entry in store.entries()}


def explain_misses(
    store: Store | None, observed: Iterable[Lookup], stored_before: Collection[str]
) -> dict[str, str]:
    """One line per missed key (digest to line): its kind, summary and why it missed,
    compared with the entries `stored_before` the session."""
    first_of_each: dict[str, Lookup] = {}
    for lookup in observed:
        if lookup.decision == "miss":
            first_of_each.setdefault(lookup.key.digest, lookup)
    if store is None:
        return {digest: _miss_line(lookup, "the store did not exist")
                for digest, lookup in first_of_each.items()}
    lines = {}
    for explanation in explain_lookups(store, first_of_each.values(), stored_before):
        lookup, nearest = explanation.lookup, explanation.nearest
        if nearest is None:
            why = f"no {lookup.key.kind} entry was stored before"
        elif not explanation.differences:
            why = f"{nearest.key[:DIGEST_DIGITS]} has the same key, without this call's signature"
        else:
            shown = explanation.differences[:DIFFERENCES_SHOWN]
            why = f"nearest {nearest.key[:DIGEST_DIGITS]} differs in " + "; ".join(
                f"{difference.component}: {difference.old} → {difference.new}"
                for difference in shown)
            more = len(explanation.differences) - len(shown)
            why += f" (+{more} more)" if more else ""
        lines[lookup.key.digest] = _miss_line(lookup, why)
    return lines


def _miss_line(lookup: Lookup, why: str) -> str:
    return f"{lookup.key.kind} miss {lookup.key.short}  {lookup.key.summary}: {why}"
