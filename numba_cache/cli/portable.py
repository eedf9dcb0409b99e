"""``warm``, ``export`` and ``import``: fill a store ahead of time, and carry it elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from numba_cache import settings as settings_module
from numba_cache.cli.access import CliError, open_store
from numba_cache.cli.formatting import elapsed, human_size, human_time, plural
from numba_cache.keys.components import DIGEST_DIGITS
from numba_cache.keys.remembered import this_environment
from numba_cache.portable import archive, signature
from numba_cache.store import Store


def register(commands, common) -> None:
    warm = commands.add_parser(
        "warm", parents=[common], help="compile ahead of time what TARGETs compile",
        description="Run each TARGET in a fresh process with the cache on and compile every "
        "PyTensor function it builds, called or not, into the store. A TARGET is a Python "
        "file; module:callable, which may return graphs to compile (PyTensor functions, "
        "(inputs, outputs) pairs, or a list or dict of them); or a pytest selection (a "
        "directory, a test_*.py file, path::test). PyTensor's default mode is NUMBA_CACHE "
        "meanwhile. Exit status 1 if anything failed to compile or could not be stored.",
    )
    warm.add_argument("targets", nargs="+", metavar="TARGET")
    warm.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                      help="warm N targets at a time, each in its own process (default 1)")
    warm.set_defaults(handler=command_warm)

    export = commands.add_parser(
        "export", parents=[common], help="write the entries of this environment to one archive",
        description="Write the entries of this environment's fingerprint (or of every "
        "fingerprint, --all) to FILE, a gzip-compressed tar archive with a manifest of "
        "fingerprints, keys, sizes and checksums, signed where a shared secret is set "
        "(NBCACHE_REMOTE_SECRET or _FILE). Unreadable entries are left out (exit 1).",
    )
    export.add_argument("file", metavar="FILE")
    export.add_argument("--all", action="store_true", help="the entries of every fingerprint")
    export.set_defaults(handler=command_export)

    import_ = commands.add_parser(
        "import", parents=[common], help="add the entries of an archive made by export",
        description="Check FILE's manifest and checksums, then add its entries of this "
        "environment's fingerprint to the store (created if needed); the others are skipped "
        "with the reason. An entry already in the store is kept. Safe while other processes "
        "use the store. Where a shared secret is set, FILE must be signed with it. Exit "
        "status 1 if damaged entries were skipped, 2 if FILE is unusable or not signed.",
    )
    import_.add_argument("file", metavar="FILE")
    import_.set_defaults(handler=command_import)


def target_store(disabled_means: str) -> tuple[settings_module.Settings, Store]:
    """The settings and store a command running targets writes to (warm, verify --recompile)."""
    current = settings_module.current()
    if current.disabled:
        raise CliError(f"the cache is disabled (NBCACHE_DISABLE): {disabled_means}")
    store = Store(current)
    if store.readonly:
        why = "NBCACHE_READONLY is set" if current.readonly else "permission denied"
        raise CliError(f"cannot write to the store {store.root}: {why}")
    return current, store


def check_targets(targets: list[str]) -> None:
    """Raise :class:`CliError` for a target that names nothing to run."""
    from numba_cache.diagnostics.explain import TargetError, resolve_target
    from numba_cache.portable.warm_target import is_pytest_selection

    for target in targets:
        if is_pytest_selection(target):
            if not Path(target.split("::", 1)[0]).exists():
                raise CliError(f"no such test file or directory: {target}")
            continue
        try:
            resolve_target(target)
        except TargetError as error:
            raise CliError(str(error)) from None


def command_warm(args) -> int:
    from numba_cache.portable import warm

    if args.jobs < 1:
        raise CliError(f"-j must be at least 1, got {args.jobs}")
    current, store = target_store("warming would store nothing")
    check_targets(args.targets)

    if not args.json:
        jobs = min(args.jobs, len(args.targets))
        print(f"warming {plural(len(args.targets), 'target')}, {jobs} at a time, into "
              f"{store.root} ({current.source_of('root')})", flush=True)

    progress = warm.Progress(len(args.targets), print_milestones(args, _tally_text))

    def describe() -> str:
        with progress.lock:
            return _progress_text(progress)

    from numba_cache.cli.progress import StatusLine  # rich: imported by the commands that draw

    with StatusLine(describe):
        tallies = warm.warm(args.targets, args.jobs, progress)
    linked_failures = _linked_builds(current, store, args)
    total = progress.tally
    failed = bool(total.failures or total.write_errors)
    if args.json:
        print(json.dumps({
            "store": str(store.root),
            "elapsed": round(progress.elapsed, 3),
            **_tally_json(total, with_target=True),
            "targets": [{"target": target, **_tally_json(tally)} for target, tally in tallies.items()],
            "linked_builds_failed": linked_failures,
        }, indent=2))
        return 1 if failed else 0
    print(f"warmed {plural(len(tallies), 'target')} in {elapsed(progress.elapsed)}: {_tally_text(total)}")
    for claim in linked_failures:
        print(f"linked build {claim['key'][:DIGEST_DIGITS]} failed: {claim['reason']} "
              "(its graph kernel calls its op kernels by symbol)")
    for failure in total.failures:
        where = failure.target if failure.graph is None else f"{failure.target}: {failure.graph}"
        print(f"FAILED {where}: {failure.error}")
        if failure.graph is None and failure.details.strip() and failure.details not in failure.error:
            print("  " + "\n  ".join(failure.details.rstrip().splitlines()[-5:]))
    if total.write_errors:
        print(f"{plural(total.write_errors, 'kernel')} could not be stored (see numba-cache stats)")
    return 1 if failed else 0


def _linked_builds(current, store: Store, args) -> list[dict]:
    """Under ``link_in_background``, wait for the linked builds the targets asked for
    (:mod:`numba_cache.kernels.helpers.linked_build`), so that the store is whole when warm
    returns; the claims of those that failed."""
    if not current.link_in_background:
        return []
    from numba_cache.cli.progress import StatusLine
    from numba_cache.kernels.helpers import linked_build as linked_build

    def describe() -> str:
        running = len(linked_build.running_builds(store, current.lock_timeout))
        return f"waiting for {plural(running, 'linked build')}"

    running = len(linked_build.running_builds(store, current.lock_timeout))
    if running and not args.json:
        print(f"waiting for {plural(running, 'linked build')}", flush=True)
    with StatusLine(describe):
        return linked_build.wait_for_builds(store, current.lock_timeout)


def command_export(args) -> int:
    path = Path(args.file)
    if path.is_dir():
        raise CliError(f"{path} is a directory; give the archive's file name")
    if not path.parent.is_dir():
        raise CliError(f"no such directory: {path.parent}")
    store = open_store()
    current = this_environment()
    if args.all:
        fingerprints = sorted({entry.fingerprint for entry in store.entries()})
    else:
        fingerprints = [current.digest]
    components = {digest: store.fingerprint_components(digest) for digest in fingerprints}
    components[current.digest] = current.components
    from numba_cache.cli.progress import StatusLine

    key = _archive_secret()
    with StatusLine() as status:
        report = archive.export(
            store, path, fingerprints, components, current.digest,
            progress=lambda done, total: status.show(f"exporting {done}/{total} entries"),
            secret=key,
        )
    size = path.stat().st_size
    if args.json:
        print(json.dumps({
            "archive": str(path),
            "entries": report.entries,
            "bytes": report.bytes,
            "archive_bytes": size,
            "fingerprints": report.fingerprints,
            "unreadable": [{"fingerprint": fp, "key": key, "problem": why}
                           for fp, key, why in report.unreadable],
        }, indent=2))
        return 1 if report.unreadable else 0
    scope = "every fingerprint" if args.all else f"fingerprint {current.digest[:DIGEST_DIGITS]}"
    print(f"exported {plural(report.entries, 'entry')} ({human_size(report.bytes)}) of {scope} "
          f"to {path} ({human_size(size)})")
    for fingerprint, key, why in report.unreadable:
        print(f"left out {key[:DIGEST_DIGITS]} (fingerprint {fingerprint[:DIGEST_DIGITS]}): "
              f"unreadable, {why}; numba-cache verify --repair removes it")
    return 1 if report.unreadable else 0


def command_import(args) -> int:
    key = _archive_secret()
    created = not os.path.lexists(settings_module.current().root)
    store = open_store(write=True, create=True)
    current = this_environment()
    from numba_cache.cli.progress import StatusLine

    try:
        with StatusLine() as status:
            report = archive.import_archive(
                store, Path(args.file), current,
                progress=lambda done, total: status.show(f"importing {done}/{total} entries"),
                secret=key,
            )
    except archive.ArchiveError as error:
        if created:  # a store made for an archive that could not be read is not left behind
            with contextlib.suppress(OSError):
                os.rmdir(store.root)  # only while it is empty
        raise CliError(str(error)) from None
    damaged = report.count("damaged")
    skipped = [outcome for outcome in report.outcomes if outcome.result not in ("imported", "present")]
    if args.json:
        manifest = report.manifest
        print(json.dumps({
            "archive": args.file,
            "manifest": {name: manifest.get(name) for name in
                         ("format_version", "tool_version", "created", "exported_from")},
            "imported": report.count("imported"),
            "present": report.count("present"),
            "skipped": [
                {"fingerprint": o.fingerprint, "key": o.key, "kind": o.kind, "summary": o.summary,
                 "result": o.result, "reason": o.reason}
                for o in skipped
            ],
        }, indent=2))
        return 1 if damaged else 0
    made = report.manifest.get("created")
    origin = f"made by numba_cache {report.manifest.get('tool_version')}"
    if isinstance(made, (int, float)):
        origin += f" on {human_time(made)}"
    print(f"{args.file}: {plural(len(report.outcomes), 'entry')}, {origin}")
    print(f"imported {plural(report.count('imported'), 'entry')}; "
          f"{report.count('present')} already in {store.root}")
    by_reason: dict[str, int] = {}
    for outcome in skipped:
        if outcome.result == "other-fingerprint":
            by_reason[outcome.reason] = by_reason.get(outcome.reason, 0) + 1
        else:
            print(f"skipped {outcome.key[:DIGEST_DIGITS]} ({outcome.kind}, {outcome.summary}): "
                  f"{outcome.reason}")
    for reason, count in by_reason.items():
        print(f"skipped {plural(count, 'entry')} of another environment: {reason}")
    if damaged:
        print(f"numba-cache: {plural(damaged, 'damaged entry')} not imported", file=sys.stderr)
    return 1 if damaged else 0


def _archive_secret() -> bytes | None:
    """The shared secret archives are signed and checked with (:mod:`..portable.signature`)."""
    try:
        return signature.secret(settings_module.current())
    except signature.SignatureError as problem:
        raise CliError(str(problem)) from None


def print_milestones(args, describe: Callable) -> Callable:
    """A :class:`warm.Progress` callback printing each target as it finishes (not with --json)."""

    def changed(progress, finished) -> None:
        if finished is not None and not args.json:
            target, tally = finished
            print(f"[{progress.finished}/{progress.targets}] {target}: {describe(tally)}", flush=True)

    return changed


def _progress_text(progress) -> str:
    return (f"[{progress.finished}/{progress.targets} targets] {elapsed(progress.elapsed)}  "
            f"{_tally_text(progress.tally)}")


def _tally_text(tally) -> str:
    text = f"{tally.compiled} compiled, {tally.cached} already cached"
    if tally.uncacheable:
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(tally.uncacheable.items()))
        text += f", {sum(tally.uncacheable.values())} uncacheable ({reasons})"
    failures = len(tally.failures)
    return text + (f", {plural(failures, 'failure')}" if failures else "")


def _tally_json(tally, with_target: bool = False) -> dict:
    def failure_json(failure) -> dict:
        fields = {"graph": failure.graph, "error": failure.error, "details": failure.details}
        return {"target": failure.target, **fields} if with_target else fields

    return {
        "compiled": tally.compiled,
        "cached": tally.cached,
        "uncacheable": dict(tally.uncacheable),
        "failures": [failure_json(failure) for failure in tally.failures],
        "write_errors": tally.write_errors,
    }
