"""A real CUDA kernel launched on PyTorch tensors, through the decorator.  Needs a CUDA GPU.

The launcher compiles ``axpy`` with cuda-core, and takes any two arrays: the
decorator makes them ``ViewableArgument`` proxies, and ``view(stream)`` asks the
producer to order its pending work before ``stream``.  Launching on PyTorch's
current stream means PyTorch's later work on ``y`` follows the kernel with no
further step.  Run: ``python examples/gpu_torch.py`` (needs torch with CUDA and
cuda-core).  On a machine without them it prints what it needs and exits with 0,
doing nothing.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from stridedview import ViewableArgument, args_viewable_as_strided_memory

AXPY = r"""
extern "C" __global__ void axpy(float alpha, const float *x, long long x_stride,
                                float *y, long long y_stride, unsigned long long n)
{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i * y_stride] += alpha * x[i * x_stride];  /* strides in elements */
    }
}
"""


NEEDS = "a CUDA GPU, torch built with CUDA and cuda-core (pip install cuda-core)"


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None:
        return "cuda-core is not installed"
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def main() -> None:
    import torch
    from cuda.core import Device, LaunchConfig, Program, launch

    device = Device()
    device.set_current()
    kernel = Program(AXPY, code_type="c++").compile("cubin").get_kernel("axpy")

    @args_viewable_as_strided_memory(("x", "y"))
    def axpy(alpha: float, x: ViewableArgument, y: ViewableArgument) -> None:
        """``y += alpha * x`` for 1-D float32 arrays of one length, on PyTorch's current stream."""
        torch_stream = torch.cuda.current_stream()  # has __cuda_stream__: a valid stream_ptr
        xv = x.view(torch_stream)
        yv = y.view(torch_stream)
        if xv.ndim != 1 or xv.shape != yv.shape:
            raise ValueError(f"axpy: x and y must be 1-D of one length (got {xv} and {yv})")
        if xv.dtype != np.float32 or yv.dtype != np.float32 or yv.readonly:
            raise ValueError("axpy: x and y must be float32, y writable")
        if not (xv.is_device_accessible and yv.is_device_accessible):
            raise ValueError("axpy: x and y must be device memory")
        n = xv.size
        launch(
            device.create_stream(torch_stream),  # cuda-core's handle on the same stream
            LaunchConfig(grid=(n + 255) // 256, block=256),
            kernel,
            np.float32(alpha),
            np.uint64(xv.ptr), np.int64(xv.strides[0]),
            np.uint64(yv.ptr), np.int64(yv.strides[0]),
            np.uint64(n),
        )

    x = torch.arange(10, dtype=torch.float32, device="cuda")
    y = torch.ones(20, dtype=torch.float32, device="cuda")[::2]  # strided: every other element
    axpy(2.0, x, y)
    print(y.tolist())  # PyTorch reads y on its stream, after the kernel


if __name__ == "__main__":
    lacking = missing()
    if lacking is not None:
        print(f"gpu_torch.py skipped: it needs {NEEDS} ({lacking})")
        sys.exit(0)
    main()
