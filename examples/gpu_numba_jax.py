"""Numba (CUDA Array Interface only) and JAX (DLPack only) bridged by a view.  Needs a CUDA GPU.

Numba -> JAX: the Numba array's interface names the stream it was filled on.
``stream_ptr=-1`` orders nothing yet and remembers that stream as the view's
``ready_stream``; when JAX takes the view through DLPack it passes its own
stream, and the view makes that stream wait for the Numba stream, on the device.

JAX -> Numba: the view is made on the legacy default stream (handle 1), which
Numba launches on by default; JAX orders its pending work before it, and Numba
reads the view's ``__cuda_array_interface__``.

Run: ``python examples/gpu_numba_jax.py`` (needs numba-cuda and jax with CUDA).  On
a machine without them it prints what it needs and exits with 0, doing nothing.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from stridedview import StridedMemoryView

NEEDS = "a CUDA GPU, numba-cuda (pip install numba-cuda) and jax with CUDA (jax[cuda12])"

CU_STREAM_LEGACY = 1  # the legacy default stream's handle


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    for module in ("numba", "jax"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if importlib.util.find_spec("numba.cuda") is None:
        return "numba-cuda is not installed"
    from numba import cuda

    if not cuda.is_available():
        return "numba sees no CUDA GPU"
    import jax

    try:
        jax.devices("gpu")
    except RuntimeError:
        return "jax has no GPU backend (install jax[cuda12])"
    return None


def main() -> None:
    import jax
    import jax.numpy as jnp
    from numba import cuda

    # Numba -> JAX
    numba_stream = cuda.stream()
    d = cuda.to_device(np.arange(6, dtype=np.float32), stream=numba_stream)
    view = StridedMemoryView(d, stream_ptr=-1)
    print("view of the Numba array:", view, "ready on", view.ready_stream)
    x = jnp.from_dlpack(view)  # zero-copy; JAX's stream waits for numba_stream
    print("jax:", x.tolist())

    # JAX -> Numba
    y = jax.device_put(jnp.linspace(0.0, 1.0, 5), jax.devices("gpu")[0])
    y_view = StridedMemoryView(y, stream_ptr=CU_STREAM_LEGACY)
    e = cuda.as_cuda_array(y_view)  # a Numba device array over JAX's memory
    print("numba:", e.copy_to_host().tolist())
    # JAX hands out legacy capsules, which cannot flag read-only memory: the view
    # takes them as read-only (JAX arrays are immutable), so readonly is True.


if __name__ == "__main__":
    lacking = missing()
    if lacking is not None:
        print(f"gpu_numba_jax.py skipped: it needs {NEEDS} ({lacking})")
        sys.exit(0)
    main()
