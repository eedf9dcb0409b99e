"""``numba-cache``: the command line of numba_cache.

Commands: ``demo``, ``dir``, ``stats``, ``fingerprint``. Listings take ``--json``.
A user mistake prints one line on stderr and exits with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from numba_cache import settings as settings_module

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_size(size: int) -> str:
    value = float(size)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _store():
    from numba_cache.store import Store

    return Store(settings_module.current())


def command_dir(args) -> int:
    current = settings_module.current()
    if args.json:
        print(json.dumps({"root": str(current.root), "source": current.source_of("root")}))
    else:
        print(f"{current.root}  ({current.source_of('root')})")
    return 0


def command_stats(args) -> int:
    stats = _store().stats()
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    counters = stats["counters"]
    hits = sum(v for k, v in counters.items() if k.endswith(".hit"))
    misses = sum(v for k, v in counters.items() if k.endswith(".miss"))
    lookups = hits + misses
    rows = [
        ("store", str(stats["root"])),
        ("entries", f"{stats['entries']} ({', '.join(f'{n} {k}' for k, n in sorted(stats['kinds'].items()))})"),
        ("size", f"{human_size(stats['bytes'])} of {human_size(stats['max_size'])}"),
        ("hits", str(hits)),
        ("misses", str(misses)),
        ("hit rate", f"{hits / lookups:.1%}" if lookups else "-"),
    ]
    rows += [(name, str(value)) for name, value in sorted(counters.items())
             if not name.endswith((".hit", ".miss"))]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def command_fingerprint(args) -> int:
    from numba_cache.keys import current_fingerprint

    fingerprint = current_fingerprint()
    if args.json:
        print(json.dumps({"digest": fingerprint.digest, "components": fingerprint.components}, indent=2))
    else:
        print(fingerprint.digest)
        for name, value in sorted(fingerprint.components.items()):
            text = str(value)
            print(f"  {name:<26} {text if len(text) <= 70 else text[:67] + '...'}")
    return 0


def command_demo(args) -> int:
    from numba_cache import demo

    return demo.main(args.demo_args)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="numba-cache", description="Inspect and manage numba_cache.")
    commands = root.add_subparsers(dest="command", required=True)
    for name, function, helptext in (
        ("dir", command_dir, "the store root in use and where that setting came from"),
        ("stats", command_stats, "entries, size, hits, misses, uncacheable kernels"),
        ("fingerprint", command_fingerprint, "the environment fingerprint and its components"),
    ):
        sub = commands.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        sub.set_defaults(handler=function)
    demo = commands.add_parser("demo", help="compile a real model twice, cached and uncached")
    demo.add_argument("demo_args", nargs=argparse.REMAINDER)
    demo.set_defaults(handler=command_demo)
    return root


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except settings_module.SettingsError as error:
        print(f"numba-cache: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
