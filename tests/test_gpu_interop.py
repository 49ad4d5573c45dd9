"""Views of real device memory through DLPack and the CUDA Array Interface, checked field by
field against cuda.core's own ``StridedMemoryView`` (a differential oracle), and views handed
on to another library.

On any CUDA driver (marked ``gpu``): the simulated device (tests/simgpu), where device memory
faults on a host access as on a GPU, or a real GPU.  The producers: cuda.core (its device
Buffers from the default pool, its StridedMemoryView over them, both DLPack directions),
numba-cuda (``to_device``, device arrays tied to a stream, consumed through the CAI and handed
back), cuda-bindings' own allocations behind a hand-made CAI v3 dict with ``stream``, and
ctypes DLPack capsules (tests/producers.py) of kDLCUDA, kDLCUDAHost and kDLCUDAManaged memory.
``device_id`` comes from the real ``cuPointerGetAttribute``.  The export handshake
(``__dlpack__(stream=...)``) is raced for real with the simulator's delay (marked ``simgpu``).

The last section (marked ``real_gpu``) views CuPy, Numba and torch arrays on a real GPU: the
CUDA runtime they need does not run on the simulated device.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from conftest import TWO_GPUS_SKIP_REASON, gpu_import
from stridedview import CUDAError, StridedMemoryView, _driver

pytestmark = pytest.mark.gpu

HOST = np.arange(24, dtype=np.float32).reshape(4, 6)
#: HOST[:, ::2]: shape (4, 3), strides (6, 2) in elements.
EXPECTED = HOST[:, ::2]


def core_view_class():
    return gpu_import("cuda.core.utils").StridedMemoryView


def fields(view) -> dict:
    """The fields both StridedMemoryView classes share, strides always explicit."""
    strides = view.strides
    if strides is None:  # cuda.core's C-contiguous views
        strides, step = [], 1
        for extent in reversed(view.shape):
            strides.append(step)
            step *= max(extent, 1)
        strides = tuple(reversed(strides))
    return {
        "ptr": int(view.ptr),
        "shape": tuple(view.shape),
        "strides": tuple(strides),
        "dtype": np.dtype(view.dtype),
        "device_id": int(view.device_id),
        "is_device_accessible": bool(view.is_device_accessible),
        "readonly": bool(view.readonly),
    }


def assert_same_view(ours, theirs, *, exporting_obj=None, readonly_differs=False):
    """Every shared field equal (cuda.core takes a legacy capsule as writable: ``readonly_differs``)."""
    a, b = fields(ours), fields(theirs)
    if readonly_differs:
        assert a.pop("readonly") is True and b.pop("readonly") is False
    assert a == b
    if exporting_obj is not None:
        assert ours.exporting_obj is exporting_obj


def device_cai(res, host, *, device=0, stream=None, readonly=False, index=np.s_[:, ::2]):
    """``host[index]`` in fresh device memory behind a hand-made CAI v3 dict naming ``stream``."""
    from driver_support import CAIArray

    memory = res.device(host.nbytes, device)
    memory.upload(host)
    part = host[index]
    offset = part.__array_interface__["data"][0] - host.__array_interface__["data"][0]
    return CAIArray(memory, part.shape, host.dtype, strides=part.strides, offset=offset,
                    stream=stream, readonly=readonly)


def read_device(ptr, shape, byte_strides, dtype, device=0) -> np.ndarray:
    """Elements of device memory laid out so, read back through the driver."""
    from driver_support import drv, ok, on_device, span_bytes

    dtype = np.dtype(dtype)
    low, high = span_bytes(shape, byte_strides, dtype.itemsize)
    raw = np.zeros(high - low, np.uint8)
    with on_device(device):
        ok(drv.cuCtxSynchronize())
        ok(drv.cuMemcpyDtoH(raw.ctypes.data, ptr + low, high - low))
    return np.ndarray(shape, dtype, buffer=raw, offset=-low, strides=byte_strides).copy()


def view_values(view) -> np.ndarray:
    return read_device(view.ptr, view.shape, view.byte_strides, view.dtype, view.device_id)


# --- producers, each against cuda.core's view of the same object -------------------------------


def test_hand_made_cai_over_driver_memory(gpu):
    """A CAI v3 dict over cuMemAlloc memory, with a stream: every field as cuda.core sees it."""
    stream = gpu.stream()
    producer = device_cai(gpu, HOST, stream=stream.ptr)
    ours = StridedMemoryView(producer, stream_ptr=stream.ptr)
    theirs = core_view_class().from_cuda_array_interface(producer, stream_ptr=stream.ptr)
    assert_same_view(ours, theirs, exporting_obj=producer)
    assert (ours.shape, ours.strides, ours.device_id) == ((4, 3), (6, 2), 0)
    assert np.array_equal(view_values(ours), EXPECTED)


def test_readonly_cai_is_readonly(gpu):
    """A CAI dict whose data tuple says read-only gives a read-only view, as cuda.core's."""
    producer = device_cai(gpu, HOST, readonly=True)
    ours = StridedMemoryView(producer, stream_ptr=-1)
    theirs = core_view_class().from_cuda_array_interface(producer, stream_ptr=-1)
    assert_same_view(ours, theirs)
    assert ours.readonly


def test_cuda_core_buffer_through_dlpack(gpu):
    """A cuda.core device Buffer from the default pool, through its __dlpack__: the same view as
    cuda.core's own."""
    Device = gpu_import("cuda.core").Device

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    try:
        buffer = device.allocate(4096, stream=stream)
        ours = StridedMemoryView(buffer, stream_ptr=int(stream.handle))
        theirs = core_view_class().from_dlpack(buffer, stream_ptr=int(stream.handle))
        assert_same_view(ours, theirs, exporting_obj=buffer)
        assert ours.ptr == int(buffer.handle) and ours.shape == (4096,)
        buffer.close(stream)
    finally:
        stream.sync()
        stream.close()


@pytest.mark.parametrize("through", ["dlpack", "exchange-api"])
def test_cuda_core_strided_view_both_ways(gpu, through):
    """cuda.core's StridedMemoryView of a Buffer (strided float32) viewed by stridedview, and
    stridedview's view viewed by cuda.core again: the same fields all the way, the same values."""
    Device = gpu_import("cuda.core").Device

    CoreView = core_view_class()
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    handle = int(stream.handle)
    try:
        buffer = device.allocate(HOST.nbytes, stream=stream)
        ours_in = StridedMemoryView(HOST, stream_ptr=None)
        core = CoreView.from_buffer(buffer, (4, 3), (6, 2), dtype=np.dtype(np.float32))
        if through == "dlpack":
            ours = StridedMemoryView.from_dlpack(_DLPackOnly(core), stream_ptr=handle)
        else:
            ours = StridedMemoryView(core, stream_ptr=handle)
        assert_same_view(ours, core)
        full = StridedMemoryView(CoreView.from_buffer(buffer, (4, 6), None, dtype=np.dtype(np.float32)),
                                 stream_ptr=handle)
        full.copy_from(ours_in, handle, blocking=True)
        back = CoreView.from_dlpack(ours, stream_ptr=handle)
        assert_same_view(ours, back)
        assert np.array_equal(view_values(ours), EXPECTED)
        buffer.close(stream)
    finally:
        stream.sync()
        stream.close()


class _DLPackOnly:
    """Only the DLPack methods of ``obj`` (its exchange API hidden): the general path."""

    def __init__(self, obj):
        self.obj = obj

    def __dlpack__(self, **kwargs):
        return self.obj.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()


def test_numba_device_array_through_the_cai(gpu):
    """numba.cuda.to_device on a stream, strided: ptr, shape, strides, dtype, device as cuda.core
    sees them, and the values."""
    numba_cuda = gpu_import("numba.cuda")
    stream = numba_cuda.stream()
    array = numba_cuda.to_device(HOST, stream=stream)[:, ::2]
    cai = array.__cuda_array_interface__
    assert cai["stream"] == int(stream.handle)
    ours = StridedMemoryView(array, stream_ptr=-1)
    theirs = core_view_class().from_cuda_array_interface(array, stream_ptr=-1)
    assert_same_view(ours, theirs, exporting_obj=array)
    assert ours.ptr == cai["data"][0] and ours.strides == (6, 2)
    assert ours.ready_stream == int(stream.handle)
    assert np.array_equal(view_values(ours), EXPECTED)


@pytest.mark.parametrize("kind", ["versioned", "legacy"])
@pytest.mark.parametrize("memory", ["device", "pinned", "managed"])
def test_dlpack_capsules_of_every_cuda_memory_kind(gpu, kind, memory):
    """ctypes DLPack capsules of kDLCUDA, kDLCUDAHost and kDLCUDAManaged memory (the simulator's
    real allocations): the view cuda.core makes of the same producer, field by field; host-readable
    kinds read through numpy, device memory only through the driver."""
    from producers import make_producer

    size = HOST.nbytes
    if memory == "device":
        region = gpu.device(size)
        region.upload(HOST)
        device_type = 2
    else:
        region = gpu.pinned(size) if memory == "pinned" else gpu.managed(size)
        region.array(np.float32, HOST.shape)[...] = HOST
        device_type = 3 if memory == "pinned" else 13
    producer = make_producer(kind, shape=(4, 3), strides=(6, 2), dtype="float32",
                             device=(device_type, 0), data=region.ptr)
    stream = gpu.stream()
    stream_ptr = None if memory == "pinned" else stream.ptr
    ours = StridedMemoryView(producer, stream_ptr=stream_ptr)
    theirs = core_view_class().from_dlpack(producer, stream_ptr=stream.ptr)
    assert_same_view(ours, theirs, exporting_obj=producer, readonly_differs=kind == "legacy")
    assert ours.__dlpack_device__() == (device_type, 0)
    assert np.array_equal(view_values(ours), EXPECTED)
    if memory != "device":
        assert np.array_equal(np.from_dlpack(ours), EXPECTED)
    else:
        with pytest.raises(BufferError):
            np.asarray(ours)


@pytest.mark.parametrize("resource", ["LegacyPinnedMemoryResource", "device"])
def test_cuda_core_buffer_from_buffer_as_the_constructor_sees_it(gpu, resource):
    """from_buffer on a cuda.core Buffer of a legacy pinned resource (whose device_id raises
    RuntimeError: it is bound to no GPU) and of the device's pool: the memory kind, device and
    pointer the constructor gets through the Buffer's own DLPack; the pinned bytes read back."""
    cuda_core = gpu_import("cuda.core")

    device = cuda_core.Device(0)
    device.set_current()
    stream = device.create_stream()
    try:
        if resource == "device":
            buffer = device.allocate(HOST.nbytes, stream=stream)
        else:
            buffer = getattr(cuda_core, resource)().allocate(HOST.nbytes, stream=stream)
            with pytest.raises(RuntimeError):
                buffer.device_id  # cuda.core's own: the reason from_buffer had failed
            np.ctypeslib.as_array((ctypes.c_float * HOST.size).from_address(int(buffer.handle)))[...] = HOST.ravel()
        ours = StridedMemoryView.from_buffer(buffer, (4, 3), (6, 2), dtype=np.float32)
        whole = StridedMemoryView(buffer, stream_ptr=stream if resource == "device" else None)
        assert ours.__dlpack_device__() == whole.__dlpack_device__() == buffer.__dlpack_device__()
        assert ours.device_id == whole.device_id and ours.ptr == whole.ptr == int(buffer.handle)
        assert ours.is_device_accessible and ours.exporting_obj is buffer
        if resource != "device":
            assert np.array_equal(np.from_dlpack(ours), EXPECTED)
        del ours, whole
        buffer.close(stream)
    finally:
        stream.sync()
        stream.close()


# --- device_id: cuPointerGetAttribute through the real bindings ------------------------------


@pytest.mark.simgpu
def test_device_id_is_lazy(gpu, simulator):
    """No driver call until device_id is read; then one cuPointerGetAttribute, and never again."""
    producer = device_cai(gpu, HOST, device=1 if _devices() > 1 else 0)
    before = simulator.calls("cuPointerGetAttribute")
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert "device_id=?" in repr(view)
    (view.ptr, view.shape, view.strides, view.dtype, view.readonly, view.nbytes)
    assert simulator.calls("cuPointerGetAttribute") == before
    assert view.device_id == producer.memory.device
    assert type(view.device_id) is int
    view.device_id
    assert simulator.calls("cuPointerGetAttribute") == before + 1
    assert f"device_id={producer.memory.device}" in repr(view)


def _devices():
    from driver_support import device_count

    return device_count()


def test_device_id_of_an_interior_pointer_on_the_second_device(gpu, two_gpus):
    """A view starting inside an allocation of device 1 (device 0 current) has device_id 1."""
    producer = device_cai(gpu, HOST, device=1, index=np.s_[1:, 3:])
    assert producer.ptr != producer.memory.ptr
    assert StridedMemoryView(producer, stream_ptr=-1).device_id == 1


def test_device_id_of_null_pointer_is_the_current_device(gpu, two_gpus):
    """For ptr 0 (a zero-size array) device_id is the current context's device."""
    from driver_support import CAIArray, make_current

    class Null:
        ptr = 0

    make_current(1)
    view = StridedMemoryView(CAIArray(Null, (0, 3), np.float32), stream_ptr=-1)
    assert view.device_id == 1


def test_device_id_of_host_pointer_is_cuda_error(gpu):
    """A pointer the driver does not know (pageable host memory) makes device_id raise
    CUDAError CUDA_ERROR_INVALID_VALUE, and the view stays usable."""
    from driver_support import CAIArray

    class Host:
        array = np.zeros(6, np.float32)
        ptr = array.ctypes.data

    view = StridedMemoryView(CAIArray(Host, (6,), np.float32), stream_ptr=-1)
    with pytest.raises(CUDAError, match=r"^device_id: .* points at 0x[0-9a-f]+, .*\(cuPointerGetAttribute failed: CUDA_ERROR_INVALID_VALUE\)") as excinfo:
        view.device_id
    assert excinfo.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert f"{Host.ptr:#x}" in str(excinfo.value)
    assert "device_id=?" in repr(view)


def test_device_id_of_null_pointer_without_context_is_cuda_error(gpu):
    """For ptr 0 in a thread with no current context, device_id raises CUDAError
    CUDA_ERROR_INVALID_CONTEXT."""
    from driver_support import CAIArray

    class Null:
        ptr = 0

    view = StridedMemoryView(CAIArray(Null, (0,), np.float32), stream_ptr=-1)
    outcome = {}

    def read():
        try:
            outcome["value"] = view.device_id
        except CUDAError as exc:
            outcome["error"] = exc.name

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(30)
    assert outcome == {"error": "CUDA_ERROR_INVALID_CONTEXT"}


@pytest.mark.simgpu
def test_device_id_without_devices_is_cuda_error(gpu):
    """With a driver that has no device (SIMGPU_DEVICES=0), device_id raises CUDAError naming
    cuInit's CUDA_ERROR_NO_DEVICE."""
    from simgpu.simgpu_support import run_python

    result = run_python(
        "from stridedview import StridedMemoryView, CUDAError\n"
        "class P:\n"
        "    __cuda_array_interface__ = {'version': 3, 'shape': (2,), 'typestr': '<f4',\n"
        "                                'data': (0x10000, False), 'stream': None}\n"
        "view = StridedMemoryView(P(), stream_ptr=-1)\n"
        "try:\n"
        "    view.device_id\n"
        "except CUDAError as exc:\n"
        "    print(exc.name, str(exc).startswith('cuInit failed: CUDA_ERROR_NO_DEVICE'))\n",
        env={"SIMGPU_DEVICES": "0"},
    )
    assert result.stdout.split() == ["CUDA_ERROR_NO_DEVICE", "True"], result.stderr


@pytest.mark.parametrize("producer", ["cai", "numba", "cuda-core", "capsule"])
def test_views_on_the_second_device(gpu, two_gpus, producer):
    """Memory of device 1, viewed while device 0 is current: device_id 1 for every producer,
    as cuda.core says, and the values."""
    from driver_support import make_current

    CoreView = core_view_class()
    if producer == "cai":
        obj = device_cai(gpu, HOST, device=1)
        theirs = CoreView.from_cuda_array_interface(obj, stream_ptr=-1)
    elif producer == "numba":
        numba_cuda = gpu_import("numba.cuda")
        with numba_cuda.gpus[1]:
            obj = numba_cuda.to_device(HOST)[:, ::2]
        theirs = CoreView.from_cuda_array_interface(obj, stream_ptr=-1)
    elif producer == "cuda-core":
        Device = gpu_import("cuda.core").Device

        Device(1).set_current()
        core_stream = Device(1).create_stream()
        buffer = Device(1).allocate(HOST.nbytes, stream=core_stream)
        full = StridedMemoryView(CoreView.from_buffer(buffer, (4, 6), None, dtype=np.dtype(np.float32)),
                                 stream_ptr=int(core_stream.handle))
        full.copy_from(StridedMemoryView(HOST), int(core_stream.handle), blocking=True)
        obj = CoreView.from_buffer(buffer, (4, 3), (6, 2), dtype=np.dtype(np.float32))
        theirs = obj
    else:
        from producers import make_producer

        region = gpu.device(HOST.nbytes, 1)
        region.upload(HOST)
        obj = make_producer(shape=(4, 3), strides=(6, 2), dtype="float32", device=(2, 1), data=region.ptr)
        theirs = CoreView.from_dlpack(obj, stream_ptr=-1)
    make_current(0)
    ours = StridedMemoryView(obj, stream_ptr=-1)
    assert ours.device_id == 1
    assert_same_view(ours, theirs)
    assert np.array_equal(view_values(ours), EXPECTED)


# --- the view handed on ------------------------------------------------------------------------


def test_cuda_core_consumes_a_view(gpu):
    """cuda.core's StridedMemoryView of a stridedview view (its __dlpack__, stream handshake
    included) has every field of the view."""
    stream = gpu.stream()
    ours = StridedMemoryView(device_cai(gpu, HOST, stream=stream.ptr), stream_ptr=stream.ptr)
    other = gpu.stream()
    theirs = core_view_class().from_dlpack(ours, stream_ptr=other.ptr)
    assert_same_view(ours, theirs)


def test_numba_consumes_a_view_and_hands_it_back(gpu):
    """numba.cuda.as_cuda_array of a view (its __cuda_array_interface__) is the same memory with
    the same values; a view of that numba array is the first view again."""
    numba_cuda = gpu_import("numba.cuda")
    stream = gpu.stream()
    producer = device_cai(gpu, HOST, stream=stream.ptr)
    ours = StridedMemoryView(producer, stream_ptr=stream.ptr)
    cai = ours.__cuda_array_interface__
    assert cai["stream"] == stream.ptr and cai["version"] == 3
    received = numba_cuda.as_cuda_array(ours)
    assert received.__cuda_array_interface__["data"][0] == ours.ptr
    assert np.array_equal(received.copy_to_host(), EXPECTED)
    again = StridedMemoryView(received, stream_ptr=stream.ptr)
    assert fields(again) == fields(ours)
    assert again.exporting_obj is received


@pytest.mark.simgpu
@pytest.mark.parametrize("sync", [True, False])
def test_a_numba_consumer_waits_on_the_host_only_with_its_array_interface_sync(gpu, simulator, monkeypatch, sync):
    """A view made for the launch stream S exports S as its CUDA Array Interface "stream";
    numba-cuda (and numba-cuda-mlir, which reads the same setting) synchronizes that stream on
    the host when it imports the view, unless NUMBA_CUDA_ARRAY_INTERFACE_SYNC=0
    (config.CUDA_ARRAY_INTERFACE_SYNC): with it off nothing waits on the host, and work
    launched on S is still ordered after the producer (the view ordered S)."""
    numba_cuda = gpu_import("numba.cuda")
    from numba.cuda import config

    monkeypatch.setattr(config, "CUDA_ARRAY_INTERFACE_SYNC", 1 if sync else 0)
    producer_stream, launch = gpu.stream(), gpu.stream()
    view = StridedMemoryView(device_cai(gpu, HOST, stream=producer_stream.ptr), stream_ptr=launch.ptr)
    assert view.__cuda_array_interface__["stream"] == launch.ptr
    waits = simulator.calls("cuStreamSynchronize")
    array = numba_cuda.as_cuda_array(view)
    assert simulator.calls("cuStreamSynchronize") - waits == (1 if sync else 0)
    assert array.__cuda_array_interface__["data"][0] == view.ptr


def test_a_cuda_core_buffer_typed_and_ordered(gpu, simulator):
    """The documented way to type a cuda.core Buffer (whose DLPack export is its bytes, int8):
    StridedMemoryView(buffer, stream_ptr=s).view(dtype=...).reshape(...) is ordered for s
    (its ready_stream s, the producer's stream waited for), where from_buffer lays the same
    layout over the bytes and orders nothing (ready_stream None)."""
    Device = gpu_import("cuda.core").Device

    device = Device(0)
    device.set_current()
    allocation_stream = device.create_stream()
    launch = gpu.stream()
    buffer = device.allocate(32, stream=allocation_stream)
    try:
        bytes_view = StridedMemoryView(buffer, stream_ptr=launch.ptr)
        assert (bytes_view.dtype, bytes_view.shape) == (np.dtype(np.int8), (32,))
        typed = bytes_view.view(dtype=np.float32).reshape(2, 4)
        assert (typed.dtype, typed.shape, typed.strides, typed.ptr) == (np.dtype(np.float32), (2, 4), (4, 1), bytes_view.ptr)
        assert typed.ready_stream == bytes_view.ready_stream == launch.ptr
        laid = StridedMemoryView.from_buffer(buffer, (2, 4), dtype=np.float32)
        assert (laid.dtype, laid.shape, laid.ptr) == (typed.dtype, typed.shape, typed.ptr)
        assert laid.ready_stream is None
    finally:
        buffer.close(allocation_stream)
        allocation_stream.sync()
        allocation_stream.close()


def test_numba_writes_through_a_view_from_cuda_core(gpu):
    """cuda.core memory (DLPack only) handed to numba-cuda (CAI only) through a view: numba's
    write lands in the cuda.core Buffer."""
    numba_cuda = gpu_import("numba.cuda")
    Device = gpu_import("cuda.core").Device

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    buffer = device.allocate(32, stream=stream)
    stream.sync()
    view = StridedMemoryView(core_view_class().from_buffer(buffer, (8,), None, dtype=np.dtype(np.float32)),
                             stream_ptr=-1)
    array = numba_cuda.as_cuda_array(view)
    array.copy_to_device(np.full(8, 3, np.float32))
    assert np.array_equal(read_device(int(buffer.handle), (8,), (4,), np.float32), np.full(8, 3, np.float32))
    buffer.close(stream)
    stream.sync()
    stream.close()


class SlowProducer:
    """NBYTES written late on a producer stream: FILLERS delayed operations, then the write."""

    FILLERS = 3

    def __init__(self, res, value=0x5A, nbytes=4096):
        from driver_support import CAIArray

        self.nbytes, self.value = nbytes, value
        self.stream = res.stream()
        self.memory = res.device(nbytes)
        self.scratch = res.device(64)
        self.out = res.pinned(nbytes)
        self.array = CAIArray(self.memory, (nbytes,), np.uint8, stream=self.stream.ptr)

    def write(self):
        from driver_support import drv, ok

        for _ in range(self.FILLERS):
            ok(drv.cuMemsetD8Async(self.scratch.ptr, 0, 64, self.stream.handle))
        ok(drv.cuMemsetD8Async(self.memory.ptr, self.value, self.nbytes, self.stream.handle))

    def read_on(self, stream_handle, ptr) -> bool:
        """Copy the bytes at ``ptr`` on ``stream_handle`` to pinned memory; whether all are new."""
        from driver_support import drv, ok

        ok(drv.cuMemcpyDtoHAsync(self.out.ptr, ptr, self.nbytes, stream_handle))
        ok(drv.cuStreamSynchronize(stream_handle))
        fresh = bool((self.out.array() == self.value).all())
        self.stream.synchronize()
        return fresh


@pytest.mark.simgpu
@pytest.mark.parametrize(
    "consumer_stream", ["stream", "none-is-legacy", pytest.param("minus-one", marks=pytest.mark.races)]
)
def test_export_handshake_orders_the_consumer(gpu, simulator, consumer_stream):
    """A view ready on the producer's stream, exported with __dlpack__(stream=S): S waits for the
    producer (a slow write is read complete); stream=None is the legacy default stream; -1
    orders nothing (the control: the stream-order checker reports the read, marked races;
    whether it reads stale bytes is up to the timing)."""
    slow = SlowProducer(gpu)
    view = StridedMemoryView(slow.array, stream_ptr=-1)
    assert view.ready_stream == slow.stream.ptr
    other = gpu.stream()
    simulator.set_delay_us(2000)
    slow.write()
    if consumer_stream == "stream":
        calls = [simulator.calls(name) for name in ("cuEventRecord", "cuStreamWaitEvent")]
        theirs = core_view_class().from_dlpack(view, stream_ptr=other.ptr)
        added = [simulator.calls(name) - n for name, n in zip(("cuEventRecord", "cuStreamWaitEvent"), calls)]
        assert added == [1, 1]  # one record on the producer's stream, one wait (none by cuda.core)
        fresh = slow.read_on(other.handle, theirs.ptr)
    elif consumer_stream == "none-is-legacy":
        view.__dlpack__(max_version=(1, 3))
        fresh = slow.read_on(0, view.ptr)
    else:
        theirs = core_view_class().from_dlpack(view, stream_ptr=-1)
        slow.read_on(other.handle, theirs.ptr)
        return
    assert fresh


@pytest.mark.simgpu
@pytest.mark.parametrize("ready", [2, "stream"], ids=["per-thread", "handle"])
def test_export_different_default_stream_ordered(gpu, simulator, ready):
    """A ready stream other than 1 (the per-thread default stream 2, an ordinary stream)
    exported with stream=None (1) is ordered: 2 and 1 are different streams, so one event is
    recorded on the ready stream and the legacy stream waits on it (the call log), and the
    legacy stream's read of the producer's write is ordered (the checker reports nothing)."""
    from test_gpu_ordering import Spot
    from test_gpu_stream_ordering import CallLog, Ordered

    spot = Spot(gpu)
    ready = gpu.stream().ptr if ready == "stream" else ready
    with Ordered(simulator):
        spot.write(ready, 0x5B)
        view = StridedMemoryView(spot.array(ready), stream_ptr=-1)
        assert view.ready_stream == ready
        view.device_id  # (resolved before the export: its only driver call is the ordering's)
        with CallLog(simulator) as log:
            view.__dlpack__(max_version=(1, 3))
        assert spot.read(1)
    records = [call.args for call in log.calls if call.name == "cuEventRecord"]
    waits = [call.args for call in log.calls if call.name == "cuStreamWaitEvent"]
    assert len(records) == len(waits) == 1
    assert records[0][1] == ready and waits[0] == (1, records[0][0], 0)


@pytest.mark.simgpu
@pytest.mark.parametrize("how", ["view-of-view", "dlpack-made-on-a-stream"])
def test_view_of_a_view_orders_the_new_stream(gpu, simulator, how):
    """A view, on stream S, of a view ready on the producer's stream: S waits for the producer,
    and the new view is ready on S; a DLPack view made on stream R orders an export to S after R."""
    from producers import make_producer

    slow = SlowProducer(gpu)
    other = gpu.stream()
    simulator.set_delay_us(2000)
    if how == "view-of-view":
        first = StridedMemoryView(slow.array, stream_ptr=-1)
        slow.write()
        again = StridedMemoryView(first, other.ptr)
        assert again.ready_stream == other.ptr
        assert slow.read_on(other.handle, again.ptr)
    else:
        producer = make_producer(shape=(slow.nbytes,), dtype="uint8", device=(2, 0), data=slow.memory.ptr)
        view = StridedMemoryView(producer, slow.stream.ptr)  # made on the producer's stream R
        assert view.ready_stream == slow.stream.ptr
        slow.write()
        core_view_class().from_dlpack(view, stream_ptr=other.ptr)
        assert slow.read_on(other.handle, view.ptr)


# --- CuPy, Numba and torch on a real GPU -------------------------------------------------------


@pytest.fixture(autouse=True)
def real_driver():
    """The real CUDA driver behind the seam, whatever an earlier test installed."""
    _driver.use_api(None)
    yield
    _driver.use_api(None)


def _torch():
    torch = gpu_import("torch")
    if not torch.cuda.is_available():
        pytest.fail("this machine has a CUDA GPU but torch has no CUDA: install torch with CUDA")
    return torch


def _cupy_array(device=0):
    cp = gpu_import("cupy")
    with cp.cuda.Device(device):
        return cp.asarray(HOST)[:, ::2]


def _numba_array(device=0):
    numba_cuda = gpu_import("numba.cuda")
    with numba_cuda.gpus[device]:
        return numba_cuda.to_device(HOST)[:, ::2]


def _torch_tensor(device=0):
    return _torch().as_tensor(HOST, device=f"cuda:{device}")[:, ::2]


#: name -> (make(device), address of element [0, 0], device ordinal, values as numpy)
PRODUCERS = {
    "cupy": (_cupy_array, lambda a: a.data.ptr, lambda a: a.device.id, lambda a: a.get()),
    "numba": (
        _numba_array, lambda a: a.__cuda_array_interface__["data"][0],
        lambda a: gpu_import("cupy").cuda.runtime.pointerGetAttributes(
            a.__cuda_array_interface__["data"][0]
        ).device,
        lambda a: a.copy_to_host(),
    ),
    "torch": (_torch_tensor, lambda t: t.data_ptr(), lambda t: t.device.index, lambda t: t.cpu().numpy()),
}

#: Which protocols each producer speaks.
PROTOCOLS = [("cupy", "dlpack"), ("cupy", "cai"), ("numba", "cai"), ("torch", "dlpack"), ("torch", "cai")]


def _view(obj, protocol, stream_ptr=-1):
    if protocol == "dlpack":
        return StridedMemoryView.from_dlpack(obj, stream_ptr=stream_ptr)
    return StridedMemoryView.from_cuda_array_interface(obj, stream_ptr=stream_ptr)


def _check_fields(view, obj, name, device):
    make, address, device_of, values = PRODUCERS[name]
    assert view.ptr == address(obj)
    assert view.shape == (4, 3)
    assert view.strides == (6, 2)
    assert view.dtype == np.dtype("float32")
    assert view.device_id == device == device_of(obj)
    assert view.is_device_accessible is True
    assert view.exporting_obj is obj
    np.testing.assert_array_equal(values(obj), EXPECTED)


@pytest.mark.real_gpu
@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_fields_match_the_producer(name, protocol):
    """A strided CUDA array viewed through each protocol it speaks has the producer's pointer, shape, strides, dtype and device."""
    obj = PRODUCERS[name][0](0)
    _check_fields(_view(obj, protocol), obj, name, 0)


@pytest.mark.real_gpu
@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_on_the_second_device(name, protocol):
    """An array on device 1, viewed while device 0 is current, reports device 1 and its own pointer."""
    cp = gpu_import("cupy")
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip(TWO_GPUS_SKIP_REASON)
    obj = PRODUCERS[name][0](1)
    with cp.cuda.Device(0):
        view = _view(obj, protocol)
    _check_fields(view, obj, name, 1)


def _consume_cupy_dlpack(view):
    cp = gpu_import("cupy")
    return cp.from_dlpack(view), lambda a: a.data.ptr, lambda a: a.get()


def _consume_cupy_cai(view):
    cp = gpu_import("cupy")
    return cp.asarray(view), lambda a: a.data.ptr, lambda a: a.get()


def _consume_numba_cai(view):
    numba_cuda = gpu_import("numba.cuda")
    return (
        numba_cuda.as_cuda_array(view),
        lambda a: a.__cuda_array_interface__["data"][0],
        lambda a: a.copy_to_host(),
    )


def _consume_torch_dlpack(view):
    torch = _torch()
    return torch.from_dlpack(view), lambda t: t.data_ptr(), lambda t: t.cpu().numpy()


CONSUMERS = {
    "cupy-dlpack": _consume_cupy_dlpack,
    "cupy-cai": _consume_cupy_cai,
    "numba-cai": _consume_numba_cai,
    "torch-dlpack": _consume_torch_dlpack,
}


@pytest.mark.real_gpu
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_handed_on_to_another_library(name, protocol, consumer):
    """A view of each producer, handed on to each consumer, gives it the same memory and the same values."""
    cp = gpu_import("cupy")
    obj = PRODUCERS[name][0](0)
    view = _view(obj, protocol, stream_ptr=cp.cuda.get_current_stream().ptr)
    received, address, values = CONSUMERS[consumer](view)
    assert address(received) == view.ptr
    np.testing.assert_array_equal(values(received), EXPECTED)


@pytest.mark.real_gpu
def test_gpu_numba_to_torch_bridge_writes_through():
    """Numba (CAI only) to torch (DLPack) through a view: a write in torch is seen by Numba."""
    torch = _torch()
    numba_cuda = gpu_import("numba.cuda")
    array = numba_cuda.to_device(np.zeros(8, dtype=np.float32))
    view = StridedMemoryView(array, stream_ptr=-1)
    tensor = torch.from_dlpack(view)
    tensor += 3
    torch.cuda.synchronize()
    np.testing.assert_array_equal(array.copy_to_host(), np.full(8, 3, dtype=np.float32))
