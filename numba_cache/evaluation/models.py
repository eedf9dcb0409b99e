"""Real PyTensor models used by the demo, the tests and the benchmarks.

Written in plain PyTensor, with observed data entering the graph as constants,
as PyMC builds them. Data are synthetic (seeded) so nothing is downloaded. Every
model's outputs are its log density and the concatenation of its raveled
gradients, as PyMC's ``logp_dlogp`` function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt

RADON_GROUPS = 85
RADON_OBSERVATIONS = 919


@dataclass
class Model:
    """Symbolic inputs and outputs of a model, and a point to evaluate it at.

    `point` holds one array per input, of the input's dtype and shape, so a
    function compiled with ``trust_input=True`` can be called with it.
    """

    name: str
    inputs: list
    outputs: list
    point: list


def _normal_logp(value, mu, sigma):
    return -0.5 * ((value - mu) / sigma) ** 2 - pt.log(sigma) - 0.5 * np.log(2 * np.pi)


def _student_t_logp(value, mu, sigma, nu: float = 4.0):
    constant = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * np.log(nu * np.pi)
    return constant - pt.log(sigma) - (nu + 1) / 2 * pt.log1p(((value - mu) / sigma) ** 2 / nu)


def _check_edit(model: str, edit: str | None, edits: tuple) -> None:
    if edit not in (None, *edits):
        raise ValueError(f"unknown {model} edit {edit!r}; one of {sorted(edits)}")


def _logp_dlogp(name: str, parameters: list, logp, point: list) -> Model:
    gradient = pt.concatenate([g.ravel() for g in pt.grad(logp, parameters)])
    return Model(name, parameters, [logp, gradient], [np.asarray(value) for value in point])


def radon_data(seed: int = 0, groups: int = RADON_GROUPS, observations: int = RADON_OBSERVATIONS):
    """Synthetic radon-like data: group index, a floor indicator and log-radon."""
    rng = np.random.default_rng(seed)
    group = np.concatenate([np.arange(groups), rng.integers(0, groups, observations - groups)])
    floor = rng.integers(0, 2, observations).astype("float64")
    group_effect = rng.normal(1.5, 0.3, groups)
    log_radon = group_effect[group] - 0.6 * floor + rng.normal(0, 0.7, observations)
    return group.astype("int64"), floor, log_radon


def radon_model(seed: int = 0, prior_scale: float = 5.0, extra_term: bool = False,
                groups: int = RADON_GROUPS, observations: int = RADON_OBSERVATIONS,
                edit: str | None = None) -> Model:
    """A radon-style hierarchical model: logp and its gradient w.r.t. all parameters.

    Varying intercepts per group (non-centred), a common floor slope, log-scale
    parameters for the standard deviations. Outputs: the log density and the
    concatenation of the raveled gradients, as PyMC's ``logp_dlogp`` function.
    `seed` changes the observed data, `prior_scale` a constant, `extra_term` adds
    a term: the knobs for "same model, new data" and "slight variant" graphs.
    `groups` and `observations` give a dataset of other sizes: another graph, of the
    same ops. `edit` names a change of the model's structure (:data:`RADON_EDITS`),
    as a modeller makes between runs: new fused kernels.
    """
    _check_edit("radon", edit, RADON_EDITS)
    group, floor, log_radon = radon_data(seed, groups, observations)
    mu_a = pt.scalar("mu_a")
    log_sigma_a = pt.scalar("log_sigma_a")
    a_offset = pt.vector("a_offset", shape=(groups,))
    b = pt.scalar("b")
    log_sigma_y = pt.scalar("log_sigma_y")
    parameters = [mu_a, log_sigma_a, a_offset, b, log_sigma_y]
    point = [
        np.asarray(1.0), np.asarray(-1.0), np.linspace(-1, 1, groups), np.asarray(-0.5),
        np.asarray(-0.3),
    ]

    sigma_a, sigma_y = pt.exp(log_sigma_a), pt.exp(log_sigma_y)
    a = mu_a + sigma_a * a_offset
    slope = b
    terms = []
    if edit == "group-level predictor":
        uranium = pt.as_tensor(np.random.default_rng(seed + 1).normal(0.0, 0.5, groups))
        gamma = pt.scalar("gamma")
        parameters.append(gamma)
        point.append(np.asarray(0.2))
        a = a + gamma * uranium
        terms.append(_normal_logp(gamma, 0.0, prior_scale))
    if edit == "varying slopes":
        b_offset = pt.vector("b_offset", shape=(groups,))
        log_sigma_b = pt.scalar("log_sigma_b")
        parameters += [b_offset, log_sigma_b]
        point += [np.linspace(0.5, -0.5, groups), np.asarray(-1.5)]
        sigma_b = pt.exp(log_sigma_b)
        slope = (b + sigma_b * b_offset)[pt.as_tensor(group)]
        terms += [_normal_logp(b_offset, 0.0, 1.0).sum(),
                  _normal_logp(sigma_b, 0.0, 1.0) + log_sigma_b]
    mean = a[pt.as_tensor(group)] + slope * pt.as_tensor(floor)
    if edit == "Laplace prior":
        slope_prior = -pt.abs(b) / prior_scale - np.log(2 * prior_scale)
    else:
        slope_prior = _normal_logp(b, 0.0, prior_scale)
    logp = (
        _normal_logp(mu_a, 0.0, prior_scale)
        + slope_prior
        + _normal_logp(a_offset, 0.0, 1.0).sum()
        + _normal_logp(sigma_a, 0.0, 1.0) + log_sigma_a  # half-normal, log-transformed
        + _normal_logp(sigma_y, 0.0, 1.0) + log_sigma_y
        + _normal_logp(pt.as_tensor(log_radon), mean, sigma_y).sum()
    )
    for term in terms:
        logp = logp + term
    if edit == "sum-to-zero penalty":
        logp = logp - 0.5 * (a_offset.sum() / (0.01 * groups)) ** 2
    if extra_term:
        logp = logp - 0.01 * (b**2)
    gradient = pt.concatenate([g.ravel() for g in pt.grad(logp, parameters)])
    return Model("radon", parameters, [logp, gradient], point)


#: Changes of the radon model's structure, as a modeller edits a model between runs:
#: another prior family, an added term, a new predictor, varying slopes.
RADON_EDITS = ("Laplace prior", "sum-to-zero penalty", "group-level predictor", "varying slopes")


#: Slight variants of the radon model, to compile once the base model is cached.
RADON_VARIANTS = {
    "prior_scale=2.5": {"prior_scale": 2.5},
    "prior_scale=10": {"prior_scale": 10.0},
    "extra_term": {"extra_term": True},
    "prior_scale=2.5, extra_term": {"prior_scale": 2.5, "extra_term": True},
    "prior_scale=10, extra_term": {"prior_scale": 10.0, "extra_term": True},
}

AR1_OBSERVATIONS = 100


def ar1_model(seed: int = 0, observations: int = AR1_OBSERVATIONS, edit: str | None = None) -> Model:
    """An AR(1) time series whose log-likelihood is accumulated by a ``scan``.

    The scan carries the running log-likelihood from step to step, so the loop
    is a genuine recurrence; its gradient is a scan too.
    Parameters: the mean, the log innovation scale, and the unconstrained
    autocorrelation (``tanh`` keeps it in (-1, 1)). `edit` names a change of the
    model's structure (:data:`AR1_EDITS`): new fused kernels, inside the scan for two.
    """
    _check_edit("AR(1)", edit, AR1_EDITS)
    rng = np.random.default_rng(seed)
    series = np.empty(observations)
    series[0] = rng.normal(0.5, 1.0)
    for t in range(1, observations):
        series[t] = 0.5 + 0.7 * (series[t - 1] - 0.5) + rng.normal(0, 0.4)

    mu = pt.scalar("mu")
    log_sigma = pt.scalar("log_sigma")
    phi_raw = pt.scalar("phi_raw")
    parameters = [mu, log_sigma, phi_raw]
    point = [0.3, -1.0, 0.5]
    sigma, phi = pt.exp(log_sigma), pt.tanh(phi_raw)
    innovation_logp = _student_t_logp if edit == "Student-t innovations" else _normal_logp
    observed = pt.as_tensor(series)
    sequences = [observed[1:], observed[:-1]]
    trend = [pt.scalar("slope")] if edit == "linear trend" else []
    parameters += trend
    point += [0.01] * len(trend)
    if trend:
        sequences.append(pt.as_tensor(np.arange(1.0, observations)))

    def step(value, previous, total, mu, phi, sigma):
        return total + innovation_logp(value, mu + phi * (previous - mu), sigma)

    def trend_step(value, previous, time, total, mu, phi, sigma, slope):
        level, previous_level = mu + slope * time, mu + slope * (time - 1.0)
        return total + _normal_logp(value, level + phi * (previous - previous_level), sigma)

    totals = pytensor.scan(
        trend_step if trend else step,
        sequences=sequences,
        outputs_info=[pt.as_tensor(np.float64(0.0))],  # a Python 0.0 would be float32
        non_sequences=[mu, phi, sigma, *trend],
        return_updates=False,
    )
    if edit == "Laplace prior":
        phi_prior = -pt.abs(phi_raw) - np.log(2.0)
    else:
        phi_prior = _normal_logp(phi_raw, 0.0, 1.0)
    logp = (
        totals[-1]
        + _normal_logp(mu, 0.0, 5.0)
        + _normal_logp(sigma, 0.0, 1.0) + log_sigma  # half-normal, log-transformed
        + phi_prior
    )
    for slope in trend:
        logp = logp + _normal_logp(slope, 0.0, 0.1)
    return _logp_dlogp("ar1", parameters, logp, point)


#: Changes of the AR(1) model's structure: another prior family, another likelihood
#: family (inside the scan), a new predictor (inside the scan).
AR1_EDITS = ("Laplace prior", "Student-t innovations", "linear trend")


GP_POINTS = 30


def gp_model(seed: int = 0, points: int = GP_POINTS, edit: str | None = None) -> Model:
    """A Gaussian process marginal likelihood: a multivariate normal through a Cholesky factor.

    Covariance: an exponentiated-quadratic kernel (amplitude, lengthscale) plus
    observation noise, on `points` one-dimensional inputs. The log density is
    computed as a sampler would: ``cholesky``, one triangular solve, and the log
    of the factor's diagonal. `edit` names a change of the model's structure
    (:data:`GP_EDITS`): another kernel family, an added kernel, a mean function.
    """
    _check_edit("GP", edit, GP_EDITS)
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, points))
    y = np.sin(x) + rng.normal(0, 0.2, points)

    log_amplitude = pt.scalar("log_amplitude")
    log_lengthscale = pt.scalar("log_lengthscale")
    log_noise = pt.scalar("log_noise")
    parameters = [log_amplitude, log_lengthscale, log_noise]
    point = [0.0, 0.0, -1.5]
    amplitude, lengthscale, noise = (pt.exp(p) for p in (log_amplitude, log_lengthscale, log_noise))

    distance = np.abs(x[:, None] - x[None, :])
    if edit == "Matern 3/2 kernel":
        scaled = np.sqrt(3.0) * pt.as_tensor(distance) / lengthscale
        kernel = (1.0 + scaled) * pt.exp(-scaled)
    else:
        kernel = pt.exp(-0.5 * pt.as_tensor(distance**2) / lengthscale**2)
    covariance = amplitude**2 * kernel + (noise**2 + 1e-6) * pt.eye(points)
    if edit == "periodic term":
        log_period_amplitude = pt.scalar("log_period_amplitude")
        parameters.append(log_period_amplitude)
        point.append(-1.0)
        period_phase = pt.as_tensor(np.sin(np.pi * distance / 6.0) ** 2)
        covariance = covariance + pt.exp(2 * log_period_amplitude) * pt.exp(
            -2.0 * period_phase / lengthscale**2)
    residual = pt.as_tensor(y)
    if edit == "linear mean":
        intercept, slope = pt.scalar("intercept"), pt.scalar("slope")
        parameters += [intercept, slope]
        point += [0.1, -0.05]
        residual = residual - (intercept + slope * pt.as_tensor(x))
    factor = pt.linalg.cholesky(covariance, lower=True)
    whitened = pt.linalg.solve_triangular(factor, residual, lower=True)
    logp = (
        -0.5 * pt.sum(whitened**2)
        - pt.sum(pt.log(pt.diagonal(factor)))
        - 0.5 * points * np.log(2 * np.pi)
        + _normal_logp(log_amplitude, 0.0, 1.0)
        + _normal_logp(log_lengthscale, 0.0, 1.0)
        + _normal_logp(log_noise, -1.0, 1.0)
    )
    for extra in parameters[3:]:
        logp = logp + _normal_logp(extra, 0.0, 1.0)
    return _logp_dlogp("gp", parameters, logp, point)


#: Changes of the GP model's structure: another kernel family, an added kernel, a mean
#: function with parameters of its own.
GP_EDITS = ("Matern 3/2 kernel", "periodic term", "linear mean")


LARGE_TERMS = 85
LARGE_PARAMETERS = 64
_LARGE_NONLINEARITIES = (pt.exp, pt.tanh, pt.sin, pt.log1p)


def large_model(seed: int = 0, terms: int = LARGE_TERMS) -> Model:
    """A large graph: a sum of many small terms, about 1,000 nodes once rewritten.

    Term k takes a slice of the parameter vector (random offset, width 4 to 8),
    applies one of four nonlinearities, multiplies by its own constant matrix,
    and reduces the result with ``tanh``-sum or square-sum. Terms differ in
    shapes, constants and ops, so rewriting cannot merge them, while the number
    of distinct op kernels stays small: the size is in the graph, as in a big
    model, not in many kinds of kernel.
    """
    rng = np.random.default_rng(seed)
    theta = pt.vector("theta", shape=(LARGE_PARAMETERS,))
    logp = pt.as_tensor(np.float64(0.0))
    for k in range(terms):
        width = int(rng.integers(4, 9))
        start = int(rng.integers(0, LARGE_PARAMETERS - width + 1))
        piece = theta[start : start + width]
        nonlinearity = _LARGE_NONLINEARITIES[k % len(_LARGE_NONLINEARITIES)]
        # log1p needs an argument above -1
        hidden = nonlinearity(piece**2 if nonlinearity is pt.log1p else piece)
        projected = pt.dot(hidden, rng.normal(size=(width, 3)) * (k + 1) / terms)
        logp = logp + (pt.tanh(projected).sum() if k % 2 else -(projected**2).sum())
    return _logp_dlogp("large", [theta], logp, [np.linspace(-1, 1, LARGE_PARAMETERS)])
