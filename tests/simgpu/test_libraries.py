"""Real GPU libraries on the simulated device: cuda.core and numba-cuda, unchanged.

Each library loads this process's libcuda.so.1 itself (the simulator under run.sh, the real
driver with SIMGPU_REAL_DRIVER=1); nothing here patches them.  What they do is checked
through the driver (cuda.bindings) and, on the simulator, through its call counters and
launch log.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from .simgpu_support import drv, ok

cuda_core = pytest.importorskip("cuda.core")
numba_cuda = pytest.importorskip("numba.cuda")

A = drv.CUpointer_attribute

PTX = rb"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry scale(
    .param .u64 scale_param_0,
    .param .f32 scale_param_1,
    .param .u64 scale_param_2
)
{
    ret;
}
""" + b"\0"


def device_ordinal(ptr: int) -> int:
    return ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr))


def to_host(ptr: int, nbytes: int) -> np.ndarray:
    out = np.zeros(nbytes, np.uint8)
    ok(drv.cuMemcpyDtoH(out.ctypes.data, ptr, nbytes))
    return out


# ---- cuda.core ------------------------------------------------------------------------------------


@pytest.fixture
def core_device(driver, primary):
    from cuda.core import Device

    dev = Device(0)
    dev.set_current()
    return dev


def test_cuda_core_devices(driver, device_count):
    """cuda.core sees every simulated device, its name, compute capability and UUID (its
    cuda.core.system counts come from NVML, which the simulator does not replace)."""
    from cuda.core import Device

    uuids = set()
    for i in range(device_count):
        dev = Device(i)
        assert dev.device_id == i
        assert tuple(dev.compute_capability) == ok(drv.cuDeviceComputeCapability(i))
        assert dev.name == ok(drv.cuDeviceGetName(64, i)).rstrip(b"\0 ").decode()
        assert dev.properties.multiprocessor_count > 0
        uuids.add(dev.uuid)
    assert len(uuids) == device_count


def test_cuda_core_stream_and_event(core_device, primary, sim):
    """cuda.core's streams and events are driver streams and events of the device's primary context."""
    stream = core_device.create_stream()
    try:
        assert int(ok(drv.cuStreamGetCtx(drv.CUstream(int(stream.handle))))) == int(primary[0])
        event = stream.record()
        event.sync()
        assert event.is_done
        other = core_device.create_stream()
        other.wait(event)
        other.sync()
        other.close()
    finally:
        stream.close()


def test_cuda_core_buffers_on_the_default_pool(core_device, sim):
    """device.allocate takes stream-ordered memory from the device's pool; buffer copies are byte-exact."""
    stream = core_device.create_stream()
    data = np.random.default_rng(4).integers(0, 256, 8192, np.uint8)
    try:
        src = core_device.allocate(8192, stream=stream)
        dst = core_device.allocate(8192, stream=stream)
        ptr = int(src.handle)
        assert device_ordinal(ptr) == 0
        pool = ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr))
        assert int(pool) == int(ok(drv.cuDeviceGetMemPool(0)))
        ok(drv.cuMemcpyHtoDAsync(ptr, data.ctypes.data, 8192, drv.CUstream(int(stream.handle))))
        src.copy_to(dst, stream=stream)
        stream.sync()
        assert (to_host(int(dst.handle), 8192) == data).all()
        dst.fill(7, stream=stream)
        stream.sync()
        assert (to_host(int(dst.handle), 8192) == 7).all()
        src.close(stream)
        dst.close(stream)
        stream.sync()
        if sim is not None:
            assert sim.calls("cuMemAllocFromPoolAsync") >= 2 and sim.calls("cuMemFreeAsync") >= 2
    finally:
        stream.close()


def test_cuda_core_strided_memory_view_over_device_buffer(core_device):
    """cuda.core's StridedMemoryView over a device Buffer (DLPack) describes the device memory."""
    from cuda.core.utils import StridedMemoryView

    stream = core_device.create_stream()
    try:
        buf = core_device.allocate(4096, stream=stream)
        view = StridedMemoryView.from_dlpack(buf, stream_ptr=int(stream.handle))
        assert view.ptr == int(buf.handle)
        assert view.shape == (4096,) and view.strides in (None, (1,))
        assert view.device_id == 0 and view.is_device_accessible and not view.readonly
        assert buf.__dlpack_device__() == (2, 0)  # kDLCUDA, device 0
        buf.close(stream)
    finally:
        stream.close()


def test_cuda_core_pinned_host_buffers(core_device):
    """A pinned host Buffer (cuda.core's LegacyPinnedMemoryResource) copies to and from device
    Buffers byte-exact, and the driver knows it as host memory of device 0."""
    from cuda.core import LegacyPinnedMemoryResource

    stream = core_device.create_stream()
    pinned = LegacyPinnedMemoryResource()
    data = np.random.default_rng(6).integers(0, 256, 4096, np.uint8)
    try:
        host_in = pinned.allocate(4096, stream=stream)
        host_out = pinned.allocate(4096, stream=stream)
        assert host_in.is_host_accessible
        ctypes.memmove(int(host_in.handle), data.ctypes.data, 4096)
        ctypes.memset(int(host_out.handle), 0, 4096)
        assert ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, int(host_in.handle))) == \
            drv.CUmemorytype.CU_MEMORYTYPE_HOST
        dev_buf = core_device.allocate(4096, stream=stream)
        dev_buf.copy_from(host_in, stream=stream)
        host_out.copy_from(dev_buf, stream=stream)
        stream.sync()
        assert ctypes.string_at(int(host_out.handle), 4096) == data.tobytes()
        dev_buf.close(stream)
        host_in.close(stream)
        host_out.close(stream)
    finally:
        stream.close()


def test_cuda_core_tensor_map(core_device):
    """cuda.core's as_tensor_map encodes through the driver's cuTensorMapEncodeTiled."""
    from cuda.core.utils import StridedMemoryView

    import numba.cuda as ncuda

    arr = ncuda.device_array((64, 32), dtype=np.float32)
    view = StridedMemoryView.from_cuda_array_interface(arr, stream_ptr=-1)
    tmap = view.as_tensor_map(box_dim=(8, 8))
    assert tmap is not None


def test_cuda_core_kernel_launch_is_logged(core_device, sim):
    """A kernel from ObjectCode.from_ptx launched with cuda.core's launch() runs in stream order;
    the simulator logs its arguments as the kernel would receive them."""
    from cuda.core import LaunchConfig, ObjectCode, launch

    kernel = ObjectCode.from_ptx(PTX).get_kernel("scale")
    assert kernel.num_arguments == 3
    stream = core_device.create_stream()
    try:
        buf = core_device.allocate(1024, stream=stream)
        before = sim.launch_count() if sim else 0
        launch(stream, LaunchConfig(grid=(4, 1, 1), block=(256, 1, 1)), kernel, buf,
               np.float32(2.5), np.uint64(1024))
        stream.sync()
        if sim is not None:
            entry = sim.launch(before)
            assert entry["name"] == "scale" and entry["executed"]
            assert entry["grid"] == (4, 1, 1) and entry["block"] == (256, 1, 1)
            assert entry["param_sizes"] == (8, 4, 8)
            ptr, scale, n = np.frombuffer(entry["params"][:8], np.uint64)[0], \
                np.frombuffer(entry["params"][8:12], np.float32)[0], np.frombuffer(entry["params"][16:24], np.uint64)[0]
            assert (int(ptr), float(scale), int(n)) == (int(buf.handle), 2.5, 1024)
            assert entry["stream"] == int(stream.handle)
        buf.close(stream)
    finally:
        stream.close()


# ---- numba-cuda -------------------------------------------------------------------------------------


def test_numba_sees_the_devices(driver, device_count):
    """numba-cuda finds the simulated devices through the same driver."""
    from numba import cuda

    assert cuda.is_available()
    assert len(cuda.gpus) == device_count
    assert cuda.get_current_device().compute_capability == ok(drv.cuDeviceComputeCapability(0))


def test_numba_to_device_and_back_on_a_stream(driver, sim):
    """numba.cuda.to_device on a stream, its __cuda_array_interface__ and copy_to_host are exact."""
    from numba import cuda

    if sim is not None:
        sim.set_delay_us(2000)
    host = np.random.default_rng(5).standard_normal((33, 17)).astype(np.float64)
    stream = cuda.stream()
    darr = cuda.to_device(host, stream=stream)
    cai = darr.__cuda_array_interface__
    assert cai["shape"] == (33, 17) and cai["typestr"] == "<f8" and cai["version"] == 3
    assert cai["stream"] == int(stream.handle)
    ptr = cai["data"][0]
    assert device_ordinal(ptr) == 0
    assert ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)) == drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    back = darr.copy_to_host(stream=stream)
    stream.synchronize()
    assert back.tobytes() == host.tobytes()
    strided = darr[::2, 1:]
    assert strided.__cuda_array_interface__["strides"] == (2 * 17 * 8, 8)
    assert (strided.copy_to_host() == host[::2, 1:]).all()


def test_numba_device_array_on_the_second_device(driver, two_devices):
    """A numba device array made under device 1 lives on device 1."""
    from numba import cuda

    with cuda.gpus[1]:
        darr = cuda.to_device(np.arange(100, dtype=np.int32))
        ptr = darr.__cuda_array_interface__["data"][0]
        assert (darr.copy_to_host() == np.arange(100)).all()
    assert device_ordinal(ptr) == 1


@pytest.mark.parametrize("use_nvidia_binding", ["0", "1"])
def test_numba_either_binding_setting(driver, use_nvidia_binding):
    """numba-cuda works with NUMBA_CUDA_USE_NVIDIA_BINDING unset-like (0) and 1: this numba-cuda
    always drives the GPU through cuda.bindings, the variable only chooses a check."""
    from .simgpu_support import run_python

    result = run_python(
        "import numpy as np\n"
        "from numba import cuda\n"
        "a = np.arange(256, dtype=np.uint32)\n"
        "s = cuda.stream()\n"
        "d = cuda.to_device(a, stream=s)\n"
        "print((d.copy_to_host(stream=s) == a).all())\n",
        env={"NUMBA_CUDA_USE_NVIDIA_BINDING": use_nvidia_binding},
    )
    assert result.stdout.strip() == "True", result.stderr


def test_numba_array_through_cuda_core_view(core_device, sim):
    """A numba array handed to cuda.core's StridedMemoryView through the CAI keeps its layout;
    a consumer stream other than the producer's is ordered after it (a driver wait)."""
    from cuda.core.utils import StridedMemoryView
    from numba import cuda

    producer = cuda.stream()
    darr = cuda.to_device(np.arange(24, dtype=np.int16).reshape(4, 6), stream=producer)
    consumer = core_device.create_stream()
    try:
        waits = sim.calls("cuStreamWaitEvent") if sim else 0
        view = StridedMemoryView.from_cuda_array_interface(darr, stream_ptr=int(consumer.handle))
        assert view.ptr == darr.__cuda_array_interface__["data"][0]
        assert view.shape == (4, 6) and view.dtype == np.int16 and view.device_id == 0
        if sim is not None:
            assert sim.calls("cuStreamWaitEvent") > waits
        consumer.sync()
    finally:
        consumer.close()


def test_library_calls_stay_within_the_simulator(sim_only):
    """Every entry point the libraries called is one the simulator implements (a summary)."""
    report = sim_only.calls_report()
    assert "cuInit" in report and report["cuInit"] >= 1
    assert all(count > 0 for count in report.values())
