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
6. structural edits (radon): each edit of the model's structure in its own process,
   on the caches as the warm step left them (restored before each edit), so each
   edit is compiled after the base alone;
7. linked build (``NUMBA_CACHE``): with ``NBCACHE_LINK_BACKGROUND=1``, a process
   asks for the base model's linked build; once its helper stored it, a new
   process loads it and times calls (compared with ``NUMBA``'s warm figures).

Each process is timed by the parent from its start to its first result; the
process reports its in-process figures itself (see :mod:`.child`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.child import FIRST_RESULT, OURS
from benchmarks.modes import MODES, REPOSITORY, Mode, disk_usage
from numba_cache import settings
from numba_cache.evaluation.models import RADON_EDITS, RADON_VARIANTS
from numba_cache.kernels.helpers import linked_build as linked_build
from numba_cache.store import Store

CHILD = Path(__file__).with_name("child.py")
#: How long a linked build may take in its helper before the benchmark gives up on it.
LINKED_BUILD_TIMEOUT = 1800.0


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
        Model("ar1", "ar1_model", new_model={"seed": 1, "observations": 60}),
        Model("gp", "gp_model", new_model={"seed": 1, "points": 20}),
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
            stderr.seek(0)
            last = [line for line in stderr.read().splitlines() if line.strip()][-1:]
            raise ChildFailed(f"{spec['mode']} {spec['function']}{spec['kwargs']}: {''.join(last)}")
    report = json.loads(lines[-1])
    if not Path(report["numba_cache_package"]).is_relative_to(REPOSITORY):
        raise ChildFailed(f"the child imported the numba_cache at {report['numba_cache_package']}, "
                          f"not this checkout's ({REPOSITORY})")
    report["process_seconds"] = first_result
    return report


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

        warm = self._step("warm", {}, environment, calls=True, keys=self.mode.name == OURS)
        for figure, value in (
            ("warm", warm["compile_seconds"]), ("process", warm["process_seconds"]),
            ("compiles_warm", warm["numba_compiles"]), ("call", warm["call_us"]),
            ("call_trusted", warm["call_trusted_us"]),
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
        if self.mode.name == OURS:
            self._linked_build(environment, workdir / "store")
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

    def _linked_build(self, environment: dict, store: Path) -> None:
        linked = dict(environment, NBCACHE_LINK_BACKGROUND="1")
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
        served = self._step("linked build: served", {}, linked, calls=True)
        if served["cache_events"].get("linking:served") != 1:
            raise ChildFailed(f"{self.model.name}: the linked build was not served")
        self._add("warm_linked", served["compile_seconds"])
        self._add("call_linked", served["call_us"])
        self._add("call_trusted_linked", served["call_trusted_us"])

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
    for repeat in range(1, plan.repeat + 1):
        log(f"repeat {repeat}/{plan.repeat}")
        for model in plan.models:
            for mode in plan.modes:
                if mode.name in results.failures[model.name]:
                    continue
                workdir = Path(tempfile.mkdtemp(prefix="numba_cache_bench_"))
                try:
                    Sequence(model, mode, results, log).run(workdir)
                except ChildFailed as failure:
                    results.failures[model.name][mode.name] = str(failure)
                    log(f"{model.name:<6} {mode.name:<15} FAILED, skipped from now on: {failure}")
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
    return results
