"""What the installed jax does with DLPack, found out once, for tests whose expectations differ.

jax 0.10 exports legacy (pre-1.0) capsules even when asked for a versioned one, and asks
producers for a legacy capsule (no ``max_version``); jax 0.12 exports versioned capsules
flagged READ_ONLY and asks for versioned ones.  Either way a view of a jax array is
read-only; what differs is whether jax can take a read-only view back (only through a
versioned capsule, which can say so).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


@functools.cache
def jax_exports_versioned() -> bool:
    """True when a jax array asked for DLPack 1.x hands out a versioned capsule."""
    import jax.numpy as jnp

    capsule = jnp.arange(3.0).__dlpack__(max_version=(1, 3))
    return _get_name(capsule) == b"dltensor_versioned"


@functools.cache
def jax_asks_for_versioned() -> bool:
    """True when ``jax.numpy.from_dlpack`` passes ``max_version`` >= (1, 0) to a producer."""
    import jax.numpy as jnp

    asked = {}
    source = np.arange(4.0)

    class Recorder:
        def __dlpack_device__(self):
            return source.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            asked.update(kwargs)
            return source.__dlpack__(**kwargs)

    jnp.from_dlpack(Recorder())
    max_version = asked.get("max_version")
    return max_version is not None and tuple(max_version) >= (1, 0)
