"""A decorated launcher captured into a CUDA graph and replayed.  Needs a CUDA driver.

A producer fills device memory on its own stream and hands it over through the CUDA Array
Interface, naming that stream.  ``copy_into`` is a launcher decorated with
``record_stream=True``; its "kernel" is a device-to-device copy on the launch stream.  The
launch is made once while the launch stream captures a graph, then the graph is replayed:

- the view's ordering becomes part of the graph (an external event wait on an event the
  graph owns), so every replay waits for what the producer had queued at capture time;
- the launch's hold on the producer's array belongs to the graph: it is released once the
  graph and its executable graph are destroyed (``release_pending()`` or the next view
  creation performs the release), never before.

Only cuda-bindings and a driver are used, so it also runs on the simulated device of the
tests, from a clone: ``simgpu/with-simulator.sh python examples/gpu_graphs.py`` (which
builds it and puts it first on the library path).  On a GPU: ``python examples/gpu_graphs.py``.
Without a driver it says what it needs and exits with 0.
"""

from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np

from stridedview import args_viewable_as_strided_memory, release_pending

NEEDS = "a CUDA GPU (or the simulated device) and cuda-bindings (pip install cuda-bindings)"
NBYTES = 1 << 16
REPLAYS = 10


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-bindings is not installed"
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return f"cuda-bindings cannot be imported ({exc})"
    try:
        if int(driver.cuInit(0)[0]) != 0:
            return "the CUDA driver cannot be initialised"
        code, count = driver.cuDeviceGetCount()
    except (RuntimeError, OSError) as exc:
        return f"no CUDA driver ({exc})"
    if int(code) != 0 or count < 1:
        return "no CUDA device"
    return None


def ok(result):
    code, *values = result
    if int(code) != 0:
        raise RuntimeError(f"CUDA driver call failed: {code!r}")
    return values[0] if len(values) == 1 else tuple(values)


class DeviceArray:
    """A CUDA Array Interface producer: bytes of device memory, filled on ``stream``."""

    def __init__(self, drv, ptr, stream):
        self.drv, self.ptr, self.stream = drv, ptr, stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": (NBYTES,), "typestr": "|u1", "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self.stream}

    def __del__(self):
        print("  producer array released")


def main() -> None:
    from cuda.bindings import driver as drv

    device = ok(drv.cuDeviceGet(0))
    context = ok(drv.cuDevicePrimaryCtxRetain(device))
    ok(drv.cuCtxSetCurrent(context))
    producer_stream = ok(drv.cuStreamCreate(1))  # non-blocking streams
    launch_stream = ok(drv.cuStreamCreate(1))
    source, target = ok(drv.cuMemAlloc(NBYTES)), ok(drv.cuMemAlloc(NBYTES))
    for value in range(0x20, 0x2B):  # the producer's work, in passes: done late
        ok(drv.cuMemsetD8Async(source, value, NBYTES, producer_stream))
    ok(drv.cuMemsetD8Async(target, 0, NBYTES, launch_stream))
    ok(drv.cuStreamSynchronize(launch_stream))

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def copy_into(src, dst, stream):
        """The "kernel": dst[:] = src[:], on ``stream``, both viewed on it."""
        s = int(stream)
        a = src.view(stream_ptr=s)  # orders the launch stream after the producer's
        b = dst.view(stream_ptr=s)
        ok(drv.cuMemcpyDtoDAsync(b.ptr, a.ptr, a.size, stream))

    produced = DeviceArray(drv, int(source), int(producer_stream))
    out = DeviceArray(drv, int(target), None)
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    ok(drv.cuStreamBeginCapture(launch_stream, mode))
    copy_into(produced, out, launch_stream)
    graph = ok(drv.cuStreamEndCapture(launch_stream))  # the capture stayed valid
    print("captured one launch into a graph")
    del produced, out  # the graph keeps the launch's holds

    exe = ok(drv.cuGraphInstantiate(graph, 0))
    host = np.zeros(NBYTES, np.uint8)
    for _ in range(REPLAYS):
        ok(drv.cuMemsetD8Async(target, 0, NBYTES, launch_stream))
        ok(drv.cuGraphLaunch(exe, launch_stream))
        ok(drv.cuMemcpyDtoHAsync(host.ctypes.data, target, NBYTES, launch_stream))
        ok(drv.cuStreamSynchronize(launch_stream))
        if not (host == 0x2A).all():
            raise SystemExit("a replay read the producer's memory before it was written")
    print(f"replayed {REPLAYS} times: every replay read the producer's bytes")
    release_pending(wait=True)  # does not wait for, nor release, what the graph owns

    print("destroying the graph and its executable graph")
    ok(drv.cuGraphExecDestroy(exe))
    ok(drv.cuGraphDestroy(graph))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the driver gives the holds back from a thread of its own
        if release_pending():
            break
        time.sleep(0.001)
    release_pending()
    for ptr in (source, target):
        ok(drv.cuMemFree(ptr))
    for stream in (producer_stream, launch_stream):
        ok(drv.cuStreamDestroy(stream))
    ok(drv.cuDevicePrimaryCtxRelease(device))


if __name__ == "__main__":
    lacking = missing()
    if lacking is not None:
        print(f"gpu_graphs.py skipped: it needs {NEEDS} ({lacking})")
        sys.exit(0)
    main()
