"""Small graphs covering each family of ops, for correctness tests.

Each family returns ``(inputs, outputs, values, updates)``; every test compiles
it with ``NUMBA_CACHE`` and compares against PyTensor's Python-mode results.
Imported by subprocesses (cold and warm runs), so everything is deterministic.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import ifelse
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.linalg import Cholesky, Solve

RNG = np.random.default_rng(42)


def _vec(n=5, dtype="float64"):
    return RNG.normal(size=n).astype(dtype)


def fused_elemwise():
    x, y = pt.vectors("x", "y")
    out = pt.exp(x) * pt.sin(y) + pt.log1p(x**2) / (1 + y**2)
    return [x, y], [out], [_vec(), _vec()], None


def reductions():
    x = pt.matrix("x")
    return [x], [x.sum(), x.max(axis=0), pt.argmax(x, axis=1), x.prod(axis=1)], [RNG.normal(size=(3, 4))], None


def indexing():
    x = pt.matrix("x")
    idx = pt.lvector("idx")
    outputs = [x[1:, ::2], x[idx], x[idx, pt.arange(2)], x[x > 0]]
    return [x, idx], outputs, [RNG.normal(size=(4, 3)), np.array([2, 0], dtype="int64")], None


def inc_set_subtensor():
    x = pt.vector("x")
    y = pt.scalar("y")
    outputs = [pt.inc_subtensor(x[1:3], y), pt.set_subtensor(x[[0, 4]], y * 2)]
    return [x, y], outputs, [_vec(), np.float64(1.5)], None


def join_split_concat():
    x, y = pt.vectors("x", "y")
    a, b = pt.split(x, [2, 3], n_splits=2)
    outputs = [pt.concatenate([x, y * 2]), pt.stack([x, y], axis=1), a + 1, b * 2]
    return [x, y], outputs, [_vec(), _vec()], None


def reshape_dimshuffle():
    x = pt.matrix("x")
    outputs = [x.reshape((2, 6)), x.T @ x, x.dimshuffle("x", 1, 0).sum(axis=0), x.flatten()]
    return [x], outputs, [RNG.normal(size=(3, 4))], None


def dot_matmul_gemv():
    a = pt.matrix("a")
    v = pt.vector("v")
    w = pt.vector("w")
    outputs = [pt.dot(a, v), a @ a.T, 2.0 * pt.dot(a, v) + w]
    return [a, v, w], outputs, [RNG.normal(size=(3, 3)), _vec(3), _vec(3)], None


def linalg():
    a = pt.matrix("a")
    b = pt.vector("b")
    spd = a @ a.T + 3 * pt.eye(3)
    outputs = [
        pt.linalg.solve(spd, b),
        pt.linalg.cholesky(spd),
        pt.linalg.inv(spd),
        pt.linalg.det(spd),
    ]
    return [a, b], outputs, [RNG.normal(size=(3, 3)), _vec(3)], None


def scan_with_gradient():
    x0 = pt.scalar("x0")
    w = pt.scalar("w")
    sit_sot = pytensor.scan(lambda prev, w: prev * w + 1.0, outputs_info=[x0], non_sequences=[w], n_steps=5, return_updates=False)
    mit_sot = pytensor.scan(
        lambda prev2, prev1, w: prev1 * w + 0.5 * prev2,
        outputs_info=[{"initial": pt.stack([x0, x0 + 1]), "taps": [-2, -1]}],
        non_sequences=[w], n_steps=4, return_updates=False,
    )
    total = sit_sot.sum() + mit_sot.sum()
    return [x0, w], [sit_sot, mit_sot, pt.grad(total, w)], [np.float64(0.5), np.float64(0.9)], None


def random_with_updates():
    rng = pytensor.shared(np.random.default_rng(123), name="rng")
    mu = pt.scalar("mu")
    next_rng, draws = pt.random.normal(mu, 1.0, size=(4,), rng=rng).owner.outputs
    return [mu], [draws], [np.float64(2.0)], {rng: next_rng}


def if_else():
    x = pt.vector("x")
    c = pt.scalar("c")
    return [x, c], [ifelse(c > 0, x * 2, x - 1)], [_vec(), np.float64(1.0)], None


def op_from_graph():
    a, b = pt.vectors("a", "b")
    ofg = OpFromGraph([a, b], [a * b + pt.exp(a)])
    x, y = pt.vectors("x", "y")
    return [x, y], [ofg(x, y) + ofg(y, x)], [_vec(), _vec()], None


def blockwise():
    a = pt.tensor3("a")
    b = pt.matrix("b")
    spd = a @ pt.swapaxes(a, -1, -2) + 3 * pt.eye(3)
    solve = Blockwise(Solve(assume_a="gen", b_ndim=1))
    chol = Blockwise(Cholesky(lower=True))
    return [a, b], [solve(spd, b), chol(spd)], [RNG.normal(size=(2, 3, 3)), RNG.normal(size=(2, 3))], None


def dtypes():
    f32 = pt.vector("f32", dtype="float32")
    i64 = pt.vector("i64", dtype="int64")
    flag = pt.vector("flag", dtype="bool")
    outputs = [f32 * 2, i64 // 3 + i64 % 3, pt.switch(flag, f32, 0).astype("float32"), flag & (i64 > 0)]
    values = [_vec(dtype="float32"), np.arange(-2, 3, dtype="int64"), np.array([True, False, True, True, False])]
    return [f32, i64, flag], outputs, values, None


def zero_d_and_empty():
    s = pt.scalar("s")
    e = pt.vector("e")
    return [s, e], [s * 2 + 1, e.sum(), pt.exp(e)], [np.float64(3.0), np.zeros(0)], None


def inplace():
    x = pt.vector("x")
    y = pt.vector("y")
    # `x` is not needed afterwards, so the rewrites make the elemwise ops inplace.
    return [pytensor.In(x, mutable=True), y], [pt.exp(x) * y + 1], [_vec(), _vec()], None


FAMILIES = {
    function.__name__: function
    for function in (
        fused_elemwise, reductions, indexing, inc_set_subtensor, join_split_concat,
        reshape_dimshuffle, dot_matmul_gemv, linalg, scan_with_gradient, random_with_updates,
        if_else, op_from_graph, blockwise, dtypes, zero_d_and_empty, inplace,
    )
}


def evaluate(name: str, mode) -> list:
    """Compile family `name` with `mode` and evaluate it (twice if it updates an RNG)."""
    RNG.bit_generator.state = np.random.default_rng(zlib.crc32(name.encode())).bit_generator.state
    inputs, outputs, values, updates = FAMILIES[name]()
    function = pytensor.function(inputs, outputs, mode=mode, updates=updates)
    results = [np.asarray(r) for r in function(*[np.copy(v) for v in values])]
    if updates:
        results += [np.asarray(r) for r in function(*[np.copy(v) for v in values])]
    return results
