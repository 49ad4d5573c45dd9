"""Driver calls that fail, on the simulated device: the failures tests/fake_driver.py injected,
now injected into the C entry points the real cuda-bindings call (``Simulator.fail``, from
tests/simgpu's ``simgpu_fail``), so the library's error paths run the code a GPU runs.

Each test names the fake-driver test it replaced (tests/test_stream_ordering.py,
tests/test_record_stream.py: the fake no longer orders streams, and those tests are gone).  A real driver cannot be made to fail on demand: the module is
marked ``simgpu`` (skipped on a real GPU).  Where data are read back, the simulator delays every
stream operation, so a missing wait reads stale bytes.  The context stack is read with
``cuCtxPopCurrent`` until it is empty and pushed back (``context_stack``), so a test can tell a
balanced push/pop from a leaked one.
"""

from __future__ import annotations

import re
import sys

import pytest

from stridedview import CUDAError, StridedMemoryView, _driver, _view, release_pending
from test_gpu_ordering import DELAY_US, Spot

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]


@pytest.fixture
def delayed(gpu, simulator):
    simulator.set_delay_us(DELAY_US)
    return gpu


def code(name: str):
    """The CUresult called ``name``."""
    from driver_support import drv

    return getattr(drv.CUresult, name)


def calls(simulator, name: str) -> int:
    """Calls of ``name`` and of its versioned variants (what the bindings call: ``name_v2``...)."""
    pattern = re.compile(re.escape(name) + r"(_v\d+)?")
    return sum(n for entry, n in simulator.calls_report().items() if pattern.fullmatch(entry))


def context_stack() -> list[int]:
    """The calling thread's context stack, bottom first (popped to empty, then pushed back)."""
    from driver_support import drv

    popped = []
    while True:
        err, context = drv.cuCtxPopCurrent()
        if err != drv.CUresult.CUDA_SUCCESS:
            break
        popped.append(context)
    for context in reversed(popped):
        err, = drv.cuCtxPushCurrent(context)
        assert err == drv.CUresult.CUDA_SUCCESS, err
    return [int(context) for context in reversed(popped)]


def pop_one() -> None:
    """Pop the context a failed cuCtxPopCurrent left pushed."""
    from driver_support import drv, ok

    ok(drv.cuCtxPopCurrent())


# --- the stale-event retry -----------------------------------------------------------------


def test_a_stale_record_is_retried_once_with_a_fresh_event(delayed, simulator):
    """A warm record failing once with CUDA_ERROR_INVALID_HANDLE makes the library look the
    stream's context up afresh, replace the event and record once more: the consumer still sees
    the producer's write (a handle really reused by another context, ``Simulator.stream_move``:
    test_gpu_stream_ordering.py's test_stale_context_retried_after_invalid_handle)."""
    spot = Spot(delayed)
    producer, consumer = delayed.stream().ptr, delayed.stream().ptr
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)  # warm: context and event cached
    spot.write(producer, 0x31)
    created, destroyed = simulator.counter("events_created"), simulator.counter("events_destroyed")
    simulator.calls_reset()
    simulator.fail("cuEventRecord", code("CUDA_ERROR_INVALID_HANDLE"))
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert simulator.fail_fired("cuEventRecord") == 1
    assert calls(simulator, "cuEventRecord") == 2
    assert calls(simulator, "cuStreamGetCtx") == 1
    assert calls(simulator, "cuStreamWaitEvent") == 1
    assert simulator.counter("events_created") - created == 1
    assert simulator.counter("events_destroyed") - destroyed == 1  # the dead one
    assert spot.read(consumer)
    # Warm again: one record, one wait.
    simulator.calls_reset()
    spot.write(producer, 0x32)
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert calls(simulator, "cuEventRecord") == 1 and calls(simulator, "cuStreamGetCtx") == 0
    assert spot.read(consumer)


def test_a_record_failing_again_after_the_retry_raises(gpu, simulator):
    """If the retried record fails with CUDA_ERROR_INVALID_HANDLE too, CUDAError is raised after
    exactly two records and no wait (mirrors test_record_failing_twice_raises, and
    test_errors_contract.py's "driver-call-failed" case)."""
    spot = Spot(gpu)
    producer, consumer = gpu.stream().ptr, gpu.stream().ptr
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    simulator.calls_reset()
    simulator.fail("cuEventRecord", code("CUDA_ERROR_INVALID_HANDLE"), count=-1)
    with pytest.raises(CUDAError, match="^cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE$") as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert excinfo.value.name == "CUDA_ERROR_INVALID_HANDLE"
    assert calls(simulator, "cuEventRecord") == 2
    assert calls(simulator, "cuStreamWaitEvent") == 0


def test_a_stale_record_after_a_fresh_lookup_is_not_retried(gpu, simulator):
    """A record failing with CUDA_ERROR_INVALID_HANDLE right after the context was looked up and
    the event created is raised at once: nothing stale to retry (mirrors
    test_invalid_handle_on_fresh_lookup_is_not_retried)."""
    spot = Spot(gpu)
    producer, consumer = gpu.stream().ptr, gpu.stream().ptr
    simulator.calls_reset()
    simulator.fail("cuEventRecord", code("CUDA_ERROR_INVALID_HANDLE"))
    with pytest.raises(CUDAError) as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert excinfo.value.name == "CUDA_ERROR_INVALID_HANDLE"
    assert calls(simulator, "cuEventRecord") == 1
    assert calls(simulator, "cuStreamGetCtx") == 1


# --- each call failing: its name, its code, the context stack -------------------------------

FAILURES = [
    ("cuInit", "CUDA_ERROR_NO_DEVICE"),
    ("cuStreamGetCtx", "CUDA_ERROR_INVALID_HANDLE"),
    ("cuCtxGetCurrent", "CUDA_ERROR_DEINITIALIZED"),
    ("cuCtxPushCurrent", "CUDA_ERROR_INVALID_CONTEXT"),
    ("cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("cuCtxPopCurrent", "CUDA_ERROR_INVALID_CONTEXT"),
    ("cuEventRecord", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("cuStreamWaitEvent", "CUDA_ERROR_LAUNCH_FAILED"),
]


@pytest.mark.parametrize("call, error", FAILURES, ids=[call for call, _ in FAILURES])
def test_failing_call_raises_cuda_error_with_its_name(gpu, simulator, two_gpus, call, error):
    """A failing driver call raises CUDAError (a RuntimeError) named by its CUresult, with the
    message '<call> failed: <NAME>', and leaves the context stack as it was; a failed pop leaves
    the pushed context on top (mirrors test_failing_call_raises_cuda_error_with_its_name)."""
    from driver_support import primary

    spot = Spot(gpu)
    producer = gpu.stream(1).ptr  # another context: the push/pop path
    consumer = gpu.stream().ptr
    before = context_stack()
    simulator.fail(call, code(error))
    with pytest.raises(CUDAError, match="^" + re.escape(f"{call} failed: {error}")) as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert simulator.fail_fired(call) == 1
    assert excinfo.value.name == error
    assert isinstance(excinfo.value, RuntimeError)
    if call == "cuCtxPopCurrent":
        assert context_stack() == before + [int(primary(1))]
        pop_one()
    assert context_stack() == before


@pytest.mark.parametrize("call", ["cuInit", "cuStreamGetCtx", "cuEventCreate", "cuEventRecord", "cuStreamWaitEvent"])
def test_ordering_works_after_a_failure(delayed, simulator, call):
    """After a failed ordering the next one succeeds and the consumer sees the producer's write
    (no poisoned cache; mirrors test_ordering_works_after_a_failure)."""
    spot = Spot(delayed)
    producer, consumer = delayed.stream().ptr, delayed.stream().ptr
    simulator.fail(call, code("CUDA_ERROR_UNKNOWN"))
    with pytest.raises(CUDAError):
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert simulator.fail_fired(call) == 1
    spot.write(producer, 0x41)
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert spot.read(consumer)


def test_a_failed_cuinit_is_not_remembered(gpu, simulator):
    """cuInit failing with CUDA_ERROR_NO_DEVICE raises CUDAError 'cuInit failed:
    CUDA_ERROR_NO_DEVICE', naming the way out (stream_ptr=-1); the next ordering calls cuInit again and works (mirrors
    test_cuinit_retried_after_failure)."""
    spot = Spot(gpu)
    producer, consumer = gpu.stream().ptr, gpu.stream().ptr
    simulator.calls_reset()
    simulator.fail("cuInit", code("CUDA_ERROR_NO_DEVICE"))
    with pytest.raises(CUDAError, match="^cuInit failed: CUDA_ERROR_NO_DEVICE") as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert excinfo.value.name == "CUDA_ERROR_NO_DEVICE"
    assert str(excinfo.value).endswith("stream_ptr=-1 to order streams yourself (no driver call is then made)")
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert calls(simulator, "cuInit") == 2


# --- a failure in the middle of a push ... pop ------------------------------------------------


@pytest.mark.parametrize(
    "producer_kind, call, error",
    [
        ("legacy", "cuEventRecord", "CUDA_ERROR_ILLEGAL_ADDRESS"),
        ("legacy", "cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY"),
        ("stream", "cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY"),
    ],
    ids=["legacy-record", "legacy-create", "stream-create"],
)
def test_a_failure_inside_a_pushed_context_still_pops(gpu, simulator, two_gpus, producer_kind, call, error):
    """When a call made with another context pushed fails (the record on device 1's legacy
    stream, or the event's creation), the pop still runs: as many pops as pushes, the stack as
    it was (mirrors test_event_create_failure_in_other_context_pops)."""
    spot = Spot(gpu, 1)  # the data, and a legacy producer stream, on device 1
    producer = 1 if producer_kind == "legacy" else gpu.stream(1).ptr
    consumer = gpu.stream(0).ptr
    before = context_stack()
    simulator.calls_reset()
    simulator.fail(call, code(error))
    with pytest.raises(CUDAError) as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert excinfo.value.name == error
    assert simulator.fail_fired(call) == 1
    pushes = calls(simulator, "cuCtxPushCurrent")
    assert pushes >= 1 and calls(simulator, "cuCtxPopCurrent") == pushes
    assert context_stack() == before


def test_failing_pop_does_not_hide_the_first_error(gpu, simulator, two_gpus):
    """When cuEventCreate fails in a pushed context and the pop fails too, the CUDAError raised is
    cuEventCreate's (mirrors test_failing_pop_does_not_hide_the_first_error)."""
    from driver_support import primary

    spot = Spot(gpu)
    producer, consumer = gpu.stream(1).ptr, gpu.stream().ptr
    before = context_stack()
    simulator.fail("cuEventCreate", code("CUDA_ERROR_OUT_OF_MEMORY"))
    simulator.fail("cuCtxPopCurrent", code("CUDA_ERROR_INVALID_CONTEXT"))
    with pytest.raises(CUDAError) as excinfo:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert excinfo.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert simulator.fail_fired("cuCtxPopCurrent") == 1
    assert context_stack() == before + [int(primary(1))]
    pop_one()


def test_no_event_leaks_when_pop_fails_after_create(delayed, simulator, two_gpus):
    """If the pop after the event's creation fails, the event is kept and reused by the next
    ordering, which is correct, and destroyed with the others (mirrors
    test_no_event_leaks_when_pop_fails_after_create)."""
    spot = Spot(delayed, 1)
    producer, consumer = delayed.stream(1).ptr, delayed.stream(0).ptr
    before = context_stack()
    live, created = simulator.counter("events_live"), simulator.counter("events_created")
    simulator.fail("cuCtxPopCurrent", code("CUDA_ERROR_INVALID_CONTEXT"))
    with pytest.raises(CUDAError, match="^cuCtxPopCurrent failed"):
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    pop_one()  # the failed pop left the pushed context current
    assert context_stack() == before
    spot.write(producer, 0x51)
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert spot.read(consumer, device=0)
    assert simulator.counter("events_created") - created == 1
    _driver.use_api(None)
    assert simulator.counter("events_live") == live


# --- hand-overs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error",
    [("cuEventCreate", "CUDA_ERROR_OUT_OF_MEMORY"), ("cuEventRecord", "CUDA_ERROR_ILLEGAL_ADDRESS")],
    ids=["create", "record"],
)
def test_a_failed_hand_over_record_keeps_the_hold_and_is_reported_once(gpu, simulator, monkeypatch, call, error):
    """A hand-over whose event cannot be created or recorded (an answer that says nothing of the
    stream's work) cannot raise from a deallocation: the hold is kept, not released, and the
    CUDAError reported once through sys.unraisablehook; tried again at the later checks (not
    reported again), it is recorded once the driver answers, and released after the stream's
    work, once (tests/test_gpu_hold_rule.py has the rule for queries and waits)."""
    from test_gpu_record_stream import Marking

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=stream.ptr)
    marking.mark(producer.last, stream)
    view.record_stream(stream)
    simulator.fail(call, code(error), count=-1)
    try:
        del view
        assert release_pending() == 0 and release_pending() == 0  # tried again, still failing
        fired = simulator.fail_fired(call)
    finally:
        simulator.fail_clear()
    assert fired >= 3
    assert marking.calls == {} and _view._deferred_holds() == 1
    assert len(reported) == 1
    assert isinstance(reported[0].exc_value, CUDAError)
    assert reported[0].exc_value.name == error
    assert "hand-over" in str(reported[0].object)
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


def test_a_stale_hand_over_record_on_a_live_stream_is_retried(gpu, simulator, monkeypatch):
    """A hand-over record failing once with CUDA_ERROR_INVALID_HANDLE on a stream that is still
    there is retried with a fresh event: the hold stays until the stream's work is done, its
    deleter runs once, nothing is reported (the stale-event rule of
    test_context_reset_under_a_pending_hold_releases_it, on a live stream)."""
    from simgpu.simgpu_support import Gate
    from test_gpu_record_stream import Marking

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    # The stream held at a gate until the hold is found pending (a delay alone let a
    # loaded machine's stream finish first).
    gate = Gate().enqueue(stream.handle)
    try:
        producer = marking.producer()
        view = StridedMemoryView(producer, stream_ptr=stream.ptr)
        marking.mark(producer.last, stream)
        view.record_stream(stream)
        simulator.calls_reset()
        simulator.fail("cuEventRecord", code("CUDA_ERROR_INVALID_HANDLE"))
        del view
        assert simulator.fail_fired("cuEventRecord") == 1
        assert calls(simulator, "cuEventRecord") == 2
        assert release_pending() == 0 and marking.calls == {}
    finally:
        gate.open()
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []
    assert reported == []
    assert _view._pending_holds() == (0, 0, 0)


# --- a machine with a driver and no device --------------------------------------------------

NO_DEVICE_SCRIPT = """
import json, sys
sys.path[:0] = sys.argv[1:3]
import numpy as np
from stridedview import CUDAError, StridedMemoryView

class CAI:
    def __init__(self, stream):
        self.__cuda_array_interface__ = {"version": 3, "shape": (2, 3), "typestr": "<f4",
                                         "data": (0x7F0000000000, False), "strides": None,
                                         "stream": stream}

try:
    StridedMemoryView(CAI(0x5000), stream_ptr=0x7000)
    ordered = None
except CUDAError as exc:
    ordered = {"name": exc.name, "message": str(exc)}
view = StridedMemoryView(CAI(0x5000), stream_ptr=-1)
host = StridedMemoryView(np.arange(6, dtype=np.float32), stream_ptr=-1)
print(json.dumps({"ordered": ordered, "shape": list(view.shape), "host": list(host.shape)}))
"""


def test_a_driver_with_no_device_is_cuda_error_no_device(gpu):
    """With the driver loaded but no device (SIMGPU_DEVICES=0: cuInit answers
    CUDA_ERROR_NO_DEVICE), ordering raises CUDAError CUDA_ERROR_NO_DEVICE naming stream_ptr=-1, and views that need no
    ordering still work (in a child process: the device count is fixed at start)."""
    import json

    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(NO_DEVICE_SCRIPT, args=child_paths(), env={"SIMGPU_DEVICES": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["ordered"]["name"] == "CUDA_ERROR_NO_DEVICE", outcome
    assert outcome["ordered"]["message"].startswith("cuInit failed: CUDA_ERROR_NO_DEVICE"), outcome
    assert "pass stream_ptr=-1" in outcome["ordered"]["message"], outcome
    assert outcome["shape"] == [2, 3] and outcome["host"] == [6]
