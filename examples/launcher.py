"""A kernel launcher that accepts any array (args_viewable_as_strided_memory).

``axpy(alpha, x, y)`` computes ``y += alpha * x``.  The decorator hands the
function a ``ViewableArgument`` for ``x`` and ``y`` whatever the caller
passed (a numpy array, a torch tensor, a CuPy array, ...); the function makes
the views on the stream it launches on and checks them before launching.
Here the "kernel" runs on the host through numpy, so the example runs
anywhere: ``python examples/launcher.py``.  ``examples/gpu_torch.py``
launches a real CUDA kernel, compiled with cuda-core, the same way.

``stream_ptr`` has no default that orders nothing: host arrays need no stream
(None), and device memory viewed with None is refused as ambiguous, so a caller
with device arrays must say on which stream the kernel runs (-1 only where the
caller orders the producer's work itself).  A launch given temporaries from a
stream-ordered allocator (CuPy, torch, cuda.core, jax) also needs
``record_stream=True``: ``examples/launcher_temporaries.py``.
"""

from __future__ import annotations

import numpy as np

from stridedview import (
    StridedMemoryView,
    ViewableArgument,
    args_viewable_as_strided_memory,
)


def host_kernel(
    alpha: float, x: StridedMemoryView, y: StridedMemoryView
) -> None:
    """Stand-in for a kernel launch: a real launch's arguments, on the host."""
    kernel_args = (alpha, x.ptr, y.ptr, x.size, x.strides, y.strides)
    print("launch axpy", kernel_args)
    # view(float32) only retypes numpy's result for the type checker: no copy.
    x_host = np.from_dlpack(x).view(np.float32)
    np.from_dlpack(y).view(np.float32)[...] += alpha * x_host


@args_viewable_as_strided_memory(("x", "y"))
def axpy(
    alpha: float,
    x: ViewableArgument,
    y: ViewableArgument,
    *,
    stream_ptr: int | None = None,
) -> None:
    """``y += alpha * x`` for float32 arrays of one shape; ``y`` writable.

    Device arrays need ``stream_ptr``, the stream the kernel runs on."""
    xv = x.view(stream_ptr)
    yv = y.view(stream_ptr)
    f32 = np.dtype(np.float32)
    if xv.shape != yv.shape or xv.dtype != f32 or yv.dtype != f32:
        raise ValueError(
            f"axpy: x and y must be float32 of one shape (got {xv} and {yv})"
        )
    if yv.readonly:
        raise ValueError("axpy: y is read-only")
    if xv.is_device_accessible != yv.is_device_accessible:
        raise ValueError("axpy: x and y must both be host or device memory")
    host_kernel(alpha, xv, yv)


def main() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # A transposed (column-major) view: its strides differ from x's.
    y = np.ones((3, 2), dtype=np.float32).T
    axpy(2.0, x, y)
    axpy(1.0, x=x, y=y)  # by keyword: the same arguments are wrapped
    print(y)

    try:
        import torch
    except ImportError:
        return
    t = torch.zeros(2, 3)
    axpy(0.5, x, t)  # a torch tensor as y: written in place, no copy
    print(t)


if __name__ == "__main__":
    main()
