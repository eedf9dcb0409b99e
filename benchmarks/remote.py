"""Benchmark of the remote tier: the radon model compiled in fresh processes, three ways.

- cold: empty local store, empty Redis (the compile publishes to Redis);
- local: the local store the cold run filled (a local hit);
- redis: an empty local store, Redis filled by the cold run (remote hits, written back).

Each is timed in a fresh process (interpreter start to first result, and the
compile alone: ``pytensor.function`` plus the first call), ``--repeats`` times
against a real ``redis-server`` started on loopback for the run. Prints the medians
and the ratios of the Redis case to a local hit and to a cold compile, and writes
``benchmarks/REMOTE.md``.

Usage: python benchmarks/remote.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the loopback server of the tests
sys.path.insert(0, str(HERE.parent))

from benchmarks.modes import with_this_checkout  # noqa: E402
from redis_server import redis_server  # noqa: E402

SECRET = "benchmark-secret-0123456789abcdef"
CASES = ("cold", "local", "redis")

CHILD = """
import json, time
import numba_cache, pytensor
from numba_cache import settings
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.kernels.context import current_context
from numba_cache.evaluation.models import radon_model
from numba_cache.store import Store

model = radon_model()
with count_numba_compiles() as compiled:
    begin = time.perf_counter()
    current_context()  # what the first compile of a process does first: the self-test if due
    middle = time.perf_counter()
    function = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")
    function(*model.point)
    end = time.perf_counter()
counters = Store(settings.current()).stats()["counters"]
print(json.dumps({"compile_seconds": end - begin, "self_test_seconds": middle - begin,
                  "numba_compiles": len(compiled),
                  "session": dict(numba_cache.session_stats()),
                  "remote": {k: v for k, v in counters.items() if k.startswith("remote:")}}))
"""


def run_child(store: Path, url: str) -> dict:
    env = with_this_checkout(dict(os.environ, NBCACHE_DIR=str(store), NBCACHE_REMOTE=url,
                                  NBCACHE_REMOTE_SECRET=SECRET))
    begin = time.perf_counter()
    process = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                             text=True, check=False)
    wall = time.perf_counter() - begin
    if process.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{process.stderr[-3000:]}")
    report = json.loads(process.stdout.strip().splitlines()[-1])
    report["process_seconds"] = wall
    return report


def measure(repeats: int, work: Path) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {case: [] for case in CASES}
    with redis_server(work / "redis") as server:
        client = server.client()
        for repeat in range(repeats):
            client.flushall()
            first, second = work / f"a{repeat}", work / f"b{repeat}"
            for case, store in (("cold", first), ("local", first), ("redis", second)):
                report = run_child(store, server.url)
                results[case].append(report)
                print(f"repeat {repeat + 1}/{repeats} {case:<5}  compile "
                      f"{report['compile_seconds']:.3f} s, process {report['process_seconds']:.3f} s, "
                      f"{report['numba_compiles']} numba compiles", flush=True)
        results["server"] = {"redis_version": client.info()["redis_version"],
                             "entries": client.dbsize()}
    return results


def median(results: list[dict], field: str) -> float:
    return statistics.median(report[field] for report in results)


def report_markdown(results: dict, repeats: int) -> str:
    rows, figures = [], {}
    for case in CASES:
        figures[case] = {field: median(results[case], field)
                         for field in ("compile_seconds", "self_test_seconds", "process_seconds")}
        compiles = sorted({report["numba_compiles"] for report in results[case]})
        rows.append(f"| {case} | {figures[case]['compile_seconds']:.3f} | "
                    f"{figures[case]['self_test_seconds']:.3f} | "
                    f"{figures[case]['process_seconds']:.3f} | {', '.join(map(str, compiles))} |")
    ratios = {
        field: (figures["redis"][field] / figures["local"][field],
                figures["redis"][field] / figures["cold"][field])
        for field in ("compile_seconds", "process_seconds")
    }
    remote = results["redis"][-1]["remote"]
    published = results["cold"][-1]["remote"]
    lines = [
        "# Remote tier benchmark: the radon model from Redis",
        "",
        f"`python benchmarks/remote.py --repeats {repeats}`, {time.strftime('%Y-%m-%d')}: Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, redis-server "
        f"{results['server']['redis_version']} on loopback. Fresh processes; medians of "
        f"{repeats} repeats. *Compile* is `pytensor.function` plus the first call, "
        "including the cache's per-machine *self-test* (probe kernels compiled and rebuilt "
        "once per fresh local store, unless Redis vouches that they passed for this "
        "fingerprint: then only the checks that compile nothing; shown apart too); *process* "
        "is interpreter start to exit.",
        "",
        "| case | compile (s) | of which self-test (s) | process (s) | numba compiles |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"- cold: empty local store and Redis; it published {published.get('remote:published', 0)} "
        f"entries ({published.get('remote:bytes_out', 0) / 1024:.0f} KiB compressed).",
        "- local: a hit in the local store the cold run filled.",
        f"- redis: an empty local store; {remote.get('remote:hit', 0)} remote hits "
        f"({remote.get('remote:bytes_in', 0) / 1024:.0f} KiB, the cold run's vouch and "
        "numba's runtime among them), written back locally.",
        "",
        f"**Redis with an empty local store / local hit: {ratios['compile_seconds'][0]:.2f}x** "
        f"(process: {ratios['process_seconds'][0]:.2f}x).  ",
        f"**Redis with an empty local store / cold compile: {ratios['compile_seconds'][1]:.2f}x** "
        f"(process: {ratios['process_seconds'][1]:.2f}x).",
        "",
        "The self-test also loads numba's compiler, which the local case pays inside its "
        "compile instead: subtracting it would flatter the Redis case.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="numba_cache-remote-bench-") as work:
        results = measure(args.repeats, Path(work))
    text = report_markdown(results, args.repeats)
    (HERE / "REMOTE.md").write_text(text)
    print()
    print(text)


if __name__ == "__main__":
    main()
