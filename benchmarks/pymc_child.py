"""A PyMC user's run, in a fresh process: ``pm.sample`` on one of the models below.

``python -m benchmarks.pymc_child SPEC``, from the repository, with SPEC a JSON object: ``model`` (a
name of :data:`MODELS`), ``sampler`` (``pymc`` or ``nutpie``), ``mode``
(``numba_cache``: the process first runs the one line a user adds,
``numba_cache.activate()``; ``NUMBA``: it never imports numba_cache, PyTensor's
built-in backend and cache), and optionally ``draws`` (tuning steps as many),
``mp_ctx`` and ``seed``. It prints one JSON line: the draws, the parent's
numba_cache counters, the times of ``pm.sample`` and of its sampling (PyMC's own
``sampling_time``), the compile phase (the rest: everything before the sampler
draws; arviz is imported beforehand, so converting the draws costs little, and
so is nutpie, whose import is timed on its own), and
the time spent in ``pytensor.function`` (rewriting and linking; the kernels load
at the first call) and in numba compiling ``numba.cfunc`` wrappers (nutpie's), and
the leapfrog steps the chains took, tuning included (their ``n_steps``): sampling
time is the cost of a step times their number, and the number follows the
trajectory, which the last bits of a gradient change. Used by tests/test_pymc.py
and benchmarks/pymc.py.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def hierarchical(groups: int, observations: int, prior_sigma: float = 1.0, edit: str | None = None):
    """Varying intercepts and a common slope, radon-style (non-centred); `prior_sigma` is
    the scale of the mean's and the slope's priors; `edit` one of :data:`EDITS`, a change of
    the model's structure as a modeller makes between two runs."""
    import pymc as pm

    rng = np.random.default_rng(0)
    group = rng.integers(0, groups, observations)
    x = rng.normal(size=observations)
    y = rng.normal(0.5 * x + rng.normal(size=groups)[group], 0.7)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, prior_sigma)
        spread = pm.HalfNormal("spread", 1)
        offset = pm.Normal("offset", 0, 1, shape=groups)
        intercept = mu + spread * offset
        if edit == "group-level predictor":
            predictor = rng.normal(size=groups)
            intercept = intercept + pm.Normal("gamma", 0, 1) * predictor
        slope = pm.Normal("slope", 0, prior_sigma)
        if edit == "varying slopes":
            slope_offset = pm.Normal("slope_offset", 0, 1, shape=groups)
            slope = (slope + pm.HalfNormal("slope_spread", 1) * slope_offset)[group]
        sigma = pm.HalfNormal("sigma", 1)
        mean = intercept[group] + slope * x
        if edit == "StudentT likelihood":
            pm.StudentT("y", nu=pm.Gamma("nu", 2, 0.1), mu=mean, sigma=sigma, observed=y)
        else:
            pm.Normal("y", mean, sigma, observed=y)
    return model


#: Changes of the hierarchical model's structure, as a modeller edits it between runs.
EDITS = ("group-level predictor", "varying slopes", "StudentT likelihood")


def gaussian_process(points: int = 40):
    """A GP marginal likelihood: a Cholesky factor and solves (LAPACK) in logp and gradient."""
    import pymc as pm

    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 10, points))[:, None]
    y = np.sin(x[:, 0]) + rng.normal(0, 0.2, points)
    with pm.Model() as model:
        lengthscale = pm.Gamma("lengthscale", 2, 1)
        amplitude = pm.HalfNormal("amplitude", 1)
        noise = pm.HalfNormal("noise", 1)
        gp = pm.gp.Marginal(cov_func=amplitude**2 * pm.gp.cov.ExpQuad(1, lengthscale))
        gp.marginal_likelihood("y", X=x, y=y, sigma=noise)
    return model


CHAINS = 2

MODELS = {
    "small": lambda: hierarchical(8, 64),
    "small, wider priors": lambda: hierarchical(8, 64, prior_sigma=2.5),
    **{f"small, {edit}": (lambda edit=edit: hierarchical(8, 64, edit=edit)) for edit in EDITS},
    "radon": lambda: hierarchical(85, 919),
    **{f"radon, {edit}": (lambda edit=edit: hierarchical(85, 919, edit=edit)) for edit in EDITS},
    "gp": gaussian_process,
}


def sample(model: str, sampler: str, draws: int = 30, mp_ctx: str | None = None,
           seed: int = 7) -> dict:
    import arviz_base  # noqa: F401 - imported on first use after sampling: not compile time
    import numba
    import pymc as pm
    import pytensor

    started = time.perf_counter()
    if sampler == "nutpie":
        import nutpie  # noqa: F401 - pm.sample imports it first: an import, not a compile
    imported = time.perf_counter() - started
    wrappers = _time_calls(numba, "cfunc", decorator=True)
    functions = _time_calls(pytensor, "function")
    with MODELS[model]():
        started = time.perf_counter()
        idata = pm.sample(draws=draws, tune=draws, chains=CHAINS, cores=CHAINS,
                          nuts_sampler=sampler, mp_ctx=mp_ctx, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False, discard_tuned_samples=False)
        seconds = time.perf_counter() - started
    # PyMC stamps it on sample_stats, or on the posterior for external samplers.
    sampling = float(idata.sample_stats.attrs.get("sampling_time")
                     or idata.posterior.attrs["sampling_time"])
    steps = leapfrog_steps(idata)
    return {
        "draws": {name: idata.posterior[name].values.tolist() for name in idata.posterior},
        "sample_seconds": seconds,
        "sampling_seconds": sampling,
        "compile_seconds": seconds - sampling,
        "cfunc_seconds": sum(wrappers),
        "import_seconds": imported,
        "function_seconds": sum(functions),
        "leapfrog_steps": steps,
        # The chains run side by side (cores=2): a chain's wall time per step.
        "step_seconds": sampling / (steps / CHAINS),
    }


def leapfrog_steps(idata) -> int:
    """The leapfrog steps of all chains, tuning and draws (the warm-up group kept)."""
    groups = [idata.sample_stats, idata.warmup_sample_stats]
    return int(sum(int(group["n_steps"].sum()) for group in groups))


def _time_calls(module, name: str, decorator: bool = False) -> list:
    """Time each call of ``module.name`` from now on (of the function it returns, if a
    `decorator`): ``pytensor.function``, and ``numba.cfunc`` compiling nutpie's wrappers."""
    original, seconds = getattr(module, name), []

    def timed(function):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds.append(time.perf_counter() - started)
        return call

    setattr(module, name, (lambda *a, **k: timed(original(*a, **k))) if decorator
            else timed(original))
    return seconds


def main(spec: dict) -> dict:
    started = time.perf_counter()
    ours = spec["mode"] == "numba_cache"
    if ours:
        import numba_cache

        numba_cache.activate()
    result = sample(spec["model"], spec["sampler"], spec.get("draws", 30), spec.get("mp_ctx"),
                    spec.get("seed", 7))
    result["process_seconds"] = time.perf_counter() - started
    result["stats"] = dict(numba_cache.session_stats()) if ours else {}
    return result


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
