"""The simulator's stream-order checker (SIMGPU_CHECK): order, not time.

Each rule and each happens-before edge of the checker has a test here, in two forms: the racy
one, which must give exactly the expected report (its text naming both operations), and the
correctly ordered one, which must give none.  They are written against cuda.bindings.driver
like test_conformance.py, but the checker is the simulator's own: every test is
simulator-only (``sim_only``), and switches the checker on for itself (``check``), leaving
the mode as it found it.  The edges are those of docs/simulated-gpu.md, "The stream-order
checker", and of /work/shared/CUDA_SEMANTICS.md, "Order, not time".
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from .simgpu_support import SUCCESS, Gate, drv, ok, wait_until

NON_BLOCKING = drv.CUstream_flags.CU_STREAM_NON_BLOCKING
N = 4096

PTX = rb"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry ck_touch(
    .param .u64 ck_touch_param_0,
    .param .u32 ck_touch_param_1
)
{
    ret;
}

.visible .entry ck_reader(
    .param .u64 ck_reader_param_0
)
{
    ret;
}
""" + b"\0"


class Checker:
    """The reports made since the test switched the checker on."""

    def __init__(self, sim):
        self.sim = sim
        self.since = sim.check_report_count()

    def reports(self) -> list[str]:
        return self.sim.check_reports(self.since)

    def none(self) -> None:
        reports = self.reports()
        assert reports == [], reports

    def one(self, *parts: str) -> str:
        """The only report made since the last call, which must contain every part."""
        reports = self.reports()
        self.since = self.sim.check_report_count()
        assert len(reports) == 1, reports
        text = reports[0]
        assert text.startswith("simgpu: check: "), text
        for part in parts:
            assert part in text, (part, text)
        return text


@pytest.fixture
def check(sim_only):
    """The checker on (mode 1, from an empty history) for the test; its mode before, after."""
    previous = sim_only.set_check(1)
    try:
        yield Checker(sim_only)
    finally:
        sim_only.set_check(previous)


def on(stream) -> str:
    return f"on stream {int(stream):#x}"


def rng(ptr: int, n: int) -> str:
    return f"[{ptr:#x}, +{n})"


def write(buf, stream, value=1, n=N):
    ok(drv.cuMemsetD8Async(buf, value, n, stream))


def read(buf, out, stream, n=N):
    """A read of buf by stream (a copy into out, which only this stream touches)."""
    ok(drv.cuMemcpyDtoDAsync(out, buf, n, stream))


def record_wait(res, producer, consumer):
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    ok(drv.cuEventRecord(event, producer))
    ok(drv.cuStreamWaitEvent(consumer, event, 0))
    return event


def kernel(name: bytes):
    module = ok(drv.cuModuleLoadData(PTX))
    return module, ok(drv.cuModuleGetFunction(module, name))


def launch(function, stream, *values):
    args = tuple(values)
    array = (ctypes.c_void_p * len(args))(*(ctypes.addressof(v) for v in args))
    ok(drv.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(array), 0))


RACE = "simgpu: check: race: "


# ---- the switch and the exports -------------------------------------------------------------


def test_switch_and_exports(sim_only, res):
    """set_check answers the previous mode; switching on starts from an empty history (work
    enqueued while it was off is unknown and reported against nothing); reports are numbered
    from 0 and an index without a report answers 0."""
    previous = sim_only.set_check(0)
    try:
        assert sim_only.check_mode() == 0
        with pytest.raises(ValueError):
            sim_only.set_check(3)
        buf, out = res.alloc(N), res.alloc(N)
        a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
        write(buf, a)
        assert sim_only.set_check("report") == 0 and sim_only.check_mode() == 1
        checker = Checker(sim_only)
        read(buf, out, b)  # a's write was enqueued before: not known
        checker.none()
        fresh = res.alloc(N)
        write(fresh, a)
        read(fresh, out, b)
        text = checker.one(RACE)
        count = sim_only.check_report_count()
        assert sim_only.check_reports(count - 1) == [text]
        assert text in sim_only.check_reports()
        assert sim_only.lib.simgpu_check_report(count, None, 0) == 0
        assert sim_only.lib.simgpu_check_report(-1, None, 0) == 0
        cut = ctypes.create_string_buffer(16)
        assert sim_only.lib.simgpu_check_report(count - 1, cut, 16) == len(text)
        assert cut.value == text.encode()[:15]
        assert sim_only.set_check(0) == 1
        write(buf, a)
        read(buf, out, b)
        assert sim_only.check_report_count() == count  # off: nothing checked
    finally:
        sim_only.set_check(previous)


# ---- happens-before edges ---------------------------------------------------------------------


@pytest.mark.parametrize("ordered", [True, False], ids=["one-stream", "two-streams"])
def test_program_order(res, check, ordered):
    """Operations of one stream are ordered; of two streams with nothing between, not."""
    buf, out = res.alloc(N), res.alloc(N)
    a = res.stream(NON_BLOCKING)
    b = a if ordered else res.stream(NON_BLOCKING)
    write(buf, a)
    read(buf, out, b)
    if ordered:
        check.none()
    else:
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(b)} reads {rng(buf, N)} of allocation {buf:#x} "
                  f"(cuMemAlloc_v2, {N} bytes), not ordered after cuMemsetD8Async {on(a)} writing {rng(buf, N)}")


@pytest.mark.parametrize("ordered", [True, False], ids=["record-after", "record-before"])
def test_event_record_then_wait(res, check, ordered):
    """A wait joins what the event's record captured: the write when recorded after it, not
    when recorded before it."""
    buf, out = res.alloc(N), res.alloc(N)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    if ordered:
        write(buf, a)
        record_wait(res, a, b)
    else:
        record_wait(res, a, b)
        write(buf, a)
    read(buf, out, b)
    if ordered:
        check.none()
    else:
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(b)} reads", f"cuMemsetD8Async {on(a)} writing")


@pytest.mark.parametrize("ordered", [True, False], ids=["waited-again", "earlier-snapshot"])
def test_wait_uses_the_record_made_before_it(res, check, ordered):
    """A wait uses the snapshot of the event's last record at the wait: recording the event
    again later does not order the waiting stream after the later work."""
    buf, out = res.alloc(N), res.alloc(N)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    write(buf, a)
    ok(drv.cuEventRecord(event, a))
    ok(drv.cuStreamWaitEvent(b, event, 0))
    ok(drv.cuMemsetD32Async(buf, 7, N // 4, a))  # after the snapshot b waited for
    ok(drv.cuEventRecord(event, a))
    if ordered:
        ok(drv.cuStreamWaitEvent(b, event, 0))
    read(buf, out, b)
    if ordered:
        check.none()
    else:
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(b)} reads", f"cuMemsetD32Async {on(a)} writing")


def test_never_recorded_event_orders_nothing(res, check):
    """An event never recorded is an empty set of work: waiting on it orders nothing."""
    buf, out = res.alloc(N), res.alloc(N)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    write(buf, a)
    ok(drv.cuStreamWaitEvent(b, res.event(), 0))
    read(buf, out, b)
    check.one(RACE, f"cuMemsetD8Async {on(a)} writing")


@pytest.mark.parametrize("writer_flags", [0, NON_BLOCKING], ids=["blocking", "non-blocking"])
def test_legacy_stream_implicit_synchronisation(res, check, writer_flags):
    """The legacy stream is ordered after every blocking stream of its context (and they after
    it), whether that work has run or not; a non-blocking stream is exempt."""
    legacy = drv.CUstream(1)
    buf, out, out2 = res.alloc(N), res.alloc(N), res.alloc(N)
    writer = res.stream(writer_flags)
    gate = Gate().enqueue(writer)  # the write has not run when the legacy stream reads
    try:
        write(buf, writer)
        read(buf, out, legacy)
        if writer_flags == 0:
            ok(drv.cuMemsetD8Async(buf, 3, N, legacy))  # and the blocking stream after the legacy's write
            read(buf, out2, writer)
            check.none()
        else:
            check.one(RACE, "cuMemcpyDtoDAsync_v2 on stream 0x", "(legacy) reads", f"cuMemsetD8Async {on(writer)} writing")
    finally:
        gate.open()


OBSERVATIONS = ["stream-query", "stream-synchronize", "event-query", "event-synchronize",
                "context-synchronize", "synchronous-copy", "none", "synchronous-copy-of-a-non-blocking-writer"]


@pytest.mark.parametrize("how", OBSERVATIONS)
def test_host_observation(res, check, how):
    """What the host saw complete (a query answering SUCCESS, a synchronisation, a synchronous
    copy that waited) orders everything it enqueues afterwards, on any stream; without it the
    later read races, however long ago the write ran."""
    buf, out, scratch = res.alloc(N), res.alloc(N), res.alloc(N)
    writer = res.stream(NON_BLOCKING if how.endswith("non-blocking-writer") else 0)
    reader = res.stream(NON_BLOCKING)
    write(buf, writer)
    event = res.event()
    ok(drv.cuEventRecord(event, writer))
    if how == "stream-query":
        assert wait_until(lambda: drv.cuStreamQuery(writer)[0] == SUCCESS)
    elif how == "stream-synchronize":
        ok(drv.cuStreamSynchronize(writer))
    elif how == "event-query":
        assert wait_until(lambda: drv.cuEventQuery(event)[0] == SUCCESS)
    elif how == "event-synchronize":
        ok(drv.cuEventSynchronize(event))
    elif how == "context-synchronize":
        ok(drv.cuCtxSynchronize())
    elif how.startswith("synchronous-copy"):
        host = np.zeros(N, np.uint8)
        ok(drv.cuMemcpyDtoH(host.ctypes.data, scratch, N))  # the legacy stream, waited for
    else:
        time.sleep(0.02)  # the write has run, but nothing says so
    read(buf, out, reader)
    if how in ("none", "synchronous-copy-of-a-non-blocking-writer"):
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(reader)} reads", f"cuMemsetD8Async {on(writer)} writing")
    else:
        check.none()


def test_context_synchronize_observes_destroyed_streams(res, check):
    """A context synchronisation observes the work of the context's streams destroyed before it
    (their queued work is the context's too)."""
    buf, out = res.alloc(N), res.alloc(N)
    gone = ok(drv.cuStreamCreate(NON_BLOCKING))
    write(buf, gone)
    ok(drv.cuStreamDestroy(gone))
    ok(drv.cuCtxSynchronize())
    read(buf, out, res.stream(NON_BLOCKING))
    check.none()


def test_a_call_in_a_host_function_observes_nothing(res, check):
    """A host function's driver call answers NOT_PERMITTED and observes nothing: the host has
    not seen the write complete, and the later read is reported."""
    buf, out = res.alloc(N), res.alloc(N)
    writer, other, reader = (res.stream(NON_BLOCKING) for _ in range(3))
    write(buf, writer)
    answers, called = [], threading.Event()

    def call():
        answers.append(drv.cuStreamSynchronize(writer)[0])
        called.set()

    from .simgpu_support import host_fn

    host_fn(other, call)
    assert called.wait(20)
    assert answers == [drv.CUresult.CUDA_ERROR_NOT_PERMITTED]
    read(buf, out, reader)
    check.one(RACE, f"cuMemsetD8Async {on(writer)} writing")


def test_per_thread_default_stream_is_blocking(res, check):
    """The calling thread's default stream (handle 2) is a blocking stream: ordered with the
    legacy stream, not with a non-blocking one (its reports say per-thread)."""
    per_thread, legacy = drv.CUstream(2), drv.CUstream(1)
    buf, out = res.alloc(N), res.alloc(N)
    ok(drv.cuMemsetD8Async(buf, 1, N, legacy))
    read(buf, out, per_thread)
    check.none()
    writer, fresh = res.stream(NON_BLOCKING), res.alloc(N)
    write(fresh, writer)
    read(fresh, out, per_thread)
    check.one(RACE, "(per-thread) reads", f"cuMemsetD8Async {on(writer)} writing")
    ok(drv.cuStreamSynchronize(per_thread))


def test_one_host_clock_for_every_thread(res, check):
    """What one host thread saw complete orders what another thread enqueues afterwards (the
    checker cannot see the threads' own synchronisation, and assumes it)."""
    buf, out = res.alloc(N), res.alloc(N)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    write(buf, a)
    synced = threading.Event()

    def observer():
        ok(drv.cuStreamSynchronize(a))
        synced.set()

    thread = threading.Thread(target=observer)
    thread.start()
    thread.join(30)
    assert synced.is_set()
    read(buf, out, b)
    check.none()


@pytest.mark.parametrize("ordered", [True, False], ids=["waited", "not-waited"])
def test_wait_across_devices(primary, two_devices, res, check, ordered):
    """A wait on an event of another device's stream orders the waiting stream too."""
    buf = res.alloc(N)
    a = res.stream(NON_BLOCKING)
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)  # of a's context
    write(buf, a)
    ok(drv.cuEventRecord(event, a))
    ok(drv.cuCtxSetCurrent(primary[1]))
    try:
        b = ok(drv.cuStreamCreate(NON_BLOCKING))
        out = int(ok(drv.cuMemAlloc(N)))
        if ordered:
            ok(drv.cuStreamWaitEvent(b, event, 0))
        read(buf, out, b)
        ok(drv.cuStreamSynchronize(b))
        ok(drv.cuStreamDestroy(b))
        ok(drv.cuMemFree(out))
    finally:
        ok(drv.cuCtxSetCurrent(primary[0]))
    if ordered:
        check.none()
    else:
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(b)} reads", f"cuMemsetD8Async {on(a)} writing")


# ---- the rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first, second, expected",
    [("write", "read", "reads {r} of allocation {a:#x} (cuMemAlloc_v2, 4096 bytes), not ordered after cuMemsetD8Async {A} writing"),
     ("read", "write", "writes {r} of allocation {a:#x} (cuMemAlloc_v2, 4096 bytes), not ordered after cuMemcpyDtoDAsync_v2 {A} reading"),
     ("write", "write", "writes {r} of allocation {a:#x} (cuMemAlloc_v2, 4096 bytes), not ordered after cuMemsetD8Async {A} writing"),
     ("read", "read", None)],
    ids=["read-after-write", "write-after-read", "write-after-write", "two-reads"])
def test_access_pairs(res, check, first, second, expected):
    """Two unordered accesses of the same bytes race when one of them writes; two reads do not."""
    buf = res.alloc(N)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    for stream, kind in ((a, first), (b, second)):
        if kind == "write":
            write(buf, stream)
        else:
            read(buf, res.alloc(N), stream)
    if expected is None:
        check.none()
    else:
        check.one(RACE, expected.format(r=rng(buf, N), a=buf, A=on(a)), on(b))


@pytest.mark.parametrize("overlap", [False, True], ids=["other-columns", "same-columns"])
def test_pitched_accesses_are_their_rows(res, check, overlap):
    """A pitched memset or copy accesses its rows, not their bounding span: two streams writing
    different columns of the same rows do not race."""
    pitch, width, height = 256, 64, 8
    buf = res.alloc(pitch * height)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    ok(drv.cuMemsetD2D8Async(buf, pitch, 1, width, height, a))
    ok(drv.cuMemsetD2D8Async(buf + (32 if overlap else 128), pitch, 2, width, height, b))
    if overlap:
        check.one(RACE, f"cuMemsetD2D8Async {on(b)} writes [{buf + 32:#x}, +64)",
                  f"cuMemsetD2D8Async {on(a)} writing [{buf:#x}, +64)")
    else:
        check.none()


@pytest.mark.parametrize("how", ["racy", "event", "host"])
def test_free_while_in_use(res, check, how):
    """cuMemFreeAsync must be ordered after every access of the allocation: another stream's
    read, left unordered, is reported; made ordered by an event recorded after the read and
    waited on by the free's stream, or by the host synchronising the reader, it is not."""
    producer, reader = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    out = res.alloc(N)
    buf = int(ok(drv.cuMemAllocAsync(N, producer)))
    write(buf, producer)
    record_wait(res, producer, reader)
    read(buf, out, reader)
    if how == "event":
        record_wait(res, reader, producer)
    elif how == "host":
        ok(drv.cuStreamSynchronize(reader))
    ok(drv.cuMemFreeAsync(buf, producer))
    if how == "racy":
        check.one(f"simgpu: check: free while in use: cuMemFreeAsync {on(producer)} frees allocation {buf:#x} "
                  f"(cuMemAllocAsync, {N} bytes), not ordered after cuMemcpyDtoDAsync_v2 {on(reader)} reading {rng(buf, N)}")
    else:
        check.none()


def test_synchronous_free_of_an_unobserved_access(res, check):
    """cuMemFree of a stream-ordered allocation waits for nothing: an access the host has not
    seen complete is reported against it."""
    stream = res.stream(NON_BLOCKING)
    buf = int(ok(drv.cuMemAllocAsync(N, stream)))
    write(buf, stream)
    ok(drv.cuMemFree(buf))
    check.one("simgpu: check: free while in use: cuMemFree_v2 on the host frees allocation", f"cuMemsetD8Async {on(stream)} writing")
    ok(drv.cuStreamSynchronize(stream))


def test_use_after_free(res, check):
    """A kernel given a pointer into memory freed and not allocated again is a use after free,
    even on the free's own stream; once the block is allocated again, it is not."""
    module, touch = kernel(b"ck_touch")
    try:
        stream = res.stream(NON_BLOCKING)
        buf = int(ok(drv.cuMemAllocAsync(N, stream)))
        write(buf, stream)
        ok(drv.cuMemFreeAsync(buf, stream))
        launch(touch, stream, ctypes.c_uint64(buf + 16), ctypes.c_uint32(1))
        check.one(f"simgpu: check: use after free: cuLaunchKernel of kernel ck_touch {on(stream)} reads and writes "
                  f"{rng(buf, N)} of freed allocation {buf:#x} (cuMemAllocAsync, {N} bytes), "
                  f"freed by cuMemFreeAsync {on(stream)}")
        again = int(ok(drv.cuMemAllocAsync(N, stream)))
        assert again == buf  # a block freed on a stream is reused at once by that stream
        launch(touch, stream, ctypes.c_uint64(again), ctypes.c_uint32(1))
        check.none()
        ok(drv.cuMemFreeAsync(again, stream))
        ok(drv.cuStreamSynchronize(stream))
        plain = int(ok(drv.cuMemAlloc(N)))
        ok(drv.cuMemFree(plain))
        launch(touch, stream, ctypes.c_uint64(plain), ctypes.c_uint32(1))
        check.one("use after free: cuLaunchKernel of kernel ck_touch", f"(cuMemAlloc_v2, {N} bytes), freed by cuMemFree_v2 on the host")
        ok(drv.cuStreamSynchronize(stream))
    finally:
        ok(drv.cuModuleUnload(module))


@pytest.mark.parametrize("ordered", [True, False], ids=["waited", "not-waited"])
def test_pool_block_reused_after_a_free(res, check, ordered):
    """A pool block freed and allocated again is a new allocation: the old one's accesses are
    gone with its free, and the new one's are checked as its own."""
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    out = res.alloc(N)
    old = int(ok(drv.cuMemAllocAsync(N, a)))
    write(old, a)
    record_wait(res, a, b)
    read(old, out, b)
    record_wait(res, b, a)
    ok(drv.cuMemFreeAsync(old, a))
    new = int(ok(drv.cuMemAllocAsync(N, a)))
    assert new == old
    ok(drv.cuMemsetD32Async(new, 5, N // 4, a))
    check.none()
    if ordered:
        record_wait(res, a, b)
    read(new, out, b)
    if ordered:
        check.none()
    else:
        check.one(RACE, f"cuMemcpyDtoDAsync_v2 {on(b)} reads {rng(new, N)} of allocation {new:#x} (cuMemAllocAsync",
                  f"cuMemsetD32Async {on(a)} writing")
    ok(drv.cuMemFreeAsync(new, a))
    ok(drv.cuStreamSynchronize(a))


@pytest.mark.parametrize("declared", [False, True], ids=["default-read-write", "declared-read-only"])
def test_kernel_pointer_parameters(sim_only, res, check, declared):
    """A kernel's pointer parameter into an allocation reads and writes all of it, unless
    declared otherwise (simgpu_set_kernel_param_access): two kernels on two streams race by
    default and not when the parameter is declared read-only."""
    name = b"ck_reader" if declared else b"ck_touch"
    if declared:
        sim_only.set_kernel_param_access("ck_reader", 0, 1)
    module, function = kernel(name)
    try:
        buf = res.alloc(N)
        a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
        extra = () if declared else (ctypes.c_uint32(0),)
        launch(function, a, ctypes.c_uint64(buf + 100), *extra)
        launch(function, b, ctypes.c_uint64(buf), *extra)
        if declared:
            check.none()
        else:
            check.one(RACE, f"cuLaunchKernel of kernel ck_touch {on(b)} reads and writes {rng(buf, N)} of allocation {buf:#x}",
                      f"not ordered after cuLaunchKernel of kernel ck_touch {on(a)} reading and writing {rng(buf, N)}")
        ok(drv.cuCtxSynchronize())
    finally:
        sim_only.set_kernel_param_access("ck_reader", 0, 3)
        ok(drv.cuModuleUnload(module))


# ---- graphs -----------------------------------------------------------------------------------


def captured(res, body):
    """An executable graph of what body(stream) enqueues under capture."""
    stream = res.stream(NON_BLOCKING)
    ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    body(stream)
    graph = ok(drv.cuStreamEndCapture(stream))
    return graph, ok(drv.cuGraphInstantiate(graph, 0))


@pytest.mark.parametrize("ordered", [True, False], ids=["one-stream", "two-streams"])
def test_graph_replays_on_its_launch_stream(res, check, ordered):
    """Captured work is not checked (nothing runs); each launch replays it in order on the
    launch stream: two launches on one stream are ordered, on two unordered streams they race."""
    buf = res.alloc(N)
    graph, exe = captured(res, lambda s: write(buf, s))
    check.none()
    a = res.stream(NON_BLOCKING)
    b = a if ordered else res.stream(NON_BLOCKING)
    try:
        ok(drv.cuGraphLaunch(exe, a))
        ok(drv.cuGraphLaunch(exe, b))
        if ordered:
            check.none()
        else:
            check.one(RACE, f"cuMemsetD8Async (replayed by cuGraphLaunch) {on(b)} writes {rng(buf, N)}",
                      f"not ordered after cuMemsetD8Async (replayed by cuGraphLaunch) {on(a)} writing")
    finally:
        ok(drv.cuCtxSynchronize())
        ok(drv.cuGraphExecDestroy(exe))
        ok(drv.cuGraphDestroy(graph))


@pytest.mark.parametrize("ordered", [True, False], ids=["recorded-after", "recorded-before"])
def test_graph_external_event_wait(res, check, ordered):
    """A graph's external event wait node joins the event's last record as of each launch."""
    buf, out = res.alloc(N), res.alloc(N)
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)

    def body(stream):
        ok(drv.cuStreamWaitEvent(stream, event, drv.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL))
        read(buf, out, stream)

    graph, exe = captured(res, body)
    producer, runner = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    try:
        if ordered:
            write(buf, producer)
            ok(drv.cuEventRecord(event, producer))
        else:
            ok(drv.cuEventRecord(event, producer))
            write(buf, producer)
        ok(drv.cuGraphLaunch(exe, runner))
        if ordered:
            check.none()
        else:
            check.one(RACE, f"cuMemcpyDtoDAsync_v2 (replayed by cuGraphLaunch) {on(runner)} reads",
                      f"cuMemsetD8Async {on(producer)} writing")
    finally:
        ok(drv.cuCtxSynchronize())
        ok(drv.cuGraphExecDestroy(exe))
        ok(drv.cuGraphDestroy(graph))


# ---- order, not time ------------------------------------------------------------------------------


def test_reported_whatever_the_timing(sim_only, res, check):
    """A missing wait is reported on every run at SIMGPU_DELAY_US=0, whether the write has long
    run when the read is enqueued or the read runs long after it: 10 of 10."""
    sim_only.set_delay_us(0)
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    for run in range(10):
        buf, out = res.alloc(N), res.alloc(N)
        gate = Gate().enqueue(b) if run % 2 else None
        write(buf, a)
        if gate is None:
            time.sleep(0.005)  # the write has run before the read is enqueued
        read(buf, out, b)
        if gate is not None:
            gate.open()
        check.one(RACE, f"{rng(buf, N)}", f"cuMemsetD8Async {on(a)} writing")


RACY_PROGRAM = """
import sys
sys.path.insert(0, {here!r})
from simgpu_support import drv, ok, simulator
ok(drv.cuInit(0))
ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(0))))
a, b = ok(drv.cuStreamCreate(1)), ok(drv.cuStreamCreate(1))
buf, out = ok(drv.cuMemAlloc(4096)), ok(drv.cuMemAlloc(4096))
print("before", flush=True)
ok(drv.cuMemsetD8Async(buf, 1, 4096, a))
ok(drv.cuMemcpyDtoDAsync(out, buf, 4096, b))
ok(drv.cuMemsetD8Async(buf, 2, 4096, b))
sim = simulator()
print("after", sim.check_mode(), sim.check_report_count(), flush=True)
"""


def run_racy(check_value):
    env = {k: v for k, v in os.environ.items() if k != "SIMGPU_CHECK"}
    if check_value is not None:
        env["SIMGPU_CHECK"] = check_value
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run([sys.executable, "-c", RACY_PROGRAM.format(here=here)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_abort_mode_ends_the_process_at_the_first_report(sim_only):
    """SIMGPU_CHECK=abort: the process ends with abort() right after the first report's line."""
    result = run_racy("abort")
    assert result.returncode == -signal.SIGABRT, (result.returncode, result.stderr)
    assert "before" in result.stdout and "after" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("simgpu: check: ")]
    assert len(lines) == 1 and lines[0].startswith(RACE), result.stderr


def test_checker_is_off_by_default(sim_only):
    """Without SIMGPU_CHECK the checker is off: no report, counter 0; SIMGPU_CHECK=1 reports
    both races of the same program and goes on."""
    quiet = run_racy(None)
    assert quiet.returncode == 0, quiet.stderr
    assert "after 0 0" in quiet.stdout and "simgpu: check:" not in quiet.stderr
    loud = run_racy("1")
    assert loud.returncode == 0, loud.stderr
    assert "after 1 2" in loud.stdout
    assert loud.stderr.count("simgpu: check: race: ") == 2, loud.stderr
