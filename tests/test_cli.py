"""The ``numba-cache`` console script, run for real in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers import run_python


def numba_cache(*args, env=None):
    command = shutil.which("numba-cache") or sys.executable
    prefix = [] if command.endswith("numba-cache") else ["-m", "numba_cache"]
    return subprocess.run([command, *prefix, *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=600, check=False)


def test_stats_count_the_compiles_of_a_cold_and_a_warm_process(private_store):
    code = """
import json, numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.vector("x")
pytensor.function([x], pt.exp(x) * 2, mode="NUMBA_CACHE")(np.ones(2))
print(json.dumps({}))
"""
    run_python(code)
    run_python(code)
    result = numba_cache("stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["counters"]["graph.miss"] == 1 and stats["counters"]["graph.hit"] == 1
    assert stats["kinds"]["graph"] == 1 and stats["entries"] >= 2
    assert stats["root"] == str(private_store)


def test_dir_says_where_the_setting_came_from(private_store):
    result = numba_cache("dir", "--json")
    assert json.loads(result.stdout) == {"root": str(private_store), "source": "env NBCACHE_DIR"}


def test_bad_setting_is_one_clear_line_and_no_traceback():
    result = numba_cache("stats", env={"NBCACHE_MAX_SIZE": "lots"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "NBCACHE_MAX_SIZE" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_runs_and_reports_identical_results():
    result = numba_cache("demo")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "results identical across all four processes: yes" in result.stdout
    warm_line = [line for line in result.stdout.splitlines() if line.startswith("numba_cache") and " warm " in line]
    assert warm_line and warm_line[0].split()[5] == "0"  # numba compiles in the warm process
