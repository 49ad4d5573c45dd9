"""CuPy and PyTorch trading arrays through a view, both ways.  Needs a CUDA GPU.

Each view is made on the stream its consumer will use, so that the producer
orders its pending work before that stream; the consumer then takes the view
through DLPack (``from_dlpack``) or the CUDA Array Interface (``cupy.asarray``).
Run: ``python examples/gpu_cupy.py`` (needs CuPy and torch with CUDA).  On a
machine without them it prints what it needs and exits with 0, doing nothing.
"""

from __future__ import annotations

import importlib.util
import sys

from stridedview import StridedMemoryView

NEEDS = "a CUDA GPU, CuPy (pip install cupy-cuda12x) and torch built with CUDA"


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    for module in ("cupy", "torch"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def main() -> None:
    import cupy
    import torch

    # CuPy -> PyTorch.  torch.from_dlpack(view) passes PyTorch's current stream to
    # the view, which makes it wait for the stream the view was made on.
    a = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    cupy_stream = cupy.cuda.get_current_stream().ptr  # an int handle
    view = StridedMemoryView(a, stream_ptr=cupy_stream)
    t = torch.from_dlpack(view)
    print("torch:", t.tolist(), "same memory:", t.data_ptr() == a.data.ptr)

    # PyTorch -> CuPy, once through the CUDA Array Interface and once through DLPack.
    u = torch.arange(4, dtype=torch.float64, device="cuda")
    u_view = StridedMemoryView(u, stream_ptr=cupy_stream)
    b = cupy.asarray(u_view)  # reads u_view.__cuda_array_interface__ (its 'stream' included)
    c = cupy.from_dlpack(u_view)
    print("cupy:", b.tolist(), c.tolist())


if __name__ == "__main__":
    lacking = missing()
    if lacking is not None:
        print(f"gpu_cupy.py skipped: it needs {NEEDS} ({lacking})")
        sys.exit(0)
    main()
