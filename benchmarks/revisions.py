"""Two checkouts of numba_cache side by side: warm compile and per call, as ratios.

Usage: python benchmarks/revisions.py BEFORE AFTER [--models radon_model,large_model]
       [--repeat 5] [--json]

BEFORE and AFTER are folders holding a checkout (a git worktree, say). For a change
that must leave speed alone (a refactor), this answers "unchanged within noise?":
each checkout fills a store of its own in one cold process, then both compile each
model warm in fresh processes, in turn (before, after, before, ...), so that drift
of the machine's load falls on both. Each process is ``benchmarks/child.py`` of
AFTER, importing the numba_cache of its checkout. Reported: the medians of each,
their ratio (AFTER / BEFORE), and the spread of BEFORE's own runs (max / min), the
noise a ratio is to be read against.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")


def run_child(checkout: Path, store: Path, function: str) -> dict:
    environment = dict(os.environ, PYTHONPATH=str(checkout), NBCACHE_DIR=str(store))
    spec = {"function": function, "kwargs": {}, "mode": "NUMBA_CACHE", "calls": True}
    result = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], env=environment,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def compare(before: Path, after: Path, models: list[str], repeat: int) -> dict:
    figures = {}
    with tempfile.TemporaryDirectory(prefix="revisions-") as scratch:
        stores = {name: Path(scratch, name) for name in ("before", "after")}
        checkouts = {"before": before, "after": after}
        for model in models:
            samples = {name: {"compile_seconds": [], "call_trusted_us": []} for name in stores}
            for name in stores:
                run_child(checkouts[name], stores[name], model)  # cold: fills the store
            for round_ in range(repeat):
                for name in stores:
                    report = run_child(checkouts[name], stores[name], model)
                    for measure in samples[name]:
                        samples[name][measure].append(report[measure])
                print(f"{model}: round {round_ + 1}/{repeat}", file=sys.stderr, flush=True)
            figures[model] = {
                measure: {
                    "before": statistics.median(samples["before"][measure]),
                    "after": statistics.median(samples["after"][measure]),
                    "ratio": statistics.median(samples["after"][measure])
                    / statistics.median(samples["before"][measure]),
                    "before_spread": max(samples["before"][measure])
                    / min(samples["before"][measure]),
                }
                for measure in ("compile_seconds", "call_trusted_us")
            }
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--models", default="radon_model,large_model",
                        help="functions of numba_cache.evaluation.models, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="warm processes per checkout")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    for checkout in (args.before, args.after):
        if not (checkout / "numba_cache" / "__init__.py").is_file():
            parser.error(f"{checkout} holds no numba_cache checkout")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    figures = compare(args.before.resolve(), args.after.resolve(), args.models.split(","),
                      args.repeat)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print("| model | measure | before | after | after / before | spread of before |")
    print("|---|---|---|---|---|---|")
    for model, measures in figures.items():
        for measure, figure in measures.items():
            unit = "s" if measure == "compile_seconds" else "µs"
            label = "warm compile" if measure == "compile_seconds" else "per call (trusted)"
            print(f"| {model} | {label} | {figure['before']:.3g} {unit} | "
                  f"{figure['after']:.3g} {unit} | {figure['ratio']:.2f}x | "
                  f"{figure['before_spread']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
