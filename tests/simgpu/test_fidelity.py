"""Driver rules found by running a peer's GPU suite (cuda.core's) on the simulated GPU.

Each test names a place where the simulator once answered unlike a driver: an entry point a
library calls without being asked to (``cuGetExportTable``), a forked child, zero-byte
stream-ordered allocations, memory pools of the host and of managed memory, device attributes
that promise entry points, the occupancy queries, the 2-D copies' maximum pitch and the trace.
Like ``test_conformance.py``, the file uses ``cuda.bindings.driver`` (and ``ctypes`` on
``libcuda.so.1``) only, so it runs against a real driver too (``SIMGPU_REAL_DRIVER=1``); the
checks of the simulator's own choices are made only when ``sim`` is not None, or skip
(``sim_only``).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from .simgpu_support import SUCCESS, CUresult, drv, ok, run_python
from .test_conformance import PREAMBLE, PRIMARY_PREAMBLE, PTX

E = CUresult
A = drv.CUdevice_attribute
L = drv.CUmemLocationType
T = drv.CUmemAllocationType


def attribute(attr, dev=0) -> int:
    return ok(drv.cuDeviceGetAttribute(attr, ok(drv.cuDeviceGet(dev))))


def entry_point_found(symbol: str, version: int = 13000) -> bool:
    """Whether cuGetProcAddress hands out ``symbol`` for CUDA ``version``."""
    flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    err, fn, status = drv.cuGetProcAddress(symbol.encode(), version, flags)
    return err == SUCCESS and int(fn) != 0


# ---- private export tables ------------------------------------------------------------------


def test_export_table_answers_an_unknown_id(driver, sim):
    """cuGetExportTable exists (as a symbol and through cuGetProcAddress): libraries such as
    NVRTC call it unasked, and NVRTC 13 crashed at its first compile where it was missing.  An
    id the driver does not know is refused with a NULL table."""
    lib = ctypes.CDLL("libcuda.so.1")
    get_table = lib.cuGetExportTable
    get_table.restype = ctypes.c_int
    get_table.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    assert entry_point_found("cuGetExportTable")
    table = ctypes.c_void_p(0x1234)
    made_up = bytes(range(0xA0, 0xB0))  # no driver hands out a table for this id
    result = get_table(ctypes.byref(table), made_up)
    assert result != 0 and table.value is None
    if sim is not None:
        assert result == int(E.CUDA_ERROR_NOT_FOUND)
        assert get_table(None, made_up) == int(E.CUDA_ERROR_INVALID_VALUE)


# ---- processes ------------------------------------------------------------------------------


FORK_CHILD = PRIMARY_PREAMBLE + """
import os, select, time
try:
    ctypes.CDLL("libcuda.so.1").simgpu_set_delay_us(300000)  # the simulator: work stays queued
except AttributeError:
    pass
stream = ok(drv.cuStreamCreate(0))
event = ok(drv.cuEventCreate(0))
ptr = ok(drv.cuMemAlloc(1 << 20))
for _ in range(4):
    ok(drv.cuMemsetD8Async(ptr, 7, 1 << 20, stream))
ok(drv.cuEventRecord(event, stream))
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    # Two sequences, each as measured on driver 580 (a child whose first calls differ was
    # not measured: after cuInit answered NOT_INITIALIZED there, the handle calls did not
    # report back).
    if sys.argv[1] == "six":
        codes = [drv.cuEventSynchronize(event)[0], drv.cuStreamSynchronize(stream)[0],
                 drv.cuCtxSynchronize()[0], drv.cuInit(0)[0], drv.cuDeviceGetCount()[0],
                 drv.cuMemAlloc(64)[0]]
    else:
        codes = [drv.cuEventQuery(event)[0], drv.cuStreamQuery(stream)[0],
                 drv.cuEventSynchronize(event)[0], drv.cuStreamSynchronize(stream)[0],
                 drv.cuEventRecord(event, stream)[0], drv.cuStreamWaitEvent(stream, event, 0)[0],
                 drv.cuStreamGetCtx(stream)[0], drv.cuCtxGetCurrent()[0],
                 drv.cuStreamIsCapturing(stream)[0], drv.cuEventDestroy(event)[0],
                 drv.cuCtxSynchronize()[0]]
    os.write(write, " ".join(str(int(c)) for c in codes).encode())
    os._exit(0)
os.close(write)
ready, _, _ = select.select([read], [], [], 30)
if not ready:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
    sys.exit(1)
answer = os.read(read, 1000).decode()
os.waitpid(pid, 0)
ok(drv.cuEventSynchronize(event))  # the parent's driver is untouched
print("codes", answer)
"""


def test_forked_child_is_refused_not_hung(sim_only):
    """A child forked after cuInit cannot use the driver, and nothing there waits for work the
    parent had queued.  As driver 580 did on an H200: the calls naming the parent's stream or
    event (query, synchronize, record, wait, cuStreamGetCtx, cuStreamIsCapturing,
    cuEventDestroy) answer CUDA_SUCCESS at once, doing nothing; cuInit, cuDeviceGetCount,
    cuMemAlloc, cuCtxGetCurrent and cuCtxSynchronize answer NOT_INITIALIZED.  The parent's
    driver goes on working.  Simulator-only: on the H200 each sequence answered so once, but
    a later run of both in a row did not finish within 60 s (a fork of a process whose
    driver runs threads: the child may deadlock), so a real driver promises no answer."""
    success, refused = str(int(SUCCESS)), str(int(E.CUDA_ERROR_NOT_INITIALIZED))
    expected = {
        "six": [success] * 2 + [refused] * 4,
        "handles": [success] * 7 + [refused] + [success] * 2 + [refused],
    }
    for sequence, codes in expected.items():
        result = run_python(FORK_CHILD, timeout=90, args=[sequence])
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.split("codes", 1)[-1].split() == codes, (sequence, result.stdout)


# ---- memory ---------------------------------------------------------------------------------


def test_zero_byte_stream_ordered_allocations(res):
    """cuMemAllocAsync and cuMemAllocFromPoolAsync of zero bytes succeed, and what they give
    is freed with cuMemFreeAsync in stream order.  (A destroyed stream named there ends the
    process, as on a real driver: test_conformance.py's test_a_gone_handle_named_again.)"""
    stream = res.stream()
    pool = ok(drv.cuDeviceGetDefaultMemPool(ok(drv.cuDeviceGet(0))))
    first = ok(drv.cuMemAllocAsync(0, stream))
    second = ok(drv.cuMemAllocFromPoolAsync(0, pool, stream))
    ok(drv.cuMemFreeAsync(first, stream))
    ok(drv.cuMemFreeAsync(second, stream))
    ok(drv.cuStreamSynchronize(stream))


def location(kind, ident=0):
    loc = drv.CUmemLocation()
    loc.type = kind
    loc.id = ident
    return loc


def test_mem_pool_per_location_and_allocation_type(primary):
    """cuMemGetMemPool and cuMemGetDefaultMemPool take the (location, allocation type) pairs
    CUDA 13 documents: a pair the device has no pool for is NOT_SUPPORTED, and the device
    attributes say which (HOST_MEMORY_POOLS_SUPPORTED, HOST_NUMA_MEMORY_POOLS_SUPPORTED, and
    CONCURRENT_MANAGED_ACCESS for managed pools); any other pair is INVALID_VALUE."""
    device_pool = int(ok(drv.cuDeviceGetMemPool(ok(drv.cuDeviceGet(0)))))
    pinned, managed = T.CU_MEM_ALLOCATION_TYPE_PINNED, T.CU_MEM_ALLOCATION_TYPE_MANAGED
    assert int(ok(drv.cuMemGetMemPool(location(L.CU_MEM_LOCATION_TYPE_DEVICE), pinned))) == device_pool
    host_pools = attribute(A.CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED)
    numa_pools = attribute(A.CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED)
    managed_pools = attribute(A.CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)
    documented = [
        (location(L.CU_MEM_LOCATION_TYPE_HOST), pinned, host_pools),
        (location(L.CU_MEM_LOCATION_TYPE_HOST_NUMA), pinned, numa_pools),
        (location(L.CU_MEM_LOCATION_TYPE_DEVICE), managed, managed_pools),
        (location(L.CU_MEM_LOCATION_TYPE_HOST), managed, managed_pools),
        (location(L.CU_MEM_LOCATION_TYPE_INVALID), managed, managed_pools),  # NONE: no preferred location
    ]
    for get in (drv.cuMemGetMemPool, drv.cuMemGetDefaultMemPool):
        for loc, kind, supported in documented:
            expected = SUCCESS if supported else E.CUDA_ERROR_NOT_SUPPORTED
            assert get(loc, kind)[0] == expected, (get.__name__, loc.type, kind)
        # Not documented: no location for pinned memory, an invalid allocation type.
        assert get(location(L.CU_MEM_LOCATION_TYPE_INVALID), pinned)[0] == E.CUDA_ERROR_INVALID_VALUE
        assert get(location(L.CU_MEM_LOCATION_TYPE_DEVICE), T.CU_MEM_ALLOCATION_TYPE_INVALID)[0] == \
            E.CUDA_ERROR_INVALID_VALUE
    if not managed_pools:
        props = drv.CUmemPoolProps()
        props.allocType = managed
        props.location = location(L.CU_MEM_LOCATION_TYPE_DEVICE)
        assert drv.cuMemPoolCreate(props)[0] == E.CUDA_ERROR_NOT_SUPPORTED


# Each attribute that promises a feature, and entry points that feature needs.
PROMISES = [
    (A.CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
     ["cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess", "cuMemRelease"]),
    (A.CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, ["cuMemCreate", "cuMemMap"]),
    (A.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
     ["cuMemExportToShareableHandle", "cuMemImportFromShareableHandle"]),
    (A.CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
     ["cuMemPoolExportToShareableHandle", "cuMemPoolImportFromShareableHandle"]),
    (A.CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, ["cuIpcGetEventHandle", "cuIpcOpenEventHandle"]),
    (A.CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, ["cuStreamWriteValue64", "cuStreamWaitValue64"]),
    (A.CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, ["cuStreamWaitValue32"]),
    (A.CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, ["cuImportExternalSemaphore"]),
    (A.CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED, ["cuArrayCreate", "cuMemMapArrayAsync"]),
    (A.CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, ["cuArrayCreate"]),
    (A.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ["cuMemAllocAsync", "cuMemPoolCreate"]),
    (A.CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, ["cuLaunchKernelEx", "cuOccupancyMaxActiveClusters"]),
]


@pytest.mark.parametrize("attr, symbols", PROMISES, ids=[a.name for a, _ in PROMISES])
def test_attributes_promise_only_present_entry_points(driver, device_count, attr, symbols):
    """A device attribute that says a feature is there comes with the feature's entry points,
    so a library gating on the attribute skips where they are missing instead of failing."""
    for dev in range(device_count):
        if attribute(attr, dev):
            missing = [s for s in symbols if not entry_point_found(s)]
            assert not missing, f"{attr.name} is set but {missing} are not found"


# ---- occupancy ------------------------------------------------------------------------------


def launch_config(grid, block, cluster=None, shared=0):
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = shared
    if cluster is not None:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        config.attrs = [attr]
        config.numAttrs = 1
    return config


@pytest.fixture
def kernel(primary):
    module = ok(drv.cuModuleLoadData(PTX))
    yield ok(drv.cuModuleGetFunction(module, b"empty"))
    ok(drv.cuModuleUnload(module))


def test_occupancy_queries(kernel):
    """The occupancy entry points cuda.core's KernelOccupancy calls answer within the device's
    limits (blocks and threads per multiprocessor, shared memory per block)."""
    max_blocks = attribute(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)
    max_threads = attribute(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
    max_shared = attribute(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    for block in (32, 128, 1024):
        n = ok(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, block, 0))
        assert 1 <= n <= max_blocks and n * block <= max_threads
        assert ok(drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(kernel, block, 0, 0)) == n
    # More dynamic shared memory than a block may have: no block is resident.
    assert ok(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, 128, max_shared + 1)) == 0
    min_grid, block = ok(drv.cuOccupancyMaxPotentialBlockSize(kernel, None, 0, 256))
    assert 0 < block <= 256 and min_grid > 0
    assert ok(drv.cuOccupancyMaxPotentialBlockSizeWithFlags(kernel, None, 0, 256, 0)) == (min_grid, block)
    # At most what the function may use (48 KiB unless raised), less with more blocks.
    function_max = ok(drv.cuFuncGetAttribute(
        drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel))
    assert 0 < function_max <= max_shared
    one = ok(drv.cuOccupancyAvailableDynamicSMemPerBlock(kernel, 1, 128))
    eight = ok(drv.cuOccupancyAvailableDynamicSMemPerBlock(kernel, 8, 128))
    assert one == function_max and 0 < eight < one
    stream = ok(drv.cuStreamCreate(0))
    try:
        config = launch_config(128, 64)
        config.hStream = stream
        assert ok(drv.cuOccupancyMaxPotentialClusterSize(kernel, config)) >= 1
        # No cluster-dimension attribute: no clusters (driver 580 on an H200 answered 0).
        assert ok(drv.cuOccupancyMaxActiveClusters(kernel, config)) == 0
        clustered = launch_config(128, 64, cluster=2)
        clustered.hStream = stream
        assert ok(drv.cuOccupancyMaxActiveClusters(kernel, clustered)) >= 1
    finally:
        ok(drv.cuStreamDestroy(stream))


# ---- copies ---------------------------------------------------------------------------------


def copy_2d(dst_dev, src_host, width, height, src_pitch, dst_pitch):
    d = drv.CUDA_MEMCPY2D()
    d.srcMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_HOST
    d.srcHost = src_host
    d.srcPitch = src_pitch
    d.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    d.dstDevice = dst_dev
    d.dstPitch = dst_pitch
    d.WidthInBytes = width
    d.Height = height
    return d


def test_memcpy2d_pitch_above_the_maximum(res, sim):
    """A pitch above CU_DEVICE_ATTRIBUTE_MAX_PITCH in a one-row cuMemcpy2D or cuMemcpy2DAsync,
    where the pitch is never used, is accepted and the row copied (driver 580 on an H200
    accepted it, on either side, though the documentation says the 2-D copies refuse such a
    pitch); a pitch of exactly the maximum is accepted.  With two rows the simulator keeps the
    documented refusal (not measured on a real driver: simulator only)."""
    max_pitch = attribute(A.CU_DEVICE_ATTRIBUTE_MAX_PITCH)
    src = np.arange(64, dtype=np.uint8)
    dev = res.alloc(64)
    stream = res.stream()
    host = src.ctypes.data
    back = np.zeros(16, dtype=np.uint8)
    for offset, pitches in enumerate(((max_pitch + 1, 64), (64, max_pitch + 1), (max_pitch, max_pitch))):
        ok(drv.cuMemsetD8(dev, 0xFF, 64))
        ok(drv.cuMemcpy2D(copy_2d(dev, host + offset, 16, 1, *pitches)))
        ok(drv.cuMemcpyDtoH(back.ctypes.data, dev, 16))
        assert back.tolist() == list(range(offset, offset + 16)), pitches
        ok(drv.cuMemsetD8(dev, 0xFF, 64))
        ok(drv.cuMemcpy2DAsync(copy_2d(dev, host + offset, 16, 1, *pitches), stream))
        ok(drv.cuStreamSynchronize(stream))
        ok(drv.cuMemcpyDtoH(back.ctypes.data, dev, 16))
        assert back.tolist() == list(range(offset, offset + 16)), pitches
    if sim is not None:
        for pitches in ((max_pitch + 1, 64), (64, max_pitch + 1)):
            assert drv.cuMemcpy2D(copy_2d(dev, host, 16, 2, *pitches))[0] == E.CUDA_ERROR_INVALID_VALUE
            assert drv.cuMemcpy2DAsync(copy_2d(dev, host, 16, 2, *pitches), stream)[0] == \
                E.CUDA_ERROR_INVALID_VALUE


# ---- the simulator's own switches -----------------------------------------------------------


def test_trace_levels(sim_only):
    """SIMGPU_TRACE=1 traces each call; 2 adds every cuGetProcAddress lookup; other values are
    refused with a message naming the accepted range."""
    script = PREAMBLE + "ok(drv.cuInit(0)); print(ok(drv.cuDeviceGetCount()))"
    one = run_python(script, env={"SIMGPU_TRACE": "1"})
    two = run_python(script, env={"SIMGPU_TRACE": "2"})
    three = run_python(script, env={"SIMGPU_TRACE": "3"})
    for result in (one, two, three):
        assert result.returncode == 0, result.stderr
    assert "cuDeviceGetCount -> 0 CUDA_SUCCESS" in one.stderr and "cuGetProcAddress(" not in one.stderr
    assert "cuDeviceGetCount -> 0 CUDA_SUCCESS" in two.stderr
    assert "cuGetProcAddress(cuDeviceGetCount, " in two.stderr and "ignoring" not in two.stderr
    assert "ignoring SIMGPU_TRACE=3 (expected an integer in [0, 2])" in three.stderr
    assert "cuDeviceGetCount ->" not in three.stderr
