"""The shared tier: ``--remote`` for ``stats``, ``list``, ``clear`` and ``prune``, and ``publish``.

Adds the flag to the commands the other modules define, and runs the remote
variant when it is given, on Redis or a bucket alike; ``publish`` sends the local
entries and notes the server lacks. The server is asked directly
(it is not mirrored locally); its failures are one-line errors like any other.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

from numba_cache import settings as settings_module
from numba_cache.cli.access import CliError, confirm, fingerprint_prefix, open_store
from numba_cache.cli.formatting import human_age, human_size, plural, table
from numba_cache.cli.maintenance import prune_limits
from numba_cache.keys.components import DIGEST_DIGITS
from numba_cache.keys.remembered import this_environment
from numba_cache.store import CorruptEntry, Store, tier_notes
from numba_cache.store.remote import RemoteConfigError, RemoteTier, open_tier


def register(commands, common) -> None:
    for name, remote_handler in (("stats", remote_stats), ("list", remote_list),
                                 ("clear", remote_clear), ("prune", remote_prune)):
        parser = commands.choices[name]
        parser.add_argument("--remote", action="store_true",
                            help="the shared tier (NBCACHE_REMOTE: Redis or a bucket), not the "
                            "local store")
        parser.set_defaults(handler=_either(parser.get_default("handler"), remote_handler))
    publish = commands.add_parser(
        "publish", parents=[common], help="send the local entries the remote tier lacks",
        description="Send to the remote tier (NBCACHE_REMOTE) the entries of the local store "
        "of this environment's fingerprint (of every fingerprint, --all) that it does not "
        "hold, and the notes that let a fresh store use them (the self-test's vouch, the "
        "code index, remembered op kernel keys, completed registries): what processes compiled while the server was unreachable (they publish it "
        "themselves only if the server answers again before they end), or a store filled "
        "before the tier was set. Run it at the end of a CI warm step. Exit status 1 if an "
        "entry could not be read or is over the tier's size limit.",
    )
    publish.add_argument("--all", action="store_true", help="the entries of every fingerprint")
    publish.add_argument("--dry-run", action="store_true",
                         help="list what would be sent, send nothing")
    publish.set_defaults(handler=command_publish)


def _either(local_handler, remote_handler):
    def handler(args) -> int:
        return remote_handler(args) if args.remote else local_handler(args)

    return handler


def open_remote() -> RemoteTier:
    """The remote tier of the settings in force; CliError when there is none or it cannot start."""
    current = settings_module.current()
    if current.remote is None:
        raise CliError("no remote cache configured: set NBCACHE_REMOTE=redis://host:port/db "
                       "or s3://bucket/path")
    try:
        return open_tier(current, lambda fingerprint, name, n: None)
    except RemoteConfigError as problem:
        raise CliError(str(problem)) from None


def _entries(tier: RemoteTier) -> list[tuple[str, str, int, float]]:
    try:
        return tier.entries()
    except Exception as error:  # the client's errors have no common base with OSError
        raise _server_error(tier, error) from None


def _server_error(tier: RemoteTier, error: Exception) -> CliError:
    return CliError(f"the remote cache {tier.url} failed: {type(error).__name__}: {error}")


def remote_stats(args) -> int:
    if args.zero:
        raise CliError("--zero resets the local counters; remote counters are kept locally too, "
                       "run stats --zero without --remote")
    tier = open_remote()
    per_fingerprint: dict[str, dict] = defaultdict(lambda: {"entries": 0, "bytes": 0})
    for fingerprint, _, size, _ in _entries(tier):
        per_fingerprint[fingerprint]["entries"] += 1
        per_fingerprint[fingerprint]["bytes"] += size
    current = this_environment().digest
    summary = {
        "url": tier.url,
        "prefix": tier.backend.prefix,
        "readonly": tier.readonly,
        "entries": sum(figures["entries"] for figures in per_fingerprint.values()),
        "bytes": sum(figures["bytes"] for figures in per_fingerprint.values()),
        "fingerprints": dict(per_fingerprint),
        "current_fingerprint": current,
    }
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    mode = "read-only" if tier.readonly else "read-write"
    print(f"remote   {tier.url}  (prefix {tier.backend.prefix}, {mode})")
    print(f"entries  {summary['entries']}, {human_size(summary['bytes'])} (compressed)")
    if per_fingerprint:
        rows = [
            (fingerprint[:DIGEST_DIGITS], str(figures["entries"]), human_size(figures["bytes"]),
             "current" if fingerprint == current else "")
            for fingerprint, figures in sorted(per_fingerprint.items(),
                                               key=lambda item: -item[1]["bytes"])
        ]
        print()
        print(table(("FINGERPRINT", "ENTRIES", "SIZE", "VS THIS ENVIRONMENT"), rows,
                    right=("ENTRIES", "SIZE")))
    return 0


def remote_list(args) -> int:
    if args.kind is not None or args.sort == "hits":
        raise CliError("the remote listing knows keys, sizes and write times only: "
                       "--kind and --sort hits are for the local store")
    tier = open_remote()
    prefix = "" if args.fingerprint is None else fingerprint_prefix(args.fingerprint)
    rows = [row for row in _entries(tier) if row[0].startswith(prefix)]
    order = {"size": lambda row: row[2]}.get(args.sort, lambda row: row[3])
    rows.sort(key=order, reverse=True)
    shown = rows[: args.limit]
    if args.json:
        print(json.dumps({"url": tier.url, "entries": [_entry_json(row) for row in shown]},
                         indent=2))
        return 0
    if not shown:
        print(f"no entries in {tier.url}")
        return 0
    _print_rows(shown)
    of_all = f" (showing {len(shown)})" if len(shown) < len(rows) else ""
    total = human_size(sum(row[2] for row in rows))
    print(f"{plural(len(rows), 'entry')}, {total} in {tier.url}{of_all}")
    return 0


def _writable(tier: RemoteTier) -> RemoteTier:
    if tier.readonly:
        raise CliError(f"cannot change the remote cache {tier.url}: NBCACHE_REMOTE_READONLY is set")
    return tier


def _remove(tier: RemoteTier, rows) -> None:
    try:
        for fingerprint, key, _, _ in rows:
            tier.remove(fingerprint, key)
    except Exception as error:  # the client's errors have no common base with OSError
        raise _server_error(tier, error) from None


def _entry_json(row: tuple[str, str, int, float]) -> dict:
    fingerprint, key, size, written = row
    return {"key": key, "fingerprint": fingerprint, "size": size, "written": written}


def _print_rows(rows) -> None:
    now = time.time()
    print(table(
        ("KEY", "FINGERPRINT", "SIZE", "WRITTEN"),
        [(key[:DIGEST_DIGITS], fingerprint[:DIGEST_DIGITS], human_size(size),
          human_age(written, now)) for fingerprint, key, size, written in rows],
        right=("SIZE", "WRITTEN"),
    ))


def remote_clear(args) -> int:
    tier = _writable(open_remote())
    rows = _entries(tier)
    if args.fingerprint is not None:
        prefix = fingerprint_prefix(args.fingerprint)
        matching = sorted({row[0] for row in rows if row[0].startswith(prefix)})
        if len(matching) != 1:
            raise CliError(f"{len(matching)} remote fingerprints start with {prefix}; "
                           "give one (see numba-cache stats --remote)")
        chosen = [row for row in rows if row[0] == matching[0]]
        scope = f"of fingerprint {matching[0][:DIGEST_DIGITS]} in {tier.url}"
    elif args.stale:
        current = this_environment().digest
        chosen = [row for row in rows if row[0] != current]
        scope = f"of fingerprints other than this environment's in {tier.url}"
    else:
        chosen, scope = rows, f"in {tier.url}"
    size = sum(row[2] for row in chosen)
    if not chosen:
        print(json.dumps({"deleted": 0, "bytes": 0}) if args.json else f"no entries {scope}")
        return 0
    question = f"Delete {plural(len(chosen), 'entry')} ({human_size(size)}) {scope}?"
    if not args.yes and not confirm(question):
        print("nothing deleted")
        return 1
    _remove(tier, chosen)
    if args.json:
        print(json.dumps({"deleted": len(chosen), "bytes": size}))
    else:
        print(f"deleted {plural(len(chosen), 'entry')} ({human_size(size)}) {scope}")
    return 0


def remote_prune(args) -> int:
    """Delete the oldest-written entries: those written before --older-than, then more until
    the rest fit in --max-size. Write time is what the server keeps (no last use): on a
    bucket, which has no TTL, this is how its size is bounded."""
    max_size, cutoff = prune_limits(args)
    tier = open_remote() if args.dry_run else _writable(open_remote())
    rows = _entries(tier)  # oldest first
    total = sum(row[2] for row in rows)
    gone = []
    for row in rows:
        if (cutoff is None or row[3] >= cutoff) and (max_size is None or total <= max_size):
            break
        gone.append(row)
        total -= row[2]
    if not args.dry_run:
        _remove(tier, gone)
    gone_bytes = sum(row[2] for row in gone)
    if args.json:
        print(json.dumps({
            "url": tier.url,
            "dry_run": args.dry_run,
            "evicted": [_entry_json(row) for row in gone],
            "evicted_bytes": gone_bytes,
            "remaining_entries": len(rows) - len(gone),
            "remaining_bytes": total,
        }, indent=2))
        return 0
    if gone:
        _print_rows(gone)
    verb, remain = ("would delete", "would remain") if args.dry_run else ("deleted", "remain")
    print(f"{verb} {plural(len(gone), 'entry')} ({human_size(gone_bytes)}) in {tier.url}; "
          f"{plural(len(rows) - len(gone), 'entry')} ({human_size(total)}) {remain}")
    return 0


def command_publish(args) -> int:
    tier = open_remote() if args.dry_run else _writable(open_remote())
    store = open_store()  # read-only: publishing changes nothing locally, not even a last use
    fingerprint = None if args.all else this_environment().digest
    on_server = {(row[0], row[1]) for row in _entries(tier)}
    local = store.entries(fingerprint)
    missing = [entry for entry in local if (entry.fingerprint, entry.key) not in on_server]
    notes = _local_notes(store, local)
    missing_notes = {address: note for address, note in notes.items()
                     if address not in on_server}
    sent, too_large, unreadable = [], [], []
    if not args.dry_run:
        from numba_cache.cli.progress import StatusLine  # rich: imported by the commands that draw

        with StatusLine(lambda: f"publishing {len(sent) + len(too_large) + len(unreadable)} of "
                                f"{len(missing)} entries to {tier.url}"):
            for entry in missing:
                _publish_one(tier, store, entry, sent, too_large, unreadable, len(missing))
            # After the entries: a note names kernels, which a reader then finds there.
            for (fingerprint, address), note in missing_notes.items():
                if not tier.publish(fingerprint, address, note, None) and tier.backing_off:
                    raise CliError(f"the remote cache {tier.url} failed while publishing "
                                   "notes, after every entry; run publish again")
    else:
        sent = missing
    rows = [(entry.fingerprint, entry.key, entry.size, entry.created) for entry in sent]
    sent_bytes = sum(entry.size for entry in sent)
    if args.json:
        print(json.dumps({
            "url": tier.url,
            "dry_run": args.dry_run,
            "published": [_entry_json(row) for row in rows],
            "local_bytes": sent_bytes,
            "present": len(local) - len(missing),
            "notes_published": len(missing_notes),
            "notes_present": len(notes) - len(missing_notes),
            "too_large": [entry.key for entry in too_large],
            "unreadable": [entry.key for entry in unreadable],
        }, indent=2))
    else:
        scope = "every fingerprint" if args.all else "this environment"
        if rows and args.dry_run:
            _print_rows(rows)
        verb = "would publish" if args.dry_run else "published"
        print(f"{verb} {plural(len(sent), 'entry')} ({human_size(sent_bytes)} here) and "
              f"{plural(len(missing_notes), 'note')} of {scope} to {tier.url}; "
              f"{len(local) - len(missing)} of {plural(len(local), 'local entry')} "
              "were there already")
        if too_large:
            print(f"{plural(len(too_large), 'entry')} over the tier's size limit "
                  "(NBCACHE_REMOTE_MAX_SIZE) stayed local")
        if unreadable:
            print(f"{plural(len(unreadable), 'entry')} could not be read, not sent "
                  "(numba-cache verify)")
    return 1 if too_large or unreadable else 0


def _local_notes(store: Store, local: list) -> dict[tuple[str, str], bytes]:
    """The tier notes (:mod:`numba_cache.store.tier_notes`) the side files of the local
    entries' fingerprints make, by (fingerprint, address)."""
    stored = defaultdict(set)
    for entry in local:
        stored[entry.fingerprint].add(entry.key)
    return {(fingerprint, address): note
            for fingerprint, keys in stored.items()
            for address, note in tier_notes.notes_of_side_tables(
                fingerprint, store.fingerprint_components(fingerprint),
                store.side_tables(fingerprint), keys).items()}


def _publish_one(tier: RemoteTier, store: Store, entry, sent: list, too_large: list,
                 unreadable: list, total: int) -> None:
    try:
        found = store.record_of(entry.fingerprint, entry.key)
    except (CorruptEntry, OSError):
        unreadable.append(entry)
        return
    if found is None:
        return  # evicted since the listing
    data, source = found
    text = None if source is None else source.decode(errors="replace")
    if tier.publish(entry.fingerprint, entry.key, data, text,
                    Store.merge_for(entry.fingerprint, entry.key)):
        sent.append(entry)
    elif tier.backing_off:  # the server failed; the tier's warning said how
        raise CliError(f"the remote cache {tier.url} failed after {len(sent)} of "
                       f"{plural(total, 'entry')} were published; run publish again")
    else:
        too_large.append(entry)
