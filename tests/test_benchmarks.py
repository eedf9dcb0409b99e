"""The benchmark suite's smoke run produces its results file, plot and raw samples.

It checks that the suite runs and reports, not how fast anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import FIGURE, TARGETS
from benchmarks.suite import CALL_PROCESSES

RUN = Path(__file__).parents[1] / "benchmarks" / "run.py"


@pytest.mark.slow
def test_smoke_run_writes_results_plot_and_samples(tmp_path):
    output = tmp_path / "out" / "RESULTS.md"
    process = subprocess.run(
        [sys.executable, str(RUN), "--smoke", "--output", str(output)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert "radon  NUMBA_CACHE     warm" in process.stdout  # progress, one line per step

    results = output.read_text()
    assert "--smoke" in results and "## Machine" in results and "nproc" in results
    target_rows = [line for line in results.splitlines() if line.startswith("| ")]
    for target in TARGETS:
        row = next(line for line in target_rows
                    if line.startswith(f"| {target.label} ({target.model}) |"))
        # The smoke run measures radon only.
        verdicts = ("met", "not met**") if target.model == "radon" else ("not measured",)
        assert row.rstrip(" |").endswith(verdicts), row
    for figure in ("cold", "warm", "process", "variant", "new_data", "new_model", "edit", "call",
                   "call_trusted", "rewrite_key", "disk_bytes", "compiles_warm",
                   "compile_rss_cold", "compile_rss_total_cold"):
        assert any(line.startswith(f"| {FIGURE[figure].label} |") for line in target_rows), figure
    assert "| figure | NUMBA_CACHE | NUMBA |" in results
    assert "| `prior_scale=2.5` |" in results
    assert "| `Laplace prior` |" in results
    assert "](results.png)" in results

    assert (output.parent / "results.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    samples = json.loads((output.parent / "results.json").read_text())["samples"]
    assert set(samples) == {"radon"}
    assert set(samples["radon"]) == {"NUMBA_CACHE", "NUMBA"}
    assert all(len(samples["radon"][mode]["cold"]) == 1 for mode in samples["radon"])
    # Calls are timed side by side, by several processes of each mode compared.
    for mode, figure in (("NUMBA_CACHE", "call"), ("NUMBA_CACHE", "call_trusted_linked"),
                         ("NUMBA", "call_trusted")):
        assert len(samples["radon"][mode][figure]) == CALL_PROCESSES[mode], (mode, figure)
    servers = 2 * CALL_PROCESSES["NUMBA_CACHE"] + CALL_PROCESSES["NUMBA"]  # plain and linked
    assert f"calls of {servers} warm processes, side by side" in process.stdout


PHASES = Path(__file__).parents[1] / "benchmarks" / "phases.py"


@pytest.mark.slow
def test_phases_tell_a_cold_compile_from_a_warm_one(tmp_path):
    """The phase profile of a cold compile shows numba compiling and PyTensor's numba
    dispatch imported (to convert the ops); of a warm one, loads only."""
    from benchmarks.modes import MODES

    environment = MODES["NUMBA_CACHE"].environment(tmp_path)

    def measured() -> dict:
        process = subprocess.run(
            [sys.executable, str(PHASES), "radon_model", "{'groups': 4}", "--json"],
            env=environment, capture_output=True, text=True, timeout=300, check=False)
        assert process.returncode == 0, process.stderr[-3000:]
        return json.loads(process.stdout.splitlines()[-1])

    cold, warm = measured(), measured()
    typing = "numba: type inference (nested compiles included)"
    loads = "kernel loads from the store (all kinds)"
    assert cold["counters"]["rewrite.miss"] == 1 and warm["counters"]["rewrite.hit"] == 1
    assert typing in cold["phases"] and typing not in warm["phases"]
    dispatch = "PyTensor's numba dispatch"
    assert cold["phases"][dispatch]["calls"] == 1 and dispatch not in warm["phases"]
    assert (cold["phases"][dispatch]["seconds"]
            <= cold["phases"]["modules first imported (whichever phase they fall in)"]["seconds"])
    assert warm["phases"][loads]["calls"] >= warm["counters"]["op.hit"]
    for run in (cold, warm):
        assert all(0 < phase["seconds"] <= run["seconds"] for phase in run["phases"].values())
