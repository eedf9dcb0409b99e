"""Makes a Python process see another host CPU: LLVM's answer to "which CPU is this, with
which features", as numba's code generator and numba_cache's fingerprint ask it.

Put on ``PYTHONPATH`` by tests/test_fleet.py with ``NBCACHE_TEST_HOST_CPU`` naming one of
:data:`CPUS`. Each pretends to be an older CPU than any that runs the tests (its features
are those of the real CPU it also has), so code compiled for it runs here: the process
takes the real path, keys included, of a machine of another model.
"""

import os

#: Features of each pretended CPU model, as LLVM names them.
CPUS = {
    "haswell": {"64bit", "aes", "avx", "avx2", "bmi", "bmi2", "cmov", "crc32", "cx16", "cx8",
                "f16c", "fma", "fsgsbase", "fxsr", "invpcid", "lzcnt", "mmx", "movbe", "pclmul",
                "popcnt", "rdrnd", "sahf", "sse", "sse2", "sse3", "sse4.1", "sse4.2", "ssse3",
                "xsave", "xsaveopt"},
    # Older than x86-64-v3: no AVX.
    "nehalem": {"64bit", "cmov", "crc32", "cx16", "cx8", "fxsr", "mmx", "popcnt", "sahf", "sse",
                "sse2", "sse3", "sse4.1", "sse4.2", "ssse3"},
}


def _pretend(name: str) -> None:
    import llvmlite.binding as llvm

    real = llvm.get_host_cpu_features()
    features = llvm.FeatureMap()
    for feature, enabled in real.items():
        features[feature] = enabled and feature in CPUS[name]
    llvm.get_host_cpu_name = lambda: name
    llvm.get_host_cpu_features = lambda: llvm.FeatureMap(features)


if os.environ.get("NBCACHE_TEST_HOST_CPU"):
    _pretend(os.environ["NBCACHE_TEST_HOST_CPU"])
