"""The results plot: compile-time ratios to built-in NUMBA, grouped by model, one bar per mode."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from benchmarks.modes import BASELINE  # noqa: E402
from benchmarks.report import TARGET_MODEL, TARGETS, ratio  # noqa: E402

#: Panels: a title and the (figure, group label) pairs shown as bar groups.
_PANELS = (
    ("cold compile (empty cache)", "cold"),
    ("warm compile (fresh process)", "warm"),
    ("fresh process: start → first result", "process"),
)
_AFTER_BASE = (("variant", "variants"), ("new_data", "new data"), ("new_model", "new model"))


def _bars(axis, groups: list[tuple[str, str, str]], modes: list[str], samples: dict) -> None:
    """Draw one group of bars per (model, figure, label) in `groups`, one bar per mode."""
    width = 0.8 / len(modes)
    limits = {(target.model, target.figure): target.limit for target in TARGETS}
    for position, (model, figure, _) in enumerate(groups):
        for index, mode in enumerate(modes):
            value = ratio(samples, model, mode, figure)
            x = position - 0.4 + width * (index + 0.5)
            if value is None:
                axis.text(x, 1, "n/a", rotation=90, ha="center", va="bottom", fontsize=7,
                          color="grey")
                continue
            axis.bar(x, value, width, color=f"C{index}")
            axis.text(x, value, f"{value:.2f}", rotation=90, ha="center", va="bottom", fontsize=7)
        limit = limits.get((model, figure))
        if limit is not None:
            axis.hlines(limit, position - 0.45, position + 0.45, colors="black",
                        linestyles="dashed", linewidth=1)
            axis.text(position + 0.45, limit, f"target {limit:g}×",
                      ha="right", va="top", fontsize=7,
                      bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(groups)), [label for _, _, label in groups])
    axis.set_yscale("log")
    axis.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}×"))
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel(f"ratio to {BASELINE} (log)")
    axis.margins(y=0.25)


def plot(results: dict, modes: list[str], models: list[str], path) -> None:
    samples = results["samples"]
    figure, axes = plt.subplots(2, 2, figsize=(13, 9), constrained_layout=True)
    for axis, (title, key) in zip(axes.flat, _PANELS):
        _bars(axis, [(model, key, model) for model in models], modes, samples)
        axis.set_title(title)
    last = axes.flat[3]
    _bars(last, [(TARGET_MODEL, key, label) for key, label in _AFTER_BASE], modes, samples)
    last.set_title(f"{TARGET_MODEL}: compile after the base model is cached")
    handles = [Patch(color=f"C{index}", label=mode) for index, mode in enumerate(modes)]
    figure.legend(handles=handles, loc="outside lower center", ncols=len(modes))
    figure.suptitle(f"Ratios of medians to built-in {BASELINE} (dashed: the issues' targets; "
                    "lower is better)")
    figure.savefig(path, dpi=110)
    plt.close(figure)
