"""``dir``, ``stats`` and ``fingerprint``: where the store is, what it holds, what keys it."""

from __future__ import annotations

import json
import os

from numba_cache import settings as settings_module
from numba_cache.cli.access import open_store
from numba_cache.cli.formatting import human_size, plural, table
from numba_cache.keys.components import DIGEST_DIGITS, changed_components
from numba_cache.keys.remembered import environment_token, remember, this_environment
from numba_cache.store.local import unusable_root
from numba_cache.store.remote import display_url


def register(commands, common) -> None:
    for name, handler, description in (
        ("dir", command_dir, "the store root in use and where that setting came from"),
        ("stats", command_stats, "entries, size, hits, misses, uncacheable kernels, per fingerprint"),
        ("fingerprint", command_fingerprint, "this environment's fingerprint and its components"),
    ):
        sub = commands.add_parser(name, parents=[common], help=description, description=description)
        sub.set_defaults(handler=handler)
    commands.choices["stats"].add_argument(
        "--zero", action="store_true", help="reset the hit, miss and other counters"
    )


def command_dir(args) -> int:
    current = settings_module.current()
    if args.json:
        print(json.dumps({
            "root": str(current.root),
            "source": current.source_of("root"),
            "exists": os.path.isdir(current.root),
        }))
    else:
        unusable = unusable_root(current.root)
        state = ("" if os.path.isdir(current.root) else
                 f", {unusable}: the cache cannot be used" if unusable is not None
                 else ", does not exist yet")
        print(f"{current.root}  ({current.source_of('root')}{state})")
    return 0


def command_stats(args) -> int:
    store = open_store(write=args.zero)
    if args.zero:
        store.zero_counters()
        print(json.dumps({"zeroed": True}) if args.json else f"counters of {store.root} reset")
        return 0
    stats = store.stats()
    current = this_environment()
    hits, misses = lookups(stats["counters"])
    rate = hits / (hits + misses) if hits + misses else None
    if args.json:
        extra = {"hits": hits, "misses": misses, "hit_rate": rate, "current_fingerprint": current.digest}
        print(json.dumps(stats | extra, indent=2, sort_keys=True))
        return 0
    counters = stats["counters"]
    uncacheable = {
        name.removeprefix("uncacheable:"): value
        for name, value in sorted(counters.items())
        if name.startswith("uncacheable:")
    }
    kinds = ", ".join(f"{count} {kind}" for kind, count in stats["kinds"].items() if count)
    rows = [
        ("store", f"{stats['root']}  ({settings_module.current().source_of('root')})"),
        ("entries", f"{stats['entries']}" + (f": {kinds}" if kinds else "")),
        ("size", f"{human_size(stats['bytes'])} of {human_size(stats['max_size'])}"),
        ("hits", _by_kind(counters, "hit")),
        ("misses", _by_kind(counters, "miss")),
        ("hit rate", "-" if rate is None else f"{rate:.1%}"),
        ("uncacheable", _uncacheable(uncacheable, stats["uncacheable"])),
        ("evictions", str(counters.get("eviction", 0))),
        ("corrupt", str(counters.get("corrupt", 0))),
        ("write errors", str(counters.get("write_error", 0))),
    ]
    if settings_module.current().remote or any(name.startswith("remote:") for name in counters):
        rows.append(("remote", _remote(counters)))
    if (settings_module.current().link_in_background
            or any(name.startswith("linking:") for name in counters)):
        rows.append(("linked build", _linked_build(counters)))
    width = max(len(name) for name, _ in rows)
    print("\n".join(f"{name:<{width}}  {value}" for name, value in rows))
    if stats["fingerprints"]:
        print()
        print(_fingerprint_table(store, stats["fingerprints"], current))
    return 0


def command_fingerprint(args) -> int:
    from numba_cache.keys.fingerprint import current_fingerprint

    fingerprint = current_fingerprint()  # computed afresh (imports numba and PyTensor), remembered
    remember(environment_token(), fingerprint)
    if args.json:
        print(json.dumps({"digest": fingerprint.digest, "components": fingerprint.components}, indent=2))
    else:
        print(fingerprint.digest)
        for name, value in sorted(fingerprint.components.items()):
            text = str(value)
            print(f"  {name:<26} {text if len(text) <= 70 else text[:67] + '...'}")
    return 0


def lookups(counters: dict) -> tuple[int, int]:
    """Hits and misses of every kind, from counters named ``<kind>.hit`` and ``<kind>.miss``."""
    hits = sum(value for name, value in counters.items() if name.endswith(".hit"))
    misses = sum(value for name, value in counters.items() if name.endswith(".miss"))
    return hits, misses


def _by_kind(counters: dict, outcome: str) -> str:
    per_kind = {
        name.removesuffix(f".{outcome}"): value
        for name, value in sorted(counters.items())
        if name.endswith(f".{outcome}") and value
    }
    total = sum(per_kind.values())
    details = ", ".join(f"{value} {kind}" for kind, value in per_kind.items())
    return f"{total} ({details})" if details else str(total)


def _linked_build(counters: dict) -> str:
    """The linked build's counters (see :mod:`numba_cache.kernels.helpers.linked_build`) in one line."""
    builds = ", ".join(f"{counters.get('linking:' + name, 0)} {name}"
                       for name in ("requested", "built", "failed"))
    return f"builds: {builds}; served: {counters.get('linking:served', 0)}"


def _remote(counters: dict) -> str:
    """The remote tier's counters (see :mod:`numba_cache.store.remote.tier`) in one line."""
    current = settings_module.current()
    where = display_url(current.remote) if current.remote else "not configured now"
    figures = {name.removeprefix("remote:"): value for name, value in counters.items()
               if name.startswith("remote:")}
    text = ", ".join(
        f"{figures.get(name, 0)} {label}"
        for name, label in (("hit", "hits"), ("miss", "misses"), ("error", "errors"),
                            ("timeout", "timeouts"), ("bug", "bugs"),
                            ("rejected", "rejected"), ("damaged", "damaged"),
                            ("published", "published"), ("too_large", "too large"))
    )
    moved_in, moved_out = (human_size(figures.get(name, 0)) for name in ("bytes_in", "bytes_out"))
    return f"{where}: {text}; {moved_in} in, {moved_out} out"


def _uncacheable(by_reason: dict, markers: int) -> str:
    if not by_reason and not markers:
        return "none"
    compiled = sum(by_reason.values())
    reasons = ", ".join(f"{reason} {count}" for reason, count in by_reason.items())
    text = f"{plural(compiled, 'kernel')} compiled without the cache"
    text += f" ({reasons})" if reasons else ""
    return text + f"; {plural(markers, 'marker')} stored"


def _fingerprint_table(store, per_fingerprint: dict, current) -> str:
    rows = []
    for fingerprint, figures in sorted(per_fingerprint.items(), key=lambda item: -item[1]["bytes"]):
        hits, misses = lookups(figures["counters"])
        rows.append((
            fingerprint[:DIGEST_DIGITS],
            str(figures["entries"]),
            human_size(figures["bytes"]),
            str(hits),
            str(misses),
            _how_it_differs(store, fingerprint, current),
        ))
    headers = ("FINGERPRINT", "ENTRIES", "SIZE", "HITS", "MISSES", "VS THIS ENVIRONMENT")
    return table(headers, rows, right=("ENTRIES", "SIZE", "HITS", "MISSES"))


def _how_it_differs(store, fingerprint: str, current) -> str:
    """``current``, or the components of `fingerprint` that differ from the current ones."""
    if fingerprint == current.digest:
        return "current"
    recorded = store.fingerprint_components(fingerprint)
    if recorded is None:
        return "components not recorded"
    text = ", ".join(changed_components(recorded, current.components)) or "same components"
    return text if len(text) <= 70 else text[:69] + "…"
