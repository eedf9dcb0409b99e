"""What the benchmark measures, in which order, and the fresh processes that measure it.

For each repeat, model and mode, in a new work directory (empty caches, see
:mod:`.modes`), one process after another:

1. cold: compile and call the model, the cache empty;
2. warm: the same in a new process, the cache filled by the cold one; it also
   times calls and (``NUMBA_CACHE``) key computation; the disk is measured after it;
3. new data (radon): the same model with other observed data, base cached;
4. variants (radon): each slightly different graph in its own process, after
   the base and the variants before it; the disk is measured after the last;
5. new model: another graph made of the same ops (the model on a dataset of
   other sizes, or another draw of the large model's terms), after all the above;
6. structural edits (radon, AR(1), GP): each edit of the model's structure in its own process,
   on the caches as the warm step left them (restored before each edit), so each
   edit is compiled after the base alone;
7. linked build (``NUMBA_CACHE``): with ``NBCACHE_LINK_BACKGROUND=1``, a process
   asks for the base model's linked build; once its helper stored it, a new
   process loads it.

Each process is timed by the parent from its start to its first result; the
process reports its in-process figures itself (see :mod:`.child`).

Then, once every mode has run those steps, the model's calls are timed side by
side: more warm processes of every mode (:data:`CALL_PROCESSES`; for
``NUMBA_CACHE``, as many served the linked build) stay alive, and the parent asks
each in turn for one timed loop, in rounds whose order rotates, keeping each
process's best. This machine's speed drifts over minutes; timed in the same
minutes, the modes' per-call ratios are not that drift.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.child import CALL_FIGURES, FIRST_RESULT, OURS
from benchmarks.modes import BASELINE, MODES, REPOSITORY, Mode, disk_usage
from numba_cache import settings
from numba_cache.evaluation.models import AR1_EDITS, GP_EDITS, RADON_EDITS, RADON_VARIANTS
from numba_cache.kernels.helpers import linked_build as linked_build
from numba_cache.store import Store

CHILD = Path(__file__).with_name("child.py")
#: How long a linked build may take in its helper before the benchmark gives up on it.
LINKED_BUILD_TIMEOUT = 1800.0
#: Rounds of the side-by-side call timing; each times one loop (>= 0.2 s) per process and figure.
CALL_ROUNDS = 7
#: Warm processes timing calls, per mode: two processes of one mode, timed side by side,
#: differ by a tenth and more (radon: up to a third; why is not known), so each is one
#: sample; the per-call targets compare numba_cache with NUMBA, other modes get one.
CALL_PROCESSES = {OURS: 3, BASELINE: 3}


@dataclass(frozen=True)
class Model:
    """A model of :mod:`numba_cache.evaluation.models` and the graphs compiled after it is cached."""

    name: str
    function: str
    variants: dict = field(default_factory=dict)  # variant name -> keyword arguments
    new_data: dict | None = None  # keyword arguments giving the same graph other data
    new_model: dict | None = None  # keyword arguments giving another graph of the same ops
    edits: tuple = ()  # values of the function's ``edit`` argument: structural edits


MODELS = {
    model.name: model
    for model in (
        Model("radon", "radon_model", variants=RADON_VARIANTS, new_data={"seed": 1},
              new_model={"seed": 2, "groups": 50, "observations": 600}, edits=RADON_EDITS),
        Model("ar1", "ar1_model", new_model={"seed": 1, "observations": 60}, edits=AR1_EDITS),
        Model("gp", "gp_model", new_model={"seed": 1, "points": 20}, edits=GP_EDITS),
        Model("large", "large_model", new_model={"seed": 1}),
    )
}


@dataclass(frozen=True)
class Plan:
    models: list[Model]
    modes: list[Mode]
    repeat: int


def full_plan(repeat: int) -> Plan:
    return Plan(list(MODELS.values()), list(MODES.values()), repeat)


def smoke_plan() -> Plan:
    """Radon with one variant and one edit, ours and the built-in NUMBA mode, once: a check
    that it all runs."""
    radon = MODELS["radon"]
    first_variant = dict(list(radon.variants.items())[:1])
    radon = Model(radon.name, radon.function, first_variant, radon.new_data, radon.new_model,
                  radon.edits[:1])
    return Plan([radon], [MODES[OURS], MODES["NUMBA"]], 1)


class ChildFailed(RuntimeError):
    """A benchmark process exited with an error; the message ends with its stderr's last line."""


def run_child(spec: dict, environment: dict) -> dict:
    """Run one benchmark process; add `process_seconds`, its start to its first result."""
    with tempfile.TemporaryFile("w+") as stderr:  # a file: a full pipe would block the child
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(spec)],
            env=environment, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
        first_result, lines = None, []
        for line in process.stdout:
            if first_result is None and line.strip() == FIRST_RESULT:
                first_result = time.perf_counter() - started
            else:
                lines.append(line)
        process.wait()
        if process.returncode != 0:
            raise _failed(spec, stderr)
    report = _checked_report(lines[-1])
    report["process_seconds"] = first_result
    return report


def _failed(spec: dict, stderr) -> ChildFailed:
    stderr.seek(0)
    last = [line for line in stderr.read().splitlines() if line.strip()][-1:]
    return ChildFailed(f"{spec['mode']} {spec['function']}{spec['kwargs']}: {''.join(last)}")


def _checked_report(line: str) -> dict:
    report = json.loads(line)
    if not Path(report["numba_cache_package"]).is_relative_to(REPOSITORY):
        raise ChildFailed(f"the child imported the numba_cache at {report['numba_cache_package']}, "
                          f"not this checkout's ({REPOSITORY})")
    return report


class CallServer(contextlib.AbstractContextManager):
    """A warm benchmark process kept alive to time calls on request (``serve_calls``)."""

    def __init__(self, spec: dict, environment: dict):
        self._spec = dict(spec, serve_calls=True)
        self._stderr = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(self._spec)],
            env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            text=True,
        )
        lines = iter(self._process.stdout.readline, "")
        if FIRST_RESULT not in (line.strip() for line in lines):
            raise self._failure()
        report = next((line for line in lines if line.startswith("{")), None)
        if report is None:
            raise self._failure()
        self.report = _checked_report(report)

    def time(self, figure: str) -> float:
        """Microseconds per call of one timed loop, `figure` one of :data:`CALL_FIGURES`."""
        try:
            self._process.stdin.write(f"{figure}\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise self._failure() from None
        answer = self._process.stdout.readline()
        if not answer:
            raise self._failure()
        return float(answer)

    def _failure(self) -> ChildFailed:
        """What the process said before it ended (called once its stdout is at its end)."""
        self._process.wait()
        failure = _failed(self._spec, self._stderr)
        self._stderr.close()
        return failure

    def __exit__(self, *exc_info) -> None:
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.close()
        self._process.wait()
        self._stderr.close()


def time_calls_side_by_side(servers: dict, rounds: int = CALL_ROUNDS) -> dict:
    """Each of `servers`' best microseconds per call, by figure, in interleaved rounds.

    Each round asks every server for one loop of each figure, starting one server
    further along than the round before, so that no mode is always timed first.
    """
    labels = list(servers)
    best = {label: dict.fromkeys(CALL_FIGURES, math.inf) for label in labels}
    for round_number in range(rounds):
        start = round_number % len(labels)
        for label in labels[start:] + labels[:start]:
            for figure in CALL_FIGURES:
                best[label][figure] = min(best[label][figure], servers[label].time(figure))
    return best


def _figures_by_mode() -> defaultdict:
    return defaultdict(lambda: defaultdict(list))


@dataclass
class Results:
    """Every sample, by model, mode and figure; JSON-serializable as is."""

    samples: dict = field(default_factory=lambda: defaultdict(_figures_by_mode))
    outputs: dict = field(default_factory=lambda: defaultdict(dict))  # first warm run's outputs
    failures: dict = field(default_factory=lambda: defaultdict(dict))
    #: numba_cache's lookups (hits, misses, uncacheable kernels) per step, first repeat only
    events: dict = field(default_factory=lambda: defaultdict(dict))

    def add(self, model: str, mode: str, figure: str, value) -> None:
        if value is not None:
            self.samples[model][mode][figure].append(value)


class Sequence:
    """One model in one mode, in one work directory: the steps of the module docstring."""

    def __init__(self, model: Model, mode: Mode, results: Results, log):
        self.model, self.mode, self.results, self.log = model, mode, results, log
        #: The warm processes timing calls once the steps ran: figure suffix -> their
        #: environment and the cache events each must count.
        self.call_servers: dict[str, tuple[dict, dict]] = {}

    def run(self, workdir: Path) -> None:
        environment = self.mode.environment(workdir)
        cold = self._step("cold", {}, environment)
        self._add("cold", cold["compile_seconds"])
        self._add("compiles_cold", cold["numba_compiles"])
        self._add("peak_rss_cold", cold["peak_rss_bytes"])
        self._add("compile_rss_cold", cold["compile_rss_bytes"])
        self._add("helper_rss_cold", cold["helper_rss_bytes"])
        if None not in (cold["compile_rss_bytes"], cold["helper_rss_bytes"]):
            self._add("compile_rss_total_cold",
                      cold["compile_rss_bytes"] + cold["helper_rss_bytes"])
        self._add("nodes", cold["nodes"])

        warm = self._step("warm", {}, environment, keys=self.mode.name == OURS)
        for figure, value in (
            ("warm", warm["compile_seconds"]), ("process", warm["process_seconds"]),
            ("compiles_warm", warm["numba_compiles"]),
            ("rewrite_key", warm.get("rewrite_key_ms")), ("graph_key", warm.get("graph_key_ms")),
        ):
            self._add(figure, value)
        if self.mode.name == OURS and not warm["rewrite_key_stored"]:
            raise ChildFailed(f"{self.model.name}: the timed pre-rewrite key is not in the store")
        self.results.outputs[self.model.name].setdefault(self.mode.name, warm["outputs"])
        self._add_disk("disk_base", workdir)
        base = workdir.with_name(f"{workdir.name}-base")
        if self.model.edits:
            shutil.copytree(workdir, base, symlinks=True)

        if self.model.new_data is not None:
            new_data = self._step("new data", self.model.new_data, environment)
            self._add("new_data", new_data["compile_seconds"])
            self._add("new_data_process", new_data["process_seconds"])
            self._add("compiles_new_data", new_data["numba_compiles"])
        for name, kwargs in self.model.variants.items():
            variant = self._step(f"variant {name}", kwargs, environment)
            self._add("variant", variant["compile_seconds"])
            self._add(f"variant[{name}]", variant["compile_seconds"])
            self._add("compiles_variant", variant["numba_compiles"])
        if self.model.variants or self.model.new_data is not None:
            self._add_disk("disk", workdir)
        if self.model.new_model is not None:
            new_model = self._step("new model", self.model.new_model, environment)
            self._add("new_model", new_model["compile_seconds"])
            self._add("compiles_new_model", new_model["numba_compiles"])
        for name in self.model.edits:
            # Caches hold paths into the work directory: restored in place, not copied elsewhere.
            shutil.rmtree(workdir)
            shutil.copytree(base, workdir, symlinks=True)
            edited = self._step(f"edit {name}", {"edit": name}, environment)
            self._add("edit", edited["compile_seconds"])
            self._add(f"edit[{name}]", edited["compile_seconds"])
            self._add("compiles_edit", edited["numba_compiles"])
        if self.model.edits:
            shutil.rmtree(base)
        self.call_servers = {"": (environment, {})}
        if self.mode.name == OURS:
            linked = dict(environment, NBCACHE_LINK_BACKGROUND="1")
            self._linked_build(linked, workdir / "store")
            # Only the process that opts in is served the linked build.
            self.call_servers = {"": (environment, {"linking:served": None}),
                                 "_linked": (linked, {"linking:served": 1})}

    def _linked_build(self, linked: dict, store: Path) -> None:
        asked = self._step("linked build: asks for the build", {}, linked)
        if asked["cache_events"].get("linking:requested") != 1:
            raise ChildFailed(f"{self.model.name}: no linked build was asked for")
        started = time.perf_counter()
        store = Store(settings.override(settings.current(), root=str(store)))
        linked_build.wait_for_builds(store, stale_after=LINKED_BUILD_TIMEOUT)
        if store.linking_claims():
            raise ChildFailed(f"{self.model.name}: the linked build failed or is still "
                              f"running: {store.linking_claims()}")
        self._add("linked_build", time.perf_counter() - started)
        served = self._step("linked build: served", {}, linked)
        if served["cache_events"].get("linking:served") != 1:
            raise ChildFailed(f"{self.model.name}: the linked build was not served")
        self._add("warm_linked", served["compile_seconds"])

    def start_call_server(self, suffix: str, stack: contextlib.ExitStack) -> CallServer:
        """A warm process of this sequence's model and mode serving call timings: the
        plain one (`suffix` "") or, for ``NUMBA_CACHE``, the one served the linked build."""
        environment, expected_events = self.call_servers[suffix]
        spec = {"function": self.model.function, "kwargs": {}, "mode": self.mode.pytensor_mode}
        server = stack.enter_context(CallServer(spec, environment))
        events = server.report.get("cache_events", {})
        for event, count in expected_events.items():
            if events.get(event) != count:
                raise ChildFailed(f"{self.model.name}: the process timing calls{suffix} counted "
                                  f"{event} {events.get(event)}, not {count}")
        return server

    def _step(self, step: str, kwargs: dict, environment: dict, **measure) -> dict:
        spec = {"function": self.model.function, "kwargs": kwargs, "mode": self.mode.pytensor_mode}
        report = run_child(spec | measure, environment)
        if "cache_events" in report:
            self.results.events[self.model.name].setdefault(step, report["cache_events"])
        if self.mode.name != OURS and report["numba_cache_imported"]:
            raise ChildFailed(f"{self.mode.name} imported numba_cache: timings would include it")
        self.log(f"{self.model.name:<6} {self.mode.name:<15} {step:<36} "
                 f"compile {report['compile_seconds']:7.2f} s  "
                 f"process {report['process_seconds']:7.2f} s")
        return report

    def _add(self, figure: str, value) -> None:
        self.results.add(self.model.name, self.mode.name, figure, value)

    def _add_disk(self, stage: str, workdir: Path) -> None:
        usage = disk_usage(workdir)
        self._add(f"{stage}_bytes", sum(location["bytes"] for location in usage.values()))
        self._add(f"{stage}_files", sum(location["files"] for location in usage.values()))
        for location, figures in usage.items():
            self._add(f"{stage}_bytes[{location}]", figures["bytes"])


def run_plan(plan: Plan, log) -> Results:
    """Run every repeat of `plan`; a failing model and mode is recorded and skipped."""
    results = Results()

    def failed(model: Model, mode: Mode, failure: ChildFailed) -> None:
        results.failures[model.name][mode.name] = str(failure)
        log(f"{model.name:<6} {mode.name:<15} FAILED, skipped from now on: {failure}")

    for repeat in range(1, plan.repeat + 1):
        log(f"repeat {repeat}/{plan.repeat}")
        for model in plan.models:
            workdirs, sequences = [], []
            try:
                for mode in plan.modes:
                    if mode.name in results.failures[model.name]:
                        continue
                    workdirs.append(Path(tempfile.mkdtemp(prefix="numba_cache_bench_")))
                    sequence = Sequence(model, mode, results, log)
                    try:
                        sequence.run(workdirs[-1])
                        sequences.append(sequence)
                    except ChildFailed as failure:
                        failed(model, mode, failure)
                _time_calls(sequences, results, log, failed)
            finally:
                for workdir in workdirs:
                    shutil.rmtree(workdir, ignore_errors=True)
    return results


def _time_calls(sequences: list[Sequence], results: Results, log, failed) -> None:
    """Time the calls of every mode that ran the model, side by side (the module docstring)."""
    if not sequences:
        return
    model = sequences[0].model
    with contextlib.ExitStack() as stack:
        servers = {}
        for sequence in sequences:
            try:
                for suffix in sequence.call_servers:
                    for process in range(CALL_PROCESSES.get(sequence.mode.name, 1)):
                        servers[sequence.mode.name, suffix, process] = (
                            sequence.start_call_server(suffix, stack))
            except ChildFailed as failure:
                failed(model, sequence.mode, failure)
                servers = {key: server for key, server in servers.items()
                           if key[0] != sequence.mode.name}
        log(f"{model.name:<6} calls of {len(servers)} warm processes, side by side, "
            f"{CALL_ROUNDS} rounds")
        try:
            best = time_calls_side_by_side(servers)
        except ChildFailed as failure:
            log(f"{model.name:<6} FAILED timing calls, none recorded: {failure}")
            return
    for (mode, suffix, _), figures in best.items():
        for figure, microseconds in figures.items():
            results.add(model.name, mode, f"{figure}{suffix}", microseconds)
