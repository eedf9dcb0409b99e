"""New data skips rewriting only when rewriting would have answered its questions the same way.

Each case compiles a small graph over a data constant, then the same graph over
other data, in this process against the test's own store (the rewrite cache
lives in the store, so a second ``pytensor.function`` looks it up like a new
process would). Every result is compared with PyTensor's ``NUMBA`` mode, which
rewrites with the values.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import numba_cache
from numba_cache import settings
from numba_cache.store import Store

N = 40  # above HIDDEN_MIN_SIZE: passed to the kernel, described by shape in the data key


def compile_and_run(build, data, x_value, before=None):
    """Outputs of ``build(x, data)`` in our mode and in NUMBA, and what the rewrite cache did;
    ``before(x, constant)`` runs first on the same data constant, if given. A tuple of
    arrays is given as a tuple of data constants."""
    x = pt.vector("x", shape=(None,))
    constant = (tuple(map(pt.as_tensor, data)) if isinstance(data, tuple)
                else pt.as_tensor(data))
    if before is not None:
        before(x, constant)
    outputs = build(x, constant)
    numba_cache.reset_session_stats()
    ours = pytensor.function([x], outputs, mode="NUMBA_CACHE")(x_value)
    stats = numba_cache.session_stats()
    reference = pytensor.function([x], outputs, mode="NUMBA")(x_value)
    assert np.array_equal(ours, reference, equal_nan=True)
    return stats["rewrite.hit"] == 1


def gather(x, index):
    return x[index] * 2.0


X = np.linspace(0.0, 1.0, 600)
SHUFFLED = np.random.default_rng(0).permutation(200)[:N]  # fits uint8


def test_new_indices_of_the_same_kind_skip_rewriting():
    assert not compile_and_run(gather, SHUFFLED, X)
    assert compile_and_run(gather, SHUFFLED[::-1].copy(), X)


@pytest.mark.parametrize("other, why", [
    (SHUFFLED + 256, "needs uint16, the stored graph holds uint8 indices"),
    (SHUFFLED - 1, "a negative index is not downcast"),
    (np.arange(N), "an arange becomes a slice"),
])
def test_new_indices_that_rewrite_differently_are_rewritten(other, why):
    assert not compile_and_run(gather, SHUFFLED, X)
    assert not compile_and_run(gather, other, X), why


def test_an_arange_index_is_not_reused_for_other_indices():
    assert not compile_and_run(gather, np.arange(N), X)
    assert not compile_and_run(gather, SHUFFLED, X)
    assert not compile_and_run(gather, np.arange(N) + 5, X)  # another offset, another slice


def test_data_whose_elements_are_all_equal_is_not_reused_for_other_data():
    def scaled(x, data):
        return (x[:N] * data).sum()

    assert not compile_and_run(scaled, np.ones(N), X)
    assert not compile_and_run(scaled, np.linspace(1.0, 2.0, N), X)
    # The data key stays with the first data's answers; other data is found by content.
    assert compile_and_run(scaled, np.linspace(1.0, 2.0, N), X)
    assert not compile_and_run(scaled, np.linspace(3.0, 4.0, N), X)


def compile_first(build):
    """What ``before`` does in PyTensor's place: a compile of `build` over the same constant."""
    return lambda x, constant: pytensor.function([x], build(x, constant), mode="NUMBA_CACHE")


def scaled_by(x, data):
    return x[:N] * data


def accumulated(x, index):  # rewritten to an increment only when the index has no duplicates
    return pt.set_subtensor(x[index], x[index] + x[:N])


@pytest.mark.parametrize("build, first, other, before", [
    pytest.param(scaled_by, np.ones(N), np.arange(N, dtype="float64"),
                 lambda x, constant: constant.unique_value, id="unique_value read by the user"),
    pytest.param(scaled_by, np.ones(N), np.arange(N, dtype="float64"),
                 compile_first(lambda x, c: x[:N] + c * 2.0), id="unique_value of a compile"),
    pytest.param(accumulated, np.arange(N), np.full(N, 2), compile_first(
        lambda x, c: pt.set_subtensor(x[c], x[c] + 2.0 * x[:N])), id="unique_indices"),
    pytest.param(gather, np.arange(N), np.arange(N)[::-1].copy(),
                 compile_first(lambda x, c: x[c] * 3.0), id="is_arange"),
])
def test_facts_pytensor_cached_on_the_data_are_asked_again(build, first, other, before):
    """PyTensor keeps what it learned of a constant's values on the constant (its unique
    value; tags saying an index is an arange or has no duplicates) and reads it there
    later, not the values. A rewrite that took the fact from there asked the data
    nothing, and its graph was served for any data: x * ones rewritten to x for an
    arange, duplicate indices summed as unique, a reversed index taken as a slice."""
    assert not compile_and_run(build, first, X, before)
    assert not compile_and_run(build, other, X)


def test_an_unknown_attribute_on_a_data_constant_makes_the_rewrite_data_bound():
    def tagged(x, constant):
        constant.tag.is_sorted = True  # a fact of a kind numba_cache does not know

    assert not compile_and_run(scaled_by, np.linspace(1.0, 2.0, N), X, tagged)
    (reason,) = data_key_reasons()
    assert "holds tag.is_sorted" in reason


def data_key_reasons():
    return [entry.reason for entry in Store(settings.current()).entries(kind="rewrite") if entry.reason]


def test_data_folded_by_rewriting_is_folded_again_from_new_data():
    def folded(x, data):  # log(data) and its slice are folded into constants
        return x[:N - 1] + pt.log(data)[1:] * 2.0

    assert not compile_and_run(folded, np.linspace(1.0, 2.0, N), X)
    assert compile_and_run(folded, np.linspace(2.0, 3.0, N), X)


def test_a_fold_of_data_into_a_small_constant_is_data_bound():
    def mean(x, data):  # the mean is folded to a scalar frozen into the graph
        return x[:N] - data.mean()

    assert not compile_and_run(mean, np.linspace(1.0, 2.0, N), X)
    assert not compile_and_run(mean, np.linspace(2.0, 3.0, N), X)
    assert compile_and_run(mean, np.linspace(2.0, 3.0, N), X)  # by content
    (reason,) = data_key_reasons()
    assert reason.startswith("data-bound: ") and "small constant" in reason


def test_a_fold_whose_shape_depends_on_the_values_is_reused_only_for_that_shape():
    def selected(x, data):  # the nonzero positions become an index of their own length
        return x[data.nonzero()[0]] * 2.0

    def mask(zeros):
        values = np.ones(N)
        values[zeros] = 0.0
        return values

    assert not compile_and_run(selected, mask([3, 17, 29]), X)
    assert compile_and_run(selected, mask([5, 17, 30]), X)  # 37 positions again
    assert not compile_and_run(selected, mask([3, 17]), X)  # 38


def test_data_constants_merged_with_each_other_are_data_bound():
    def two(x, data):
        return x[:N] * data + x[N:2 * N] * pt.as_tensor(data.data.copy())

    data = np.linspace(1.0, 2.0, N)
    assert not compile_and_run(two, data, X)
    assert "merged" in data_key_reasons()[0]


def test_a_fold_whose_node_cannot_be_seen_makes_the_graph_data_bound(monkeypatch):
    """Fail closed: if PyTensor stops holding the folded node where numba_cache looks,
    new data is rewritten again (before, the fold was silently not followed and the
    first data's folded constant would have been served to new data)."""
    from numba_cache.rewritten import data_reads

    monkeypatch.setattr(data_reads, "folded_node", lambda frame: None)

    def folded(x, data):
        return x[:N - 1] + pt.log(data)[1:] * 2.0

    assert not compile_and_run(folded, np.linspace(1.0, 2.0, N), X)
    assert not compile_and_run(folded, np.linspace(2.0, 3.0, N), X)  # equal to NUMBA's
    (reason,) = data_key_reasons()
    assert "could not be seen" in reason


def test_pytensor_still_folds_with_its_node_in_a_local_named_node():
    """The seam folded_node reads: fails loudly if PyTensor renames it."""
    import inspect

    from pytensor.tensor.rewriting import basic

    from numba_cache._compat.pytensor_internals import CONSTANT_FOLDING

    module, _, name = CONSTANT_FOLDING.rpartition(".")
    assert module == basic.__name__
    function = getattr(basic, name)
    code = getattr(function, "__wrapped__", function)
    code = getattr(code, "transform", code)
    assert "node" in inspect.signature(code).parameters or "node" in code.__code__.co_varnames


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_constant_rewriting_makes_equal_to_the_data_keeps_its_own_values(dtype):
    """``arange`` is folded into a constant equal to the first data, and merged with
    it: its values are its own, not a slot the next data fills."""
    def plus_arange(x, data):
        return x[:N] * data + pt.arange(N, dtype=dtype)

    first = np.arange(N, dtype=dtype)
    compile_and_run(plus_arange, first, X)
    compile_and_run(plus_arange, np.random.default_rng(1).permutation(first), X)


def test_data_equal_where_the_first_was_not_is_rewritten_as_equal_data():
    """Equal data constants merge and ``f(a) - f(a)`` is rewritten to 0 (not nan for
    infinite values): a rewrite of unequal data is not reused for equal data, and is
    for other unequal data."""
    def difference(x, data):
        first, second = data
        return pt.sin(x[:N] * first) - pt.sin(x[:N] * second)

    infinite = np.where(np.arange(N) % 2, np.inf, 1.0)
    assert not compile_and_run(difference, (infinite, infinite + 1.0), X)
    assert not compile_and_run(difference, (infinite, infinite.copy()), X)
    assert compile_and_run(difference, (infinite + 2.0, infinite + 3.0), X)  # unequal again


@pytest.mark.parametrize("build", [
    lambda x, data: x[:N] * pt.log(data),
    lambda x, data: x[:N - 1] * data[1:],
], ids=["log", "slice"])
def test_folds_of_data_with_missing_values_are_folded_again_from_new_data(build):
    """A fold of data holding nan (log of a negative value, or a nan in the data) is
    that data's, refolded for the next: not the first data's values frozen."""
    first = np.linspace(-1.0, 3.0, N)
    first[N // 2] = np.nan
    assert not compile_and_run(build, first, X)
    assert compile_and_run(build, np.linspace(0.5, 3.0, N), X)


PYMC_NEGATIVE_BINOMIAL = """
import json
import numpy as np, pymc as pm, pytensor.tensor as pt
import numba_cache
rng = np.random.default_rng(5)
observed, group = rng.negative_binomial(5, 0.4, size=70).astype("int32"), rng.integers(0, 4, size=70)
with pm.Model() as model:
    mu = pm.Normal("mu", 2, 1, shape=4)
    alpha = pm.HalfNormal("alpha", 5)
    pm.NegativeBinomial("y", mu=pt.exp(mu[group]), alpha=alpha, observed=observed)
point = model.initial_point()
print(json.dumps({mode: float(model.compile_logp(mode=mode)(point)) for mode in ("NUMBA_CACHE", "NUMBA")}))
"""


def test_a_compile_under_warnings_as_errors_is_not_failed_by_a_cast_the_data_reads_try(tmp_path):
    """Rewriting this model makes a float32 constant of -inf; the data reads try it as
    integers, which numpy warns about. Test suites run with warnings as errors: the cold
    compile must give NUMBA's value there too, not raise."""
    from helpers import run_python

    from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, ulp_distance

    values = run_python(PYMC_NEGATIVE_BINOMIAL, env={
        "PYTHONWARNINGS": "error::RuntimeWarning", "NBCACHE_DIR": str(tmp_path / "store"),
        "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'compiledir'}"})
    # Within the bound against NUMBA, whose generated code differs (evaluation/compare.py).
    assert ulp_distance(values["NUMBA_CACHE"], values["NUMBA"]) <= NUMBA_ULP_BOUND
