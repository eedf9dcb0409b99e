"""Which of numba_cache's modules one compile runs code in, warm and cold.

Usage: python benchmarks/modules_visited.py [FUNCTION [KWARGS]] [--list] [--json]

Compiles ``numba_cache.evaluation.models.FUNCTION(**KWARGS)`` (default: a small radon
model) in a fresh process on an empty store (a cold miss), then in another fresh
process on the store the first filled (a warm hit), each time from
``pytensor.function`` to the first result, and counts the modules and packages of
numba_cache whose Python code ran meanwhile (a profile hook on every thread sees
each function call). Imports are not counted: a module only imported, or whose
functions only its own or another module's import called, was not visited. A measure of how far a reader follows a hit
through the code, not of time.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import ast, inspect, json, sys, threading
from pathlib import Path
import pytensor
import numba_cache
from numba_cache.evaluation import models

package = Path(numba_cache.__file__).parent
visited = set()

def run_on_import(frame):
    # A module's or class's body, or a call made from one (a decorator, a registration):
    # work of an import, which runs once per process whatever the compile is.
    return not (frame.f_code.co_flags & inspect.CO_OPTIMIZED) or (
        frame.f_back is not None and not frame.f_back.f_code.co_flags & inspect.CO_OPTIMIZED)

def profile(frame, event, arg):
    if event == "call":
        filename = frame.f_code.co_filename
        if filename.startswith(str(package)) and not run_on_import(frame):
            visited.add(filename)

model = getattr(models, sys.argv[1])(**ast.literal_eval(sys.argv[2]))
threading.setprofile(profile)
sys.setprofile(profile)
function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
function(*model.point)
sys.setprofile(None)
threading.setprofile(None)
names = sorted(str(Path(f).relative_to(package.parent).with_suffix("")).replace("/", ".")
               for f in visited)
print(json.dumps({"modules": names, "stats": dict(numba_cache.session_stats())}))
"""


def visited(function: str, kwargs: str, store: str) -> dict:
    environment = dict(os.environ, NBCACHE_DIR=store, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", _CHILD, function, kwargs], env=environment,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def packages(modules: list[str]) -> list[str]:
    """The packages of `modules` (``numba_cache.kernels.protocol`` for its modules)."""
    return sorted({module.rpartition(".")[0] for module in modules})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("function", nargs="?", default="radon_model")
    parser.add_argument("kwargs", nargs="?", default="{'groups': 8}")
    parser.add_argument("--list", action="store_true", help="name the modules visited")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    ast.literal_eval(args.kwargs)  # a clear error before two processes start

    with tempfile.TemporaryDirectory(prefix="modules-visited-") as store:
        cold = visited(args.function, args.kwargs, store)
        warm = visited(args.function, args.kwargs, store)
    result = {"function": args.function, "kwargs": args.kwargs,
              "cold": {"modules": cold["modules"], "packages": packages(cold["modules"])},
              "warm": {"modules": warm["modules"], "packages": packages(warm["modules"])},
              "warm_stats": warm["stats"]}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for run in ("warm", "cold"):
        modules, owners = result[run]["modules"], result[run]["packages"]
        print(f"{run}: {len(modules)} modules in {len(owners)} packages")
        if args.list:
            for module in modules:
                print(f"  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
