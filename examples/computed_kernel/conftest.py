"""Test set-up for the saxpy launcher: a producer of device arrays, and the kernel computed
on the simulated device by a numpy reference implementation.

Run on a machine with no GPU (stridedview and stridedview-simgpu installed):

    python -m pytest --simgpu examples/computed_kernel
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import stridedview

cuda_driver = pytest.importorskip("cuda.bindings.driver", reason="the launcher needs cuda-bindings")


def check(result):
    status, *values = result
    if status != cuda_driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {status!r}")
    return values[0] if values else None


class DeviceArray:
    """A float32 vector in device memory, as CuPy or torch would hand one over: allocated,
    written and freed in order on its own stream, exported through the CUDA Array Interface
    with that stream (so a consumer must order its work after the stream's)."""

    def __init__(self, values, stream: int):
        host = np.ascontiguousarray(values, dtype=np.float32)
        self.stream, self.n = stream, host.size
        self.ptr = int(check(cuda_driver.cuMemAllocAsync(max(host.nbytes, 1), stream)))
        self._host = host  # the source of the pending copy: kept until the array is freed
        check(cuda_driver.cuMemcpyHtoDAsync(self.ptr, host.ctypes.data, host.nbytes, stream))

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.n,), "typestr": "<f4", "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": self.stream}

    def get(self, stream: int) -> np.ndarray:
        """The values, read on ``stream`` (the one that wrote them last), once its work is
        done (a host wait)."""
        host = np.empty(self.n, np.float32)
        check(cuda_driver.cuMemcpyDtoHAsync(host.ctypes.data, self.ptr, host.nbytes, stream))
        check(cuda_driver.cuStreamSynchronize(stream))
        return host

    def __del__(self):
        # Freed in order on its own stream, as a caching allocator does: reused by the next
        # allocation there, whatever other streams still do with it.
        check(cuda_driver.cuMemFreeAsync(self.ptr, self.stream))


@pytest.fixture
def context():
    """The first device's primary context, current."""
    check(cuda_driver.cuInit(0))
    device = check(cuda_driver.cuDeviceGet(0))
    primary = check(cuda_driver.cuDevicePrimaryCtxRetain(device))
    check(cuda_driver.cuCtxSetCurrent(primary))
    yield primary
    check(cuda_driver.cuCtxSynchronize())


@pytest.fixture(scope="session")
def stream_pair():
    """Two non-blocking streams, kept for the whole session: an array that a failed test's
    traceback keeps alive is freed on its stream later, and a destroyed stream must not be
    named (a real driver crashes)."""
    check(cuda_driver.cuInit(0))
    device = check(cuda_driver.cuDeviceGet(0))
    check(cuda_driver.cuCtxSetCurrent(check(cuda_driver.cuDevicePrimaryCtxRetain(device))))
    flags = cuda_driver.CUstream_flags.CU_STREAM_NON_BLOCKING
    return tuple(int(check(cuda_driver.cuStreamCreate(flags))) for _ in range(2))


@pytest.fixture
def streams(context, stream_pair):
    """The producer's stream and the launch's."""
    yield stream_pair
    for stream in stream_pair:
        check(cuda_driver.cuStreamSynchronize(stream))
    # What the launcher still keeps for its streams (record_stream) goes back now, and with
    # it the arrays' frees on the producer's stream.
    stridedview.release_pending(wait=True)
    gc.collect()


@pytest.fixture(autouse=True)
def saxpy_computed(request):
    """On the simulated device, the saxpy kernel computes: a numpy implementation runs in its
    place in stream order (it reads x and y, writes out).  On a GPU the PTX does."""
    if "simgpu" not in request.fixturenames and not _on_simulator():
        yield
        return
    simgpu = request.getfixturevalue("simgpu")

    @simgpu.kernel("saxpy", params=("ptr", "ptr", "ptr", "float32", "uint64"), reads=(1, 2), writes=(0,))
    def saxpy(launch, out, x, y, a, n):
        launch.array(out, n, np.float32)[:] = a * launch.array(x, n, np.float32) + launch.array(y, n, np.float32)

    yield


def _on_simulator() -> bool:
    try:
        from stridedview_simgpu import simulator
    except ImportError:
        return False
    return simulator() is not None
