"""A ``numba-cache warm`` target file: it builds a function and never calls it."""

import pytensor
import pytensor.tensor as pt

x = pt.vector("x", dtype="float64")
uncalled = pytensor.function([x], pt.tanh(x) * x, mode="NUMBA_CACHE")
