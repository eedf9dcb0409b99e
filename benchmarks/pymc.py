"""Benchmark ``pm.sample`` as a PyMC user runs it: numba_cache activated beside PyTensor's NUMBA.

For each model (radon-style, 85 groups and 919 observations; a GP marginal
likelihood), each sampler (PyMC's NUTS, nutpie) and each mode (``numba_cache``:
``numba_cache.activate()``; ``NUMBA``: the built-in backend and its cache), in a
new work directory (empty caches, see :mod:`benchmarks.modes`), two fresh
processes: cold, then warm. Each reports the compile phase (``pm.sample`` until
the sampler starts drawing), the sampling, and the whole process. Prints the
medians over ``--repeat`` and the ratios to ``NUMBA`` in the same run, and
writes ``benchmarks/PYMC.md`` and the samples in ``benchmarks/PYMC.json``.

With ``--edits``, each model with edits of its structure (the radon-style one:
``benchmarks.pymc_child.EDITS``) is then sampled once per edit, each in a fresh
process on the caches the runs before it left: the edit-and-rerun loop.

Usage: .venv/bin/python benchmarks/pymc.py [--repeat 3] [--draws 200] [--models radon gp] [--edits]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(HERE.parent))

from benchmarks.modes import Mode  # noqa: E402
from benchmarks.pymc_child import EDITS, MODELS  # noqa: E402

#: Run as a module, from the repository: as a script, benchmarks/ would come first on its path
#: and ``import pymc`` would find this file.
CHILD = [sys.executable, "-m", "benchmarks.pymc_child"]
SAMPLERS = ("pymc", "nutpie")
#: The two modes: numba_cache activated (in a process of its own work directory) and the built-in.
MODES = {"numba_cache": Mode("NUMBA_CACHE", "NUMBA_CACHE"), "NUMBA": Mode("NUMBA", "NUMBA")}
FIGURES = ("import_seconds", "compile_seconds", "function_seconds", "cfunc_seconds",
           "sampling_seconds", "leapfrog_steps", "step_seconds", "process_seconds")
#: How a figure's median is written: seconds unless named here.
FORMATS = {"leapfrog_steps": lambda value: f"{value:,.0f}",
           "step_seconds": lambda value: f"{value * 1e6:.0f} µs"}
#: Each chain's process computes with one BLAS thread. PyMC runs the chains in processes
#: of their own; with BLAS's threads left to default, two GP chains on two cores took
#: about 13 s to sample instead of 0.3 s (5,200 steps, both modes alike): threads of the
#: two processes spinning against each other, noise that drowned the comparison.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: Figures of nutpie's runs only.
NUTPIE_FIGURES = ("import_seconds", "cfunc_seconds")
#: Figures of an edit's run: what the edit costs before the sampler draws.
EDIT_FIGURES = ("compile_seconds", "function_seconds", "cfunc_seconds")


def run_child(spec: dict, environment: dict) -> dict:
    process = subprocess.run([*CHILD, json.dumps(spec)], env=environment, cwd=HERE.parent,
                             capture_output=True, text=True, check=False)
    if process.returncode != 0:
        last = [line for line in process.stderr.splitlines() if line.strip()][-1:]
        raise RuntimeError(f"{spec}: {''.join(last)}")
    result = json.loads(process.stdout.strip().splitlines()[-1])
    del result["draws"]
    return result


def runs_of(model: str, edits: bool) -> dict:
    """The runs of `model`, each its own process on the caches of the runs before it: cold,
    warm, then (with `edits`) each edit of the model's structure (:data:`EDITS`), as a
    modeller edits and reruns; run name to the model it samples."""
    runs = {"cold": model, "warm": model}
    if edits:
        runs |= {f"edit: {edit}": f"{model}, {edit}" for edit in EDITS
                 if f"{model}, {edit}" in MODELS}
    return runs


def measure(models: list[str], repeat: int, draws: int, log, edits: bool = False) -> dict:
    """samples[model][sampler][mode][run][figure] -> list of values, and the counters seen."""
    samples: dict = {}
    for index in range(repeat):
        for model in models:
            for sampler in SAMPLERS:
                for mode, benchmark_mode in MODES.items():
                    with tempfile.TemporaryDirectory(prefix="nbcache-pymc-") as workdir:
                        environment = {**benchmark_mode.environment(Path(workdir)),
                                       **ONE_BLAS_THREAD}
                        for run, sampled in runs_of(model, edits).items():
                            spec = {"model": sampled, "sampler": sampler, "mode": mode,
                                    "draws": draws}
                            result = run_child(spec, environment)
                            figures = samples.setdefault(model, {}).setdefault(sampler, {}) \
                                .setdefault(mode, {}).setdefault(run, {})
                            for figure in FIGURES:
                                figures.setdefault(figure, []).append(result[figure])
                            figures.setdefault("stats", []).append(result["stats"])
                            log(f"[{index + 1}/{repeat}] {model} {sampler} {mode} {run}: "
                                f"compile {result['compile_seconds']:.2f} s "
                                f"(cfunc {result['cfunc_seconds']:.2f} s), "
                                f"sampling {result['sampling_seconds']:.2f} s "
                                f"({result['leapfrog_steps']:,} steps), "
                                f"process {result['process_seconds']:.2f} s")
    return samples


def median(values: list) -> float:
    return statistics.median(values)


def table(samples: dict) -> list[str]:
    lines = ["| model | sampler | run | figure | numba_cache | NUMBA | ratio |",
             "|---|---|---|---|---|---|---|"]
    for model, samplers in samples.items():
        for sampler, modes in samplers.items():
            for run in modes["numba_cache"]:
                for figure in FIGURES:
                    if figure in NUTPIE_FIGURES and sampler != "nutpie":
                        continue
                    if run.startswith("edit") and figure not in EDIT_FIGURES:
                        continue
                    ours = median(modes["numba_cache"][run][figure])
                    builtin = median(modes["NUMBA"][run][figure])
                    written = FORMATS.get(figure, lambda value: f"{value:.2f} s")
                    lines.append(f"| {model} | {sampler} | {run} | {figure.rsplit('_', 1)[0]} | "
                                 f"{written(ours)} | {written(builtin)} | {ours / builtin:.2f}× |")
    return lines


def write_report(samples: dict, arguments, minutes: float) -> str:
    from benchmarks.run import machine

    facts = machine()
    warm_stats = {f"{model} {sampler}": modes["numba_cache"]["warm"]["stats"][0]
                  for model, samplers in samples.items() for sampler, modes in samplers.items()}
    lines = [
        "# pm.sample: numba_cache activated beside PyTensor's NUMBA",
        "",
        f"Generated by `.venv/bin/python benchmarks/pymc.py --repeat {arguments.repeat} "
        f"--draws {arguments.draws} --models {' '.join(arguments.models)}"
        f"{' --edits' if arguments.edits else ''}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC in "
        f"{minutes:.1f} min; do not edit, run the command again.",
        "",
        f"- CPU: {facts['cpu']} (LLVM `{facts['llvm_cpu']}`), {facts['nproc']} cores; "
        f"load average {facts['load_average']:.2f} at the end",
        f"- numba_cache source: {facts['source']}",
        f"- `pm.sample(draws={arguments.draws}, tune={arguments.draws}, chains=2, cores=2)`, "
        "each run a fresh process with one BLAS thread (`" + " ".join(
            f"{name}={value}" for name, value in ONE_BLAS_THREAD.items())
        + "`: two chains' processes with default BLAS threads spin against each other, "
        "about 40× slower GP sampling in both modes); "
        "cold: empty caches, warm: the cold run's caches"
        + ("; edit: a change of the model's structure (" + ", ".join(EDITS) + "), each "
           "sampled in a fresh process on the caches the runs before it left, as a modeller "
           "edits and reruns" if arguments.edits else ""),
        "- import: `import nutpie` before `pm.sample` (it imports arviz, scipy.stats and "
        "matplotlib; `pm.sample` would do it first thing, in both modes alike); "
        "compile: `pm.sample` until the sampler draws (its time less PyMC's `sampling_time`); "
        "function: the part of it in `pytensor.function` calls (rewriting, linking; kernels "
        "load at the first call); cfunc: the part numba spends compiling nutpie's `numba.cfunc` "
        "wrappers; "
        "sampling: PyMC's `sampling_time`; leapfrog: the steps of both chains, tuning "
        "included (`n_steps`); step: sampling time per step of a chain (the chains run side "
        "by side), the figure that compares speed: the number of steps follows the trajectory, "
        "which the last bits of a gradient change; "
        "process: interpreter start to the end of `pm.sample`",
        f"- medians of {arguments.repeat}; ratio: numba_cache / NUMBA, measured in the same run",
        "",
        *table(samples),
        "",
        "numba_cache's counters in the first warm parent process: "
        + "; ".join(f"{name}: {stats}" for name, stats in warm_stats.items()),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--models", nargs="+", default=["radon", "gp"], choices=["small", "radon", "gp"])
    parser.add_argument("--edits", action="store_true",
                        help="after each model's warm run, sample each edit of its structure")
    parser.add_argument("--output", type=Path, default=HERE / "PYMC.md")
    arguments = parser.parse_args()
    started = time.perf_counter()
    samples = measure(arguments.models, arguments.repeat, arguments.draws,
                      log=lambda line: print(line, file=sys.stderr, flush=True),
                      edits=arguments.edits)
    report = write_report(samples, arguments, (time.perf_counter() - started) / 60)
    arguments.output.write_text(report)
    arguments.output.with_suffix(".json").write_text(json.dumps(samples, indent=1))
    print(report)


if __name__ == "__main__":
    main()
