"""Benchmark of the command line on a large store: wall time of each command, fresh processes.

Builds (once, then reuses) a store of ``--entries`` entries made from real ones:
the radon model compiled through numba_cache, its entries copied under new keys
(same blobs, same sizes, same kinds), plus a fingerprint of their own. Then times
each command ``--repeats`` times as a user runs it (``numba-cache ...``, a fresh
process each, output discarded), with this checkout's code and, with ``--baseline
DIR``, with another checkout's code on the same store in the same run. Writes
``benchmarks/CLI.md``.

Usage: python benchmarks/cli.py [--entries 10000] [--repeats 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

COMMANDS = [
    ["--help"],
    ["dir"],
    ["stats"],
    ["list", "--limit", "10"],
    ["verify"],
]

COMPILE_RADON = """
import pytensor, numba_cache
from numba_cache.evaluation.models import radon_model
model = radon_model()
pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")(*model.point)
"""

REPLICATE = """
import secrets, sys
from dataclasses import replace
from numba_cache import settings
from numba_cache.store import Store

store = Store(settings.current())
templates = [store.read(entry.fingerprint, entry.key) for entry in store.entries()]
templates = [entry for entry in templates if entry is not None]
wanted = int(sys.argv[1])
made = len(templates)
while made < wanted:
    for template in templates:
        if made >= wanted:
            break
        store.save(replace(template, key=secrets.token_hex(32)), source=None)
        made += 1
        if made % 1000 == 0:
            print(f"  {made} entries", file=sys.stderr, flush=True)
"""


def environment(store: Path, code_root: Path, state: Path) -> dict:
    env = dict(os.environ, NBCACHE_DIR=str(store), PYTHONPATH=str(code_root),
               XDG_STATE_HOME=str(state), NBCACHE_MAX_SIZE="1000G")
    env.pop("NBCACHE_REMOTE_URL", None)
    # An installed package has its bytecode compiled; measure as a user runs it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build_store(store: Path, entries: int, state: Path) -> None:
    marker = store / f".benchmark-{entries}"
    if marker.exists():
        return
    env = environment(store, ROOT, state)
    print(f"building a store of {entries} entries in {store}", file=sys.stderr)
    subprocess.run([sys.executable, "-c", COMPILE_RADON], env=env, check=True, cwd=ROOT)
    subprocess.run([sys.executable, "-c", REPLICATE, str(entries)], env=env, check=True, cwd=ROOT)
    marker.write_text("")


def time_command(argv: list[str], env: dict) -> float:
    begin = time.perf_counter()
    # In the checkout's directory: `python -m` puts the working directory first on the path.
    subprocess.run([sys.executable, "-m", "numba_cache", *argv], env=env, check=False,
                   cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - begin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, timed on the same store")
    parser.add_argument("--store", type=Path, help="where to build (and keep) the store")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nbcache-cli-bench-"))
    store = args.store or work / "store"
    state = work / "state"
    build_store(store, args.entries, state)
    checkouts = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for name, code_root in checkouts.items():  # remember the fingerprint, as a first use would
        subprocess.run([sys.executable, "-m", "numba_cache", "stats"], check=False, cwd=code_root,
                       env=environment(store, code_root, state), stdout=subprocess.DEVNULL)
    times: dict = {}
    for repeat in range(args.repeats):
        for argv in COMMANDS:
            for name, code_root in checkouts.items():
                seconds = time_command(argv, environment(store, code_root, state))
                times.setdefault((name, " ".join(argv)), []).append(seconds)
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    write_report(times, args, checkouts)
    return 0


def write_report(times: dict, args, checkouts: dict) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    baseline = ""
    if "baseline" in checkouts:
        base_commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"],
                                     cwd=checkouts["baseline"], capture_output=True,
                                     text=True).stdout.strip()
        baseline = f", baseline: commit {base_commit}"
    lines = [
        "# The command line on a large store",
        "",
        f"Generated by `python benchmarks/cli.py --entries {args.entries} --repeats {args.repeats}"
        f"{' --baseline DIR' if args.baseline else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; do not edit, run the command again.",
        "",
        f"- {args.entries} entries (the radon model's, copied under new keys); "
        f"this checkout: commit {commit}{baseline}",
        f"- {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average {os.getloadavg()[0]:.2f} at the end",
        f"- wall time of `python -m numba_cache COMMAND` in a fresh process, median of {args.repeats}",
        "",
    ]
    header = "| command | this checkout |" + (" baseline | ratio |" if baseline else "")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for argv in COMMANDS:
        command = " ".join(argv)
        ours = statistics.median(times[("this", command)])
        row = f"| `numba-cache {command}` | {ours:.2f} s |"
        if baseline:
            theirs = statistics.median(times[("baseline", command)])
            row += f" {theirs:.2f} s | {ours / theirs:.2f}× |"
        lines.append(row)
    (HERE / "CLI.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
