"""A ``numba-cache warm`` target file: it builds a function and never calls it."""

import pytensor
from warm_targets import SCRIPT_EXPRESSION, build

uncalled = pytensor.function(*build(SCRIPT_EXPRESSION), mode="NUMBA_CACHE")
