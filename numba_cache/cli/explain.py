"""``explain``: why a compile missed, or what differs between two stored entries."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from numba_cache import settings as settings_module
from numba_cache.cli.access import CliError, find_entry, open_store
from numba_cache.cli.formatting import plural
from numba_cache.keys.components import DIGEST_DIGITS
from numba_cache.store import CorruptEntry, Entry

if TYPE_CHECKING:
    from numba_cache.diagnostics import explain


def register(commands, common) -> None:
    sub = commands.add_parser(
        "explain", parents=[common], help="why a compile missed the cache",
        description="With TARGET (a Python file, or module:callable, that compiles and "
        "calls PyTensor functions with mode=\"NUMBA_CACHE\"): run it with the store "
        "read-only and, for each kernel it missed, list the key components that differ "
        "from the nearest stored entry of the same kind. With two KEYs: list the "
        "components that differ between these two stored entries.",
    )
    sub.add_argument("what", nargs="+", metavar="TARGET | KEY KEY",
                     help="a Python file or module:callable; or two stored keys (prefixes will do)")
    sub.set_defaults(handler=command_explain)


def command_explain(args) -> int:
    from numba_cache.diagnostics import explain

    if len(args.what) == 2:
        return _compare(args, *args.what)
    if len(args.what) > 2:
        raise CliError("explain takes one TARGET, or two KEYs")
    store = open_store()
    if settings_module.current().disabled:
        raise CliError("the cache is disabled (NBCACHE_DISABLE): nothing is looked up, nothing to explain")
    try:
        observation = explain.observe(args.what[0])
    except explain.TargetError as error:
        raise CliError(str(error)) from None
    explanations = explain.explain_lookups(store, observation.lookups)
    if args.json:
        print(json.dumps({
            "target": args.what[0],
            "failure": observation.failure,
            "lookups": [_explanation_json(explanation) for explanation in explanations],
        }, indent=2))
    else:
        _print_explanations(args.what[0], explanations)
    if observation.failure is not None:
        print(f"numba-cache: {args.what[0]} failed: {observation.failure}", file=sys.stderr)
        return 1
    return 0


def _compare(args, old_prefix: str, new_prefix: str) -> int:
    from numba_cache.diagnostics import explain

    store = open_store()
    old, new = (_read(store, find_entry(store, prefix)) for prefix in (old_prefix, new_prefix))
    differences = explain.compare_entries(store, old, new)
    if args.json:
        print(json.dumps({
            "old": _entry_reference(old),
            "new": _entry_reference(new),
            "differences": [_difference_json(difference) for difference in differences],
        }, indent=2))
        return 0
    print(f"{old.key[:DIGEST_DIGITS]} ({old.kind}) → {new.key[:DIGEST_DIGITS]} ({new.kind})")
    if old.kind != new.kind:
        print(f"  ({_article(old.kind)} {old.kind} entry and {_article(new.kind)} {new.kind} entry are keyed by different components: "
              "compare two entries of the same kind to see why one was not the other)")
    for difference in differences:
        print(f"  {_difference_text(difference)}")
    if not differences:
        print("  no differences in their components")
    return 0


def _print_explanations(target: str, explanations: list[explain.Explanation]) -> None:
    decisions = [explanation.lookup.decision for explanation in explanations]
    hits, misses = decisions.count("hit"), decisions.count("miss")
    others = len(decisions) - hits - misses
    if not explanations:
        print(f"{target} looked nothing up: it compiled no function with mode=\"NUMBA_CACHE\", "
              "or called none (kernels compile at their first call)")
        return
    uncacheable = f", {others} uncacheable" if others else ""
    print(f"{target}: {plural(len(decisions), 'lookup')}, {plural(hits, 'hit')}, "
          f"{plural(misses, 'miss')}{uncacheable}; differences read stored → this run")
    for explanation in explanations:
        key = explanation.lookup.key
        print(f"{key.kind} {explanation.lookup.decision} {key.short}  {key.summary}")
        if explanation.lookup.decision != "miss":
            continue
        nearest = explanation.nearest
        if nearest is None:
            print(f"  no stored {key.kind} entry to compare with")
            continue
        other = "" if nearest.fingerprint == explanation.lookup.fingerprint.digest else ", another fingerprint"
        print(f"  nearest stored: {nearest.key[:DIGEST_DIGITS]}  {nearest.summary}{other}")
        for difference in explanation.differences:
            print(f"    {_difference_text(difference)}")
        if not explanation.differences:
            print("    the same key: stored without the kernel of this call's signature")


def _read(store, listed: Entry) -> Entry:
    try:
        entry = store.read(listed.fingerprint, listed.key)
    except CorruptEntry as error:
        raise CliError(f"entry {listed.key[:DIGEST_DIGITS]} is unreadable: {error}") from None
    if entry is None:
        raise CliError(f"entry {listed.key[:DIGEST_DIGITS]} was removed meanwhile")
    return entry


def _difference_text(difference: explain.Difference) -> str:
    return f"{difference.component}: {difference.old} → {difference.new}"


def _difference_json(difference: explain.Difference) -> dict:
    return {"component": difference.component, "old": difference.old, "new": difference.new}


def _entry_reference(entry: Entry) -> dict:
    return {"key": entry.key, "fingerprint": entry.fingerprint, "kind": entry.kind, "summary": entry.summary}


def _explanation_json(explanation: explain.Explanation) -> dict:
    lookup = explanation.lookup
    return {
        "kind": lookup.key.kind,
        "key": lookup.key.digest,
        "fingerprint": lookup.fingerprint.digest,
        "summary": lookup.key.summary,
        "decision": lookup.decision,
        "nearest": None if explanation.nearest is None else _entry_reference(explanation.nearest),
        "differences": [_difference_json(difference) for difference in explanation.differences],
    }


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
