"""``numba-cache demo``: compile a real hierarchical model twice, with and without numba_cache.

Four fresh processes compile the radon-style model's logp and gradient: with
``NUMBA_CACHE`` on an empty store, then again (warm), and the same with
PyTensor's built-in ``NUMBA`` mode on an empty PyTensor compile directory. Each
process reports compile time (``pytensor.function`` + first call), numba
compilations, cache hits and misses, and its results.

Results are compared like with like (:mod:`numba_cache.evaluation.compare`): numba_cache's
cold and warm processes bit for bit (the promise; the exit status is 1 if they
differ), numba_cache against the built-in within ``NUMBA_ULP_BOUND`` (different
generated code), and the built-in's own cold and warm results, reported as a fact.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _child(mode: str) -> None:
    import numpy as np
    import pytensor

    import numba_cache
    from numba_cache.evaluation.compile_events import count_numba_compiles
    from numba_cache.evaluation.models import radon_model

    model = radon_model()
    with count_numba_compiles() as compiles:
        begin = time.perf_counter()
        function = pytensor.function(model.inputs, model.outputs, mode=mode)
        logp, gradient = function(*model.point)
        compile_seconds = time.perf_counter() - begin
    stats = numba_cache.session_stats()
    print(json.dumps({
        "compile_seconds": compile_seconds,
        "numba_compiles": len(compiles),
        "hits": sum(v for k, v in stats.items() if k.endswith(".hit")),
        "misses": sum(v for k, v in stats.items() if k.endswith(".miss")),
        "logp": float(logp),
        "gradient": np.asarray(gradient).tolist(),
    }))


def run_child(mode: str, environment: dict) -> dict:
    """Run one demo process; `process_seconds` is its wall time, interpreter start included."""
    started = time.perf_counter()
    process = subprocess.run(
        [sys.executable, "-m", "numba_cache.evaluation.demo", "--child", mode],
        env=environment, capture_output=True, text=True, check=False,
    )
    if process.returncode != 0:
        raise SystemExit(f"demo process for {mode} failed:\n{process.stderr[-3000:]}")
    result = json.loads(process.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - started
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="numba-cache demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the demo stores afterwards")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="numba_cache_demo_"))
    ours = dict(os.environ, NBCACHE_DIR=str(workdir / "numba_cache_store"))
    builtin = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={workdir / 'pytensor_compiledir'}")
    print("Radon-style hierarchical model (85 groups, 919 observations): logp + gradient")
    print(f"numba_cache store: {ours['NBCACHE_DIR']}\n")
    rows = []
    for label, mode, environment in (("numba_cache (NUMBA_CACHE)", "NUMBA_CACHE", ours),
                                     ("PyTensor built-in (NUMBA)", "NUMBA", builtin)):
        for run in ("cold", "warm"):
            print(f"  {label:<27} {run} process ...", end="", flush=True)
            result = run_child(mode, environment)
            print(f" {result['compile_seconds']:.2f} s")
            rows.append((label, run, result))
    print()
    header = f"{'mode':<27} {'run':<5} {'compile+call':>12} {'process':>8} {'numba compiles':>15} {'hits':>5} {'misses':>7}  logp"
    print(header)
    print("-" * len(header))
    for label, run, r in rows:
        hits = r["hits"] if "NUMBA_CACHE" in label else "-"
        misses = r["misses"] if "NUMBA_CACHE" in label else "-"
        print(f"{label:<27} {run:<5} {r['compile_seconds']:>11.2f}s {r['process_seconds']:>7.2f}s "
              f"{r['numba_compiles']:>15} {hits:>5} {misses:>7}  {r['logp']:.6f}")
    ours_warm, builtin_warm = rows[1][2], rows[3][2]
    print(f"\nwarm compile: numba_cache {ours_warm['compile_seconds']:.2f} s vs built-in "
          f"{builtin_warm['compile_seconds']:.2f} s "
          f"({ours_warm['compile_seconds'] / builtin_warm['compile_seconds']:.2f}x)")
    kept, within_bound = _report_comparisons([r for _, _, r in rows])
    if args.keep:
        print(f"stores kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if kept and within_bound else 1


def _report_comparisons(results: list[dict]) -> tuple[bool, bool]:
    """Print the three comparisons; return (cold == warm bit for bit, within the NUMBA bound)."""
    import numpy as np

    from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, digest, max_ulp_distance

    ours_cold, ours_warm, builtin_cold, builtin_warm = (
        [np.float64(r["logp"]), np.asarray(r["gradient"])] for r in results
    )
    kept = digest(ours_cold) == digest(ours_warm)
    builtin_ulps = max_ulp_distance(builtin_cold, builtin_warm)
    versus = max(max_ulp_distance(ours_warm, builtin_cold), max_ulp_distance(ours_warm, builtin_warm))
    values = 1 + ours_cold[1].size
    print(f"\nresults (logp and the gradient's values, {values} floats):")
    print(f"  numba_cache cold vs warm:      {'identical, bit for bit' if kept else 'DIFFERENT'}")
    print(f"  numba_cache vs built-in NUMBA: {_ulps(versus)} apart at most "
          f"(different generated code; bound {NUMBA_ULP_BOUND} ULP)")
    why = ("" if builtin_ulps == 0 else
           " (its cold process ran the callees it compiled, a warm one its own copies of them)")
    print(f"  built-in NUMBA cold vs warm:   {_ulps(builtin_ulps)} apart at most{why}")
    return kept, versus <= NUMBA_ULP_BOUND


def _ulps(distance: int) -> str:
    return "0 ULP (identical)" if distance == 0 else f"{distance} ULP"


if __name__ == "__main__":
    sys.exit(main())
