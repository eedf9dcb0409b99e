"""A nutpie user's process: compile a small PyMC model with nutpie, call its callbacks, sample.

``python tests/nutpie_child.py SPEC``, SPEC a JSON object: ``model`` (``hidden``: a
hierarchical model whose observed data are hidden constants of the kernels;
``data``: a model with ``pm.Data`` shared variables), ``mode`` (``numba_cache``:
the process calls ``numba_cache.activate()`` first; ``NUMBA``: it never imports
numba_cache), and optionally ``scale`` (multiplies the model's data). It prints
one JSON line: the logp, gradient and expansion at a fixed point as the hex of
their float64 bytes, the draws of a short ``nutpie.sample`` with a fixed seed,
numba_cache's session counters, and the seconds spent compiling ``numba.cfunc``
wrappers. Used by tests/test_nutpie.py.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

import numpy as np


def model(name: str, scale: float):
    import pymc as pm

    rng = np.random.default_rng(0)
    if name == "hidden":
        groups, observations = 6, 48  # observed arrays of 48 elements are hidden constants
        group = rng.integers(0, groups, observations)
        x = scale * rng.normal(size=observations)
        y = rng.normal(0.5 * x + rng.normal(size=groups)[group], 0.7)
        with pm.Model() as built:
            mu = pm.Normal("mu", 0, 1)
            spread = pm.HalfNormal("spread", 1)
            offset = pm.Normal("offset", 0, 1, shape=groups)
            sigma = pm.HalfNormal("sigma", 1)
            pm.Normal("y", mu + spread * offset[group] + 0.5 * x, sigma, observed=y)
        return built
    with pm.Model() as built:
        x = pm.Data("x", scale * rng.normal(size=40))
        shift = pm.Data("shift", rng.normal(size=(2, 3)))
        slope = pm.Normal("slope", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", slope * x + shift.sum(), sigma, observed=rng.normal(size=40))
    return built


def call_callbacks(compiled) -> dict:
    """The logp callback's status, logp and gradient, and the expansion, at a fixed point."""
    def pointer(array):
        return array.ctypes.data_as(ctypes.POINTER(ctypes.c_double))

    point = np.linspace(-0.5, 0.5, compiled.n_dim)
    gradient, logp = np.zeros(compiled.n_dim), np.zeros(())
    status = compiled.compiled_logp_func.ctypes(
        compiled.n_dim, pointer(point), pointer(gradient), pointer(logp),
        compiled.user_data.ctypes.data)
    expanded = np.zeros(compiled.n_expanded)
    expand_status = compiled.compiled_expand_func.ctypes(
        compiled.n_dim, compiled.n_expanded, pointer(point), pointer(expanded),
        compiled.user_data.ctypes.data)
    return {"status": [int(status), int(expand_status)], "logp": logp.tobytes().hex(),
            "gradient": gradient.tobytes().hex(), "expanded": expanded.tobytes().hex()}


def main(spec: dict) -> dict:
    ours = spec["mode"] == "numba_cache"
    if ours:
        import numba_cache

        numba_cache.activate()
    import numba
    import nutpie

    compile_seconds = []
    original_cfunc = numba.cfunc

    def timed_cfunc(*args, **kwargs):
        decorate = original_cfunc(*args, **kwargs)

        def timed(function):
            started = time.perf_counter()
            try:
                return decorate(function)
            finally:
                compile_seconds.append(time.perf_counter() - started)
        return timed

    numba.cfunc = timed_cfunc
    compiled = nutpie.compile_pymc_model(model(spec["model"], spec.get("scale", 1.0)),
                                         backend="numba")
    numba.cfunc = original_cfunc
    result = call_callbacks(compiled)
    trace = nutpie.sample(compiled, draws=20, tune=20, chains=1, seed=5, progress_bar=False)
    result["draws"] = {name: trace.posterior[name].values.tobytes().hex()
                       for name in trace.posterior}
    result["cfunc_seconds"] = compile_seconds
    result["stats"] = dict(numba_cache.session_stats()) if ours else {}
    return result


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
