"""The saxpy launcher's tests: results, stream order, and arrays dropped right after a launch.

Each runs on a GPU, or on the simulated device under ``pytest --simgpu`` (needs_gpu), where
the stream-order checker fails a test whose launch reads before the producer's writes, or
whose array is freed while the kernel may still use it, whatever the timing.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import DeviceArray
from saxpy import saxpy

pytestmark = pytest.mark.needs_gpu


def test_saxpy_computes_a_x_plus_y(streams):
    producer, launch = streams
    x, y = np.arange(1000, dtype=np.float32), np.full(1000, 0.5, np.float32)
    out = DeviceArray(np.zeros(1000), producer)
    saxpy(out, DeviceArray(x, producer), DeviceArray(y, producer), 2.0, launch)
    np.testing.assert_array_equal(out.get(launch), 2.0 * x + y)


def test_the_launch_reads_the_producers_pending_writes(streams):
    """x is written on the producer's stream and not yet done: the launch must wait for it."""
    producer, launch = streams
    x = DeviceArray(np.ones(1 << 16), producer)
    y = DeviceArray(np.zeros(1 << 16), producer)
    out = DeviceArray(np.zeros(1 << 16), producer)
    saxpy(out, x, y, 3.0, launch)
    np.testing.assert_array_equal(out.get(launch), np.full(1 << 16, 3.0, np.float32))


def test_arrays_dropped_after_the_call_are_kept_for_the_kernel(streams):
    """Temporaries freed on the producer's stream right after the call (as in
    ``saxpy(out, a + b, c, ...)``): the launcher keeps them until its kernel is done."""
    producer, launch = streams
    out = DeviceArray(np.zeros(4096), producer)
    for round_ in range(5):
        saxpy(out, DeviceArray(np.full(4096, round_), producer), DeviceArray(np.ones(4096), producer), 1.0, launch)
        np.testing.assert_array_equal(out.get(launch), np.full(4096, round_ + 1.0, np.float32))


def test_a_float64_array_is_refused(streams):
    producer, launch = streams

    class Float64(DeviceArray):
        @property
        def __cuda_array_interface__(self):
            return dict(super().__cuda_array_interface__, typestr="<f8", shape=(self.n // 2,))

    x = Float64(np.zeros(8), producer)
    with pytest.raises(ValueError, match="contiguous float32 vector"):
        saxpy(DeviceArray(np.zeros(4), producer), x, DeviceArray(np.zeros(4), producer), 1.0, launch)
