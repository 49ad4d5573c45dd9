"""Numba (CUDA Array Interface only) and JAX (DLPack only) bridged by a view.  Needs a CUDA GPU.

Numba -> JAX: the Numba array's interface names the stream it was filled on.
``stream_ptr=-1`` orders nothing yet and remembers that stream as the view's
``ready_stream``; when JAX takes the view through DLPack it passes its own
stream, and the view makes that stream wait for the Numba stream, on the device.

JAX -> Numba: the view is made on the legacy default stream (handle 1), which
Numba launches on by default; JAX orders its pending work before it, and Numba
reads the view's ``__cuda_array_interface__``.

Run: ``python examples/gpu_numba_jax.py`` (needs numba-cuda and jax with CUDA).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from numba import cuda

from stridedview import StridedMemoryView

CU_STREAM_LEGACY = 1  # the legacy default stream's handle


def main() -> None:
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
    main()
