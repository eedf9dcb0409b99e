"""Comparing results like with like: bit for bit, or by distance in units in the last place.

numba_cache's cold and warm processes run the same machine code and must agree
bit for bit. numba_cache and PyTensor's ``NUMBA`` mode run different generated
code (numba_cache's graph function calls op kernels compiled apart; ``NUMBA``'s
is one module): LLVM may vectorise or reassociate a reduction differently, so
the two agree to within a few units in the last place (ULP), not bit for bit.
"""

from __future__ import annotations

import hashlib

import numpy as np

#: The largest ULP distance accepted between numba_cache and ``NUMBA`` for one value.
#: A reassociated float64 sum of n terms may differ by up to about n * eps * sum|x_i|;
#: for the models here (about 1,000 terms, little cancellation) that is well under 2**10
#: ULP of the result. Observed: under 20. A near-cancelling sum is further apart in ULP
#: of its small result (``docs/limits.md``, "Results and bits"); this bound is not for those.
NUMBA_ULP_BOUND = 1024


def digest(values) -> str:
    """A digest of the exact bits, dtypes and shapes of `values` (arrays or scalars)."""
    hasher = hashlib.sha256()
    for value in values:
        array = np.ascontiguousarray(value)
        hasher.update(f"{array.dtype.str}{array.shape}".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()


def ulp_distance(a, b) -> int:
    """The largest distance in ULP between corresponding floats of `a` and `b`.

    Equal values (and NaNs in the same places) are 0 apart; a shape or dtype
    mismatch, or NaN against a number, is reported as an infinite distance
    (returned as ``2**63 - 1``).
    """
    infinite = np.iinfo(np.int64).max
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return infinite
    if a.dtype.kind != "f":
        return 0 if np.array_equal(a, b) else infinite
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return infinite
    a, b = a[~nan_a], b[~nan_b]
    if a.size == 0:
        return 0
    signed = np.dtype(f"i{a.dtype.itemsize}")
    # Map floats onto integers that count representable values, monotonically.
    ordered_a, ordered_b = (_ordered(values.view(signed)) for values in (a, b))
    return int(np.max(np.abs(ordered_a.astype(object) - ordered_b.astype(object))))


def _ordered(bits: np.ndarray) -> np.ndarray:
    minimum = np.iinfo(bits.dtype).min
    return np.where(bits < 0, minimum - bits, bits)


def ulp_distance_at_scale(a, b) -> int:
    """:func:`ulp_distance` of `a` and `b`, where each pair of floats counts as no further
    apart than their difference in ULP of the largest magnitude in `b`.

    For a vector whose elements are sums of terms of about that magnitude (a gradient): an
    element that nearly cancels is far apart in ULP of itself while its difference
    stays at the rounding of its terms (``docs/limits.md``, "Results and bits").
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    exact = ulp_distance(a, b)
    if exact == np.iinfo(np.int64).max or a.size == 0:
        return exact
    scale = np.spacing(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
    return max((_at_scale(x, y, scale) for x, y in zip(a.ravel(), b.ravel())
                if x != y and not np.isnan(x)), default=0)


def _at_scale(x: float, y: float, scale: float) -> int:
    in_units_of_scale = abs(x - y) / scale
    exact = ulp_distance(x, y)
    return exact if not np.isfinite(in_units_of_scale) else min(exact, int(np.ceil(in_units_of_scale)))


def max_ulp_distance(values_a, values_b) -> int:
    """:func:`ulp_distance` over pairs of results (a function's outputs)."""
    if len(values_a) != len(values_b):
        return np.iinfo(np.int64).max
    return max((ulp_distance(a, b) for a, b in zip(values_a, values_b)), default=0)
