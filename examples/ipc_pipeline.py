"""Two processes, one pipeline: a producer process fills device buffers on its stream and
sends views of them through a ``multiprocessing`` queue; a consumer process reads each on
its own stream.  Nothing waits on the host between them: the consumer's stream waits on an
event the producer's stream recorded (CUDA IPC), and each buffer is freed by the producer
only once the consumer's stream is done with it.

Run it on a GPU: ``python examples/ipc_pipeline.py``; without one, on the simulated device:
``simgpu/with-simulator.sh python examples/ipc_pipeline.py``.  It needs cuda-bindings; on a
machine without a CUDA driver it prints what it needs and exits with 0.
"""

from __future__ import annotations

import ctypes
import importlib.util
import multiprocessing
import sys

import numpy as np

from stridedview import StridedMemoryView

BATCHES = 16
ELEMENTS = 1 << 14  # float32 elements per batch
PIECES = 8  # the producer writes each batch in this many steps


def _ok(result):
    code, *values = result
    if int(code) != 0:
        raise RuntimeError(f"CUDA driver call failed: {code!r}")
    return values[0] if len(values) == 1 else (values or None)


def _stream():
    """Device 0's primary context made current, and a new non-blocking stream in it."""
    from cuda.bindings import driver as drv

    _ok(drv.cuInit(0))
    _ok(drv.cuCtxSetCurrent(_ok(drv.cuDevicePrimaryCtxRetain(_ok(drv.cuDeviceGet(0))))))
    return drv, _ok(drv.cuStreamCreate(1))


class Batch:
    """A producer's buffer: device memory written on ``stream`` (in ``PIECES`` steps, as a
    producer's kernels would), offered through the CUDA
    Array Interface (the "stream" key: the consumer orders itself after it), freed when the
    last reference goes; for a view sent to another process, that is once the consumer
    has let go."""

    def __init__(self, drv, stream, value: float):
        self.drv = drv
        self.ptr = _ok(drv.cuMemAlloc(ELEMENTS * 4))
        bits = int(np.float32(value).view(np.uint32))
        piece = ELEMENTS // PIECES
        for start in range(0, ELEMENTS, piece):
            _ok(drv.cuMemsetD32Async(int(self.ptr) + start * 4, bits, piece, stream))
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (ELEMENTS,), "typestr": "<f4",
            "data": (int(self.ptr), False), "strides": None, "stream": int(stream),
        }

    def __del__(self):
        self.drv.cuMemFree(self.ptr)


def consumer(views, results) -> None:
    """Read each received view on this process's stream (a kernel would go there)."""
    drv, stream = _stream()
    host = _ok(drv.cuMemAllocHost(BATCHES * ELEMENTS * 4))
    results.put("ready")
    for index in range(BATCHES):
        received = views.get()  # a stridedview.ipc.ReceivedView
        view = StridedMemoryView(received, stream_ptr=int(stream))  # waits for the producer's write
        _ok(drv.cuMemcpyDtoHAsync(host + index * ELEMENTS * 4, view.ptr, ELEMENTS * 4, stream))
        view.record_stream(int(stream))  # the producer keeps the memory until this copy is done
        del view, received
    _ok(drv.cuStreamSynchronize(stream))  # this process's own result, read on the host
    data = np.frombuffer(ctypes.string_at(int(host), BATCHES * ELEMENTS * 4), np.float32)
    results.put(data.reshape(BATCHES, ELEMENTS).sum(axis=1).tolist())


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-bindings is not installed (pip install cuda-bindings)"
    from cuda.bindings import driver as drv

    try:
        code = drv.cuInit(0)[0]
    except RuntimeError as exc:  # no libcuda.so.1 at all
        return f"no CUDA driver can be loaded ({exc})"
    if int(code) != 0:
        return f"the CUDA driver has no usable device ({code!r})"
    return None


def main() -> int:
    lacking = missing()
    if lacking is not None:
        print(f"ipc_pipeline.py skipped: it needs a CUDA driver and a device ({lacking}); "
              "try simgpu/with-simulator.sh python examples/ipc_pipeline.py")
        return 0
    context = multiprocessing.get_context("spawn")  # a forked child cannot use the driver
    views, results = context.Queue(), context.Queue()
    process = context.Process(target=consumer, args=(views, results))
    process.start()
    drv, stream = _stream()
    if results.get(timeout=300) != "ready":
        raise RuntimeError("the consumer process did not start")
    for index in range(BATCHES):
        batch = Batch(drv, stream, value=index + 1)
        views.put(StridedMemoryView(batch, stream_ptr=int(stream)))  # pickled: CUDA IPC
        del batch  # freed once the consumer's stream is done with it
    sums = results.get(timeout=300)
    process.join(60)
    expected = [float((index + 1) * ELEMENTS) for index in range(BATCHES)]
    print(f"{BATCHES} views sent to process {process.pid}; sums {'match' if sums == expected else 'DIFFER'}")
    return 0 if sums == expected and process.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
