"""Fresh-process compile times of the radon model: numba_cache beside PyTensor's NUMBA.

Usage: python benchmarks/fresh_process.py [--repeat N]

Each repeat uses new, empty stores, then runs a cold and a warm process per mode
(see ``numba_cache.demo``). Prints min/median/max seconds of ``pytensor.function``
+ first call and of the whole process, and each median as a ratio to the
built-in ``NUMBA`` mode measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from numba_cache.demo import run_child

MODES = {"NUMBA_CACHE": "NBCACHE_DIR", "NUMBA": "PYTENSOR_FLAGS"}


def environment_for(mode: str, workdir: Path) -> dict:
    if mode == "NUMBA_CACHE":
        return dict(os.environ, NBCACHE_DIR=str(workdir / "store"))
    return dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={workdir / 'compiledir'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    samples = {(mode, run, figure): [] for mode in MODES for run in ("cold", "warm")
               for figure in ("compile_seconds", "process_seconds")}
    for repeat in range(args.repeat):
        print(f"repeat {repeat + 1}/{args.repeat}", flush=True)
        for mode in MODES:
            workdir = Path(tempfile.mkdtemp(prefix="numba_cache_bench_"))
            try:
                for run in ("cold", "warm"):
                    result = run_child(mode, environment_for(mode, workdir))
                    for figure in ("compile_seconds", "process_seconds"):
                        samples[mode, run, figure].append(result[figure])
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{'figure':<34} {'min':>7} {'median':>7} {'max':>7} {'vs NUMBA':>9}")
    for (mode, run, figure), values in samples.items():
        baseline = statistics.median(samples["NUMBA", run, figure])
        median = statistics.median(values)
        print(f"{mode + ' ' + run + ' ' + figure.split('_')[0]:<34} {min(values):>7.3f} "
              f"{median:>7.3f} {max(values):>7.3f} {median / baseline:>8.2f}x")


if __name__ == "__main__":
    main()
