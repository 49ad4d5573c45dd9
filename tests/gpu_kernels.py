"""Helpers of the GPU tests (tests/test_gpu_*.py): real kernels on real streams, through CuPy.

Imported only inside ``gpu`` tests, after ``conftest.gpu_import`` found CuPy.
"""

from __future__ import annotations

import numpy as np

#: About 0.1 s of spinning on current GPUs: long enough for an unordered read to race.
SPIN_CYCLES = 200_000_000

KERNELS = r"""
extern "C" __global__ void slow_fill(float* x, long long n, long long cycles, float value) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = value;
}

extern "C" __global__ void copy(const float* src, long long stride, float* dst, long long n) {
    for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i * stride];
}
"""


def _function(cp, name):
    module = cp.RawModule(code=KERNELS)
    return module.get_function(name)


def device_array(cp, ptr: int, n: int, owner):
    """A 1-d float32 CuPy array over ``n`` elements at ``ptr`` (no protocol, no ordering)."""
    memory = cp.cuda.UnownedMemory(ptr, n * 4, owner)
    return cp.ndarray((n,), cp.float32, cp.cuda.MemoryPointer(memory, 0))


def slow_fill(cp, ptr: int, n: int, value: float, stream, owner) -> None:
    """Enqueue on ``stream`` a kernel that spins SPIN_CYCLES, then writes ``value`` to ``n`` floats at ``ptr``."""
    target = device_array(cp, ptr, n, owner)
    with stream:
        _function(cp, "slow_fill")(
            (64,), (256,), (target, np.int64(n), np.int64(SPIN_CYCLES), np.float32(value))
        )


def read_on(cp, view, stream):
    """The view's float32 values, copied by a kernel on ``stream`` (a CuPy stream), as a numpy array.

    The kernel reads ``view.ptr`` with ``view.strides`` directly: no protocol is used, so
    nothing but the view itself ordered the producer's work before ``stream``.
    """
    (n,), (stride,) = view.shape, view.strides
    source = device_array(cp, view.ptr, (n - 1) * stride + 1, view)
    with stream:
        out = cp.empty(n, dtype=cp.float32)
        _function(cp, "copy")((64,), (256,), (source, np.int64(stride), out, np.int64(n)))
        return out.get(stream=stream)


class TaggedCAI:
    """A CUDA Array Interface producer over ``array``'s memory that names ``stream`` as its own."""

    def __init__(self, array, stream: int):
        self.array = array
        self.__cuda_array_interface__ = {
            **array.__cuda_array_interface__, "version": 3, "stream": stream,
        }
