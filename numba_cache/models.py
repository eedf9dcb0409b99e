"""Real PyTensor models used by the demo, the tests and the benchmarks.

Written in plain PyTensor, with observed data entering the graph as constants,
as PyMC builds them. Data are synthetic (seeded) so nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor.tensor as pt

RADON_GROUPS = 85
RADON_OBSERVATIONS = 919


@dataclass
class Model:
    """Symbolic inputs and outputs of a model, and a point to evaluate it at."""

    name: str
    inputs: list
    outputs: list
    point: list


def _normal_logp(value, mu, sigma):
    return -0.5 * ((value - mu) / sigma) ** 2 - pt.log(sigma) - 0.5 * np.log(2 * np.pi)


def radon_data(seed: int = 0, groups: int = RADON_GROUPS, observations: int = RADON_OBSERVATIONS):
    """Synthetic radon-like data: group index, a floor indicator and log-radon."""
    rng = np.random.default_rng(seed)
    group = np.concatenate([np.arange(groups), rng.integers(0, groups, observations - groups)])
    floor = rng.integers(0, 2, observations).astype("float64")
    group_effect = rng.normal(1.5, 0.3, groups)
    log_radon = group_effect[group] - 0.6 * floor + rng.normal(0, 0.7, observations)
    return group.astype("int64"), floor, log_radon


def radon_model(seed: int = 0, prior_scale: float = 5.0, extra_term: bool = False) -> Model:
    """A radon-style hierarchical model: logp and its gradient w.r.t. all parameters.

    Varying intercepts per group (non-centred), a common floor slope, log-scale
    parameters for the standard deviations. Outputs: the log density and the
    concatenation of the raveled gradients, as PyMC's ``logp_dlogp`` function.
    `seed` changes the observed data, `prior_scale` a constant, `extra_term` adds
    a term: the knobs for "same model, new data" and "slight variant" graphs.
    """
    group, floor, log_radon = radon_data(seed)
    mu_a = pt.scalar("mu_a")
    log_sigma_a = pt.scalar("log_sigma_a")
    a_offset = pt.vector("a_offset", shape=(RADON_GROUPS,))
    b = pt.scalar("b")
    log_sigma_y = pt.scalar("log_sigma_y")
    parameters = [mu_a, log_sigma_a, a_offset, b, log_sigma_y]

    sigma_a, sigma_y = pt.exp(log_sigma_a), pt.exp(log_sigma_y)
    a = mu_a + sigma_a * a_offset
    mean = a[pt.as_tensor(group)] + b * pt.as_tensor(floor)
    logp = (
        _normal_logp(mu_a, 0.0, prior_scale)
        + _normal_logp(b, 0.0, prior_scale)
        + _normal_logp(a_offset, 0.0, 1.0).sum()
        + _normal_logp(sigma_a, 0.0, 1.0) + log_sigma_a  # half-normal, log-transformed
        + _normal_logp(sigma_y, 0.0, 1.0) + log_sigma_y
        + _normal_logp(pt.as_tensor(log_radon), mean, sigma_y).sum()
    )
    if extra_term:
        logp = logp - 0.01 * (b**2)
    gradient = pt.concatenate([g.ravel() for g in pt.grad(logp, parameters)])
    point = [np.float64(1.0), np.float64(-1.0), np.linspace(-1, 1, RADON_GROUPS), np.float64(-0.5), np.float64(-0.3)]
    return Model("radon", parameters, [logp, gradient], point)
