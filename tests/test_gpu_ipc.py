"""Device views sent to another process (CUDA IPC), on the simulated device or a real GPU.

A parent process pickles views of its device memory into a ``multiprocessing`` queue (spawn);
a consumer process (tests/ipc_peers.py) unpickles them and views them on its own stream.
Order is proven by gates (a host function holding a stream until the test opens it), never
by a delay: the producer's write sits behind a gate when the view is pickled, and the
consumer's copy is queued, not done, until the gate opens, then reads what was written.
Lifetime the same way: the consumer writes on a gated stream and lets go; the parent's hold
stays until the gate opens and the consumer's stream is done.  The exporter's and the
importer's deaths are real process exits.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time

import numpy as np
import pytest

from stridedview import StridedMemoryView

pytestmark = [pytest.mark.gpu]

MARK = 0x5A


def start_peer(method="spawn"):
    """A consumer process (spawn or forkserver: a fresh driver, never a forked one)."""
    import ipc_peers

    context = multiprocessing.get_context(method)
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=ipc_peers.consumer, args=(inbox, outbox), daemon=True)
    process.start()
    return Peer(inbox, outbox, process)


def stop_peer(peer):
    peer.inbox.put(None)
    peer.process.join(20)
    if peer.process.is_alive():
        peer.process.kill()


@pytest.fixture(scope="module")
def peer():
    """One consumer process for the module's tests."""
    started = start_peer()
    yield started
    stop_peer(started)


class Peer:
    def __init__(self, inbox, outbox, process):
        self.inbox, self.outbox, self.process = inbox, outbox, process

    def ask(self, *request, expect=None):
        self.inbox.put(request)
        return self.answer(expect)

    def answer(self, expect=None):
        reply = self.outbox.get(timeout=60)
        if reply[0] == "error" and expect != "error":
            pytest.fail(f"the consumer process failed: {reply[1]}: {reply[2]}")
        if expect is not None:
            assert reply[0] == expect, reply
        return reply


def shares_held():
    from stridedview import ipc

    return ipc.shares_held()


def wait_for(predicate, timeout=20.0):
    """Poll ``predicate`` (an answer arriving from another process) up to ``timeout`` s."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def producer_view(gpu, shape, dtype, *, strides=None, offset=0, gate=False):
    """A view of fresh device memory, its bytes set to MARK on a producer stream (behind a
    gate if asked), viewed on a second stream: its ready_stream."""
    import driver_support
    from simgpu.simgpu_support import Gate

    itemsize = np.dtype(dtype).itemsize
    memory = gpu.device(4096)
    memory.upload(np.zeros(4096, np.uint8))
    produce, view_stream = gpu.stream(), gpu.stream()
    opened = Gate(timeout=30).enqueue(produce.handle) if gate else None
    driver_support.ok(driver_support.drv.cuMemsetD8Async(memory.ptr, MARK, 4096, produce.handle))
    array = driver_support.CAIArray(memory, shape, dtype, strides=strides, offset=offset, stream=produce.ptr)
    view = StridedMemoryView(array, stream_ptr=view_stream.ptr)
    assert view.itemsize == itemsize
    return view, memory, opened


def test_a_view_received_in_another_process_reads_what_was_written_after_its_gate(gpu, peer):
    """The producer's write is behind a gate when the view is pickled; the consumer's copy on
    its own stream is queued but not done until the gate opens, then sees every byte."""
    view, memory, gate = producer_view(gpu, (8, 16), np.float32, gate=True)
    peer.inbox.put(("read", view, 512))
    queued = peer.answer("queued")
    assert queued[1] is False, "the consumer's copy finished while the producer's write was gated"
    assert queued[2] == {"shape": (8, 16), "strides": (16, 1), "dtype": "float32", "readonly": False, "device_id": 0}
    gate.open()
    peer.inbox.put("finish")
    _, data, offset = peer.answer("bytes")
    assert offset == 0 and data == bytes([MARK]) * 512


def test_a_forkserver_child_receives_views_too(gpu):
    """multiprocessing's forkserver method: the child (forked from a server that never
    loaded the driver) reads what was written behind the gate, after it opened."""
    forkserver = start_peer("forkserver")
    try:
        view, memory, gate = producer_view(gpu, (256,), np.uint8, gate=True)
        forkserver.inbox.put(("read", view, 256))
        assert forkserver.answer("queued")[1] is False
        gate.open()
        forkserver.inbox.put("finish")
        assert forkserver.answer("bytes")[1] == bytes([MARK]) * 256
    finally:
        stop_peer(forkserver)


def test_memory_imported_from_another_process_is_not_sent_on(gpu, peer):
    """The importer pickling its view of imported memory again: refused (the driver cannot
    export an imported mapping), saying so; its allocation facts say it is not shareable."""
    view, memory, _ = producer_view(gpu, (64,), np.uint8)
    peer.inbox.put(("repickle", view))
    reply = peer.answer("refused")
    assert reply[1].startswith("ipc: cannot pickle a view of device memory at ")
    assert "memory imported from another process" in reply[1]
    assert reply[2:] == ("device", False)


@pytest.mark.parametrize(
    "shape, strides, offset",
    [((4, 8), (-32, 1), 3 * 128), ((8, 4), (1, 8), 0), ((2, 3, 4), (48, -4, 2), 8 * 4 * 2)],
    ids=["negative rows", "transposed", "3-d negative middle"],
)
def test_the_layout_travels(gpu, peer, shape, strides, offset):
    """Shape, strides in elements (negative too) and element [0, ..., 0] inside the span arrive
    as the exporter's view has them."""
    byte_strides = tuple(s * 4 for s in strides)
    view, memory, _ = producer_view(gpu, shape, np.int32, strides=byte_strides, offset=offset)
    low, high = view.byte_bounds
    peer.inbox.put(("read", view, high - low))
    queued = peer.answer("queued")
    assert queued[2]["shape"] == shape and queued[2]["strides"] == strides
    peer.inbox.put("finish")
    _, data, ptr_offset = peer.answer("bytes")
    assert ptr_offset == view.ptr - low
    assert data == bytes([MARK]) * (high - low)


@pytest.mark.parametrize("code, bits, lanes", [(4, 16, 1), (2, 32, 4), (0, 8, 1)], ids=["bfloat16", "float32x4", "int8"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
def test_the_exact_dlpack_type_travels(gpu, peer, code, bits, lanes, reverse):
    """bfloat16, a vector type (numpy sees opaque 16-byte items) and int8, forward and with a
    negative stride: the received view has the exporter's exact DLPack type and layout."""
    from stridedview import DLPackDType

    bytes_view, memory, _ = producer_view(gpu, (512,), np.uint8)
    view = bytes_view.view(dtype=DLPackDType(code, bits, lanes))
    if reverse:
        view = view[::-1]
    peer.inbox.put(("fields_of", view))
    fields = peer.answer("fields")[1]
    assert (fields["dlpack_dtype"], fields["shape"], fields["strides"]) == ((code, bits, lanes), view.shape, view.strides)


def test_the_exporter_keeps_the_memory_until_the_importers_stream_is_done(gpu, peer):
    """The consumer fills the view on a gated stream, records the stream and lets go; the
    exporter's share stays held while the gate is shut, goes once it opens, and the parent
    then reads the consumer's bytes."""
    view, memory, _ = producer_view(gpu, (256,), np.uint8)
    before = shares_held()
    peer.inbox.put(("write", view, 0x33, True))
    del view
    peer.answer("dropped")
    time.sleep(0.05)
    assert shares_held() == before + 1, "the exporter let go while the importer's stream was gated"
    peer.inbox.put("open")
    peer.answer("opened")
    assert wait_for(lambda: shares_held() == before), "the importer's release never arrived"
    assert memory.download(256).tolist() == [0x33] * 256


def test_a_ticket_is_redeemed_once(gpu, peer):
    """The same pickled bytes unpickled by a second importer: BufferError naming the ticket."""
    view, memory, _ = producer_view(gpu, (64,), np.uint8)
    record = pickle.dumps(view)
    peer.inbox.put(("view", _Raw(record), -1))
    peer.answer("fields")
    peer.inbox.put(("view", _Raw(record), -1))
    reply = peer.answer("error")
    assert reply[1] == "BufferError" and "redeemed by one importer" in reply[2]


class _Raw:
    """Pickled bytes that unpickle, in the receiving process, into what they pickled."""

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return (pickle.loads, (self.data,))


def test_an_importer_that_dies_releases_its_share(gpu):
    """A consumer that received a view and exits without letting go: the exporter's share
    goes when its socket closes (process liveness, no timeout)."""
    import ipc_peers

    context = multiprocessing.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=ipc_peers.consumer, args=(inbox, outbox), daemon=True)
    process.start()
    view, memory, _ = producer_view(gpu, (64,), np.uint8)
    before = shares_held()
    inbox.put(("hold", view))
    assert outbox.get(timeout=60)[0] == "held"
    del view
    assert shares_held() == before + 1
    inbox.put(("exit", 9))
    process.join(30)
    assert process.exitcode == 9
    assert wait_for(lambda: shares_held() == before), "the dead importer's share was kept"


def test_host_views_pickle_by_value_and_unshareable_memory_is_refused(gpu):
    """A host view pickles as a copy of its elements; managed and pinned memory are refused
    at pickling, naming why and what to allocate instead."""
    host = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::-1]
    copy = pickle.loads(pickle.dumps(StridedMemoryView(host, stream_ptr=-1)))
    assert np.asarray(copy).tolist() == host.tolist()
    import driver_support

    managed = gpu.managed(256)
    view = StridedMemoryView(driver_support.CAIArray(managed, (256,), np.uint8), stream_ptr=-1)
    assert view.allocation.kind == "managed" and not view.allocation.shareable
    with pytest.raises(BufferError, match=r"ipc: cannot pickle a view of managed memory .*cuMemAlloc"):
        pickle.dumps(view)
    pinned = gpu.pinned(256)
    view = StridedMemoryView(driver_support.CAIArray(pinned, (256,), np.uint8), stream_ptr=-1)
    assert (view.allocation.kind, view.allocation.shareable, view.allocation.device_id) == ("pinned", False, -1)
    with pytest.raises(BufferError, match=r"ipc: cannot pickle a view of pinned memory .*cannot be shared through CUDA IPC"):
        pickle.dumps(view)


def test_allocation_facts(gpu):
    """``view.allocation``: base and size of the whole cuMemAlloc allocation (the view at an
    offset into it), kind device, shareable; managed memory is managed."""
    import driver_support

    memory = gpu.device(4096)
    view = StridedMemoryView(driver_support.CAIArray(memory, (16,), np.float32, offset=256), stream_ptr=-1)
    facts = view.allocation
    assert (facts.base, facts.kind, facts.shareable, facts.device_id) == (memory.ptr, "device", True, 0)
    assert facts.size >= 4096


def test_an_exporter_that_exits_first(gpu):
    """A view received from a process that then exits: viewing it again is a BufferError
    naming that process (its memory is gone with it on a real GPU); before, it read fine."""
    import driver_support
    import ipc_peers

    context = multiprocessing.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=ipc_peers.producer, args=(inbox, outbox), daemon=True)
    process.start()
    inbox.put(("make", 1024, 0x77))
    kind, received = outbox.get(timeout=60)
    assert kind == "view" and received.exporter_pid == process.pid and received.exporter_alive
    stream = gpu.stream()
    view = StridedMemoryView(received, stream_ptr=stream.ptr)
    out = np.zeros(1024, np.uint8)
    driver_support.ok(driver_support.drv.cuMemcpyDtoHAsync(out.ctypes.data, view.ptr, 1024, stream.handle))
    stream.synchronize()
    assert out.tolist() == [0x77] * 1024
    del view
    inbox.put(("exit", 0))
    process.join(30)
    assert wait_for(lambda: not received.exporter_alive)
    with pytest.raises(BufferError, match=rf"ipc: the exporting process {process.pid} has exited"):
        StridedMemoryView(received, stream_ptr=stream.ptr)


def test_a_pool_block_travels_through_the_pools_descriptor(gpu, peer):
    """A block of a pool made with a POSIX file descriptor handle type: shareable, sent with
    the pool's descriptor, read by the consumer; a pool without one is refused."""
    import driver_support

    drv = driver_support.drv
    stream = gpu.stream()
    pools = {}
    for handle_types in (1, 0):
        props = drv.CUmemPoolProps()
        props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = drv.CUmemAllocationHandleType(handle_types)
        props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = 0
        pool = driver_support.ok(drv.cuMemPoolCreate(props))
        ptr = driver_support.ok(drv.cuMemAllocFromPoolAsync(1024, pool, stream.handle))
        driver_support.ok(drv.cuMemsetD8Async(ptr, 0x42, 1024, stream.handle))
        pools[handle_types] = (pool, ptr)
    try:
        memory = type("PoolBlock", (), {"ptr": int(pools[1][1])})()
        view = StridedMemoryView(driver_support.CAIArray(memory, (1024,), np.uint8, stream=stream.ptr), stream_ptr=stream.ptr)
        facts = view.allocation
        assert (facts.kind, facts.shareable, facts.pool) == ("pool", True, int(pools[1][0]))
        peer.inbox.put(("read", view, 1024))
        peer.answer("queued")
        peer.inbox.put("finish")
        assert peer.answer("bytes")[1] == bytes([0x42]) * 1024
        del view
        assert wait_for(lambda: shares_held() == 0)
        plain = type("PoolBlock", (), {"ptr": int(pools[0][1])})()
        refused = StridedMemoryView(driver_support.CAIArray(plain, (1024,), np.uint8), stream_ptr=-1)
        with pytest.raises(BufferError, match="not created with a POSIX file descriptor handle type"):
            pickle.dumps(refused)
    finally:
        for pool, ptr in pools.values():
            drv.cuMemFreeAsync(ptr, stream.handle)
        stream.synchronize()
        for pool, _ in pools.values():
            drv.cuMemPoolDestroy(pool)


@pytest.mark.simgpu
def test_synchronize_waits_for_the_writes_ordered_before_the_view(gpu, simulator):
    """``view.synchronize()`` (for MPI, which takes no stream): blocked while the producer's
    write ordered before the view is held by a gate, returns once it ran, the bytes there;
    one host wait counted."""
    import threading

    view, memory, gate = producer_view(gpu, (4096,), np.uint8, gate=True)
    waits = simulator.counter("host_waits")
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (view.synchronize(), done.set()))
    waiter.start()
    assert not done.wait(0.2), "synchronize() returned while the producer's write was gated"
    gate.open()
    assert done.wait(20), "synchronize() did not return once the write had run"
    waiter.join()
    assert simulator.counter("host_waits") - waits == 1
    host = np.zeros(4096, np.uint8)
    import driver_support

    driver_support.ok(driver_support.drv.cuMemcpyDtoH(host.ctypes.data, memory.ptr, 4096))
    assert host.tolist() == [MARK] * 4096
