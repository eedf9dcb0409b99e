"""The CPU numba compiles for: this machine's own, or a baseline a whole fleet shares.

numba compiles for the host's CPU model and features, and the fingerprint holds
them, so entries are shared only between machines of one CPU model. Under the
``target`` setting (``NBCACHE_TARGET``) every kernel of the process is compiled
for a named baseline of the machine's architecture instead (for x86-64 an LLVM
level such as ``x86-64-v3``), and the fingerprint holds that baseline in place of
the host's model and features: every machine whose CPU has the baseline's features
computes the same fingerprint and loads the same code, bit for bit.

The baseline is applied the way numba documents it, through ``NUMBA_CPU_NAME`` and
``NUMBA_CPU_FEATURES`` (set in the environment too, so numba's config reloads and
the process's helpers keep it), before numba creates its code generator. A machine
whose CPU lacks one of the baseline's features compiles for itself, under its own
fingerprint, and is told why once: code for the baseline would stop it with an
illegal instruction, so it never computes the fingerprint that would load it.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from numba_cache import logs, session
from numba_cache._compat import numba_internals

HOST = "host"
PORTABLE = "portable"


class Baseline(NamedTuple):
    """An LLVM CPU name a fleet compiles for, and the host features it needs."""

    name: str
    architecture: str  #: the first part of LLVM's process triple
    requires: frozenset[str]


_X86_64_V2 = frozenset({"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"})
_X86_64_V3 = _X86_64_V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
_X86_64_V4 = _X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

#: The baselines a process may compile for, by the name ``NBCACHE_TARGET`` takes.
BASELINES = {
    baseline.name: baseline
    for baseline in (
        Baseline("x86-64-v2", "x86_64", _X86_64_V2),
        Baseline("x86-64-v3", "x86_64", _X86_64_V3),
        Baseline("x86-64-v4", "x86_64", _X86_64_V4),
        Baseline("generic", "aarch64", frozenset({"neon"})),
    )
}
#: What ``NBCACHE_TARGET=portable`` means on each architecture (benchmarks/RESULTS.md
#: measures x86-64-v3's calls against host code).
PORTABLE_BASELINES = {"x86_64": "x86-64-v3", "aarch64": "generic"}
#: Every value of the ``target`` setting.
TARGETS = (HOST, PORTABLE, *BASELINES)


class TargetWarning(UserWarning):
    """The portable target cannot be used in this process; it compiles for its host."""


def apply(target: str) -> None:
    """Compile this process's kernels for `target` from now on, once per process: the
    first call decides (numba's code generator is made once), later ones do nothing."""
    state = session.current()
    if state.cpu_target is not None:
        return
    state.cpu_target = target
    if target == HOST:
        return
    problem = _why_not(target)
    if problem is not None:
        logs.warn(f"numba_cache: NBCACHE_TARGET={target} is not used, {problem}; kernels "
                  "are compiled for this machine's CPU and shared only with machines "
                  "of its model", TargetWarning, stacklevel=3)
        return
    baseline = _baseline(target)
    os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = baseline.name, ""
    numba_internals.set_codegen_cpu(baseline.name, "")


def _baseline(target: str) -> Baseline | None:
    if target == PORTABLE:
        name = PORTABLE_BASELINES.get(numba_internals.host_architecture())
        return None if name is None else BASELINES[name]
    return BASELINES[target]


def _why_not(target: str) -> str | None:
    """Why this process cannot compile for `target`, or None if it can."""
    baseline = _baseline(target)
    architecture = numba_internals.host_architecture()
    if baseline is None:
        return f"no portable baseline is known for the {architecture} architecture"
    if baseline.architecture != architecture:
        return f"{baseline.name} is a baseline of {baseline.architecture}, not of {architecture}"
    missing = sorted(baseline.requires - numba_internals.host_cpu_features())
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which {baseline.name} code uses"
    if numba_internals.codegen_created() and numba_internals.codegen_cpu() != (baseline.name, ""):
        # Its target machine was made for another CPU: keys naming the baseline would lie.
        return ("numba compiled code in this process before numba_cache could choose the "
                "CPU (set NBCACHE_TARGET before the first compile, or NUMBA_CPU_NAME="
                f"{baseline.name} and NUMBA_CPU_FEATURES= empty in the environment)")
    return None
