"""``list`` and ``show``: the entries of the store, and one entry in full."""

from __future__ import annotations

import argparse
import json
import time

from numba_cache.cli.access import CliError, find_entry, fingerprint_prefix, open_store
from numba_cache.cli.formatting import human_age, human_size, human_time, plural, table
from numba_cache.keys.components import DIGEST_DIGITS, brief, is_node_list
from numba_cache.store import KINDS, CorruptEntry, Entry
from numba_cache.store.entry_layout import SOURCE_BLOB

#: ``--sort`` orders: the entry field, largest or newest first.
SORTS = {
    "last-used": lambda entry: entry.last_used,
    "created": lambda entry: entry.created,
    "size": lambda entry: entry.size,
    "hits": lambda entry: entry.hits,
}


def register(commands, common) -> None:
    listing = commands.add_parser(
        "list", parents=[common], help="the entries, most recently used first",
        description="The entries of the store, most recently used first.",
    )
    listing.add_argument("--sort", choices=SORTS, default="last-used",
                         help="order, largest or newest first (default: last-used)")
    listing.add_argument("--limit", type=_positive, metavar="N", help="show the first N entries only")
    listing.add_argument("--kind", choices=KINDS, help="only entries of this kind")
    listing.add_argument("--fingerprint", metavar="PREFIX",
                         help="only entries of the fingerprints starting with PREFIX")
    listing.set_defaults(handler=command_list)
    show = commands.add_parser(
        "show", parents=[common], help="one entry: metadata, key components, generated source",
        description="One entry in full: metadata, key components and generated source.",
    )
    show.add_argument("key", help="the entry's key, or a prefix of it that only it has")
    show.add_argument("--no-source", dest="source", action="store_false",
                      help="leave out the generated source")
    show.set_defaults(handler=command_show)


def command_list(args) -> int:
    store = open_store()
    prefix = "" if args.fingerprint is None else fingerprint_prefix(args.fingerprint)
    entries = [
        entry for entry in store.entries(kind=args.kind) if entry.fingerprint.startswith(prefix)
    ]
    entries.sort(key=SORTS[args.sort], reverse=True)
    shown = entries[: args.limit]
    if args.json:
        print(json.dumps({"entries": [entry_json(entry) for entry in shown]}, indent=2))
        return 0
    if not shown:
        print("no entries")
        return 0
    now = time.time()
    rows = [
        (
            entry.key[:DIGEST_DIGITS],
            entry.kind,
            entry.fingerprint[:DIGEST_DIGITS],
            human_size(entry.size),
            human_age(entry.created, now),
            human_age(entry.last_used, now),
            str(entry.hits),
            _summary(entry),
        )
        for entry in shown
    ]
    headers = ("KEY", "KIND", "FINGERPRINT", "SIZE", "CREATED", "LAST USED", "HITS", "SUMMARY")
    print(table(headers, rows, right=("SIZE", "CREATED", "LAST USED", "HITS")))
    total = sum(entry.size for entry in entries)
    of_all = f" (showing {len(shown)})" if len(shown) < len(entries) else ""
    print(f"{plural(len(entries), 'entry')}, {human_size(total)}{of_all}")
    return 0


def command_show(args) -> int:
    store = open_store()
    listed = find_entry(store, args.key)
    try:
        entry = store.read(listed.fingerprint, listed.key)
    except CorruptEntry as error:
        raise CliError(
            f"entry {listed.key[:DIGEST_DIGITS]} is unreadable ({error}); "
            "numba-cache verify --repair removes it"
        ) from None
    if entry is None:
        raise CliError(f"entry {listed.key[:DIGEST_DIGITS]} was removed meanwhile")
    entry.last_used, entry.hits = listed.last_used, listed.hits
    source_path = store.source_path(entry.fingerprint, entry.key)
    source = _source(entry, source_path)
    if args.json:
        print(json.dumps(
            entry_json(entry) | {
                "tool_version": entry.tool_version,
                "blobs": [{"name": name, "size": len(data)} for name, data in entry.blobs.items()],
                "components": entry.components,
                "source_path": str(source_path) if source_path.exists() else None,
                "source": source,
            },
            indent=2,
        ))
        return 0
    cacheable = "yes" if entry.cacheable else f"no: {entry.reason}"
    rows = [
        ("key", entry.key),
        ("fingerprint", entry.fingerprint),
        ("kind", entry.kind),
        ("summary", entry.summary),
        ("cacheable", cacheable),
        ("size", human_size(entry.size)),
        ("created", human_time(entry.created)),
        ("last used", human_time(entry.last_used)),
        ("hits", str(entry.hits)),
        ("written by", f"numba_cache {entry.tool_version}"),
    ]
    rows += [("blob", f"{name}  {human_size(len(data))}") for name, data in entry.blobs.items()]
    if source_path.exists():
        rows.append(("source copy", str(source_path)))
    print("\n".join(f"{name:<12} {value}" for name, value in rows))
    print("\ncomponents")
    print(_components_text(entry.components))
    if args.source:
        print("\nsource")
        print(source.rstrip("\n") if source is not None else "(none: this entry has no generated source)")
    return 0


def entry_json(entry: Entry) -> dict:
    """The listing fields of an entry, as ``list --json`` and ``show --json`` give them."""
    return {
        "key": entry.key,
        "fingerprint": entry.fingerprint,
        "kind": entry.kind,
        "summary": entry.summary,
        "cacheable": entry.cacheable,
        "reason": entry.reason,
        "size": entry.size,
        "created": entry.created,
        "last_used": entry.last_used,
        "hits": entry.hits,
    }


def _summary(entry: Entry) -> str:
    return entry.summary if entry.cacheable else f"[uncacheable: {entry.reason}] {entry.summary}"


def _source(entry: Entry, source_path) -> str | None:
    """The generated source: the ``.py`` copy beside the record, or the record's own blob."""
    try:
        return source_path.read_text(errors="replace")
    except FileNotFoundError:
        blob = entry.blobs.get(SOURCE_BLOB)
        return None if blob is None else blob.decode(errors="replace")


def _components_text(components: dict) -> str:
    width = max((len(name) for name in components), default=0)
    lines = []
    for name, value in components.items():
        lines.append(f"  {name:<{width}}  {brief(value, 100)}")
        if is_node_list(value):
            lines += [
                f"    [{position}] {node['op']}  op {node['op_digest'][:DIGEST_DIGITS]}  "
                f"inputs {', '.join(node['inputs'])}"
                for position, node in enumerate(value)
            ]
    return "\n".join(lines)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value

