"""PyMC 6 models of many families, as users write them, for differential tests.

Each function builds a ``pm.Model`` on seeded synthetic data; :func:`evaluate` compiles
its ``logp_dlogp_function`` in a mode and evaluates it at points of its own, as a
sampler calls it. Families (and what they bring into the graph): a non-centred
hierarchy, a Gaussian random walk (cumulative sums), an autoregression (``pm.AR``,
a scan-free convolution), an LKJ Cholesky covariance with a multivariate normal
(Cholesky factors and triangular solves: BLAS/LAPACK pointer getters), a normal
mixture with Dirichlet weights and an ordered transform (``logsumexp``), a
zero-sum normal, a censored likelihood (``log_ndtr``-style tails), a zero-inflated
Poisson through ``switch``, Gamma/Beta/Weibull/StudentT likelihoods (``gammaln``,
``betaln``), ``pm.Data`` containers, a marginal Gaussian process, an ordered
logistic, and a hand-written ``scan``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt

from benchmarks.pymc_child import gaussian_process

#: Points at which each model is evaluated: its initial point moved by these amounts.
POINT_SHIFTS = (0.0, 0.3, 0.6)


def eight_schools(rng):
    y = np.array([28.0, 8, -3, 7, -1, 1, 18, 12])
    sigma = np.array([15.0, 10, 16, 11, 9, 11, 10, 18])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfCauchy("tau", 5)
        theta = pm.Normal("theta", 0, 1, shape=8)
        pm.Normal("y", mu + tau * theta, sigma, observed=y)
    return model


def random_walk(rng):
    with pm.Model() as model:
        sigma = pm.Exponential("sigma", 1.0)
        walk = pm.GaussianRandomWalk("walk", sigma=sigma, init_dist=pm.Normal.dist(0, 1), steps=30)
        pm.Normal("obs", walk, 0.5, observed=rng.normal(size=31).cumsum())
    return model


def autoregression(rng):
    with pm.Model() as model:
        rho = pm.Normal("rho", 0, 0.5, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.AR("y", rho=rho, sigma=sigma, init_dist=pm.Normal.dist(0, 1, shape=2),
              observed=rng.normal(size=50))
    return model


def lkj_covariance(rng):
    observed = rng.normal(size=(40, 3))
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0, shape=3))
        mu = pm.Normal("mu", 0, 1, shape=3)
        pm.MvNormal("obs", mu, chol=chol, observed=observed)
    return model


def normal_mixture(rng):
    observed = np.concatenate([rng.normal(-2, 1, 50), rng.normal(3, 1, 50)])
    with pm.Model() as model:
        weights = pm.Dirichlet("weights", np.ones(2))
        mu = pm.Normal("mu", [-1, 1], 3, shape=2, transform=pm.distributions.transforms.ordered)
        sigma = pm.HalfNormal("sigma", 2, shape=2)
        pm.NormalMixture("obs", weights, mu, sigma, observed=observed)
    return model


def zero_sum(rng):
    group = rng.integers(0, 6, 80)
    with pm.Model() as model:
        effect = pm.ZeroSumNormal("effect", sigma=1.0, shape=6)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", effect[group], sigma, observed=rng.normal(size=80))
    return model


def censored(rng):
    observed = np.clip(rng.normal(1, 2, 60), -1, 3)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Censored("y", pm.Normal.dist(mu, sigma), lower=-1, upper=3, observed=observed)
    return model


def zero_inflated_switch(rng):
    x = rng.normal(size=70)
    counts = rng.poisson(2, 70)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        zero = pm.Beta("zero", 2, 2)
        rate = pm.math.exp(a + b * x)
        logp = pm.math.switch(pt.eq(counts, 0),
                              pt.log(zero + (1 - zero) * pt.exp(-rate)),
                              pt.log1p(-zero) + pm.logp(pm.Poisson.dist(rate), counts))
        pm.Potential("zero_inflated", logp.sum())
    return model


def positive_likelihoods(rng):
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 2, 1)
        beta = pm.Gamma("beta", 2, 1)
        pm.Beta("p", alpha, beta, observed=rng.beta(2, 5, 40))
        shape = pm.Exponential("shape", 1)
        pm.Weibull("w", shape + 0.5, 2.0, observed=rng.weibull(1.5, 30))
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("t", nu=nu, mu=0, sigma=1, observed=rng.standard_t(4, 30))
    return model


def data_containers(rng):
    x = rng.normal(size=50)
    with pm.Model() as model:
        x_data = pm.Data("x", x)
        y_data = pm.Data("y_observed", 2 * x + rng.normal(size=50))
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", a + b * x_data, sigma, observed=y_data, shape=x_data.shape)
    return model


def marginal_gp(rng):
    return gaussian_process(points=25)  # the pm.sample benchmarks' GP, on its own data


def ordered_logistic(rng):
    observed = rng.integers(0, 4, 60)
    x = rng.normal(size=60)
    with pm.Model() as model:
        cutpoints = pm.Normal("cutpoints", np.arange(3.0), 2, shape=3,
                              transform=pm.distributions.transforms.ordered)
        b = pm.Normal("b", 0, 1)
        pm.OrderedLogistic("y", eta=b * x, cutpoints=cutpoints, observed=observed)
    return model


def hand_written_scan(rng):
    with pm.Model() as model:
        rho = pm.Uniform("rho", -0.9, 0.9)
        start = pm.Normal("start", 0, 1)
        path = pytensor.scan(lambda previous, rho: rho * previous + 0.1, outputs_info=[start],
                             non_sequences=[rho], n_steps=20)[0]
        pm.Normal("obs", path, 0.3, observed=rng.normal(size=20))
    return model


MODELS = {function.__name__: function for function in (
    eight_schools, random_walk, autoregression, lkj_covariance, normal_mixture, zero_sum,
    censored, zero_inflated_switch, positive_likelihoods, data_containers, marginal_gp,
    ordered_logistic, hand_written_scan)}


def build(name: str) -> pm.Model:
    return MODELS[name](np.random.default_rng(7))


def evaluate(model: pm.Model, mode) -> list[list]:
    """``[logp, *gradient]`` at each of :data:`POINT_SHIFTS`, compiled in `mode` as PyMC's
    samplers compile it (``logp_dlogp_function`` on raveled inputs)."""
    function = model.logp_dlogp_function(mode=mode, ravel_inputs=True)
    function.set_extra_values({})
    initial = model.initial_point()
    start = np.concatenate([np.ravel(initial[variable.name]) for variable in model.value_vars])
    results = []
    for shift in POINT_SHIFTS:
        point = start + shift * np.sin(np.arange(start.size) + 10 * shift)
        logp, gradient = function(point)
        results.append([float(logp), *np.asarray(gradient).tolist()])
    return results
