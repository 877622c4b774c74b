"""LLVM intrinsics for the numba kernels.

`prefetch(arr, i)` asks the CPU to start loading arr[i] into cache. The kernels walk a
trace whose keys index per-key arrays of 100+ MB at random, so nearly every access
misses the cache; issuing the load of the key 16 requests ahead overlaps those misses
instead of paying them one after another (measured 1.9x on the stack-distance kernel on
a criteo-kaggle trace).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

from replay._jit import kernel

PREFETCH_AHEAD = 16  # requests


@kernel(inline="always")
def ix(i: int) -> np.uint64:
    """An array index as unsigned, `arr[ix(i)]` for an i known to be >= 0: numba then
    leaves out its negative-index wraparound (a compare and an add on every access),
    which in the hot loops is a tenth of the work (the LRU kernel measured 13.6 -> 11.5 ns
    per lookup)."""
    return np.uint64(i)


def _prefetch(typingctx: Any, arr: Any, index: Any) -> Any:
    """Hint the CPU to fetch arr[index] into cache (no fault on a bad address)."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
        # read, high temporal locality, data cache
        args = [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3)]
        builder.call(fn, [*args, ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, index), codegen


def kernel_call(definition: Callable[..., Any]) -> Any:
    """An intrinsic as the kernels call it. numba's stubs type an `@intrinsic` as its
    definition, typing context first, and calling it from Python raises; inside a kernel
    it is called without the context. This is the type boundary: the intrinsic is `Any`
    to mypy, and its name is annotated with the call the kernels make."""
    return intrinsic(definition)


# prefetch(arr, i): inside a kernel only
prefetch: Callable[[np.ndarray, Any], None] = kernel_call(_prefetch)
