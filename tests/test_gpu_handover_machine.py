"""A stateful random test of stridedview's two stream promises, with the simulated driver's
stream-order checker as its oracle.

stridedview promises that (1) a kernel launched on a view's stream reads the producer's
finished data, and (2) memory handed to a stream (``view.record_stream(s)``, or a launcher
decorated with ``record_stream=True``) is not given back to its producer before that stream is
done with it.  The simulated driver's checker (``SIMGPU_CHECK``, switched on here for each
example with ``Simulator.set_check(1)``) decides from the program's calls, whatever the timing,
whether every access of device memory was ordered after the writes before it and before the
free after it.  The machine below plays a *correct user*: every read is made on the stream its
view was made for (or ordered by the user itself after ``stream_ptr=-1``), a producer gives its
memory back only with its own stream-ordered free, and memory read without a hand-over is kept
alive by the user (the streams that read it synchronized before the user's last reference
goes).  So any checker report means the library broke a promise.

The world (``World``: streams made once per test, reused by every example):

- producers of stream-ordered memory, ``cuMemAllocAsync`` on the producer's stream and a memset
  there, freed with ``cuMemFreeAsync`` on that stream when the producer object goes: a DLPack
  producer (ctypes capsules, the deleter written in Python; its ``__dlpack__`` orders the
  consumer's stream after its own, with an external wait when that stream is capturing) and a
  CUDA Array Interface producer (a dict naming its stream).  Producer streams: a non-blocking
  and a blocking ordinary stream, and the legacy stream;
- consumer streams: two non-blocking and one blocking ordinary stream (these three may
  capture), the producers' streams, the legacy stream (1, or 0) and the per-thread default
  stream (2) of the thread that uses it;
- a "kernel": ``cuLaunchKernel`` of an empty PTX kernel whose pointer argument the checker takes
  as a read of the whole allocation (``set_kernel_param_access``).

The rules: make a producer; launch (a view made with ``stream_ptr=`` the consumer stream, or
``-1`` and the user's own event wait, then the kernel on that stream; with or without
``record_stream``; the view kept or dropped, plainly or in a garbage cycle collected at once,
or, for a CAI owner of a recorded view, one the program breaks later); launch again through a
kept view, on its stream or on another the user orders after it; ``record_stream`` on a kept
view; hand a kept view on (its own DLPack and CAI exports); decorated launches with and without
``record_stream=True`` (one and two arguments, one and two streams); drop a view; drop a
producer;
``release_pending()`` and ``release_pending(wait=True)``; hold a stream at a gate (a host
function) and open the gates; launch or drop from a short-lived thread (its own per-thread
stream included); a host function running Python that makes views and drops one; begin a
capture (thread-local or global mode) on a capturable stream, launch inside it, invalidate it
(a query of the capturing stream), end it, instantiate, launch the executable graph on a stream,
destroy graphs and executable graphs (one by one, or as a round whose capture also records and
drops kept views); injected transient driver failures (``Simulator.fail`` on
``cuEventQuery``, ``cuEventSynchronize``, ``cuEventRecord``, ``cuStreamIsCapturing``, with codes
that say nothing of the work) around one action; and, at the start of an example, a pending
bound of 1 or 3 hand-overs (``_set_pending_limit``) or the default.

The invariants: after every step, no checker report (the reports are shown on failure), no
DLPack deleter run twice or while its view lives, no free failed or made while the user still
holds the producer, no exception or unraisable report but the documented ones (docs/errors.md:
a view for a capture that was invalidated; the failing call's ``CUDAError`` while a failure is
injected, raised from an ordering or reported through ``sys.unraisablehook`` by a hand-over),
no gate left to time out (a host wait the library does not promise).  At teardown: every
capture ended, every graph destroyed, ``release_pending(wait=True)`` until nothing is pending or
owned by a graph, then every DLPack deleter ran exactly once, every producer's memory was freed
exactly once, ``_pending_holds() == (0, 0, 0)``, and still no report.

``stridedview.release_driver_resources()`` and a primary-context reset take every allocation of
device 0: ``test_reset_machine_in_a_child`` runs ResetMachine, with that rule, in a child
process.  ``test_careless_machine_is_reported`` runs CarelessMachine, whose one more rule makes
the two mistakes a careless user makes (a read without ordering; memory freed under a launch
without a hand-over): the checker must report each, so that its silence above means something.

CI runs a bounded, reproducible number of examples (``derandomize=True``, no database):
``CI_EXAMPLES`` (200) of up to ``CI_STEPS`` (50) steps, about 8,000 steps: 3.5 s on two idle
cores, 8.5 s with both busy (the file: 6 s and 13 s), the states each reaches counted and
asserted reached (``REACHED``).  (Whether an injected failure fires depends on the streams'
timing; the model, which the steps' preconditions and draws read, does not: transient_failure.)
A longer hunt, with random seeds (a failure prints the ``@reproduce_failure`` blob that replays
it; ResetMachine and CarelessMachine run a tenth and a twentieth as many)::

    STRIDEDVIEW_MACHINE_EXAMPLES=500 PYTHONPATH=$PWD/src tests/simgpu/run.sh -q -p no:cacheprovider tests/test_gpu_handover_machine.py

The machine found two defects, each now a plain test: the checker had no happens-before
edge from the release of an executable graph's user objects (which the driver makes only
after its launches ran) to the host (``test_checker_sees_a_graph_hold_come_back``; the
machine still synchronizes an executable graph's launch streams as it destroys it,
``destroy_exec``), and a view of a CUDA Array Interface producer made for a capturing stream
kept that stream as its ready_stream after the capture, though only the graph's replays wait
for the producer (``test_a_view_made_under_capture_handed_on_after_it``: its ready_stream is
now the producer's stream).  The machine gives views made under capture no ready stream to
hand on from (``ViewInfo.ready_key``): a DLPack producer orders the capturing stream itself.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import itertools
import os
import sys
import threading
import time
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test,
)

import producers
from stridedview import CUDAError, StridedMemoryView, _view, args_viewable_as_strided_memory, release_pending

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu, pytest.mark.slow]

#: Examples and steps per example of a CI run (derandomized: the same run each time).
CI_EXAMPLES = 200
CI_STEPS = 50
#: Examples of the careless user's machine (CarelessMachine) and of the one that resets the
#: device in a child process (ResetMachine).
CARELESS_EXAMPLES = 8
RESET_EXAMPLES = 20
#: STRIDEDVIEW_MACHINE_EXAMPLES=N: a longer run of N examples, with random seeds.
LONG_RUN = int(os.environ.get("STRIDEDVIEW_MACHINE_EXAMPLES", "0") or 0)

NON_BLOCKING = 1
DISABLE_TIMING = 2
WAIT_EXTERNAL = 1
SUCCESS = 0
#: Answers that say nothing of the work a call was asked about (tests/test_gpu_hold_rule.py).
FAULT_CODES = ("CUDA_ERROR_NOT_PERMITTED", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_UNKNOWN")
FAULT_CALLS = ("cuEventQuery", "cuEventSynchronize", "cuEventRecord", "cuStreamIsCapturing")
#: A gate opens by itself after this long: a host wait behind a closed gate (one the library
#: does not promise) then shows as a gate that timed out.
GATE_TIMEOUT = 5.0

PTX = b"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry svm_read(
    .param .u64 svm_read_param_0
)
{
    ret;
}
\0"""


def drv():
    from cuda.bindings import driver

    return driver


def code_of(result) -> int:
    return int(result[0] if isinstance(result, tuple) else result)


class OwnFailure(Exception):
    """A driver call the test itself made (a producer's ordering, the user's own wait) failed."""

    def __init__(self, call, code):
        super().__init__(f"{call} failed: {code}")
        self.call, self.code = call, code


def own(call, result):
    """The value of a driver call the test made; OwnFailure if it failed."""
    code = code_of(result)
    if code != SUCCESS:
        raise OwnFailure(call, code)
    values = result[1:] if isinstance(result, tuple) else ()
    return values[0] if len(values) == 1 else None


def result_name(code: int) -> str:
    return drv().CUresult(code).name


# --- the world: streams and a kernel, made once per test --------------------------------------


class World:
    """The streams and the kernel every example of a test uses.

    Stream keys: ``nb0``, ``nb1`` (non-blocking) and ``b0`` (blocking) may capture; ``p0``
    (non-blocking) and ``p1`` (blocking) are producers' streams (never captured) and consumers'
    too; ``legacy`` is handle 1 (or 0), ``ptds`` the main thread's per-thread stream (2)."""

    CAPTURABLE = ("nb0", "nb1", "b0")
    PRODUCER_STREAMS = ("p0", "p1", "legacy")
    KEYS = ("nb0", "nb1", "b0", "p0", "p1", "legacy", "ptds")

    def __init__(self, sim):
        from driver_support import Stream

        d = drv()
        self.sim = sim
        self.owned = {
            "nb0": Stream(0, NON_BLOCKING), "nb1": Stream(0, NON_BLOCKING), "b0": Stream(0, 0),
            "p0": Stream(0, NON_BLOCKING), "p1": Stream(0, 0),
        }
        self.handles = {key: stream.ptr for key, stream in self.owned.items()}
        self.handles["legacy"] = 1
        self.handles["ptds"] = 2
        self.module = own("cuModuleLoadData", d.cuModuleLoadData(PTX))
        self.read_fn = own("cuModuleGetFunction", d.cuModuleGetFunction(self.module, b"svm_read"))
        sim.set_kernel_param_access("svm_read", 0, 1)  # the pointer is read, never written

    def stream_arg(self, key, form: int):
        """How a user names the stream: the handle, an object with ``__cuda_stream__``, 0 for the
        legacy stream (``form`` picks)."""
        if key in self.owned and form == 1:
            return self.owned[key]
        if key == "legacy" and form == 1:
            return 0
        return self.handles[key]

    def close(self):
        d = drv()
        for stream in self.owned.values():
            stream.close()
        d.cuModuleUnload(self.module)
        self.sim.set_kernel_param_access("svm_read", 0, 3)


def read_kernel(world, handle, ptr) -> int:
    """Enqueue the "kernel" reading ``ptr``'s allocation on ``handle``; its result code."""
    value = ctypes.c_uint64(ptr)
    args = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    return code_of(drv().cuLaunchKernel(world.read_fn, 1, 1, 1, 32, 1, 1, 0, handle, ctypes.addressof(args), 0))


# --- producers ---------------------------------------------------------------------------------

#: How often each state was reached (HandOverMachine.note_reached), and injected failures fired.
REACHED: collections.Counter = collections.Counter()
#: Capsules handed out and not yet deleted: id -> (structures, the producer, its info).
CAPSULES: dict = {}
#: Contract breaches seen where no assertion can be raised (a deleter, a finalizer).
BREACHES: list = []
_capsule_ids = itertools.count(1)  # (a NULL manager_ctx would read back as None)
_capsule_lock = threading.Lock()


def _delete_capsule(address):
    capsule_id = producers.DLManagedTensorVersioned.from_address(address).manager_ctx
    with _capsule_lock:
        entry = CAPSULES.pop(capsule_id, None)
    if entry is None:
        BREACHES.append(f"the deleter of capsule {capsule_id} ran again (or for no capsule)")
        return
    info = entry[-1]
    info.deleted[capsule_id] = info.deleted.get(capsule_id, 0) + 1
    del entry  # the producer object may go now, and free its memory


DELETER = producers.DLPackDeleter(_delete_capsule)


class ProducerInfo:
    """What the machine knows of one producer (never a reference to the producer object but
    ``obj``, the user's own reference)."""

    numbers = itertools.count()

    def __init__(self, kind, key, handle, ptr, size, ledger):
        self.number = next(ProducerInfo.numbers)
        self.kind, self.key, self.handle, self.ptr, self.size = kind, key, handle, ptr, size
        self.ledger = ledger
        self.obj = None  # the user's reference; None once the user dropped it
        self.frees: list[int] = []  # cuMemFreeAsync results
        self.deleted: dict[int, int] = {}  # capsule id -> deleter runs
        self.unprotected: set[str] = set()  # streams that read it with no hand-over, not synchronized since
        self.pins: set[int] = set()  # captures/graphs whose replays read it with no hand-over
        self.finalized = 0  # how often the producer object went
        self.dead = False  # its memory was taken by a primary-context reset (ResetMachine)

    def __repr__(self):
        return f"<{self.kind} producer {self.number} on {self.key}>"


def free_memory(info):
    """The producer's stream-ordered free (from its finalizer: no exception may leave)."""
    try:
        if info.dead:
            return  # a reset took the memory (and the stream)
        if info.key == "legacy" and info.ledger.legacy_blocked():
            info.ledger.deferred.append(info)  # the legacy stream cannot take work beside the capture
            return
        info.frees.append(code_of(drv().cuMemFreeAsync(info.ptr, info.handle)))
    except BaseException as exc:  # noqa: BLE001 - reported by the invariant
        BREACHES.append(f"freeing {info}: {exc!r}")


class CAIProducer:
    """A CUDA Array Interface v3 producer naming its stream; frees its memory when it goes."""

    def __init__(self, info):
        self._info = info
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (info.size,), "typestr": "|u1", "data": (info.ptr, False),
            "strides": None, "stream": info.handle,
        }

    def __del__(self):
        self._info.finalized += 1
        free_memory(self._info)


class DLPackProducer:
    """A DLPack producer (kDLCUDA, versioned capsules) whose ``__dlpack__(stream=s)`` makes ``s``
    wait for its own stream (with an external wait, the event kept until the example ends, when
    ``s`` is capturing); each capsule keeps the producer alive until its deleter runs; frees its
    memory when it goes."""

    def __init__(self, info):
        self._info = info

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        info = self._info
        order_after(info.ledger, info.handle, 1 if stream is None else stream)
        capsule_id = next(_capsule_ids)
        managed = producers.DLManagedTensorVersioned()
        managed.version = producers.DLPackVersion(1, 2)
        shape = (ctypes.c_int64 * 1)(info.size)
        strides = (ctypes.c_int64 * 1)(1)
        managed.dl_tensor = producers.DLTensor(
            data=info.ptr, device=producers.DLDevice(2, 0), ndim=1,
            dtype=producers.DLDataType(1, 8, 1), shape=shape, strides=strides,
        )
        managed.manager_ctx = capsule_id
        managed.deleter = DELETER
        with _capsule_lock:
            CAPSULES[capsule_id] = ((managed, shape, strides), self, info)
        info.deleted[capsule_id] = 0
        info.ledger.last_capsule = capsule_id
        return producers._PyCapsule_New(
            ctypes.addressof(managed), b"dltensor_versioned", producers._capsule_destructor
        )

    def __del__(self):
        self._info.finalized += 1
        free_memory(self._info)


def order_after(ledger, producer_handle, consumer_handle):
    """Make ``consumer_handle`` wait for ``producer_handle``'s work so far (the user's own
    ordering after ``stream_ptr=-1``, and the DLPack producer's)."""
    if consumer_handle == -1 or consumer_handle == producer_handle:
        return
    d = drv()
    event = own("cuEventCreate", d.cuEventCreate(DISABLE_TIMING))
    capturing = consumer_handle in ledger.capturing_handles()
    try:
        own("cuEventRecord", d.cuEventRecord(event, producer_handle))
        own("cuStreamWaitEvent", d.cuStreamWaitEvent(consumer_handle, event, WAIT_EXTERNAL if capturing else 0))
    finally:
        if capturing:
            ledger.graph_events.append(event)  # replays wait on it: kept until the graphs are gone
        else:
            d.cuEventDestroy(event)


class Wrapper:
    """A producer lending another's memory, which its view can keep in a garbage cycle."""

    def __init__(self, inner):
        self.inner = inner
        self.keeps = None


class CAIWrapper(Wrapper):
    def __init__(self, inner):
        super().__init__(inner)
        self.__cuda_array_interface__ = inner.__cuda_array_interface__


class DLPackWrapper(Wrapper):
    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


def wrapped(obj):
    return (CAIWrapper if isinstance(obj, CAIProducer) else DLPackWrapper)(obj)


def collect(ref):
    """Collect garbage until ``ref`` is dead, the youngest generations first (a full collection
    walks everything a long run made: hypothesis's own objects too)."""
    for generation in (0, 1, 2):
        if ref() is None:
            return
        gc.collect(generation)


def make_view(obj, stream_ptr):
    """``StridedMemoryView(obj, stream_ptr)``; a DLPack producer's capsule id with it."""
    if isinstance(obj, Wrapper):
        inner = obj.inner
    else:
        inner = obj
    view = StridedMemoryView(obj, stream_ptr=stream_ptr)
    capsule = inner._info.ledger.last_capsule if isinstance(inner, DLPackProducer) else None
    return view, capsule


# --- the machine's model -------------------------------------------------------------------------


class Ledger:
    """What producers need to know of the example (no reference to the machine itself)."""

    def __init__(self):
        self.deferred: list = []  # legacy-stream producers whose free waits for a capture to end
        self.graph_events: list = []  # events external waits of captured orderings wait on
        self.captures: dict = {}  # stream key -> CaptureInfo
        self.handles: dict = {}
        self.last_capsule = None

    def legacy_blocked(self) -> bool:
        """The legacy stream takes no work while the blocking stream b0 captures (or its capture,
        invalidated, is not yet ended)."""
        return "b0" in self.captures

    def capturing_handles(self):
        return {self.handles[key] for key, capture in self.captures.items() if capture.status == "active"}


class ViewInfo:
    numbers = itertools.count()

    def __init__(self, view, producer, key, capsule, wrapper, rereadable, ready_key=None):
        self.number = next(ViewInfo.numbers)
        # The stream its ready_stream names, where the data are ready outside any capture (a
        # view handed on orders its consumer after it); None when there is none, or it is
        # another thread's per-thread stream, or the view was made for a capturing stream.
        self.ready_key = ready_key
        self.view, self.producer, self.key, self.capsule = view, producer, key, capsule
        self.wrapper = wrapper  # the Wrapper the view was made of, or None
        self.recorded: set[str] = set()  # streams whose later reads its hold covers
        self.handed = False  # record_stream was called on it (its release names the streams)
        self.rereadable = rereadable  # made for (and ordered on) a stream outside any capture

    def __repr__(self):
        return f"<view {self.number} of {self.producer!r} on {self.key}>"

    def mark_recorded(self, key, capturing=False):
        """record_stream was called for ``key``: the release names its streams, and the hold
        covers ``key``'s later reads (not a capturing stream's: the graph's replays own it)."""
        self.handed = True
        if not capturing:
            self.recorded.add(key)


class CaptureInfo:
    numbers = itertools.count(1)

    def __init__(self, key, mode):
        self.number = next(CaptureInfo.numbers)
        self.key, self.mode, self.status = key, mode, "active"
        self.unprotected: set = set()  # producers its replays read with no hand-over

    def __repr__(self):
        return f"<capture {self.number} on {self.key} ({self.status})>"


class GraphInfo:
    def __init__(self, capture, handle):
        self.capture, self.handle = capture, handle
        self.alive = True
        self.stale = False  # made before a primary-context reset (ResetMachine): only destroyed
        self.execs: list = []

    def __repr__(self):
        return f"<graph of capture {self.capture.number}{'' if self.alive else ' (destroyed)'}>"


class ExecInfo:
    def __init__(self, graph, handle):
        self.graph, self.handle = graph, handle
        self.launched_on: set[str] = set()

    def __repr__(self):
        return f"<exec of {self.graph!r}>"


class Worker:
    """A thread that lives across steps (its per-thread default stream, its caches and event
    pools with it) and runs what it is given, one job at a time."""

    def __init__(self):
        import queue

        self.jobs = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        from driver_support import make_current

        make_current(0)
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, done, out = job
            try:
                out["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - raised by call()
                out["error"] = exc
            finally:
                del fn
                done.set()

    def call(self, fn):
        done, out = threading.Event(), {}
        self.jobs.put((fn, done, out))
        assert done.wait(60), "the worker thread did not answer"
        if "error" in out:
            raise out.pop("error")
        return out.pop("value", None)

    def stop(self):
        self.jobs.put(None)
        self.thread.join(60)
        assert not self.thread.is_alive()


class Gate:
    """A host function holding its stream until opened (or GATE_TIMEOUT, which is noted)."""

    def __init__(self, world, key):
        from simgpu.simgpu_support import host_fn

        self.key = key
        self.timed_out = False
        self._open = threading.Event()

        def wait():
            if not self._open.wait(GATE_TIMEOUT):
                self.timed_out = True

        host_fn(world.handles[key], wait)

    def open(self):
        self._open.set()


class HandOverMachine(RuleBasedStateMachine):
    """The correct user (module docstring); ``World`` and the simulator come from the test."""

    world: World = None

    def __init__(self):
        super().__init__()
        from driver_support import simulator

        self.sim = simulator()
        self.w = type(self).world
        self.ledger = Ledger()
        self.ledger.handles = self.w.handles
        self.producers: list[ProducerInfo] = []
        self.views: list[ViewInfo] = []
        self.graphs: list[GraphInfo] = []
        self.execs: list[ExecInfo] = []
        self.gates: list[Gate] = []
        self.owner_cycles: list = []  # weak references to owners in cycles with their recorded views
        self.worker = None  # a Worker, once a step needs one
        self.unraisable: list = []
        self.fault = None  # (call, code name) while a failure is injected
        self.limit = None
        BREACHES.clear()
        self._hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self.sim.fail_clear()
        self._check_mode = self.sim.set_check(1)
        self.reports = self.sim.check_report_count()
        self.launchers = self._launchers()

    # ---- helpers ----

    def _unraisable(self, unraisable):
        exc = unraisable.exc_value
        where = str(unraisable.object)
        if (
            self.fault is not None and isinstance(exc, CUDAError) and exc.name == self.fault[1]
            and "hand-over" in where
        ):
            return  # documented: a hand-over's record failing, kept and tried again
        self.unraisable.append(f"{where}: {exc!r}")

    def _launchers(self):
        def body(*args):
            *arrays, stream, key = args
            views = [a.view(stream) for a in arrays]
            for view in views:
                code = read_kernel(self.w, self.w.handles[key], view.ptr)
                assert code == SUCCESS, result_name(code)

        return {
            ("record", 1): args_viewable_as_strided_memory((0,), record_stream=True)(
                lambda a, stream, key: body(a, stream, key)),
            ("record", 2): args_viewable_as_strided_memory((0, 1), record_stream=True)(
                lambda a, b, stream, key: body(a, b, stream, key)),
            ("plain", 1): args_viewable_as_strided_memory((0,))(
                lambda a, stream, key: body(a, stream, key)),
            # one launch, two streams: the group's hand-over has two places
            ("record", "two streams"): args_viewable_as_strided_memory((0, 1), record_stream=True)(
                lambda a, b, s1, k1, s2, k2: (body(a, s1, k1), body(b, s2, k2))),
        }

    def capture_of(self, key):
        return self.ledger.captures.get(key)

    def active(self, key) -> bool:
        capture = self.capture_of(key)
        return capture is not None and capture.status == "active"

    def usable(self, key) -> bool:
        """Whether work may be enqueued on ``key`` now, outside a capture."""
        if key in self.ledger.captures:
            return False
        return not (key == "legacy" and self.ledger.legacy_blocked())

    def consumer_keys(self, capturing=True):
        """Streams a launch may use: usable ones, and (``capturing``) those capturing."""
        keys = [key for key in World.KEYS if self.usable(key)]
        if capturing:
            keys += [key for key in World.CAPTURABLE if self.active(key)]
        return keys

    def live_producers(self):
        found = [p for p in self.producers if p.obj is not None and not p.dead]
        if self.ledger.legacy_blocked():  # (its stream cannot be ordered after now)
            found = [p for p in found if p.key != "legacy"]
        return found

    def open_gates(self):
        for gate in self.gates:
            gate.open()
        self.gates = [gate for gate in self.gates if not gate._open.is_set()]

    def synchronize(self, keys):
        """The user waits on the host for ``keys``' work: reads made there are no longer in use."""
        self.open_gates()
        d = drv()
        for key in keys:
            own("cuStreamSynchronize", d.cuStreamSynchronize(self.w.handles[key]))
        for p in self.producers:
            p.unprotected -= set(keys)

    def syncable(self, keys) -> bool:
        return all(self.usable(key) for key in keys)

    def register_read(self, p, key, protected):
        """A read of ``p`` enqueued on ``key`` (captured when ``key`` captures)."""
        capture = self.capture_of(key)
        if capture is not None:
            if not protected:
                capture.unprotected.add(p)
                p.pins.add(capture.number)
        elif not protected:
            p.unprotected.add(key)

    def keep_or_drop(self, info, keep, cycle):
        """List the user's new view; drop it at once unless ``keep``."""
        self.views.append(info)
        if not keep:
            self.drop_view_info(info, cycle)

    def drop_view_info(self, info, cycle):
        """Drop the user's view; the producer's memory may go (then every unprotected read of it
        was synchronized first)."""
        p = info.producer
        if p.obj is None and p.unprotected:
            self.synchronize(sorted(p.unprotected))
        self.views.remove(info)
        view, wrapper = info.view, info.wrapper
        info.view = info.wrapper = None
        if not cycle or wrapper is None:
            del view, wrapper
            return
        wrapper.keeps = view  # wrapper -> view -> wrapper
        ref = weakref.ref(wrapper)
        owner = isinstance(wrapper, CAIWrapper) and info.handed
        del view, wrapper
        if owner:
            gc.collect(0)
            # The wrapper owns the memory (the view holds it by its CUDA Array Interface): a
            # view with a hand-over does not report its owner to the collector, so a cycle
            # through the owner is not collected until the program breaks it (_handover.pxi,
            # "The collector"; break_owner_cycles).
            self.owner_cycles.append(ref)
        else:
            collect(ref)

    @precondition(lambda self: self.owner_cycles)
    @rule()
    def break_owner_cycles(self):
        """The program breaks the cycles through owners of recorded views: they hand over."""
        refs, self.owner_cycles = self.owner_cycles, []
        for ref in refs:
            wrapper = ref()
            if wrapper is not None:
                wrapper.keeps = None
            del wrapper

    # ---- the example's set-up ----

    @initialize(limit=st.sampled_from([None, None, 1, 3]))
    def pending_limit(self, limit):
        """The bound on pending hand-overs: the default (4096) or a small one, which makes the
        library wait on the host for the oldest (so no gate is used then)."""
        if limit is not None:
            self.limit = _view._set_pending_limit(limit)

    # ---- producers ----

    @precondition(lambda self: sum(p.obj is not None for p in self.producers) < 6)
    @rule(
        kind=st.sampled_from(["cai", "dlpack"]),
        key=st.sampled_from(World.PRODUCER_STREAMS),
        size=st.sampled_from([64, 256, 4096]),
    )
    def new_producer(self, kind, key, size):
        if not self.usable(key):
            key = "p0"
        d = drv()
        handle = self.w.handles[key]
        ptr = int(own("cuMemAllocAsync", d.cuMemAllocAsync(size, handle)))
        own("cuMemsetD8Async", d.cuMemsetD8Async(ptr, 0x5A, size, handle))  # the producer's data
        info = ProducerInfo(kind, key, handle, ptr, size, self.ledger)
        info.obj = (CAIProducer if kind == "cai" else DLPackProducer)(info)
        self.producers.append(info)

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(data=st.data())
    def drop_producer(self, data):
        """The user lets go of a producer: the streams that read it without a hand-over are
        synchronized first (the memory goes once its views are gone too)."""
        choices = [p for p in self.producers if p.obj is not None and not p.pins and self.syncable(p.unprotected)]
        if not choices:
            return
        p = data.draw(st.sampled_from(choices), label="producer")
        self.synchronize(sorted(p.unprotected))
        p.obj = None

    # ---- launches ----

    def launch(self, p, key, how, record, keep, wrap, form, cycle):
        """A view of ``p`` for stream ``key`` and a kernel reading it there."""
        capture = self.capture_of(key)
        if capture is not None and record:
            keep = False  # protected only if released during the capture
        stream = self.w.stream_arg(key, form)
        handle = self.w.handles[key]
        obj = wrapped(p.obj) if wrap else p.obj
        if how == "minus1":
            view, capsule = make_view(obj, -1)
            order_after(self.ledger, p.handle, handle)  # the user's own ordering
        else:
            view, capsule = make_view(obj, stream)
        code = read_kernel(self.w, handle, view.ptr)
        assert code == SUCCESS, result_name(code)
        recorded = False
        try:
            if record:
                view.record_stream(stream)
                recorded = True
        finally:
            self.register_read(p, key, recorded)
        if capture is not None:
            ready_key = None
        elif how == "ordered":
            ready_key = key
        else:  # -1: a CAI view's ready_stream is the producer's, a DLPack view has none
            ready_key = p.key if p.kind == "cai" else None
        info = ViewInfo(view, p, key, capsule, obj if wrap else None, rereadable=capture is None,
                        ready_key=ready_key)
        del view, obj
        if recorded:
            info.mark_recorded(key, capturing=capture is not None)
        self.keep_or_drop(info, keep, cycle)

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(
        data=st.data(), how=st.sampled_from(["ordered", "ordered", "minus1"]), record=st.booleans(),
        keep=st.booleans(), wrap=st.booleans(), form=st.integers(0, 1), cycle=st.booleans(),
    )
    def launch_rule(self, data, how, record, keep, wrap, form, cycle):
        producers_ = self.live_producers()
        if not producers_:
            return
        p = data.draw(st.sampled_from(producers_), label="producer")
        key = data.draw(st.sampled_from(self.consumer_keys()), label="stream")
        if self.active(key):
            how = "ordered"  # (the user's own wait would have to be external)
        self.launch(p, key, how, record, keep, wrap, form, cycle)

    @precondition(lambda self: any(self.capture_of(k) is not None and self.capture_of(k).status == "invalidated"
                                   for k in World.CAPTURABLE))
    @rule(data=st.data())
    def launch_into_an_invalidated_capture(self, data):
        """A view of a CAI producer for a stream whose capture was invalidated: the documented
        CUDAError, no wait made."""
        keys = [k for k in World.CAPTURABLE if self.capture_of(k) is not None and self.capture_of(k).status == "invalidated"]
        choices = [p for p in self.live_producers() if p.kind == "cai"]
        if not choices:
            return
        p = data.draw(st.sampled_from(choices), label="producer")
        key = data.draw(st.sampled_from(keys), label="stream")
        with pytest.raises(CUDAError) as caught:
            StridedMemoryView(p.obj, stream_ptr=self.w.handles[key])
        assert caught.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", caught.value
        assert str(caught.value).startswith("cuStreamIsCapturing: the consumer stream's capture was invalidated")

    @precondition(lambda self: any(v.ready_key is not None for v in self.views))
    @rule(data=st.data(), via=st.sampled_from(["dlpack", "cai"]), record=st.booleans(), keep=st.booleans(),
          form=st.integers(0, 1))
    def launch_through_a_view(self, data, via, record, keep, form):
        """A view handed on as a producer (its own ``__dlpack__`` or ``__cuda_array_interface__``):
        the new view's stream is ordered after the first view's ready_stream."""
        choices = [v for v in self.views
                   if v.ready_key is not None and self.usable(v.ready_key) and not v.producer.dead]
        if not choices:
            return
        first = data.draw(st.sampled_from(choices), label="view")
        key = data.draw(st.sampled_from(self.consumer_keys()), label="stream")
        capture = self.capture_of(key)
        if capture is not None and record:
            keep = False
        if not keep and first.producer.obj is None and not self.syncable(first.producer.unprotected):
            # Dropping the new view may free the producer's memory, which the user let go of:
            # it would first synchronize the streams that read it unprotected, and one is
            # capturing now (drop_view's rule: such a view is not dropped until it is not).
            return
        stream = self.w.stream_arg(key, form)
        if via == "dlpack":
            view = StridedMemoryView(first.view, stream_ptr=stream)
        else:
            view = StridedMemoryView.from_cuda_array_interface(first.view, stream)
        code = read_kernel(self.w, self.w.handles[key], view.ptr)
        assert code == SUCCESS, result_name(code)
        if record:
            view.record_stream(stream)
        self.register_read(first.producer, key, record)
        info = ViewInfo(view, first.producer, key, None, None, rereadable=capture is None,
                        ready_key=None if capture is not None else key)
        del view
        if record:
            info.mark_recorded(key, capturing=capture is not None)
        self.keep_or_drop(info, keep, False)

    @precondition(lambda self: any(v.rereadable for v in self.views))
    @rule(data=st.data())
    def launch_again(self, data):
        """Another kernel through a kept view, on the stream it was made for (outside captures)."""
        choices = [v for v in self.views if v.rereadable and self.usable(v.key) and not v.producer.dead]
        if not choices:
            return
        info = data.draw(st.sampled_from(choices), label="view")
        code = read_kernel(self.w, self.w.handles[info.key], info.view.ptr)
        assert code == SUCCESS, result_name(code)
        self.register_read(info.producer, info.key, info.key in info.recorded)

    @precondition(lambda self: any(v.rereadable for v in self.views))
    @rule(data=st.data(), record=st.booleans())
    def launch_elsewhere(self, data, record):
        """A kept view read on another stream, which the user orders after the view's own (an
        event of its own), recorded there or not: a view handed to two streams."""
        choices = [v for v in self.views if v.rereadable and self.usable(v.key) and not v.producer.dead]
        if not choices:
            return
        info = data.draw(st.sampled_from(choices), label="view")
        keys = [k for k in World.KEYS if self.usable(k) and k != info.key]
        key = data.draw(st.sampled_from(keys), label="stream")
        order_after(self.ledger, self.w.handles[info.key], self.w.handles[key])
        code = read_kernel(self.w, self.w.handles[key], info.view.ptr)
        assert code == SUCCESS, result_name(code)
        if record:
            info.view.record_stream(self.w.handles[key])
            info.mark_recorded(key)
        self.register_read(info.producer, key, record)

    @precondition(lambda self: self.views)
    @rule(data=st.data(), form=st.integers(0, 1))
    def record_kept_view(self, data, form):
        info = data.draw(st.sampled_from(self.views), label="view")
        if info.key is None or info.key not in World.KEYS or info.producer.dead:
            return
        info.view.record_stream(self.w.stream_arg(info.key, form))
        # (reads made before stay counted as unprotected: conservative)
        info.mark_recorded(info.key, capturing=self.capture_of(info.key) is not None)

    @precondition(lambda self: self.views)
    @rule(data=st.data(), cycle=st.booleans())
    def drop_view(self, data, cycle):
        choices = [v for v in self.views if v.producer.obj is not None or self.syncable(v.producer.unprotected)]
        if not choices:
            return
        self.drop_view_info(data.draw(st.sampled_from(choices), label="view"), cycle)

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(
        data=st.data(), wrap=st.booleans(),
        which=st.sampled_from([("record", 1), ("record", 2), ("plain", 1), ("record", "two streams")]),
    )
    def decorated_launch(self, data, which, wrap):
        producers_ = self.live_producers()
        if not producers_:
            return
        count = 2 if which[1] != 1 else 1
        keys = [data.draw(st.sampled_from(self.consumer_keys()), label="stream")]
        if which[1] == "two streams":
            keys.append(data.draw(st.sampled_from(self.consumer_keys()), label="stream"))
        args = [data.draw(st.sampled_from(producers_), label="producer") for _ in range(count)]
        launcher = self.launchers[which]
        objs = [wrapped(p.obj) if wrap else p.obj for p in args]
        streams = [(self.w.stream_arg(key, data.draw(st.integers(0, 1), label="form")), key) for key in keys]
        try:
            launcher(*objs, *[part for pair in streams for part in pair])
        finally:
            for i, p in enumerate(args):
                self.register_read(p, keys[min(i, len(keys) - 1)], which[0] == "record")

    # ---- releases and gates ----

    @rule(wait=st.booleans())
    def release(self, wait):
        if wait:
            self.open_gates()
        assert release_pending(wait=wait) >= 0

    @precondition(lambda self: self.limit is None and len(self.gates) < 2)
    @rule(data=st.data())
    def gate(self, data):
        keys = [k for k in World.KEYS if self.usable(k) and k != "ptds"]
        self.gates.append(Gate(self.w, data.draw(st.sampled_from(keys), label="stream")))

    @precondition(lambda self: self.gates)
    @rule()
    def open_the_gates(self):
        self.open_gates()

    # ---- threads and host functions ----

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(data=st.data(), record=st.booleans(), hand_back=st.booleans())
    def launch_in_a_thread(self, data, record, hand_back):
        """A short-lived thread views a producer for a stream (its own per-thread stream among
        them), launches there, records or not, and drops the view or hands it back."""
        producers_ = self.live_producers()
        if not producers_:
            return
        p = data.draw(st.sampled_from(producers_), label="producer")
        keys = [k for k in World.KEYS if self.usable(k) and k != "ptds"] + ["thread"]
        key = data.draw(st.sampled_from(keys), label="stream")
        self.open_gates()  # (the thread may synchronize its stream)
        out, failures = {}, []
        w, obj = self.w, p.obj

        def work():
            try:
                from driver_support import make_current

                make_current(0)
                handle = 2 if key == "thread" else w.handles[key]
                view, capsule = make_view(obj, handle)
                code = read_kernel(w, handle, view.ptr)
                assert code == SUCCESS, result_name(code)
                if record:
                    view.record_stream(handle)
                elif key == "thread":  # its per-thread stream ends with it: synchronized first
                    own("cuStreamSynchronize", drv().cuStreamSynchronize(2))
                if hand_back:
                    out["view"] = (view, capsule)
                del view
            except BaseException as exc:  # noqa: BLE001 - raised below
                failures.append(exc)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join(60)
        assert not thread.is_alive()
        if failures:
            raise failures[0]
        if key != "thread":
            self.register_read(p, key, record)
        if "view" in out:
            view, capsule = out.pop("view")
            info = ViewInfo(view, p, "thread" if key == "thread" else key, capsule, None,
                            rereadable=key != "thread", ready_key=None if key == "thread" else key)
            if record:
                info.mark_recorded(info.key)
            self.views.append(info)

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(data=st.data(), record=st.booleans(), stop=st.booleans())
    def worker_launch(self, data, record, stop):
        """The worker thread views a producer for its own per-thread stream (2), launches there
        and records the view there (or synchronizes its stream, then the read is done), and hands
        the view to the main thread, which releases it later: while the worker lives (recorded on
        its context's legacy stream), or once it ended (``stop``: through the event the worker
        recorded on its stream as it ended)."""
        producers_ = self.live_producers()
        if not producers_:
            return
        p = data.draw(st.sampled_from(producers_), label="producer")
        obj, w = p.obj, self.w
        if not record:
            self.open_gates()  # (the worker synchronizes its stream, which waits for the legacy one)
        if self.worker is None:
            self.worker = Worker()

        def job():
            view, capsule = make_view(obj, 2)
            code = read_kernel(w, 2, view.ptr)
            assert code == SUCCESS, result_name(code)
            if record:
                view.record_stream(2)
            else:
                own("cuStreamSynchronize", drv().cuStreamSynchronize(2))
            return view, capsule

        view, capsule = self.worker.call(job)
        del obj
        info = ViewInfo(view, p, "worker", capsule, None, rereadable=False)
        del view
        if record:
            info.mark_recorded("worker")
        self.views.append(info)
        if stop:
            self.worker.stop()
            self.worker = None

    @precondition(lambda self: self.views)
    @rule(data=st.data())
    def drop_in_a_thread(self, data):
        """A view released by another thread than the one that made or recorded it."""
        choices = [v for v in self.views if v.producer.obj is not None or self.syncable(v.producer.unprotected)]
        if not choices:
            return
        info = data.draw(st.sampled_from(choices), label="view")
        p = info.producer
        if p.obj is None and p.unprotected:
            self.synchronize(sorted(p.unprotected))
        self.views.remove(info)
        box = [info.view]
        info.view = info.wrapper = None
        failures = []

        def work():
            try:
                from driver_support import make_current

                make_current(0)
                del box[:]
            except BaseException as exc:  # noqa: BLE001 - raised below
                failures.append(exc)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join(60)
        if failures:
            raise failures[0]

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(data=st.data(), make=st.booleans(), drop=st.booleans())
    def host_function(self, data, make, drop):
        """Python run inside a CUDA host function (every CUDA call answers NOT_PERMITTED there):
        view creations (which check pending holds) and the release of a view whose producer the
        user still holds; nothing may be released or waited for there."""
        from simgpu.simgpu_support import host_fn

        keys = [k for k in World.KEYS if self.usable(k) and k != "ptds"]
        key = data.draw(st.sampled_from(keys), label="stream")
        producers_ = self.live_producers()
        made = data.draw(st.sampled_from(producers_), label="producer") if make and producers_ else None
        droppable = [v for v in self.views if v.producer.obj is not None]
        dropped = data.draw(st.sampled_from(droppable), label="view") if drop and droppable else None
        self.open_gates()
        box = [dropped.view] if dropped is not None else []
        if dropped is not None:
            self.views.remove(dropped)
            dropped.view = dropped.wrapper = None
        seen = {}
        done = threading.Event()

        def inside():
            try:
                for _ in range(40):  # (a view creation checks the oldest holds every 32)
                    StridedMemoryView(np.zeros(2), stream_ptr=-1)
                if made is not None:
                    seen["view"] = make_view(made.obj, -1)
                del box[:]
                seen["released"] = release_pending()
            except BaseException as exc:  # noqa: BLE001 - a host function cannot raise
                seen["error"] = exc
            finally:
                done.set()

        d = drv()
        host_fn(self.w.handles[key], inside)
        returned = own("cuEventCreate", d.cuEventCreate(DISABLE_TIMING))
        own("cuEventRecord", d.cuEventRecord(returned, self.w.handles[key]))
        assert done.wait(30)
        # The host function has returned, its thread state gone, before anything it made is
        # dropped here: on a free-threaded build, an object dropped by another thread while
        # its maker's thread state lives is deallocated by the maker as that state goes
        # (biased reference counting), which would be inside the host function.
        own("cuEventSynchronize", d.cuEventSynchronize(returned))
        d.cuEventDestroy(returned)
        assert "error" not in seen, seen["error"]
        assert seen["released"] == 0
        if "view" in seen:
            view, capsule = seen.pop("view")
            self.views.append(ViewInfo(view, made, None, capsule, None, rereadable=False,
                                       ready_key=made.key if made.kind == "cai" else None))

    # ---- graphs ----

    @precondition(lambda self: len(self.ledger.captures) < 2)
    @rule(key=st.sampled_from(World.CAPTURABLE), mode=st.sampled_from(["thread_local", "global"]))
    def begin_capture(self, key, mode):
        if key not in self.ledger.captures:
            self._begin_capture(key, mode)

    def _begin_capture(self, key, mode):
        d = drv()
        modes = d.CUstreamCaptureMode
        value = modes.CU_STREAM_CAPTURE_MODE_GLOBAL if mode == "global" else modes.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        own("cuStreamBeginCapture", d.cuStreamBeginCapture(self.w.handles[key], value))
        self.ledger.captures[key] = CaptureInfo(key, mode)

    @precondition(lambda self: any(c.status == "active" for c in self.ledger.captures.values()))
    @rule(data=st.data())
    def invalidate_capture(self, data):
        keys = sorted(k for k, c in self.ledger.captures.items() if c.status == "active")
        key = data.draw(st.sampled_from(keys), label="stream")
        code = code_of(drv().cuStreamQuery(self.w.handles[key]))  # not allowed while capturing
        assert code != SUCCESS
        self.ledger.captures[key].status = "invalidated"

    @precondition(lambda self: self.ledger.captures)
    @rule(data=st.data())
    def end_capture(self, data):
        key = data.draw(st.sampled_from(sorted(self.ledger.captures)), label="stream")
        self._end_capture(key)

    def _end_capture(self, key):
        capture = self.ledger.captures.pop(key)
        result = drv().cuStreamEndCapture(self.w.handles[key])
        if capture.status == "invalidated":
            assert result_name(code_of(result)) == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", result
            for p in capture.unprotected:
                p.pins.discard(capture.number)
        else:
            graph = GraphInfo(capture, own("cuStreamEndCapture", result))
            self.graphs.append(graph)
            self.flush_deferred()
            return graph
        self.flush_deferred()
        return None

    def flush_deferred(self):
        if not self.ledger.legacy_blocked():
            deferred, self.ledger.deferred = self.ledger.deferred, []
            for info in deferred:
                free_memory(info)

    @precondition(lambda self: any(g.alive for g in self.graphs))
    @rule(data=st.data())
    def instantiate(self, data):
        choices = [g for g in self.graphs if g.alive and not g.stale]
        if choices:
            self._instantiate(data.draw(st.sampled_from(choices), label="graph"))

    def _instantiate(self, graph):
        handle = own("cuGraphInstantiate", drv().cuGraphInstantiate(graph.handle, 0))
        info = ExecInfo(graph, handle)
        graph.execs.append(info)
        self.execs.append(info)
        return info

    @precondition(lambda self: self.execs)
    @rule(data=st.data())
    def launch_graph(self, data):
        exe = data.draw(st.sampled_from(self.execs), label="exec")
        keys = [k for k in World.KEYS if self.usable(k)]
        self._launch_exec(exe, data.draw(st.sampled_from(keys), label="stream"))

    def _launch_exec(self, exe, key):
        own("cuGraphLaunch", drv().cuGraphLaunch(exe.handle, self.w.handles[key]))
        exe.launched_on.add(key)
        for p in exe.graph.capture.unprotected:
            p.unprotected.add(key)

    @precondition(lambda self: any(g.alive for g in self.graphs))
    @rule(data=st.data())
    def destroy_graph(self, data):
        self._destroy_graph(data.draw(st.sampled_from([g for g in self.graphs if g.alive]), label="graph"))

    def _destroy_graph(self, graph):
        own("cuGraphDestroy", drv().cuGraphDestroy(graph.handle))
        graph.alive = False
        self._graph_gone(graph)

    @precondition(lambda self: self.execs)
    @rule(data=st.data())
    def destroy_exec(self, data):
        choices = [e for e in self.execs if self.syncable(e.launched_on)]
        if not choices:
            return
        self._destroy_exec(data.draw(st.sampled_from(choices), label="exec"))

    def _destroy_exec(self, exe):
        own("cuGraphExecDestroy", drv().cuGraphExecDestroy(exe.handle))
        self.execs.remove(exe)
        exe.graph.execs.remove(exe)
        # The checker does not see that the driver gives a graph's user objects back only once
        # the launches ran: synchronized here, so that a hold coming back is not reported
        # (test_checker_sees_a_graph_hold_come_back).
        self.synchronize(sorted(exe.launched_on))
        self._graph_gone(exe.graph)

    def _graph_gone(self, graph):
        if not graph.alive and not graph.execs:
            for p in graph.capture.unprotected:
                p.pins.discard(graph.capture.number)
            self.graphs.remove(graph)

    @precondition(lambda self: any(p.obj is not None for p in self.producers))
    @rule(
        data=st.data(), mode=st.sampled_from(["thread_local", "global"]),
        during=st.lists(
            st.tuples(st.sampled_from(["view", "decorated", "record_kept", "drop_kept", "release"]),
                      st.booleans(), st.booleans()),
            min_size=1, max_size=4),
        invalidate=st.booleans(),
        replays=st.lists(st.sampled_from(World.KEYS), max_size=3),
        ending=st.sampled_from(["keep", "graph", "exec", "both"]),
    )
    def graph_round(self, data, mode, during, invalidate, replays, ending):
        """A whole round: capture a stream; during the capture launch (views and decorated
        launches, with and without hand-overs), record kept views on the capturing stream, drop
        kept views (whose hand-overs then wait for the capture: a blocking stream's capture keeps
        the legacy stream from taking a record), check pending holds; maybe invalidate it; end,
        instantiate, replay on streams, destroy the graph and/or the executable graph now or
        leave them to later rules."""
        keys = [k for k in World.CAPTURABLE if k not in self.ledger.captures]
        if not keys:
            return
        key = data.draw(st.sampled_from(keys), label="capturing")
        self._begin_capture(key, mode)
        for kind, record, wrap in during:
            producers_ = self.live_producers()
            if kind == "view" and producers_:
                p = data.draw(st.sampled_from(producers_), label="producer")
                self.launch(p, key, "ordered", record, False, wrap, 0, False)
            elif kind == "decorated" and producers_:
                p = data.draw(st.sampled_from(producers_), label="producer")
                launcher = self.launchers[("record" if record else "plain", 1)]
                try:
                    launcher(wrapped(p.obj) if wrap else p.obj, self.w.handles[key], key)
                finally:
                    self.register_read(p, key, record)
            elif kind == "record_kept" and self.views:
                info = data.draw(st.sampled_from(self.views), label="view")
                if not info.producer.dead:
                    info.view.record_stream(self.w.handles[key])
                    info.mark_recorded(key, capturing=True)
            elif kind == "drop_kept":
                choices = [v for v in self.views if v.producer.obj is not None or self.syncable(v.producer.unprotected)]
                if choices:
                    self.drop_view_info(data.draw(st.sampled_from(choices), label="view"), wrap)
            elif kind == "release":
                release_pending()
        if invalidate:
            assert code_of(drv().cuStreamQuery(self.w.handles[key])) != SUCCESS
            self.ledger.captures[key].status = "invalidated"
        graph = self._end_capture(key)
        if graph is None:
            return
        exe = self._instantiate(graph)
        for replay in replays:
            if self.usable(replay):
                self._launch_exec(exe, replay)
        if ending in ("graph", "both"):
            self._destroy_graph(graph)
        if ending in ("exec", "both") and self.syncable(exe.launched_on):
            self._destroy_exec(exe)

    # ---- injected failures ----

    @precondition(lambda self: any(p.obj is not None for p in self.producers) or self.views)
    @rule(
        data=st.data(), call=st.sampled_from(FAULT_CALLS), name=st.sampled_from(FAULT_CODES),
        skip=st.integers(0, 2),
        action=st.sampled_from(["launch", "decorated", "drop", "release", "release_wait"]),
    )
    def transient_failure(self, data, call, name, skip, action):
        """A driver call fails once (after ``skip`` good calls) with an answer that says nothing
        of the work, around one action: a raise is the failing call's CUDAError (an ordering), a
        hand-over's failure is reported through sys.unraisablehook and retried; either way the
        invariants hold.

        Which call the failure hits depends on the library's state, which the streams' timing
        decides (its periodic checks query pending holds and retry deferred records, a
        hand-over joins a pending entry or not), so whether the action raised must not decide
        the model, which the next steps' preconditions and draws read: a launch that raised
        (before its view existed: the ordering's failure) is made again once the failure is
        cleared, as a user retries a transient failure, so that the view is listed and its
        read registered either way."""
        d = drv()
        self.sim.fail(call, getattr(d.CUresult, name), count=1, skip=skip)
        self.fault = (call, name)
        retry = None
        try:
            if action == "launch" and self.live_producers():
                p = data.draw(st.sampled_from(self.live_producers()), label="producer")
                key = data.draw(st.sampled_from(self.consumer_keys(capturing=False)), label="stream")
                record = data.draw(st.booleans(), label="record")
                keep = data.draw(st.booleans(), label="keep")
                before = (len(self.views), set(p.unprotected))
                retry = (p, key, "ordered", record, keep, False, 0, False)
                self.launch(*retry)
                retry = None
            elif action == "decorated" and self.live_producers():
                self.decorated_launch(data, ("record", 1), False)
            elif action == "drop" and self.views:
                self.drop_view(data, False)
            elif action == "release":
                release_pending()
            elif action == "release_wait":
                self.open_gates()
                release_pending(wait=True)
        except CUDAError as exc:
            assert exc.name == name and str(exc).startswith(call), exc
        except OwnFailure as exc:
            assert result_name(exc.code) == name, exc
        finally:
            REACHED["failures injected"] += self.sim.fail_fired(call) > 0
            self.sim.fail_clear()
            self.fault = None
        if retry is not None:
            # The launch raised before it made its view (and so before its read): nothing of it
            # is in the model yet.
            assert (len(self.views), set(retry[0].unprotected)) == before, "a launch failed after its read"
            self.launch(*retry)

    # ---- invariants ----

    @invariant()
    def note_reached(self):
        """Count the states the library was left in (test_handover_machine asserts the CI run
        reaches each: a change to the machine must not lose them quietly)."""
        entries, holds, _ = _view._pending_holds()
        REACHED["steps"] += 1
        REACHED["pending holds"] += holds > 0
        REACHED["deferred holds"] += _view._deferred_holds() > 0
        REACHED["graph-owned"] += _view._graph_owned() > 0
        REACHED["capturing"] += bool(self.ledger.captures)
        REACHED["gated"] += bool(self.gates)

    @invariant()
    def nothing_reported(self):
        count = self.sim.check_report_count()
        if count != self.reports:
            texts = self.sim.check_reports(self.reports)
            self.reports = count
            raise AssertionError("the stream-order checker reported:\n" + "\n".join(texts))
        assert BREACHES == [], BREACHES
        assert self.unraisable == [], self.unraisable
        assert not any(gate.timed_out for gate in self.gates), "a host wait behind a gate"
        for p in self.producers:
            assert all(code in (SUCCESS, "reset") for code in p.frees), (p, p.frees)
            assert len(p.frees) <= 1 and p.finalized <= 1, (p, p.frees, p.finalized)
            if p.obj is not None:
                assert p.frees in ([], ["reset"]), f"{p} freed while the user holds it"
            assert all(n <= 1 for n in p.deleted.values()), (p, p.deleted)
        for v in self.views:
            if v.capsule is not None:
                assert v.producer.deleted[v.capsule] == 0, f"{v}: its capsule was deleted"

    # ---- the end of an example ----

    def teardown(self):
        failing = sys.exc_info()[0] is not None  # (then clean up, and assert nothing more)
        try:
            self.sim.fail_clear()
            self.fault = None
            self.open_gates()
            for key in sorted(self.ledger.captures):
                try:
                    self._end_capture(key)
                except (OwnFailure, AssertionError):
                    # A failed step may have invalidated a capture the model holds active: the
                    # rest is cleaned up all the same (a graph or a worker left would keep every
                    # later example's settle() waiting its full timeout while Hypothesis shrinks).
                    if not failing:
                        raise
            for exe in list(self.execs):
                self._destroy_exec(exe)
            for graph in list(self.graphs):
                if graph.alive:
                    own("cuGraphDestroy", drv().cuGraphDestroy(graph.handle))
                    graph.alive = False
                self._graph_gone(graph)
            self.flush_deferred()
            while self.views:
                self.drop_view_info(self.views[-1], False)
            self.break_owner_cycles()
            if self.worker is not None:
                self.worker.stop()
                self.worker = None
            for p in self.producers:
                if p.obj is not None:
                    self.synchronize(sorted(p.unprotected))
                    p.obj = None
            self.launchers = None
            gc.collect(1)
            settle()
            if any(p.finalized == 0 for p in self.producers):
                gc.collect()  # (a full collection costs what a long run made: only when needed)
                settle()
            own("cuCtxSynchronize", drv().cuCtxSynchronize())
            for event in self.ledger.graph_events:
                drv().cuEventDestroy(event)
            self.ledger.graph_events = []
            if failing:
                return
            self.nothing_reported()
            assert _view._pending_holds() == (0, 0, 0), _view._pending_holds()
            assert _view._graph_owned() == 0, _view._graph_owned()
            assert self.ledger.deferred == []
            for p in self.producers:
                assert p.frees in ([SUCCESS], ["reset"]) and p.finalized == 1, f"{p}: frees {p.frees}, gone {p.finalized} times"
                assert set(p.deleted.values()) <= {1}, f"{p}: deleters {p.deleted}"
            left = sorted(cid for cid, entry in CAPSULES.items() if entry[-1].ledger is self.ledger)
            assert left == [], f"capsules never deleted: {left}"
        finally:
            self.sim.fail_clear()
            self.sim.set_check(self._check_mode)
            sys.unraisablehook = self._hook
            if self.limit is not None:
                _view._set_pending_limit(self.limit)


def settle(timeout=20.0):
    """``release_pending(wait=True)`` until nothing is pending or owned by a graph (graphs give
    their holds back from a driver thread)."""
    deadline = time.monotonic() + timeout
    while True:
        release_pending(wait=True)
        if _view._pending_holds() == (0, 0, 0) and _view._graph_owned() == 0:
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


def machine_settings(examples, steps, long_share=1.0):
    """CI's bounded, derandomized run; with STRIDEDVIEW_MACHINE_EXAMPLES=N, ``long_share`` of N
    examples with random seeds (printing the blob that reproduces a failure)."""
    long_run = LONG_RUN > 0
    return settings(
        max_examples=max(examples, int(LONG_RUN * long_share)) if long_run else examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=not long_run,
        database=None,
        print_blob=long_run,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def world(gpu, simulator):
    gc.collect()
    gc.freeze()  # (a collection walks only what the machine makes)
    made = World(simulator)
    yield made
    made.close()
    gc.unfreeze()


def test_handover_machine(world):
    """The correct user's machine: the checker never reports, every deleter runs once, every
    producer's memory is freed once (CI_EXAMPLES examples of CI_STEPS steps)."""
    HandOverMachine.world = world
    REACHED.clear()
    try:
        run_state_machine_as_test(HandOverMachine, settings=machine_settings(CI_EXAMPLES, CI_STEPS))
    finally:
        HandOverMachine.world = None
    print(f"machine: {dict(REACHED)}")
    # Each state reached (a CI run: about 8,000 steps, each state after 40 to 3,000 of them,
    # how many depending on the streams' timing, as do the injected failures that fire).
    for state in ("pending holds", "deferred holds", "graph-owned", "capturing", "gated"):
        assert REACHED[state] >= 10, (state, dict(REACHED))
    assert REACHED["failures injected"] >= 5, dict(REACHED)



# --- release_driver_resources() and a primary-context reset, in a child process ---------------


class ResetMachine(HandOverMachine):
    """The machine with one more rule: ``stridedview.release_driver_resources()`` then
    ``cuDevicePrimaryCtxReset``, which destroys every stream, event and allocation of device 0
    (so it runs in a child process: ``test_reset_machine_in_a_child``)."""

    resets = 0  # made so far in this process (the child reports it)

    @rule(keep_graphs=st.booleans(), keep_views=st.booleans(), keep_producers=st.booleans())
    def reset(self, keep_graphs, keep_views, keep_producers):
        """As a correct user resets: captures ended, executable graphs destroyed, views that
        name streams (record_stream) released (their release records on those streams), gates
        opened; graphs (and the holds they own), unrecorded views and producers may stay.  After
        it the streams are made anew; what stayed never touches the old ones (a real driver
        crashes on a reset's stream or event, and the simulator with it)."""
        from driver_support import make_current

        import stridedview

        self.open_gates()
        for key in sorted(self.ledger.captures):
            self._end_capture(key)
        for exe in list(self.execs):
            self._destroy_exec(exe)
        if not keep_graphs:
            for graph in [g for g in self.graphs if g.alive]:
                self._destroy_graph(graph)
        for info in list(self.views):
            if info.handed or not keep_views:
                self.drop_view_info(info, False)
        self.break_owner_cycles()
        if not keep_producers:
            for p in self.producers:
                if p.obj is not None and not p.pins:
                    self.synchronize(sorted(p.unprotected))
                    p.obj = None
        if not any(g.alive for g in self.graphs):
            for event in self.ledger.graph_events:
                drv().cuEventDestroy(event)
        self.ledger.graph_events = []  # (those still used by graphs die with the reset)
        stridedview.release_driver_resources()
        type(self).resets += 1
        assert _view._pending_holds() == (0, 0, 0), _view._pending_holds()
        d = drv()
        own("cuDevicePrimaryCtxReset", d.cuDevicePrimaryCtxReset(own("cuDeviceGet", d.cuDeviceGet(0))))
        for p in self.producers:
            if not p.frees:
                p.dead = True
                p.frees.append("reset")
            p.unprotected.clear()
            p.pins.clear()
        for graph in self.graphs:
            graph.stale = True
        for info in self.views:
            info.rereadable = False
        make_current(0)
        self.w = type(self).world = World(self.sim)
        self.ledger.handles = self.w.handles



# --- the oracle sees: a careless user's mistakes are reported -----------------------------------


class CarelessMachine(HandOverMachine):
    """The same machine with one more rule, a careless user's launch: a read made without
    ordering, or memory freed under a launch made without a hand-over, on a producer of its own.
    The checker must report it, whatever state the rest of the machine left: its silence in
    HandOverMachine means something."""

    mistakes = 0  # careless launches made (and reported) in this process

    @rule(mistake=st.sampled_from(["unordered", "no_hand_over"]), kind=st.sampled_from(["cai", "dlpack"]),
          data=st.data())
    def careless_launch(self, mistake, kind, data):
        keys = [k for k in ("nb0", "nb1", "b0") if self.usable(k)]
        if not keys:
            return
        key = data.draw(st.sampled_from(keys), label="stream")
        self.new_producer(kind, "p0", 256)
        p = self.producers[-1]
        d = drv()
        handle = self.w.handles[key]
        before = self.sim.check_report_count()
        if mistake == "unordered":
            view, _ = make_view(p.obj, -1)  # and no ordering of the user's own
            assert read_kernel(self.w, handle, view.ptr) == SUCCESS
            expected = "simgpu: check: race: cuLaunchKernel of kernel svm_read"
            self.open_gates()
            own("cuStreamSynchronize", d.cuStreamSynchronize(handle))  # (nothing more to report)
        else:
            view, _ = make_view(p.obj, handle)
            assert read_kernel(self.w, handle, view.ptr) == SUCCESS
            expected = "simgpu: check: free while in use: cuMemFreeAsync"
        del view
        p.obj = None  # freed now: before the read, without a hand-over
        texts = self.sim.check_reports(before)
        assert any(text.startswith(expected) and f"{p.ptr:#x}" in text for text in texts), (expected, texts)
        self.reports = self.sim.check_report_count()
        type(self).mistakes += 1


@pytest.mark.races
def test_careless_machine_is_reported(world):
    """A few examples of CarelessMachine: every careless launch is reported, every other step is
    not."""
    CarelessMachine.world = world
    CarelessMachine.mistakes = 0
    try:
        run_state_machine_as_test(CarelessMachine, settings=machine_settings(CARELESS_EXAMPLES, CI_STEPS, 0.05))
    finally:
        CarelessMachine.world = None
    assert CarelessMachine.mistakes >= 3, CarelessMachine.mistakes


GRAPH_HOLD_SCRIPT = """
import sys, time
sys.path[:0] = sys.argv[1:3]
from driver_support import Stream, drv, make_current, ok, simulator
from simgpu.simgpu_support import Gate
import test_gpu_handover_machine as t
from stridedview import StridedMemoryView, _view, release_pending

sim = simulator()
make_current(0)
sim.set_check(1)
world = t.World(sim)
freed = []


class Producer:
    def __init__(self, stream):
        self.stream = stream
        self.ptr = int(ok(drv.cuMemAllocAsync(256, stream)))
        ok(drv.cuMemsetD8Async(self.ptr, 7, 256, stream))
        self.__cuda_array_interface__ = {"version": 3, "shape": (256,), "typestr": "|u1",
                                         "data": (self.ptr, False), "strides": None, "stream": stream}

    def __del__(self):
        ok(drv.cuMemFreeAsync(self.ptr, self.stream))
        freed.append(self.ptr)


capturing, launching, producing = world.owned["nb0"], world.owned["nb1"], world.owned["p0"]
gate = Gate().enqueue(launching.handle)
producer = Producer(producing.ptr)
ok(drv.cuStreamBeginCapture(capturing.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
view = StridedMemoryView(producer, stream_ptr=capturing.ptr)
assert t.read_kernel(world, capturing.ptr, view.ptr) == 0
view.record_stream(capturing.ptr)
del view, producer  # the hold belongs to the graph
graph = ok(drv.cuStreamEndCapture(capturing.handle))
exe = ok(drv.cuGraphInstantiate(graph, 0))
ok(drv.cuGraphLaunch(exe, launching.handle))  # the replay reads the memory on `launching`
ok(drv.cuGraphDestroy(graph))
ok(drv.cuGraphExecDestroy(exe))  # its user object goes once the queued replay ran
gate.open()
deadline = time.monotonic() + 10
while not freed and time.monotonic() < deadline:
    release_pending()  # the hold comes back, the producer frees on its stream
    time.sleep(0.002)
assert freed, "the hold never came back"
print(sim.check_report_count())
for text in sim.check_reports():
    print(text)
"""


def test_checker_sees_a_graph_hold_come_back(gpu, simulator):
    """A hold handed to a capturing stream comes back once the graph and its executable graph
    are gone and the replay queued on another stream has run: the producer's free that follows
    is ordered after that replay (the driver said so by running the destructor), and nothing is
    reported.  In a child process: the checker's mode is the process's."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(GRAPH_HOLD_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "0", "\n".join(lines)


RESET_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
from driver_support import make_current, simulator
from hypothesis.stateful import run_state_machine_as_test
import test_gpu_handover_machine as t

make_current(0)
t.ResetMachine.world = t.World(simulator())
run_state_machine_as_test(t.ResetMachine, settings=t.machine_settings(t.RESET_EXAMPLES, t.CI_STEPS, 0.1))
t.ResetMachine.world.close()
print("done", t.ResetMachine.resets)
"""


def test_reset_machine_in_a_child(gpu):
    """ResetMachine (the machine, and release_driver_resources() then a primary-context reset
    as a rule) in a child process: a reset takes every allocation of device 0, this process's
    other tests' included.  No checker report, every deleter once, every producer once, nothing
    pending, and the process does not crash on a stream or event the reset killed."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_SCRIPT, args=child_paths(), timeout=300)
    last = result.stdout.splitlines()[-1:]
    assert result.returncode == 0 and last and last[0].startswith("done "), (
        result.stdout[-3000:] + result.stderr[-6000:])
    assert int(last[0].split()[1]) > 0, "no example reset the device"


# --- what the machine keeps clear of: a view made for a capturing stream, after the capture -----


def test_a_view_made_under_capture_handed_on_after_it(gpu, simulator):
    """A CAI producer writes on P; a view is made for C while C captures (every replay of the
    graph waits for P, C itself never does); the capture ends; the view is handed on to D:
    its ready_stream is P (ready there outside the graph), so D is ordered after P's write and
    nothing is reported.  (The machine gives such views no ready stream: ViewInfo.ready_key.)"""
    d = drv()
    previous = simulator.set_check(1)
    world = World(simulator)
    try:
        before = simulator.check_report_count()
        producing, capturing, consuming = world.owned["p0"], world.owned["nb0"], world.owned["nb1"]
        ptr = int(own("cuMemAllocAsync", d.cuMemAllocAsync(256, producing.ptr)))
        own("cuMemsetD8Async", d.cuMemsetD8Async(ptr, 7, 256, producing.ptr))
        array = {"version": 3, "shape": (256,), "typestr": "|u1", "data": (ptr, False),
                 "strides": None, "stream": producing.ptr}
        holder = type("Producer", (), {"__cuda_array_interface__": array})()
        own("cuStreamBeginCapture", d.cuStreamBeginCapture(
            capturing.handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
        view = StridedMemoryView(holder, stream_ptr=capturing.ptr)
        graph = own("cuStreamEndCapture", d.cuStreamEndCapture(capturing.handle))
        assert view.ready_stream == producing.ptr
        handed = StridedMemoryView(view, stream_ptr=consuming.ptr)
        assert read_kernel(world, consuming.ptr, handed.ptr) == SUCCESS
        reports = simulator.check_reports(before)
        own("cuCtxSynchronize", d.cuCtxSynchronize())
        del handed, view
        own("cuGraphDestroy", d.cuGraphDestroy(graph))
        own("cuMemFreeAsync", d.cuMemFreeAsync(ptr, producing.ptr))
        assert reports == []
    finally:
        world.close()
        simulator.set_check(previous)
