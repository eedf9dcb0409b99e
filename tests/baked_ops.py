"""Ops whose numba kernels bake a BLAS function pointer, for uncacheable-kernel tests.

``BakedDot`` calls BLAS ``ddot`` (from scipy's cython_blas) through its address
frozen into the machine code as an integer, the way a careless extension would:
numba caches such a kernel without any warning, and another process would jump
to a stale address. ``CtypesDot`` calls the same routine through a ctypes
function object, which numba itself flags as a dynamic global.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
import pytensor.tensor as pt
from llvmlite import ir
from numba.core import types
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key
from scipy.linalg import cython_blas


def blas_address(name: str) -> int:
    capsule = cython_blas.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule))


DDOT_ADDRESS = blas_address("ddot")


@numba.extending.intrinsic
def _ddot_at_baked_address(typingctx, n, x, y):
    """ddot(n, x, 1, y, 1) through DDOT_ADDRESS, frozen into the IR as an integer."""

    def codegen(context, builder, signature, args):
        n_value, x_array, y_array = args
        int_ptr = ir.IntType(32).as_pointer()
        dbl_ptr = ir.DoubleType().as_pointer()
        fnty = ir.FunctionType(ir.DoubleType(), [int_ptr, dbl_ptr, int_ptr, dbl_ptr, int_ptr])
        function = builder.inttoptr(ir.Constant(ir.IntType(64), DDOT_ADDRESS), fnty.as_pointer())
        n_slot = builder.alloca(ir.IntType(32))
        builder.store(builder.trunc(n_value, ir.IntType(32)), n_slot)
        one = builder.alloca(ir.IntType(32))
        builder.store(ir.Constant(ir.IntType(32), 1), one)
        x_data = context.make_array(signature.args[1])(context, builder, x_array).data
        y_data = context.make_array(signature.args[2])(context, builder, y_array).data
        return builder.call(function, [n_slot, x_data, one, y_data, one])

    return types.float64(n, x, y), codegen


class BakedDot(Op):
    __props__ = ()

    def make_node(self, x, y):
        x, y = pt.as_tensor(x), pt.as_tensor(y)
        return Apply(self, [x, y], [pt.scalar(dtype="float64")])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(np.dot(*inputs))


@register_funcify_and_cache_key(BakedDot)
def _(op, node=None, **kwargs):
    @numba_njit
    def baked_dot(x, y):
        return np.asarray(_ddot_at_baked_address(x.shape[0], np.ascontiguousarray(x), np.ascontiguousarray(y)))

    return baked_dot, "baked-dot-v1"


DDOT_CTYPES = ctypes.CFUNCTYPE(
    ctypes.c_double,
    ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
    ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
)(DDOT_ADDRESS)


class CtypesDot(BakedDot):
    pass


@register_funcify_and_cache_key(CtypesDot)
def _(op, node=None, **kwargs):
    @numba_njit
    def ctypes_dot(x, y):
        n = np.array([x.shape[0]], dtype=np.int32)
        one = np.array([1], dtype=np.int32)
        xc, yc = np.ascontiguousarray(x), np.ascontiguousarray(y)
        return np.asarray(DDOT_CTYPES(n.ctypes, xc.ctypes, one.ctypes, yc.ctypes, one.ctypes))

    return ctypes_dot, "ctypes-dot-v1"
