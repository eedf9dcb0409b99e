"""The figures of ``numba-cache stats``: entries, bytes, kinds and counters, per fingerprint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .entry import KINDS, Entry


def summarize(entries: Iterable[Entry], counters: dict[str, dict[str, int]]) -> dict:
    """``entries``, ``bytes``, ``kinds`` (cacheable entries per kind), ``uncacheable``
    (markers), ``counters`` (name to value), in total and under ``fingerprints``
    (fingerprint to the same five figures). `counters` is by fingerprint, then name."""
    per_fingerprint: dict[str, dict] = {}

    def figures_of(fingerprint: str) -> dict:
        empty = {"entries": 0, "bytes": 0, "kinds": dict.fromkeys(KINDS, 0)}
        empty |= {"uncacheable": 0, "counters": {}}
        return per_fingerprint.setdefault(fingerprint, empty)

    for entry in entries:
        figures = figures_of(entry.fingerprint)
        figures["entries"] += 1
        figures["bytes"] += entry.size
        if entry.cacheable:
            figures["kinds"][entry.kind] += 1
        else:
            figures["uncacheable"] += 1
    for fingerprint, values in counters.items():
        figures_of(fingerprint)["counters"] = values
    kinds, totals = Counter(), Counter()
    for figures in per_fingerprint.values():
        kinds.update(figures["kinds"])
        totals.update(figures["counters"])
    return {
        "entries": sum(figures["entries"] for figures in per_fingerprint.values()),
        "bytes": sum(figures["bytes"] for figures in per_fingerprint.values()),
        "kinds": {kind: kinds[kind] for kind in KINDS},
        "uncacheable": sum(figures["uncacheable"] for figures in per_fingerprint.values()),
        "counters": dict(totals),
        "fingerprints": per_fingerprint,
    }
