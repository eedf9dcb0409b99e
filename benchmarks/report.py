"""RESULTS.md: the machine, the targets and goals of the issues, and one table per model.

Every cell is the median over repeats with the range (min to max), and the ratio
of medians to PyTensor's built-in ``NUMBA`` mode measured in the same run.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from benchmarks.child import OURS
from benchmarks.modes import BASELINE, DISK_LOCATIONS, MODES
from benchmarks.suite import CALL_PROCESSES, CALL_ROUNDS, MODELS


@dataclass(frozen=True)
class Figure:
    key: str
    unit: str  # "s", "us", "ms", "B" or "" (a count)
    label: str
    #: The baseline's figure it is compared with, if not its own.
    baseline: str | None = None


FIGURES = [
    Figure("nodes", "", "apply nodes after rewriting"),
    Figure("cold", "s", "cold compile: `pytensor.function` + first call, empty cache"),
    Figure("warm", "s", "warm compile, fresh process (same)"),
    Figure("process", "s", "fresh process: interpreter start → first result"),
    Figure("new_data", "s", "new data, base cached: compile (fresh process)"),
    Figure("new_data_process", "s", "new data, base cached: start → first result"),
    Figure("variant", "s", "variant compile after base cached (all variants)"),
    Figure("new_model", "s", "new model of the same ops (other sizes or terms), after all"),
    Figure("edit", "s", "structural edit, after the base alone (all edits)"),
    Figure("peak_rss_cold", "B", "peak resident memory of the cold process"),
    Figure("compile_rss_cold", "B", "resident memory the cold compile added (peak − before)"),
    Figure("helper_rss_cold", "B",
           "… added by child processes (a helper compiling ahead, a C compiler): own pages"),
    Figure("compile_rss_total_cold", "B", "… both peaks together"),
    Figure("call", "us", "per call"),
    Figure("call_trusted", "us", "per call, `trust_input=True`"),
    Figure("linked_build", "s", "linked build: its build in the helper, after the process asking"),
    Figure("warm_linked", "s", "linked build: warm compile, its build stored (vs warm)", "warm"),
    Figure("call_linked", "us", "linked build: per call (vs per call)", "call"),
    Figure("call_trusted_linked", "us", "linked build: per call, `trust_input=True` (vs same)",
           "call_trusted"),
    Figure("rewrite_key", "ms", "pre-rewrite key (`rewrite_key`)"),
    Figure("graph_key", "ms", "graph kernel key (`graph_kernel_key`)"),
    Figure("compiles_cold", "", "numba compiles, cold"),
    Figure("compiles_warm", "", "numba compiles, warm"),
    Figure("compiles_new_data", "", "numba compiles, new data"),
    Figure("compiles_variant", "", "numba compiles, per variant"),
    Figure("compiles_new_model", "", "numba compiles, new model"),
    Figure("compiles_edit", "", "numba compiles, per structural edit"),
    Figure("disk_base_bytes", "B", "disk after the base model"),
    Figure("disk_bytes", "B", "disk after base + new data + variants"),
    Figure("disk_files", "", "files after base + new data + variants"),
]
FIGURE = {figure.key: figure for figure in FIGURES}


@dataclass(frozen=True)
class Target:
    label: str
    figure: str
    limit: float
    model: str = "radon"


#: The issues' targets: ratios to built-in NUMBA, on radon unless named.
TARGETS = [
    Target("warm compile", "warm", 0.25),
    Target("fresh process start → first result", "process", 0.6),
    Target("variant compile after base cached", "variant", 0.5),
    Target("cold compile", "cold", 1.10),
    Target("per call, default", "call", 1.05),
    Target("per call, `trust_input=True`", "call_trusted", 1.05),
    Target("disk bytes, base + the six radon variants", "disk_bytes", 1.0),
    Target("same model, new data (fresh process, base cached)", "new_data", 0.1),
    Target("a new model whose ops are all in the store", "new_model", 0.4),
    Target("a new model whose ops are all in the store", "new_model", 0.4, "large"),
    Target("a structural edit of the model, base cached", "edit", 0.4),
    Target("cold compile", "cold", 0.6, "large"),
    Target("cold compile", "cold", 0.8, "gp"),
    Target("peak resident memory added by the cold compile (with its helper's)",
           "compile_rss_total_cold", 0.5, "large"),
    Target("per call, default", "call", 1.10, "large"),
    Target("per call, linked build", "call_linked", 1.02),
    Target("per call, linked build", "call_linked", 1.02, "large"),
]
TARGET_MODEL = "radon"

#: A peer every model's goal row also compares with: PyTensor's default C backend.
PEER = "CVM"


@dataclass(frozen=True)
class Goal:
    label: str
    figure: str
    limit: float
    below_peer: bool = False  # the goal also asks for a ratio below the peer's


#: The edit-and-rerun loop's goals, for every model that measures the figure.
GOALS = [
    Goal("a new model whose ops are all in the store", "new_model", 0.25, below_peer=True),
    Goal("a structural edit of the model, base cached", "edit", 0.4, below_peer=True),
    Goal("warm compile", "warm", 0.10),
    Goal("fresh process start → first result", "process", 0.5),
    Goal("cold compile", "cold", 0.8),
]


def median(samples: dict, model: str, mode: str, figure: str):
    values = samples.get(model, {}).get(mode, {}).get(figure)
    return statistics.median(values) if values else None


def ratio(samples: dict, model: str, mode: str, figure: str):
    value = median(samples, model, mode, figure)
    baseline = median(samples, model, BASELINE, baseline_figure(figure))
    if value is None or not baseline:
        return None
    return value / baseline


def baseline_figure(figure: str) -> str:
    """The baseline's figure `figure` is compared with."""
    known = FIGURE.get(figure)
    return figure if known is None or known.baseline is None else known.baseline


def format_value(value, unit: str) -> str:
    if unit == "B":
        for size, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if value >= size:
                return f"{value / size:.1f} {name}"
        return f"{value:.0f} B"
    if unit == "":
        return f"{value:g}"
    unit_text = {"us": "µs"}.get(unit, unit)
    # three significant digits, trailing zeros kept (1.00 s, not 1 s)
    number = f"{value:.0f}" if value >= 100 else f"{value:#.3g}".rstrip(".")
    return f"{number} {unit_text}"


def cell(samples: dict, model: str, mode: str, figure: Figure) -> str:
    values = samples.get(model, {}).get(mode, {}).get(figure.key)
    if not values:
        return "—"
    text = format_value(statistics.median(values), figure.unit)
    if len(values) > 1 and min(values) != max(values):
        low, high = (format_value(value, figure.unit) for value in (min(values), max(values)))
        text += f" ({low}–{high})"
    value_ratio = ratio(samples, model, mode, figure.key)
    if value_ratio is not None and mode != BASELINE:
        text += f" **{value_ratio:.2f}×**"
    return text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def targets_section(samples: dict) -> list[str]:
    rows = []
    for target in TARGETS:
        ours = median(samples, target.model, OURS, target.figure)
        baseline = median(samples, target.model, BASELINE, baseline_figure(target.figure))
        value_ratio = ratio(samples, target.model, OURS, target.figure)
        unit = FIGURE[target.figure].unit
        if value_ratio is None:
            verdict = "not measured"
        else:
            verdict = "met" if value_ratio <= target.limit else "**not met**"
        rows.append([
            f"{target.label} ({target.model})",
            f"≤ {target.limit:g}×",
            "—" if ours is None else format_value(ours, unit),
            "—" if baseline is None else format_value(baseline, unit),
            "—" if value_ratio is None else f"{value_ratio:.2f}×",
            verdict,
        ])
    return [
        "## Targets",
        "",
        f"{OURS} against built-in {BASELINE}, medians over repeats.",
        "",
        *_table(["target", "limit", OURS, BASELINE, "ratio", "verdict"], rows),
    ]


def goals_section(samples: dict, models: list[str]) -> list[str]:
    """One row per goal of :data:`GOALS` and model measuring it, with the peer's ratio."""
    rows = []
    for goal in GOALS:
        for model in models:
            value_ratio = ratio(samples, model, OURS, goal.figure)
            if value_ratio is None:
                continue
            peer_ratio = ratio(samples, model, PEER, goal.figure)
            met = value_ratio <= goal.limit and (
                not goal.below_peer or peer_ratio is None or value_ratio < peer_ratio)
            limit = f"≤ {goal.limit:g}×" + (f", below {PEER}" if goal.below_peer else "")
            rows.append([
                f"{goal.label} ({model})", limit,
                format_value(median(samples, model, OURS, goal.figure), FIGURE[goal.figure].unit),
                f"{value_ratio:.2f}×",
                "—" if peer_ratio is None else f"{peer_ratio:.2f}×",
                "met" if met else "**not met**",
            ])
    return [
        "## Goals of the edit-and-rerun loop, per model",
        "",
        f"Ratios of medians to built-in {BASELINE}; {PEER}'s ratio beside ours where it "
        f"compiles the model.",
        "",
        *_table(["goal", "limit", OURS, f"{OURS} ratio", f"{PEER} ratio", "verdict"], rows),
    ]


def max_relative_difference(outputs: list, reference: list) -> float:
    return max(
        float(np.max(np.abs(np.subtract(a, b)) / np.maximum(np.abs(b), 1e-300)))
        for a, b in zip(outputs, reference, strict=True)
    )


def model_section(results, model: str, modes: list[str]) -> list[str]:
    samples = results["samples"]
    measured = {mode for mode in modes if samples.get(model, {}).get(mode)}
    rows = [
        [figure.label] + [cell(samples, model, mode, figure) for mode in modes]
        for figure in FIGURES
        if any(samples.get(model, {}).get(mode, {}).get(figure.key) for mode in measured)
    ]
    reference = results["outputs"].get(model, {}).get(BASELINE)
    if reference is not None:
        rows.append([f"results: max. relative difference to {BASELINE}"] + [
            "reference" if mode == BASELINE
            else f"{max_relative_difference(results['outputs'][model][mode], reference):.1e}"
            if mode in results["outputs"][model] else "—"
            for mode in modes
        ])
    lines = [f"## {model}", "", *_table(["figure"] + modes, rows), *_events(results, model)]
    failures = results["failures"].get(model, {})
    for mode, message in failures.items():
        lines += ["", f"- {mode} failed (skipped from then on): `{message}`"]
    return lines


def _events(results, model: str) -> list[str]:
    """numba_cache's lookups in each step of the first repeat, as counted by the process."""
    steps = results["events"].get(model, {})
    if not steps:
        return []
    lines = ["", f"{OURS} lookups per process (first repeat; `numba_cache.session_stats()`):", ""]
    for step, events in steps.items():
        counted = ", ".join(f"{name} {count}" for name, count in sorted(events.items()))
        lines.append(f"- {step}: {counted or 'none'}")
    return lines


def each_graph_section(results, model: str, modes: list[str], figure: str, names,
                       title: str) -> list[str]:
    """A table of `figure` for each of `names` (variants, edits) of `model`, under `title`."""
    samples = results["samples"]
    figures = [Figure(f"{figure}[{name}]", "s", name) for name in names if any(
        samples.get(model, {}).get(mode, {}).get(f"{figure}[{name}]") for mode in modes)]
    if not figures:
        return []
    rows = [[f"`{each.label}`"] + [cell(samples, model, mode, each) for mode in modes]
            for each in figures]
    return [f"### {model}: {title}", "", *_table([figure] + modes, rows)]


def disk_section(results, model: str, modes: list[str]) -> list[str]:
    samples = results["samples"]
    figures = [Figure(f"disk_bytes[{location}]", "B", location) for location in DISK_LOCATIONS]
    rows = [[f"`{figure.label}`: {DISK_LOCATIONS[figure.label]}"]
            + [cell(samples, model, mode, figure) for mode in modes] for figure in figures]
    return [
        f"### {model}: disk after base + new data + variants, by location",
        "",
        *_table(["location"] + modes, rows),
    ]


def machine_section(machine: dict) -> list[str]:
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items())
    return [
        "## Machine",
        "",
        f"- CPU: {machine['cpu']} (LLVM host CPU `{machine['llvm_cpu']}`), "
        f"{machine['nproc']} cores available (nproc)",
        f"- {versions}",
        f"- C compiler (C, CVM): {machine['cxx']}",
        f"- numba_cache source: {machine['source']}; code digest "
        f"`{machine['code_digest']}` at the start, " + (
            "unchanged at the end" if machine["code_digest_end"] == machine["code_digest"]
            else f"**`{machine['code_digest_end']}` at the end: the code changed during the run**"
        ) + "; its bytecode written before the run, as a wheel install does",
        f"- load average (1 min) {machine['load_average']:.2f} at the start, "
        f"{machine['load_average_end']:.2f} at the end; the run took "
        f"{machine['duration'] / 60:.1f} min",
    ]


def render(results: dict, modes: list[str], models: list[str], machine: dict, command: str,
           date: str, plot_name: str) -> str:
    """The text of RESULTS.md for a run of `models` in `modes`."""
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{command}` on {date} ({results['repeat']} repeat(s)); "
        "do not edit, run the command again.",
        "",
        *machine_section(machine),
        "",
        *targets_section(results["samples"]),
        "",
        *goals_section(results["samples"], models),
        "",
        f"![ratios to built-in NUMBA]({plot_name})",
        "",
        *models_section(models),
        "",
        *_how_to_read(modes),
    ]
    for model in models:
        lines += ["", *model_section(results, model, modes)]
        if MODELS[model].variants:
            lines += ["", *each_graph_section(
                results, model, modes, "variant", MODELS[model].variants,
                "compile of each variant, after the base, the new data and the variants above it")]
            lines += ["", *disk_section(results, model, modes)]
        if MODELS[model].edits:
            lines += ["", *each_graph_section(
                results, model, modes, "edit", MODELS[model].edits,
                "compile of each structural edit, after the base alone")]
    return "\n".join(lines) + "\n"


def models_section(models: list[str]) -> list[str]:
    """Each model's name, from the first line of its function's docstring."""
    from numba_cache.evaluation import models as definitions

    lines = ["## Models", ""]
    for name in models:
        model = MODELS[name]
        summary = getattr(definitions, model.function).__doc__.splitlines()[0]
        lines.append(f"- **{name}** (`{model.function}`): {summary}")
    return lines


def _call_processes() -> str:
    counts = [f"{count} of {mode}" for mode, count in CALL_PROCESSES.items()]
    return ", ".join([*counts, "one of each other mode", f"as many served {OURS}'s linked build"])


def _how_to_read(modes: list[str]) -> list[str]:
    return [
        "## How to read the tables",
        "",
        "Each cell: median over repeats (min–max) and, in bold, the ratio of medians to "
        f"built-in {BASELINE} in this run. Each repeat, model and mode starts from empty caches "
        "in a work directory of its own; every compile happens in a fresh process.",
        "",
        *(f"- **{mode}**: {MODES[mode].description}" for mode in modes),
        "",
        "- *compile* is `pytensor.function` plus the first call, timed inside the process; "
        "imports (numba_cache's included) are outside it, and numba is imported before it in "
        "every numba mode. *start → first result* is timed by the parent, from starting "
        "the process to reading its first-result line: interpreter start, imports, model "
        "construction and compile.",
        "- *warm*: a second process on the cache the cold one filled. *New data*: the same model "
        "with other observed data (`seed=1`), after base. *Variants*: each in its own process "
        "after the base, the new data and the variants before it. *New model*: another graph "
        "of the same ops (the model on a dataset of other sizes; for `large`, other terms), "
        "after all of those. *Structural edits*: each a change of the model's structure, in "
        "its own process on the caches as the warm process left them: for radon another "
        "prior family, an added term, a group-level predictor, varying slopes; for AR(1) "
        "another prior family, Student-t innovations and a linear trend (both inside the "
        "scan); for the GP a Matérn 3/2 kernel, an added periodic kernel and a linear mean. "
        "The large model has none: its new model is already another draw of its terms.",
        "- *memory*: `VmHWM` of the cold process (its peak resident set, interpreter and "
        "imports included), and that peak less `VmRSS` just before `pytensor.function`: "
        "what the compile added.",
        "- *per call*: timed side by side once every mode has run the steps: warm processes "
        f"of every mode ({_call_processes()}) stay alive, and the parent asks each in turn for "
        "one `timeit` loop (auto-ranged, ≥ 0.2 s), with `trust_input` off, then on; "
        f"{CALL_ROUNDS} rounds, each starting one process further along. A process's best "
        "loop is one sample. This machine's speed drifts over minutes: the ratios compare "
        "loops timed in the same minutes; two processes of one mode still differ "
        "by a tenth and more (radon: up to a third), hence several processes.",
        f"- *keys* ({OURS} only): timed in the warm process, after its compile: the pre-rewrite "
        "key of the graph as `pytensor.function` prepares it for rewriting, the graph kernel key "
        "of the rewritten graph. A warm hit computes the first and loads the second.",
        "- *disk*: apparent sizes of the regular files in the work directory's "
        "`store` (NBCACHE_DIR), `compiledir` (PyTensor's base_compiledir, every mode) "
        "and `tmp` (TMPDIR: files left behind by the processes).",
        "- *numba compiles*: dispatcher compilations reported by numba's event API "
        "(`numba_cache.evaluation.compile_events`), nested ones included.",
    ]
