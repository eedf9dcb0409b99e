"""The like-with-like comparisons the differential tests state their bounds in."""

from __future__ import annotations

import numpy as np

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, ulp_distance, ulp_distance_at_scale

INFINITE = np.iinfo(np.int64).max


def test_ulp_distance_counts_representable_values_across_zero():
    assert ulp_distance(1.0, np.nextafter(1.0, 2.0)) == 1
    assert ulp_distance(np.array([-0.0]), np.array([0.0])) == 0
    assert ulp_distance(-5e-324, 5e-324) == 2
    assert ulp_distance(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == INFINITE


def test_a_near_cancelling_element_is_measured_at_the_scale_of_its_vector():
    builtin = np.array([3.0, 0.0, -1.5])
    ours = np.array([3.0, -1.6653345369377348e-17, -1.5])  # 0 from terms of about 1
    assert ulp_distance(ours, builtin) > 2**60
    assert ulp_distance_at_scale(ours, builtin) == 1


def test_at_scale_never_reports_more_than_the_ulp_distance_and_keeps_real_differences():
    builtin = np.array([100.0, 2.0, 1e-3])
    assert ulp_distance_at_scale(builtin, builtin) == 0
    slightly = builtin.copy()
    slightly[2] = np.nextafter(1e-3, 1.0)
    assert ulp_distance_at_scale(slightly, builtin) == 1
    wrong = builtin.copy()
    wrong[1] = 2.0 + 1e-9  # a wrong gradient element: outside the bound at any scale
    assert ulp_distance_at_scale(wrong, builtin) > NUMBA_ULP_BOUND
    rng = np.random.default_rng(0)
    for _ in range(100):
        a = rng.normal(size=5) * 10.0 ** rng.integers(-5, 5, 5)
        b = a * (1 + rng.normal(size=5) * 1e-14)
        assert ulp_distance_at_scale(a, b) <= ulp_distance(a, b)
    assert ulp_distance_at_scale(np.array([1.0, np.inf]), np.array([1.0, 5.0])) > 2**50
    assert ulp_distance_at_scale(np.array([np.nan]), np.array([1.0])) == INFINITE
