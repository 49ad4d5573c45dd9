"""The other process of tests/test_gpu_ipc.py: a consumer that receives pickled device views.

Started with ``multiprocessing``'s spawn (or forkserver) method, so it loads the same driver
(the simulated one through LD_LIBRARY_PATH, or a real GPU's) and stridedview afresh.  It
takes requests from ``inbox`` and answers on ``outbox``; every failure is answered as
``("error", type name, message)`` so that the test names it.  Nothing here keeps a received
view alive for the exporter: a view is held only while a request says so.
"""

from __future__ import annotations

import ctypes
import os


def _ok(result):
    from cuda.bindings import driver as drv

    code = result[0]
    if int(code) != 0:
        raise RuntimeError(f"{drv.cuGetErrorName(code)[1]!r}")
    return result[1] if len(result) == 2 else result[1:]


def _expect(inbox, word: str) -> None:
    """The next request must be ``word`` (no assert: CI runs this under python -O too)."""
    got = inbox.get()
    if got != word:
        raise RuntimeError(f"expected {word!r} from the test, got {got!r}")


def _setup():
    from cuda.bindings import driver as drv

    _ok(drv.cuInit(0))
    device = _ok(drv.cuDeviceGet(0))
    context = _ok(drv.cuDevicePrimaryCtxRetain(device))
    _ok(drv.cuCtxSetCurrent(context))
    return drv, _ok(drv.cuStreamCreate(1))


def _fields(view):
    return {
        "shape": view.shape,
        "strides": view.strides,
        "dtype": str(view.dtype),
        "readonly": view.readonly,
        "device_id": view.device_id,
    }


def consumer(inbox, outbox) -> None:
    """Serve requests until None arrives:

    - ``("read", received, nbytes)``: view ``received`` on this process's stream, copy its
      span's ``nbytes`` into pinned memory on that stream, answer ``("queued", done,
      fields)`` (``done``: whether the stream had already finished the copy), then wait for
      ``"finish"``, synchronise the stream and answer ``("bytes", data, span_offset)``.
    - ``("write", received, value, gated)``: fill the view's span with ``value`` on the
      stream (behind a gate if ``gated``), ``record_stream`` it, drop every reference,
      answer ``("dropped",)``; then wait for ``"open"``, open the gate and answer
      ``("opened",)``.
    - ``("view", received, stream_ptr)``: view it and answer ``("fields", fields)`` (or the
      error), dropping it at once.
    - ``("fields_of", received)``: answer ``("fields", fields)``, the received view's own,
      its exact DLPack type included.
    - ``("repickle", received)``: view it and pickle that view again, answering
      ``("refused", message, allocation kind, shareable)`` or ``("pickled",)``.
    - ``("hold", received)``: keep it (answer ``("held",)``).
    - ``("exit", code)``: leave with ``os._exit(code)``, holding whatever was received.
    """
    from stridedview import StridedMemoryView

    drv, stream = _setup()
    held = []
    while True:
        try:
            request = inbox.get()  # unpickling a received view happens here
            if request is None:
                return
            kind, request = request[0], request[1:]  # only the names below hold what arrived
            if kind == "read":
                received, nbytes = request
                view = StridedMemoryView(received, stream_ptr=int(stream))
                low = view.byte_bounds[0]
                host = _ok(drv.cuMemAllocHost(nbytes))
                _ok(drv.cuMemcpyDtoHAsync(host, low, nbytes, stream))
                done = int(drv.cuStreamQuery(stream)[0]) == 0
                outbox.put(("queued", done, _fields(view)))
                _expect(inbox, "finish")
                _ok(drv.cuStreamSynchronize(stream))
                data = ctypes.string_at(host, nbytes)
                _ok(drv.cuMemFreeHost(host))
                outbox.put(("bytes", data, view.ptr - low))
                del view, received, request
            elif kind == "write":
                received, value, gated = request
                gate = None
                if gated:
                    from simgpu.simgpu_support import Gate

                    gate = Gate(timeout=30).enqueue(stream)
                view = StridedMemoryView(received, stream_ptr=int(stream))
                low, high = view.byte_bounds
                _ok(drv.cuMemsetD8Async(low, value, high - low, stream))
                view.record_stream(int(stream))
                del view, received, request
                outbox.put(("dropped",))
                _expect(inbox, "open")
                if gate is not None:
                    gate.open()
                _ok(drv.cuStreamSynchronize(stream))
                from stridedview import release_pending

                release_pending()
                outbox.put(("opened",))
            elif kind == "view":
                received, stream_ptr = request
                view = StridedMemoryView(received, stream_ptr=stream_ptr)
                outbox.put(("fields", _fields(view)))
                del view, received, request
            elif kind == "fields_of":
                received, = request
                fields = dict(_fields(received), dlpack_dtype=tuple(received.dlpack_dtype))
                del request, received
                outbox.put(("fields", fields))
            elif kind == "repickle":
                received, = request
                view = StridedMemoryView(received, stream_ptr=int(stream))
                del request, received
                import pickle

                try:
                    pickle.dumps(view)
                    outbox.put(("pickled",))
                except BufferError as exc:
                    outbox.put(("refused", str(exc), view.allocation.kind, view.allocation.shareable))
                del view
            elif kind == "hold":
                held.append(request[0])
                outbox.put(("held",))
            elif kind == "exit":
                os._exit(request[0])
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which names it
            outbox.put(("error", type(exc).__name__, str(exc)))


def producer(inbox, outbox) -> None:
    """Export one view and exit on request: ``("make", nbytes, value)`` allocates ``nbytes``
    of device memory (cuMemAlloc), fills it with ``value``, answers ``("view", view)`` (the
    view pickled into the queue); ``("exit", code)`` leaves at once with ``os._exit``."""
    from stridedview import StridedMemoryView

    drv, stream = _setup()
    kept = []
    while True:
        request = inbox.get()
        if request is None:
            return
        try:
            if request[0] == "make":
                _, nbytes, value = request
                memory = _ok(drv.cuMemAlloc(nbytes))
                _ok(drv.cuMemsetD8Async(memory, value, nbytes, stream))
                array = _Device(int(memory), nbytes, int(stream))
                view = StridedMemoryView(array, stream_ptr=int(stream))
                kept.append((memory, array))
                outbox.put(("view", view))
            elif request[0] == "exit":
                outbox.close()
                outbox.join_thread()
                os._exit(request[1])
        except BaseException as exc:  # noqa: BLE001 - reported to the test, which names it
            outbox.put(("error", type(exc).__name__, str(exc)))


class _Device:
    """A CUDA Array Interface v3 producer of ``nbytes`` bytes written on ``stream``."""

    def __init__(self, ptr: int, nbytes: int, stream: int):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "stream": stream,
        }
