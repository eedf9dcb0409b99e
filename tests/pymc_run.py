"""A PyMC user's run, in a fresh process: a small hierarchical model sampled with ``pm.sample``.

``python tests/pymc_run.py SAMPLER MP_CTX MODE`` samples with ``nuts_sampler=SAMPLER``
(``pymc`` or ``nutpie``), 2 chains on 2 cores, workers started by ``MP_CTX``, and
prints the draws, the parent's numba_cache counters and the times (pm.sample,
and PyMC's own sampling time). With MODE ``numba_cache`` the process first runs
the one line a user adds, ``numba_cache.activate()``; with ``NUMBA`` it never
imports numba_cache: PyTensor's built-in backend and cache.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def hierarchical_model(groups: int = 8, observations: int = 64):
    import pymc as pm

    rng = np.random.default_rng(0)
    group = rng.integers(0, groups, observations)
    x = rng.normal(size=observations)
    y = rng.normal(0.5 * x + rng.normal(size=groups)[group], 0.7)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        spread = pm.HalfNormal("spread", 1)
        offset = pm.Normal("offset", 0, 1, shape=groups)
        slope = pm.Normal("slope", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu + spread * offset[group] + slope * x, sigma, observed=y)
    return model


def sample(sampler: str, mp_ctx: str, draws: int = 30) -> dict:
    import pymc as pm

    with hierarchical_model():
        started = time.perf_counter()
        idata = pm.sample(draws=draws, tune=draws, chains=2, cores=2, nuts_sampler=sampler,
                          mp_ctx=mp_ctx, random_seed=7, progressbar=False,
                          compute_convergence_checks=False)
        seconds = time.perf_counter() - started
    return {
        "draws": {name: idata.posterior[name].values.tolist() for name in idata.posterior},
        "seconds": seconds,
        # PyMC stamps it on sample_stats, or on the posterior for external samplers.
        "sampling": float(idata.sample_stats.attrs.get("sampling_time")
                          or idata.posterior.attrs["sampling_time"]),
    }


if __name__ == "__main__":
    sampler, mp_ctx, mode = sys.argv[1:4]
    if mode == "numba_cache":
        import numba_cache

        numba_cache.activate()
    result = sample(sampler, mp_ctx)
    if mode == "numba_cache":
        result["stats"] = dict(numba_cache.session_stats())
    print(json.dumps(result))
