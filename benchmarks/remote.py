"""Benchmark of the remote tier: the radon model compiled in fresh processes, on Redis and
on a bucket, beside the local store.

- cold: empty local store, empty tier (the compile publishes to the tier), once per tier;
- local: the local store the cold run filled (a local hit);
- redis / bucket: an empty local store, the tier filled by its cold run (remote hits,
  written back): a fresh machine of a fleet.

Each is timed in a fresh process (interpreter start to first result, and the
compile alone: ``pytensor.function`` plus the first call), ``--repeats`` times
against a real ``redis-server`` and moto's S3 server, both on loopback for the run.
Prints the medians and the ratios of each tier's case to a local hit and to a cold
compile, and writes ``benchmarks/REMOTE.md``.

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
from object_server import moto_server  # noqa: E402
from redis_server import redis_server  # noqa: E402

SECRET = "benchmark-secret-0123456789abcdef"
BUCKET = "nbcache-benchmark"
#: (case, the tier its process uses, whether its local store is the cold run's).
CASES = (("cold", "redis"), ("local", "redis"), ("redis", "redis"),
         ("cold (bucket)", "bucket"), ("bucket", "bucket"))

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


def run_child(store: Path, url: str, env: dict) -> dict:
    env = with_this_checkout(dict(os.environ, **env, NBCACHE_DIR=str(store), NBCACHE_REMOTE=url,
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


def measure(repeats: int, work: Path) -> dict:
    results: dict = {case: [] for case, _ in CASES}
    with redis_server(work / "redis") as server, moto_server() as moto:
        client, buckets = server.client(), moto.client()
        buckets.create_bucket(Bucket=BUCKET)
        for repeat in range(repeats):
            client.flushall()
            tiers = {"redis": (server.url, {}),
                     "bucket": (f"s3://{BUCKET}/repeat-{repeat}", moto.environment())}
            stores = {"cold": "a", "local": "a", "redis": "b", "cold (bucket)": "c", "bucket": "d"}
            for case, tier in CASES:
                url, env = tiers[tier]
                report = run_child(work / f"{stores[case]}{repeat}", url, env)
                results[case].append(report)
                print(f"repeat {repeat + 1}/{repeats} {case:<13}  compile "
                      f"{report['compile_seconds']:.3f} s, process {report['process_seconds']:.3f} s, "
                      f"{report['numba_compiles']} numba compiles", flush=True)
        results["server"] = {"redis_version": client.info()["redis_version"],
                             "moto_version": _version("moto"), "obstore_version": _version("obstore")}
    return results


def _version(package: str) -> str:
    from importlib import metadata

    return metadata.version(package)


def median(results: list[dict], field: str) -> float:
    return statistics.median(report[field] for report in results)


def report_markdown(results: dict, repeats: int) -> str:
    rows, figures = [], {}
    for case, _ in CASES:
        figures[case] = {field: median(results[case], field)
                         for field in ("compile_seconds", "self_test_seconds", "process_seconds")}
        compiles = sorted({report["numba_compiles"] for report in results[case]})
        rows.append(f"| {case} | {figures[case]['compile_seconds']:.3f} | "
                    f"{figures[case]['self_test_seconds']:.3f} | "
                    f"{figures[case]['process_seconds']:.3f} | {', '.join(map(str, compiles))} |")
    server = results["server"]
    lines = [
        "# Remote tier benchmark: the radon model from Redis and from a bucket",
        "",
        f"`python benchmarks/remote.py --repeats {repeats}`, {time.strftime('%Y-%m-%d')}: Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, redis-server "
        f"{server['redis_version']} and moto {server['moto_version']}'s S3 server (obstore "
        f"{server['obstore_version']}), both on loopback. Fresh processes; medians of "
        f"{repeats} repeats. *Compile* is `pytensor.function` plus the first call, "
        "including the cache's per-machine *self-test* (probe kernels compiled and rebuilt "
        "once per fresh local store, unless the tier vouches that they passed for this "
        "fingerprint: then only the checks that compile nothing; shown apart too); *process* "
        "is interpreter start to exit.",
        "",
        "| case | compile (s) | of which self-test (s) | process (s) | numba compiles |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        "- cold, cold (bucket): empty local store and tier; the compile publishes to the tier "
        f"({_published(results['cold'])} to Redis, {_published(results['cold (bucket)'])} "
        "to the bucket).",
        "- local: a hit in the local store the cold run filled.",
        f"- redis, bucket: an empty local store, the tier filled by its cold run: "
        f"{_fetched(results['redis'])} from Redis, {_fetched(results['bucket'])} from the "
        "bucket (the cold run's vouch and numba's runtime among them), written back locally.",
        "",
    ]
    for case, cold in (("redis", "cold"), ("bucket", "cold (bucket)")):
        local = figures[case]["compile_seconds"] / figures["local"]["compile_seconds"]
        local_process = figures[case]["process_seconds"] / figures["local"]["process_seconds"]
        against_cold = figures[case]["compile_seconds"] / figures[cold]["compile_seconds"]
        lines.append(f"**{case}, empty local store / local hit: {local:.2f}x** (process: "
                     f"{local_process:.2f}x); / cold compile: {against_cold:.2f}x.  ")
    lines += [
        "",
        "The self-test also loads numba's compiler, which the local case pays inside its "
        "compile instead: subtracting it would flatter the tiers.",
        "",
    ]
    return "\n".join(lines)


def _published(reports: list[dict]) -> str:
    remote = reports[-1]["remote"]
    return (f"{remote.get('remote:published', 0)} entries, "
            f"{remote.get('remote:bytes_out', 0) / 1024:.0f} KiB compressed")


def _fetched(reports: list[dict]) -> str:
    remote = reports[-1]["remote"]
    return f"{remote.get('remote:hit', 0)} hits ({remote.get('remote:bytes_in', 0) / 1024:.0f} KiB)"


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
