"""Targets for ``numba-cache warm`` in the tests: small graphs, and one that cannot compile.

``graphs`` returns graphs to compile; ``with_broken_graph`` adds one whose op numba
cannot type. :func:`expected` gives each good graph's value at :data:`INPUT`, for
the process that compiles them again from the store.
"""

from __future__ import annotations

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_funcify

INPUT = np.array([0.5, 1.5, 2.5])

#: The good graphs, as expressions of the float64 vector ``x``.
EXPRESSIONS = {
    "exp": "pt.exp(x) * pt.maximum(x, 2.0)",  # scale2 of tests/reliability.py
    "logsum": "pt.log1p(x) + pt.sum(x)",
    "cumsum": "pt.cumsum(x ** 2)",
}
#: The graph of ``warm_script.py``, built there and never called.
SCRIPT_EXPRESSION = "pt.tanh(x) * x"


class Unlowerable(Op):
    """An op whose numba implementation calls a name numba cannot type."""

    __props__ = ()

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0]


@numba_funcify.register(Unlowerable)
def _funcify_unlowerable(op, node=None, **kwargs):
    @numba.njit
    def unlowerable(x):
        return no_such_function(x)  # noqa: F821 -- the point: numba fails to type it

    return unlowerable


def build(expression: str):
    x = pt.vector("x", dtype="float64")
    return [x], eval(expression, {"pt": pt, "x": x})


def graphs() -> dict:
    return {name: build(expression) for name, expression in EXPRESSIONS.items()}


def with_broken_graph() -> dict:
    x = pt.vector("x", dtype="float64")
    found = graphs()
    found["broken"] = ([x], Unlowerable()(pt.exp(x)) + 1.0)
    return dict(sorted(found.items()))  # the broken graph is not last: the ones after it count


def expected(expression: str) -> list[float]:
    """The value of a graph at :data:`INPUT` in PyTensor's Python mode."""
    inputs, output = build(expression)
    python_mode = Mode(linker="py", optimizer="fast_run")
    return np.asarray(pytensor.function(inputs, output, mode=python_mode)(INPUT)).tolist()
