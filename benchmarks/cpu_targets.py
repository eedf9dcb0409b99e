"""What the portable target costs per call: every model compiled for the host and for each
x86-64 baseline (``NBCACHE_TARGET``), with PyTensor's ``NUMBA`` beside them, in one run.

For each model and target, a work directory of its own (:mod:`.modes`): a cold process
fills its store, then warm processes time calls (:mod:`.child`), the targets taken in turn
within each repeat so that the machine's drift falls on all of them alike. Each cell is
the median over repeats with its range; ratios are of medians to host code. A baseline the
CPU lacks is reported as such, not timed. The outputs of every target are compared with the
host's: the bits are the same across repeats of one target, and the largest distance to the
host's results is given in ULP (other code, other rounding). Writes ``TARGETS.md`` and
``targets.json`` beside this file (or ``--output``)::

    python -m benchmarks.cpu_targets --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from benchmarks.child import OURS
from benchmarks.modes import BASELINE, MODES, REPOSITORY
from benchmarks.run import code_digest, machine, precompile
from benchmarks.suite import MODELS, run_child
from numba_cache import cpu_target
from numba_cache._compat import numba_internals

HOST = cpu_target.HOST
BASELINES = [name for name, baseline in cpu_target.BASELINES.items()
             if baseline.architecture == numba_internals.host_architecture()]


def _usable(target: str) -> bool:
    return target == HOST or cpu_target.BASELINES[target].requires <= (
        numba_internals.host_cpu_features())


def _environment(mode: str, target: str, workdir: Path) -> dict:
    environment = MODES[mode].environment(workdir)
    environment.pop("NUMBA_CPU_NAME", None)
    environment.pop("NUMBA_CPU_FEATURES", None)
    environment["NBCACHE_TARGET"] = target
    return environment


def _ulp_distance(first, second) -> int:
    """The largest distance in units in the last place between two lists of float outputs."""
    a = np.concatenate([np.atleast_1d(np.asarray(x, dtype=np.float64)).ravel() for x in first])
    b = np.concatenate([np.atleast_1d(np.asarray(x, dtype=np.float64)).ravel() for x in second])
    ordered = [np.where(v.view(np.int64) < 0, np.int64(-(2**63)) - v.view(np.int64),
                        v.view(np.int64)) for v in (a, b)]
    return int(np.max(np.abs(ordered[0] - ordered[1]))) if a.size else 0


def measure(repeat: int, models: list[str], log) -> dict:
    columns = [(OURS, HOST), *((OURS, name) for name in BASELINES if _usable(name)),
               (BASELINE, HOST)]
    samples: dict = {model: {f"{mode}|{target}": [] for mode, target in columns} for model in models}
    outputs: dict = {model: {} for model in models}
    with tempfile.TemporaryDirectory(prefix="nbcache-targets-") as scratch:
        for model_name in models:
            model = MODELS[model_name]
            for mode, target in columns:
                workdir = Path(scratch) / model_name / f"{mode}-{target}"
                log(f"{model_name}: {mode} for {target}, cold")
                spec = {"mode": mode, "function": model.function, "kwargs": {}}
                run_child(spec, _environment(mode, target, workdir))
            for round_ in range(repeat):
                for mode, target in columns:
                    workdir = Path(scratch) / model_name / f"{mode}-{target}"
                    spec = {"mode": mode, "function": model.function, "kwargs": {},
                            "calls": True}
                    warm = run_child(spec, _environment(mode, target, workdir))
                    column = f"{mode}|{target}"
                    samples[model_name][column].append(
                        {"call_us": warm["call_us"], "call_trusted_us": warm["call_trusted_us"]})
                    first = outputs[model_name].setdefault(column, warm["outputs"])
                    if warm["outputs"] != first:
                        raise RuntimeError(f"{model_name} {column}: a warm process gave other "
                                           "bits than the first")
                log(f"{model_name}: round {round_ + 1} of {repeat} timed")
    return {"columns": [f"{mode}|{target}" for mode, target in columns], "samples": samples,
            "outputs": outputs,
            "unusable": [name for name in BASELINES if not _usable(name)]}


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def render(data: dict, measured_on: dict, date: str, command: str) -> str:
    host_column = f"{OURS}|{HOST}"
    lines = [
        "# Per call: the portable target against host code",
        "",
        f"Measured {date} on {measured_on['cpu']} (LLVM host CPU `{measured_on['llvm_cpu']}`), "
        f"{measured_on['nproc']} cores, code `{measured_on['code_digest']}`; `{command}`.",
        "Each cell: median µs per call over the warm processes (range), then its ratio to "
        "numba_cache's host code; `NUMBA` is PyTensor's built-in, for scale. Call with "
        "`trust_input=True`, the way samplers call.",
        "",
    ]
    if data["unusable"]:
        lines += [f"Not timed (this CPU lacks their features): {', '.join(data['unusable'])}.", ""]
    header = ["model", *(column.replace("|", " for ").replace(f"{BASELINE} for {HOST}", BASELINE)
                         for column in data["columns"]), "largest ULP distance to host code"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model, by_column in data["samples"].items():
        host = statistics.median(s["call_trusted_us"] for s in by_column[host_column])
        cells = []
        for column in data["columns"]:
            values = [s["call_trusted_us"] for s in by_column[column]]
            cells.append(f"{_cell(values)}, {statistics.median(values) / host:.2f}x")
        distances = {column.split("|")[1]: _ulp_distance(data["outputs"][model][column],
                                                         data["outputs"][model][host_column])
                     for column in data["columns"] if column.startswith(f"{OURS}|")
                     and column != host_column}
        lines.append(f"| {model} | " + " | ".join(cells) + " | "
                     + ", ".join(f"{name}: {ulp}" for name, ulp in distances.items()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm processes per target")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--output", type=Path, default=REPOSITORY / "benchmarks" / "TARGETS.md")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", flush=True)

    measured_on = machine()
    precompile()
    data = measure(args.repeat, args.models, log)
    measured_on["code_digest_end"] = code_digest()
    if measured_on["code_digest_end"] != measured_on["code_digest"]:
        raise RuntimeError("the code changed while it was measured")
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks.cpu_targets " + " ".join(argv or sys.argv[1:])
    args.output.write_text(render(data, measured_on, date, command.strip()))
    args.output.with_name("targets.json").write_text(json.dumps(data, indent=1) + "\n")
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
