"""The environment fingerprint: everything outside a graph that changes machine code.

A kernel compiled under one fingerprint is only ever loaded under the same one:
entries are stored under the fingerprint's digest, and the digest is also mixed
into every key. Components are read without compiling anything (well under a
millisecond): the CPU triple, name and features are the ones numba's own
``CPUCodegen.magic_tuple()`` is made of, read from the same sources, with the
other settings numba's codegen reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata

from numba_cache import cpu_target, settings, versions

_VERSIONED_PACKAGES = ("numba", "llvmlite", "numpy", "scipy", "pytensor")

#: PyTensor config flags that change the code numba generates for a graph.
PYTENSOR_FLAGS = ("floatX", "numba__fastmath")

#: ``numba.config`` settings that numba's pass builders and lowering read at each compile:
#: a program may set ``numba.config.BOUNDSCHECK`` (or any of these) between two compiles,
#: and numba compiles the second under the new value.
NUMBA_SETTINGS = ("OPT", "LOOP_VECTORIZE", "SLP_VECTORIZE", "LLVM_REFPRUNE_PASS",
                  "LLVM_REFPRUNE_FLAGS", "BOUNDSCHECK", "DEBUGINFO_DEFAULT")


@dataclass(frozen=True)
class Fingerprint:
    """A digest with the named components it was computed from."""

    components: dict = field(compare=False)
    digest: str

    @classmethod
    def from_components(cls, components: dict) -> Fingerprint:
        canonical = json.dumps(components, sort_keys=True, separators=(",", ":"))
        return cls(components, hashlib.sha256(canonical.encode()).hexdigest())


def _package_version(name: str) -> str:
    """The version of an imported package as it reports it, else its installed metadata.

    Reading distribution metadata costs about 2 ms a package, a tenth of a warm
    compile; all of these packages but scipy are imported before any compile.
    """
    version = getattr(sys.modules.get(name), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _cpu_components() -> dict:
    """The CPU numba's JIT codegen compiles for, read where ``CPUCodegen`` reads it when
    numba makes it, once per process.

    The CPU name and features are those of ``CPUCodegen._get_host_cpu_name`` and
    ``_get_host_cpu_features`` (its ``magic_tuple()``): ``NUMBA_CPU_NAME`` set to
    the empty string is a CPU of its own, not the host, and ``NUMBA_ENABLE_AVX``
    acts through the features. ``tests/test_cpu_targets.py`` checks them against
    ``magic_tuple()`` under each setting.
    """
    import llvmlite.binding as llvm
    from numba.core import config as numba_config
    from numba.core.codegen import get_host_cpu_features

    return {
        "cpu_triple": llvm.get_process_triple(),
        "cpu_name": (
            llvm.get_host_cpu_name() if numba_config.CPU_NAME is None else numba_config.CPU_NAME
        ),
        "cpu_features": (
            get_host_cpu_features()
            if numba_config.CPU_FEATURES is None
            else numba_config.CPU_FEATURES
        ),
        "numba_svml": str(getattr(numba_config, "USING_SVML", None)),
    }


def numba_settings() -> dict:
    """The values of :data:`NUMBA_SETTINGS` in force now."""
    from numba.core import config as numba_config

    return {name: getattr(numba_config, name) for name in NUMBA_SETTINGS}


def _numba_components() -> dict:
    settings_now = numba_settings()
    return {
        "numba_opt": str(settings_now["OPT"]),
        "numba_loop_vectorize": str(settings_now["LOOP_VECTORIZE"]),
        "numba_slp_vectorize": str(settings_now["SLP_VECTORIZE"]),
        "numba_refprune": (f"{settings_now['LLVM_REFPRUNE_PASS']}:"
                           f"{settings_now['LLVM_REFPRUNE_FLAGS']}"),
        "numba_boundscheck": str(settings_now["BOUNDSCHECK"]),
        "numba_debuginfo": str(settings_now["DEBUGINFO_DEFAULT"]),
    }


def _pytensor_flags() -> dict:
    from pytensor import config

    return {f"pytensor_{flag}": str(getattr(config, flag)) for flag in PYTENSOR_FLAGS}


@functools.cache
def _static_components() -> tuple:
    # Before numba's codegen is read: the target decides the CPU name and features.
    cpu_target.apply(settings.current().target)
    components = {
        "format_version": versions.KEY_FORMAT,
        "python": f"{sys.implementation.name}-{platform.python_version()}",
        **{name: _package_version(name) for name in _VERSIONED_PACKAGES},
        **_cpu_components(),
    }
    return tuple(sorted(components.items()))


def current_fingerprint() -> Fingerprint:
    """The fingerprint of this process, with numba's settings and PyTensor's flags in
    force now.

    Package versions and the CPU (as the ``target`` setting decides it,
    :mod:`numba_cache.cpu_target`) are read once per process: numba's codegen reads
    the CPU once too. numba's settings and PyTensor's flags are read each time:
    ``numba.config`` and ``config.change_flags`` can change them at any time.
    """
    return Fingerprint.from_components(
        dict(_static_components()) | _numba_components() | _pytensor_flags())
