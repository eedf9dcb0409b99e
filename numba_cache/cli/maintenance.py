"""``clear``, ``prune`` and ``verify``: deleting entries, bounding the store, checking it."""

from __future__ import annotations

import argparse
import json
import time

from numba_cache import settings as settings_module
from numba_cache.cli.access import CliError, confirm, find_fingerprint, open_store
from numba_cache.cli.entries import entry_json
from numba_cache.cli.formatting import human_age, human_size, plural, table
from numba_cache.cli.portable import check_targets, print_milestones, target_store
from numba_cache.keys.components import DIGEST_DIGITS
from numba_cache.keys.remembered import this_environment


def register(commands, common) -> None:
    clear = commands.add_parser(
        "clear", parents=[common], help="delete every entry, or those of some fingerprints",
        description="Delete every entry, or those of one fingerprint, or those of every "
        "fingerprint but this environment's. Asks first, unless --yes. Counters stay "
        "(stats --zero resets them).",
    )
    which = clear.add_mutually_exclusive_group()
    which.add_argument("--fingerprint", metavar="PREFIX", help="only the entries of this fingerprint")
    which.add_argument("--stale", action="store_true",
                       help="only the entries of fingerprints other than this environment's")
    clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    clear.set_defaults(handler=command_clear)

    prune = commands.add_parser(
        "prune", parents=[common], help="evict least recently used entries",
        description="Evict least recently used entries: those unused for longer than "
        "--older-than, then more until the store fits in --max-size.",
    )
    prune.add_argument("--max-size", metavar="SIZE",
                       help="the size to fit in: 500M, 2G (powers of 1024)")
    prune.add_argument("--older-than", metavar="AGE",
                       help="evict entries unused for longer than this: 30m, 12h, 7d")
    prune.add_argument("--dry-run", action="store_true", help="only show what would be evicted")
    prune.set_defaults(handler=command_prune)

    verify = commands.add_parser(
        "verify", parents=[common], help="check every entry; exit status 1 if anything is wrong",
        description="Check the checksums and metadata of every entry, source copies, "
        "PyTensor's generated source, temporary files and the index. With --recompile N TARGET...: then also run each "
        "TARGET (the forms warm takes), one after the other in a fresh process, recompiling "
        "its cache hits, at most N in all, and comparing each with the code the store "
        "served (the NBCACHE_VERIFY_HITS check); an entry that differs is a key collision: "
        "it is removed and replaced by the code compiled now. Exit status 0: clean, "
        "1: problems or collisions found, or a TARGET failed.",
    )
    verify.add_argument("--repair", action="store_true",
                        help="remove broken entries, orphaned files, damaged generated source "
                             "and stale temporary files")
    verify.add_argument("--recompile", type=_positive_count, metavar="N",
                        help="recompile at most N cache hits of the TARGETs and compare")
    verify.add_argument("targets", nargs="*", metavar="TARGET",
                        help="with --recompile: a Python file, module:callable or pytest selection")
    verify.set_defaults(handler=command_verify)


def _positive_count(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"N must be a positive whole number, got {text!r}")
    return int(text)


def command_clear(args) -> int:
    store = open_store(write=True)
    entries = store.entries()
    if args.fingerprint is not None:
        fingerprints = [find_fingerprint(store, args.fingerprint)]
        scope = f"of fingerprint {fingerprints[0][:DIGEST_DIGITS]}"
    elif args.stale:
        current = this_environment().digest
        fingerprints = sorted({entry.fingerprint for entry in entries} - {current})
        scope = f"of fingerprints other than this environment's ({current[:DIGEST_DIGITS]})"
    else:
        fingerprints = None
        scope = f"in {store.root}"
    chosen = [entry for entry in entries if fingerprints is None or entry.fingerprint in fingerprints]
    size = sum(entry.size for entry in chosen)
    if not chosen:
        print(json.dumps({"deleted": 0, "bytes": 0}) if args.json else f"no entries {scope}")
        return 0
    if not args.yes and not confirm(f"Delete {plural(len(chosen), 'entry')} ({human_size(size)}) {scope}?"):
        print("nothing deleted")
        return 1
    if fingerprints is None:
        store.clear()
    else:
        for fingerprint in fingerprints:
            store.clear(fingerprint)
    left = {(entry.fingerprint, entry.key) for entry in store.entries()}
    deleted = [entry for entry in chosen if (entry.fingerprint, entry.key) not in left]
    deleted_bytes = sum(entry.size for entry in deleted)
    if args.json:
        print(json.dumps({"deleted": len(deleted), "bytes": deleted_bytes}))
    elif len(deleted) == len(chosen):
        print(f"deleted {plural(len(deleted), 'entry')} ({human_size(deleted_bytes)}) {scope}")
    else:
        print(f"deleted {len(deleted)} of {plural(len(chosen), 'entry')} {scope}")
    return 0 if len(deleted) == len(chosen) else 1


def prune_limits(args) -> tuple[int | None, float | None]:
    """``(max_size, cutoff)`` of ``prune``: bytes to fit in, and the Unix time before which
    entries go (None: not given); CliError if neither is given."""
    if args.max_size is None and args.older_than is None:
        raise CliError("prune needs --max-size, --older-than or both")
    max_size = (None if args.max_size is None
                else settings_module.parse_size(args.max_size, "--max-size"))
    age = (None if args.older_than is None
           else settings_module.parse_duration(args.older_than, "--older-than", kind="an age"))
    return max_size, None if age is None else time.time() - age


def command_prune(args) -> int:
    max_size, cutoff = prune_limits(args)
    store = open_store(write=not args.dry_run)
    listing = {(entry.fingerprint, entry.key): entry for entry in store.entries()}
    evicted = store.evict_to(max_size, last_used_before=cutoff, dry_run=args.dry_run)
    gone = [listing[address] for address in evicted if address in listing]
    gone_bytes = sum(entry.size for entry in gone)
    remaining = len(listing) - len(gone)
    remaining_bytes = sum(entry.size for entry in listing.values()) - gone_bytes
    if args.json:
        print(json.dumps({
            "dry_run": args.dry_run,
            "evicted": [entry_json(entry) for entry in gone],
            "evicted_bytes": gone_bytes,
            "remaining_entries": remaining,
            "remaining_bytes": remaining_bytes,
        }, indent=2))
        return 0
    if gone:
        now = time.time()
        rows = [
            (entry.key[:DIGEST_DIGITS], entry.kind, human_size(entry.size),
             human_age(entry.last_used, now), entry.summary)
            for entry in gone
        ]
        print(table(("KEY", "KIND", "SIZE", "LAST USED", "SUMMARY"), rows, right=("SIZE", "LAST USED")))
    verb = "would evict" if args.dry_run else "evicted"
    print(
        f"{verb} {plural(len(gone), 'entry')} ({human_size(gone_bytes)}); "
        f"{plural(remaining, 'entry')} ({human_size(remaining_bytes)}) "
        f"{'would remain' if args.dry_run else 'remain'}"
    )
    return 0


def command_verify(args) -> int:
    if args.recompile is not None and not args.targets:
        raise CliError("--recompile needs at least one TARGET to run")
    if args.targets and args.recompile is None:
        raise CliError(f"TARGETs are run only with --recompile N (got {args.targets[0]})")
    if args.recompile is not None:
        target_store("nothing is looked up, nothing to verify")
        check_targets(args.targets)
    store = open_store(write=args.repair)
    checked = len(store.entries())
    found = store.verify(repair=args.repair)
    problems = [problem for problem in found if not problem.dangling]
    dangling = [problem for problem in found if problem.dangling]
    if args.recompile is None or not args.json:
        status = _report_problems(args, store, checked, problems, dangling)
        if args.recompile is None:
            return status
    recompiled = _recompile(args, store)
    if args.json:
        print(json.dumps({**_problems_json(args, problems, dangling), "recompile": recompiled},
                         indent=2))
    failed = recompiled["collisions"] or recompiled["failures"]
    return 1 if problems or failed else 0


def _recompile(args, store) -> dict:
    """Run the targets verifying their hits; what was found, as the JSON reports it."""
    from numba_cache.portable import warm

    if not args.json:
        print(f"recompiling at most {plural(args.recompile, 'hit')} of "
              f"{plural(len(args.targets), 'target')} and comparing with {store.root}", flush=True)

    progress = warm.Progress(len(args.targets), print_milestones(args, _verified_text))
    tallies = warm.verify(args.targets, args.recompile, progress)
    total = progress.tally
    if not args.json:
        for collision in total.collisions:
            print(f"COLLISION {_collision_text(collision)}")
        for failure in total.failures:
            where = failure.target if failure.graph is None else f"{failure.target}: {failure.graph}"
            print(f"FAILED {where}: {failure.error}")
        skipped = [target for target, tally in tallies if tally is None]
        if skipped:
            print(f"not run, {plural(args.recompile, 'hit')} verified already: {', '.join(skipped)}")
        print(f"{_verified_text(total)}; {plural(len(total.collisions), 'entry')} removed"
              + (" (replaced by the code compiled now)" if total.collisions else ""))
        if total.verified == 0:
            print("nothing was verified: the targets hit nothing the store holds (warm it first?)")
    return {
        "limit": args.recompile,
        "verified": total.verified,
        "unrecorded": total.unrecorded,
        "collisions": total.collisions,
        "removed": len(total.collisions),
        "failures": [
            {"target": failure.target, "graph": failure.graph, "error": failure.error}
            for failure in total.failures
        ],
        "targets": [
            {"target": target, "run": tally is not None,
             "verified": 0 if tally is None else tally.verified,
             "collisions": 0 if tally is None else len(tally.collisions)}
            for target, tally in tallies
        ],
    }


def _verified_text(tally) -> str:
    text = f"{plural(tally.verified, 'hit')} verified, {plural(len(tally.collisions), 'collision')}"
    if tally.unrecorded:
        text += f", {tally.unrecorded} stored without an IR digest (not compared)"
    if tally.failures:
        text += f", {plural(len(tally.failures), 'failure')}"
    return text


def _collision_text(collision: dict) -> str:
    looked_up = f"entry {collision['key'][:DIGEST_DIGITS]} ({collision['summary']})"
    if collision["made_under"] == collision["key"]:
        return (f"{looked_up} served code that differs from what it compiles to now, made "
                "under the same key: the key misses something the code depends on")
    return (f"{looked_up} served code made under key {collision['made_under'][:DIGEST_DIGITS]} "
            f"({collision['made_under_summary']})")


def _problems_json(args, problems, dangling) -> dict:
    def listed(found) -> list[dict]:
        return [
            {
                "problem": problem.problem,
                "fingerprint": problem.fingerprint,
                "key": problem.key,
                "path": None if problem.path is None else str(problem.path),
            }
            for problem in found
        ]

    return {"problems": listed(problems), "dangling": listed(dangling), "repaired": args.repair}


def _report_problems(args, store, checked: int, problems, dangling) -> int:
    if args.json:
        print(json.dumps(_problems_json(args, problems, dangling), indent=2))
        return 1 if problems else 0
    if problems:
        rows = [
            (problem.key[:DIGEST_DIGITS] if problem.key else str(problem.path), problem.problem)
            for problem in problems
        ]
        print(table(("ENTRY OR FILE", "PROBLEM"), rows))
        advice = "repaired" if args.repair else "run numba-cache verify --repair to repair"
        print(f"{plural(len(problems), 'problem')}; {advice}")
    else:
        print(f"no problems in {store.root} ({plural(checked, 'entry')} checked)")
    if dangling:
        print(f"{plural(len(dangling), 'dangling reference')} (to entries evicted or never "
              "stored, compiled again when used; --json lists them)")
    return 1 if problems else 0
