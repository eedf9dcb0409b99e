"""What the reliability tests share: tiny graphs, child processes, checkpoints, damage.

Children compile named graphs with ``mode="NUMBA_CACHE"``, call them, and report
their values beside PyTensor's Python mode (``Mode(linker="py",
optimizer="fast_run")``) on the same graph, with the lookups they made, their
session counters and the numba_cache warnings they gave. Functions here run in
the test process and, being importable, as ``multiprocessing`` targets under
fork, spawn and forkserver alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
from helpers import child_environment, run_cli
from pytensor.compile.mode import Mode

import numba_cache
from numba_cache import settings
from numba_cache.kernels.outcomes.report import observe_lookups
from numba_cache.keys import current_fingerprint
from numba_cache.store import Store

INPUT = [0.1, 0.7, 1.3, 2.0, 2.9]
#: Relative tolerance of a value against Python mode (numba uses fastmath).
RTOL = 1e-9

#: Graphs by name, as expressions of the float64 vector ``x``. ``outer<n>`` is one graph on
#: data of any length n (another graph key at each length, one lengths-free key); ``scale<k>`` is
#: ``exp(x) * maximum(x, k)`` for any k: as many distinct, same-shaped graphs as a test
#: needs, each with an op kernel of its own (k is read by a maximum, so it stays baked
#: in the fused kernel: numba_cache/codegen/lifted_constants.py lifts only constants
#: read by add, sub and mul, and ``exp(x) * k`` would share one kernel for every k).
EXPRESSIONS = {
    "sumexp": "pt.exp(x).sum() * 3 + pt.log1p(x ** 2)",
    "tanh": "pt.tanh(x) * x - 1",
    "sqrtcos": "pt.sqrt(x) + pt.cos(x)",
    "cumsum": "pt.cumsum(x) * 2",
    "maxshift": "x - pt.max(x)",
    "logistic": "1 / (1 + pt.exp(-x))",
    "padmax": "pt.concatenate([x, pt.alloc(pt.max(x), 3)])",  # PyTensor writes Alloc's source
}


def expression(name: str) -> str:
    if name.startswith("scale"):
        return f"pt.exp(x) * pt.maximum(x, {float(name[len('scale'):])!r})"
    if name.startswith("outer"):  # one graph at any length n of its data: other static lengths
        n = int(name[len("outer"):])
        return f"pt.exp(x[:, None] * pt.as_tensor(np.linspace(0.5, 1.5, {n}))[None, :]).sum(axis=1)"
    return EXPRESSIONS[name]


def scales(count: int, first: int = 2) -> list[str]:
    return [f"scale{k}" for k in range(first, first + count)]


# In a child


def build(name: str):
    """The graph `name`: its input variable and output."""
    x = pt.vector("x", dtype="float64")
    return x, eval(expression(name), {"pt": pt, "np": np, "x": x})


def python_mode_value(name: str) -> list[float]:
    x, output = build(name)
    function = pytensor.function([x], output, mode=Mode(linker="py", optimizer="fast_run"))
    return np.asarray(function(np.array(INPUT))).tolist()


def cached_value(name: str) -> list[float]:
    x, output = build(name)
    return np.asarray(pytensor.function([x], output, mode="NUMBA_CACHE")(np.array(INPUT))).tolist()


def compile_graphs(names: list[str]) -> dict:
    """Compile and call each graph through the cache; report what happened.

    ``values`` and ``expected`` (Python mode) by name, ``lookups`` by name (kind,
    key, decision of each kernel lookup), ``stats`` (session counters),
    ``warnings`` (the numba_cache ones) and ``fingerprint``.
    """
    values, lookups = {}, {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in names:
            with observe_lookups() as observed:
                values[name] = cached_value(name)
            lookups[name] = [
                {"kind": lookup.key.kind, "key": lookup.key.digest, "decision": lookup.decision}
                for lookup in observed
            ]
    return {
        "values": values,
        "expected": {name: python_mode_value(name) for name in names},
        "lookups": lookups,
        "stats": dict(numba_cache.session_stats()),
        "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
        "fingerprint": current_fingerprint().digest,
    }


def churn(names: list[str], compiles: int, seed: int) -> dict:
    """Compile and call `compiles` graphs drawn from `names`, each checked against Python mode.

    Reports ``compiles``, ``wrong`` (the names whose value differed), ``stats``
    and ``warnings``.
    """
    numba_cache.reset_session_stats()  # a forked worker starts with its parent's
    expected = {name: python_mode_value(name) for name in sorted(set(names))}
    chooser = random.Random(seed)
    wrong = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(compiles):
            name = chooser.choice(names)
            if not np.allclose(cached_value(name), expected[name], rtol=RTOL, atol=0):
                wrong.append(name)
    return {
        "compiles": compiles,
        "wrong": wrong,
        "stats": dict(numba_cache.session_stats()),
        "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
    }


def race_worker(barrier, results, names: list[str]) -> None:
    """A multiprocessing worker: wait for the others, compile `names`, put the report."""
    numba_cache.reset_session_stats()
    barrier.wait(120)
    results.put(compile_graphs(names))


def race(method: str, names_by_worker: list[list[str]], warm_up: str) -> dict:
    """Compile `warm_up` here, then race one `method` worker per list of names.

    The warm-up opens the store (index connection, locks, numba) in the parent
    that forked workers inherit. Returns the workers' reports and exit codes.
    """
    compile_graphs([warm_up])
    context = multiprocessing.get_context(method)
    barrier, results = context.Barrier(len(names_by_worker)), context.Queue()
    workers = [
        context.Process(target=race_worker, args=(barrier, results, names))
        for names in names_by_worker
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(60)
    return {"reports": reports, "exitcodes": [worker.exitcode for worker in workers]}


def churn_worker(results, names: list[str], compiles: int, seed: int) -> None:
    """A multiprocessing worker: :func:`churn`, its report put on `results`."""
    results.put(churn(names, compiles, seed))


START_METHODS = ("fork", "spawn", "forkserver")


def crowd(processes: int, compiles: int, names: list[str]) -> dict:
    """Run `processes` :func:`churn` workers at once, start methods taken in turn.

    This process uses the store first, as a parent whose forked workers inherit it.
    Returns the workers' reports and exit codes (a worker that died has no report).
    """
    compile_graphs(names[:1])
    started = []
    for number in range(processes):
        context = multiprocessing.get_context(START_METHODS[number % len(START_METHODS)])
        results = context.Queue()
        worker = context.Process(target=churn_worker, args=(results, names, compiles, number))
        worker.start()
        started.append((worker, results))
    reports, exitcodes = [], []
    for worker, results in started:
        report = _report_of(worker, results)
        if report is not None:
            reports.append(report)
        worker.join(60)
        exitcodes.append(worker.exitcode)
    return {"reports": reports, "exitcodes": exitcodes}


def _report_of(worker, results) -> dict | None:
    """What `worker` put on `results`, or None if it ended without putting anything."""
    while True:
        ended = not worker.is_alive()
        try:
            return results.get(timeout=1)
        except queue.Empty:
            if ended:
                return None


def main(arguments: list[str]) -> None:
    command, *rest = arguments
    if command == "compile":
        print(json.dumps(compile_graphs(rest)))
    elif command == "churn":
        compiles, seed, *names = rest
        print(json.dumps(churn(names, int(compiles), int(seed))))
    elif command == "crowd":
        processes, compiles, *names = rest
        print(json.dumps(crowd(int(processes), int(compiles), names)))
    elif command == "race":
        method, warm_up, *groups = rest
        print(json.dumps(race(method, [group.split(",") for group in groups], warm_up)))
    else:
        raise SystemExit(f"unknown command {command!r}")


# In the test process


def start(
    names: list[str],
    env: dict | None = None,
    *,
    command: str = "compile",
    stderr: Path | None = None,
) -> subprocess.Popen:
    """A child running :func:`main` (by default compiling `names`), started.

    With `stderr`, the child's stderr goes to that file, for a test to watch.
    """
    with contextlib.ExitStack() as files:
        errors = subprocess.PIPE if stderr is None else files.enter_context(stderr.open("w"))
        return subprocess.Popen(
            [sys.executable, str(Path(__file__)), command, *names], env=child_environment(env),
            stdout=subprocess.PIPE, stderr=errors, text=True,
        )


def finish(process: subprocess.Popen, timeout: float = 300) -> dict:
    """The report of a child started with :func:`start`; it must exit 0 within `timeout`."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{tail(stderr)}") from None
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{tail(stderr)}"
    return json.loads(stdout.splitlines()[-1])


def tail(text: str | None) -> str:
    return (text or "")[-5000:]


def run(
    names: list[str], env: dict | None = None, timeout: float = 300, command: str = "compile"
) -> dict:
    """Run :func:`main` (by default compiling `names`) in a fresh process; return its report."""
    return finish(start(names, env, command=command), timeout)


def assert_correct(report: dict) -> None:
    """Every value the child computed equals Python mode's."""
    for name, value in report["values"].items():
        expected = report["expected"][name]
        assert np.allclose(value, expected, rtol=RTOL, atol=0), (name, value, expected)


def keys_of(report: dict, name: str, kind: str) -> list[str]:
    """The keys of kind `kind` that graph `name` looked up, in order."""
    return [lookup["key"] for lookup in report["lookups"][name] if lookup["kind"] == kind]


def key_of(report: dict, name: str, kind: str) -> str:
    (key,) = set(keys_of(report, name, kind))
    return key


def decisions(report: dict, name: str) -> dict[str, str]:
    """The decision of graph `name`'s lookup of each kind (the last one, for an op kind
    looked up more than once)."""
    return {lookup["kind"]: lookup["decision"] for lookup in report["lookups"][name]}


def decision_of(report: dict, name: str, key: str) -> str:
    (decision,) = {lookup["decision"] for lookup in report["lookups"][name] if lookup["key"] == key}
    return decision


def verify_problems(env: dict | None = None) -> list[dict]:
    """What ``numba-cache verify`` finds in the store NBCACHE_DIR names (empty: clean)."""
    result = run_cli("verify", "--json", env=env)
    assert result.returncode in (0, 1), result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert (result.returncode == 0) == (not problems)
    return problems


def record_path(root: Path, fingerprint: str, key: str) -> Path:
    return root / fingerprint / key[:2] / f"{key}.nbk"


def source_path(root: Path, fingerprint: str, key: str) -> Path:
    return root / fingerprint / key[:2] / f"{key}.py"


def temp_files(root: Path) -> list[Path]:
    return sorted((root / "tmp").glob("*.tmp")) if (root / "tmp").is_dir() else []


def open_store(root: Path, **changes) -> Store:
    """A :class:`~numba_cache.store.Store` on `root` in this process."""
    values = {"root": Path(root), "disabled": False, "readonly": False} | changes
    return Store(settings.override(settings.current(), **values))


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` and a hash of its content (SQLite's -wal/-shm files aside:
    opening the index for reading may create them)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in root.rglob("*")
        if path.is_file() and not path.name.endswith(("-wal", "-shm"))
    }


def copy_store(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination


class Checkpoint:
    """A writer paused at a checkpoint of the store (see ``numba_cache.store.checkpoints``)."""

    def __init__(self, directory: Path, name: str, label: str = "writer"):
        self.name = name
        self.path = directory / f"checkpoint-{label}-{name}"
        # The writer alone: a helper compiling ahead (numba_cache/kernels/helpers/compile_ahead.py)
        # would be a second writer, paused at the checkpoint in its stead.
        self.env = {"NBCACHE_TEST_CHECKPOINT": f"{name}:{self.path}",
                    "NBCACHE_COMPILE_AHEAD": "0"}

    @property
    def reached_file(self) -> Path:
        return Path(f"{self.path}.reached")

    def wait(self, process: subprocess.Popen, timeout: float = 120) -> None:
        """Wait until `process` is paused here; fail if it ends or takes too long."""
        deadline = time.monotonic() + timeout
        while not self.reached_file.exists():
            if process.poll() is not None:
                _, stderr = process.communicate()
                raise AssertionError(
                    f"exited ({process.returncode}) before {self.name}:\n{tail(stderr)}"
                )
            assert time.monotonic() < deadline, f"{self.name} not reached in {timeout} s"
            time.sleep(0.02)

    def release(self) -> None:
        Path(f"{self.path}.release").touch()


def kill(process: subprocess.Popen) -> None:
    """SIGKILL `process` and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL


# Damage, file by file: each takes the file, and another file of the same kind.


def truncate_half(path: Path, other: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def truncate_last_byte(path: Path, other: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def empty(path: Path, other: Path) -> None:
    path.write_bytes(b"")


def flip_byte_at(fraction: float):
    """A damage flipping every bit of the byte at `fraction` of the file's length."""

    def flip(path: Path, other: Path) -> None:
        data = bytearray(path.read_bytes())
        data[min(int(len(data) * fraction), len(data) - 1)] ^= 0xFF
        path.write_bytes(bytes(data))

    flip.__name__ = f"flip_byte_at_{fraction:g}"
    return flip


def swap_in(path: Path, other: Path) -> None:
    """Replace the file by another, valid one of the same kind (another entry's record)."""
    shutil.copyfile(other, path)


def garbage(path: Path, other: Path) -> None:
    path.write_bytes(os.urandom(max(len(path.read_bytes()), 64)))


def delete(path: Path, other: Path) -> None:
    path.unlink()


def record_parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    """A record's header, metadata (its JSON text) and blobs, whatever the header holds."""
    start = data.index(b'{"key":')
    text = data[start:].decode("utf-8", "surrogateescape")
    _, end = json.JSONDecoder().raw_decode(text)
    stop = start + len(text[:end].encode("utf-8", "surrogateescape"))
    return data[:start], data[start:stop], data[stop:]


def metadata_without_payload(path: Path, other: Path) -> None:
    header, metadata, _ = record_parts(path.read_bytes())
    path.write_bytes(header + metadata)


def payload_without_metadata(path: Path, other: Path) -> None:
    header, _, blobs = record_parts(path.read_bytes())
    path.write_bytes(header + blobs)


def payload_of_another_entry(path: Path, other: Path) -> None:
    header, metadata, _ = record_parts(path.read_bytes())
    path.write_bytes(header + metadata + record_parts(other.read_bytes())[2])


def flip_bit_in_summary(path: Path, other: Path) -> None:
    """One bit flipped in the summary text: the metadata stays valid JSON."""
    data = bytearray(path.read_bytes())
    data[data.index(b'"summary":"') + len(b'"summary":"')] ^= 0x01
    path.write_bytes(bytes(data))


def flip_bit_in_payload(path: Path, other: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01
    path.write_bytes(bytes(data))


if __name__ == "__main__":
    main(sys.argv[1:])
