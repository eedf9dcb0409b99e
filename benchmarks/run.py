"""Benchmark numba_cache beside PyTensor's NUMBA (cache on and off), C and CVM modes.

Usage: .venv/bin/python benchmarks/run.py [--repeat N] [--output PATH] [--smoke]

Runs the suite of :mod:`benchmarks.suite` (every compile in a fresh process) and
writes PATH (default ``benchmarks/RESULTS.md``), the plot ``results.png`` and
the raw samples ``results.json`` beside it. ``--smoke`` runs radon only, with
one variant, in ``NUMBA_CACHE`` and ``NUMBA``, once: a check that the suite runs,
not a measurement to quote.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import plot, report  # noqa: E402
from benchmarks.modes import REPOSITORY  # noqa: E402
from benchmarks.suite import full_plan, run_plan, smoke_plan  # noqa: E402


def machine() -> dict:
    """The machine and software the figures were measured on."""
    import pytensor

    import numba_cache
    from numba_cache.keys.fingerprint import current_fingerprint

    components = current_fingerprint().components
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown",
    )
    try:
        compiler = subprocess.run([pytensor.config.cxx, "--version"], capture_output=True,
                                  text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        compiler = f"none usable ({pytensor.config.cxx!r})"
    return {
        "load_average": os.getloadavg()[0],
        "source": _source_state(),
        "code_digest": code_digest(),
        "cpu": cpu,
        "llvm_cpu": components["cpu_name"],
        "nproc": len(os.sched_getaffinity(0)),
        "versions": {"Python": components["python"]}
        | {name: components[name] for name in ("pytensor", "numba", "llvmlite", "numpy", "scipy")}
        | {"numba_cache": numba_cache.__version__},
        "cxx": compiler,
    }


def _source_state() -> str:
    """The commit the measured numba_cache was checked out at, and whether it had local changes."""
    def git(*arguments) -> str:
        return subprocess.run(["git", "-C", str(REPOSITORY), *arguments], capture_output=True,
                              text=True, check=True).stdout.strip()

    try:
        changed = len(git("status", "--porcelain", "--untracked-files=no").splitlines())
        commit = git("rev-parse", "--short=12", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git checkout)"
    return f"commit {commit}" + (f", uncommitted changes to {changed} files" if changed else "")


def code_digest() -> str:
    """A digest of the measured Python code (numba_cache and benchmarks), to see it change.

    Other work can land in the checkout during a long run; comparing this digest
    at the start and at the end says whether every repeat measured the same code.
    """
    digest = hashlib.sha256()
    sources = [*REPOSITORY.glob("numba_cache/**/*.py"), *REPOSITORY.glob("benchmarks/*.py")]
    for path in sorted(sources):
        digest.update(str(path.relative_to(REPOSITORY)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def precompile() -> None:
    """Write numba_cache's bytecode, as installing a package from a wheel does.

    An editable install leaves none, and with ``PYTHONDONTWRITEBYTECODE`` set no
    process writes it, so every benchmark process would compile numba_cache's
    sources anew (about 20 ms) while PyTensor and numba load theirs.
    """
    compileall.compile_dir(REPOSITORY / "numba_cache", quiet=1)


def _command() -> str:
    def shown(path: str) -> str:
        absolute = Path(path).absolute()
        if absolute.is_relative_to(REPOSITORY):
            return str(absolute.relative_to(REPOSITORY))
        return path

    return shlex.join([shown(sys.executable), shown(sys.argv[0]), *sys.argv[1:]])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per model and mode (default 3)")
    parser.add_argument("--output", type=Path, default=REPOSITORY / "benchmarks" / "RESULTS.md",
                        help="the results file; the plot and raw samples go beside it")
    parser.add_argument("--smoke", action="store_true",
                        help="radon, one variant, NUMBA_CACHE and NUMBA, one repeat")
    args = parser.parse_args(argv)
    plan = smoke_plan() if args.smoke else full_plan(args.repeat)

    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", flush=True)

    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    measured_on = machine()
    precompile()
    log(f"{len(plan.models)} models x {len(plan.modes)} modes x {plan.repeat} repeats")
    results = run_plan(plan, log)
    measured_on["load_average_end"] = os.getloadavg()[0]
    measured_on["code_digest_end"] = code_digest()
    measured_on["duration"] = time.perf_counter() - started
    data = {"repeat": plan.repeat, "samples": results.samples, "outputs": results.outputs,
            "failures": results.failures, "events": results.events}
    data = json.loads(json.dumps(data))  # plain dicts from here on

    args.output.parent.mkdir(parents=True, exist_ok=True)
    plot_path = args.output.with_name("results.png")
    modes = [mode.name for mode in plan.modes]
    models = [model.name for model in plan.models]
    plot.plot(data, modes, models, plot_path)
    args.output.write_text(
        report.render(data, modes, models, measured_on, _command(), date, plot_path.name)
    )
    args.output.with_name("results.json").write_text(json.dumps(data, indent=1) + "\n")
    log(f"wrote {args.output}, {plot_path.name} and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
