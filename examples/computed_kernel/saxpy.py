"""A kernel launcher as a GPU library writes one: ``saxpy(out, x, y, a, stream)``.

``out[i] = a * x[i] + y[i]`` over float32 vectors from any producer (CuPy, torch, JAX,
Numba, cuda.core, a CAI or DLPack object of your own), launched on ``stream`` (a ``CUstream``
handle, as an int).  The kernel is PTX, compiled by the driver where it runs.

What makes it safe, and what its tests (``test_saxpy.py``) check on the simulated device:

- each argument is viewed on ``stream``: the producer's pending writes are ordered before
  the kernel (DLPack's stream argument, or an event the stream waits on for the CAI);
- ``record_stream=True``: each argument is kept until the kernel is done with it, so an
  array dropped right after the call is not freed (and reused) under the kernel.

On the simulated device (stridedview-simgpu) the kernel computes through a host
implementation registered for its name (``test_saxpy.py``'s fixture).
"""

from __future__ import annotations

import numpy as np

from stridedview import ViewableArgument, args_viewable_as_strided_memory

PTX = b"""
.version 7.0
.target sm_75
.address_size 64

.visible .entry saxpy(
    .param .u64 saxpy_out,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y,
    .param .f32 saxpy_a,
    .param .u64 saxpy_n
)
{
    .reg .pred %p<2>;
    .reg .f32 %f<5>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [saxpy_out];
    ld.param.u64 %rd2, [saxpy_x];
    ld.param.u64 %rd3, [saxpy_y];
    ld.param.f32 %f1, [saxpy_a];
    ld.param.u64 %rd4, [saxpy_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r4, %r1, %r2, %r3;
    cvt.u64.u32 %rd5, %r4;
    setp.ge.u64 %p1, %rd5, %rd4;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd6, %rd1;
    cvta.to.global.u64 %rd7, %rd2;
    cvta.to.global.u64 %rd8, %rd3;
    shl.b64 %rd9, %rd5, 2;
    add.s64 %rd10, %rd7, %rd9;
    ld.global.f32 %f2, [%rd10];
    add.s64 %rd10, %rd8, %rd9;
    ld.global.f32 %f3, [%rd10];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    add.s64 %rd11, %rd6, %rd9;
    st.global.f32 [%rd11], %f4;
DONE:
    ret;
}
""" + b"\0"

BLOCK = 256
_functions: dict[int, object] = {}  # the kernel, per context


def _check(result):
    from cuda.bindings import driver

    status, *values = result
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"saxpy: CUDA driver call failed: {status!r}")
    return values[0] if values else None


def _kernel():
    """The saxpy kernel of the current context (loaded once per context)."""
    from cuda.bindings import driver

    context = int(_check(driver.cuCtxGetCurrent()))
    if context not in _functions:
        module = _check(driver.cuModuleLoadData(PTX))
        _functions[context] = _check(driver.cuModuleGetFunction(module, b"saxpy"))
    return _functions[context]


@args_viewable_as_strided_memory(("out", "x", "y"), record_stream=True)
def saxpy(out: ViewableArgument, x: ViewableArgument, y: ViewableArgument, a: float, stream: int) -> None:
    """``out = a * x + y`` on ``stream``; every array a contiguous float32 vector of one length."""
    from cuda.bindings import driver

    out_view, x_view, y_view = out.view(stream), x.view(stream), y.view(stream)
    for name, view in (("out", out_view), ("x", x_view), ("y", y_view)):
        if view.dtype != np.float32 or len(view.shape) != 1 or not view.is_c_contiguous:
            raise ValueError(f"saxpy: {name} must be a contiguous float32 vector, not {view}")
        if not view.is_device_accessible:
            raise ValueError(f"saxpy: {name} is not in device memory ({view})")
    n = out_view.shape[0]
    if x_view.shape[0] != n or y_view.shape[0] != n:
        raise ValueError(f"saxpy: lengths differ: out {n}, x {x_view.shape[0]}, y {y_view.shape[0]}")
    if out_view.readonly:
        raise ValueError("saxpy: out is read-only")
    if n == 0:
        return
    args = (
        np.array([out_view.ptr], np.uint64), np.array([x_view.ptr], np.uint64),
        np.array([y_view.ptr], np.uint64), np.array([a], np.float32), np.array([n], np.uint64),
    )
    pointers = np.array([arg.ctypes.data for arg in args], np.uint64)
    grid = (n + BLOCK - 1) // BLOCK
    _check(driver.cuLaunchKernel(_kernel(), grid, 1, 1, BLOCK, 1, 1, 0, stream, pointers.ctypes.data, 0))
