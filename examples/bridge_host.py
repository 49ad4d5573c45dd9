"""Hand one array between libraries through a view, on the host.

A view is itself a DLPack producer, so any DLPack consumer can take it, and the
consumer's array shares the original memory.  Runs anywhere:
``python examples/bridge_host.py`` (torch and jax are used when installed).
The same calls bridge device arrays; gpu_numba_jax.py shows the CUDA Array
Interface side, which needs a GPU.
"""

from __future__ import annotations

import gc
import importlib.util
from typing import cast

import numpy as np

from stridedview import StridedMemoryView
from stridedview.typing import SupportsDLPack


def numpy_and_torch() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = StridedMemoryView(a)
    del a  # the view keeps the array alive: its memory stays valid
    gc.collect()

    b = np.from_dlpack(view)  # numpy consumes a capsule of the view
    b[0, 0] = 42.0
    print("numpy:", b.tolist())
    if importlib.util.find_spec("torch") is None:
        return
    import torch

    t = torch.from_dlpack(view)  # the same memory, now a torch tensor
    print("torch sees the write:", t[0, 0].item())
    again = np.from_dlpack(StridedMemoryView(t))  # and back to numpy
    print("round trip shares memory:", np.shares_memory(again, b))


def jax_arrays() -> None:
    if importlib.util.find_spec("jax") is None:
        return
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    # jax.Array's type stub omits __dlpack_device__ (the method exists at run
    # time), so a type checker needs telling that it is a DLPack producer.
    view = StridedMemoryView(cast(SupportsDLPack, x))
    # jax hands out legacy capsules, which cannot say "read-only": the view
    # takes them as read-only (jax arrays are immutable), so readonly is True.
    print("jax view:", view)
    data = np.array(np.from_dlpack(view)).tolist()
    print("numpy copy of the jax data:", data)


if __name__ == "__main__":
    numpy_and_torch()
    jax_arrays()
