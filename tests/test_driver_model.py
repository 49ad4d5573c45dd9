"""Model-based tests of stream ordering: random interleavings against the modelling fake driver.

Each seed drives a few real threads through a random program, one step at a time: the main
thread hands a step to one worker and waits for it, so the interleaving is reproducible
(deterministic seeds, a few seconds in all) while every step runs in its own thread, with
that thread's current context and that thread's cached events.  The program mixes:

- devices (three), each with its primary context, plus a context of the test's own on
  device 1;
- the worker's current context: any of those, or none (a new thread has none);
- producers: CUDA Array Interface dicts with a ``stream`` key (an ordinary stream of any
  context, or 1 or 2), and a DLPack C exchange-API producer (test_fuzz.ExchangeProducer)
  whose current work stream is NULL, 1, 2 or an ordinary stream, for data on any device;
- consumers: an ordinary stream of any context, or 0, 1 or 2;
- primary-context resets (``cudaDeviceReset`` in another library: the context keeps its
  handle, its events and streams die), and threads ending and new ones starting.

The one property checked is visibility in the fake, never the library's own rule: a
consumer kernel enqueued after the view is made sees every producer write enqueued before
it.  What the handles mean is the producers' and consumers' side of the contract, written
here as such: a producer's default stream (NULL, 1, 2) is that of the device its data is on
(PyTorch's NULL work stream for a tensor on cuda:1 is device 1's default stream); a
consumer's 0/1/2 is the default stream of the context it launches with (its current one;
with none current, the data device's primary context).  At the end every thread's events
are destroyed, and nothing was shared across threads or blocked the host.
"""

from __future__ import annotations

import gc
import queue
import random
import threading

import numpy as np
import pytest

import test_fuzz
from fake_driver import FakeDriver
from stridedview import StridedMemoryView
from stridedview import _driver
from test_cai import CAIProducer

DEVICES = 3
WORKERS = 3
STEPS = 60
SEEDS = range(24)
DEFAULT_STREAMS = (0, 1, 2)


class Worker:
    """A real thread running the steps handed to it, one at a time, and reporting back."""

    def __init__(self, name):
        self.tasks: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            task = self.tasks.get()
            if task is None:
                return
            try:
                self.results.put((True, task()))
            except BaseException as exc:  # noqa: BLE001 - re-raised by run()
                self.results.put((False, exc))

    def run(self, task):
        """Run ``task`` in this worker's thread; its result, or its exception raised here."""
        self.tasks.put(task)
        ok, value = self.results.get(timeout=60)
        if not ok:
            raise value
        return value

    def stop(self):
        self.tasks.put(None)
        self.thread.join(60)
        if self.thread.is_alive():
            raise AssertionError(f"{self.thread.name} hung")


class World:
    """The fake driver, the data of each device, the streams, and the workers of one seed."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.fake = FakeDriver(devices=DEVICES, current_device=None)
        _driver.use_api(self.fake)
        self.own_context = self.fake.new_context(1)
        self.contexts = [*self.fake.primary_contexts, self.own_context]
        self.data = []
        for device in range(DEVICES):
            array = np.arange(6, dtype=np.float32) + device
            self.fake.register_pointer(array.ctypes.data, array.nbytes, device=device)
            self.data.append(array)
        self.streams = {int(c): [self.fake.new_stream(c) for _ in range(2)] for c in self.contexts}
        self.workers = [Worker(f"worker-{i}") for i in range(WORKERS)]
        self.spawned = WORKERS
        self.views = 0
        self.tag = 0
        self.log: list[str] = []

    # -- the steps --------------------------------------------------------------------

    def step(self):
        roll = self.rng.random()
        if roll < 0.15:
            self.set_current()
        elif roll < 0.2:
            self.reset()
        elif roll < 0.24:
            self.churn()
        else:
            self.view()

    def set_current(self):
        worker = self.rng.choice(self.workers)
        context = self.rng.choice([None, *self.contexts])
        self.log.append(f"{worker.thread.name}: current {context}")
        worker.run(lambda: self.fake.set_current(context))

    def reset(self):
        device = self.rng.randrange(DEVICES)
        self.log.append(f"reset device {device}")
        self.fake.reset_device(device)
        primary = self.fake.primary_contexts[device]
        self.streams[int(primary)] = [self.fake.new_stream(primary) for _ in range(2)]

    def churn(self):
        index = self.rng.randrange(len(self.workers))
        self.log.append(f"{self.workers[index].thread.name} ends")
        self.workers[index].stop()
        self.workers[index] = Worker(f"worker-{self.spawned}")
        self.spawned += 1

    def any_stream(self):
        return self.rng.choice(self.streams[int(self.rng.choice(self.contexts))])

    def view(self):
        rng = self.rng
        worker = rng.choice(self.workers)
        device = rng.randrange(DEVICES)
        kind = rng.choice(["cai", "exchange"])
        producer_choices = [1, 2] if kind == "cai" else [0, 1, 2]
        producer = rng.choice(producer_choices + [self.any_stream()] * 2)
        consumer = rng.choice([0, 1, 2, self.any_stream(), self.any_stream()])
        writes = rng.randrange(1, 3)
        tags = [self.next_tag() for _ in range(writes)]
        self.log.append(
            f"{worker.thread.name}: {kind} view of device {device}, producer {producer:#x}, "
            f"consumer {consumer:#x}, writes {tags}"
        )
        worker.run(lambda: self.view_in_thread(kind, device, producer, consumer, tags))
        self.views += 1

    def next_tag(self):
        self.tag += 1
        return self.tag

    # -- in the worker's thread --------------------------------------------------------

    def view_in_thread(self, kind, device, producer, consumer, tags):
        fake = self.fake
        primary = fake.primary_contexts[device]
        # The producer's default stream is its data's device's (the producer's side of the contract).
        producer_context = primary if producer in DEFAULT_STREAMS else None
        for tag in tags:
            fake.enqueue_write(producer, tag, context=producer_context)
        stream = fake.stream(producer, context=producer_context)
        before = {op[1] for op in stream.ops if op[0] == "write"}
        if kind == "cai":
            view = StridedMemoryView(CAIProducer(self.data[device], stream=producer), stream_ptr=consumer)
        else:
            test_fuzz._WORK_STREAM[0] = producer
            lender = test_fuzz.ExchangeProducer(
                {"device": (2, device), "dtype": (2, 32, 1), "shape": [6], "ndim": 1,
                 "strides": None, "byte_offset": 0, "data": 0x10000, "work_stream": producer}
            )
            try:
                view = StridedMemoryView(lender, stream_ptr=consumer)
            finally:
                lender.close()
                test_fuzz._WORK_STREAM[0] = 0
        if view.ready_stream != consumer:
            raise AssertionError(f"ready_stream {view.ready_stream!r}, expected {consumer!r}")
        # The consumer launches with its current context; with none, on the data's device.
        consumer_context = None
        if consumer in DEFAULT_STREAMS and fake.current_context() is None:
            consumer_context = primary
        seen = fake.enqueue_read(consumer, context=consumer_context)
        missed = before - seen
        if missed:
            raise AssertionError(f"the consumer kernel does not see producer writes {sorted(missed)}")

    # -- the end ----------------------------------------------------------------------

    def finish(self):
        for worker in self.workers:
            worker.stop()
        gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_random_interleavings_consumer_sees_producer_writes(seed):
    """Random threads, devices, current contexts (or none), producer and consumer streams and resets: every consumer kernel sees the producer writes made before its view, and every event is destroyed at the end."""
    world = World(seed)
    try:
        for _ in range(STEPS):
            try:
                world.step()
            except BaseException as exc:
                raise AssertionError(
                    f"seed {seed}, after:\n  " + "\n  ".join(world.log[-12:])
                ) from exc
        world.finish()
        fake = world.fake
        assert world.views > STEPS // 2
        assert fake.violations == []
        assert not [name for name, _ in fake.calls if name.endswith("Synchronize")]
        # Every worker ended: each thread's events were destroyed with it.
        assert fake.live_events() == 0, [e for e in fake.events.values()]
        # The primary contexts the library retained are released when the seam is swapped.
        _driver.use_api(None)
        assert fake.primary_retains == [1] * DEVICES
    finally:
        for worker in world.workers:
            if worker.thread.is_alive():
                worker.stop()
        _driver.use_api(None)


def test_model_catches_a_wrong_default_stream():
    """Control: the property fails when the consumer waits on the current context's default stream instead of the data device's (the fake tells the two apart)."""
    fake = FakeDriver(devices=2, current_device=0)
    fake.cuInit(0)
    fake.enqueue_write(1, "on-device-1", context=fake.primary_contexts[1])
    consumer = fake.new_stream()
    # What resolving the producer's handle 1 in the current context (device 0) amounts to:
    (_, event) = fake.cuEventCreate(2)
    fake.cuEventRecord(event, 1)
    fake.cuStreamWaitEvent(consumer, event, 0)
    assert "on-device-1" not in fake.enqueue_read(consumer)


# --- the fake's own model: what the tests above rely on --------------------------------------

def test_fake_new_thread_has_no_current_context():
    """In the fake a new thread starts with no current context: cuCtxGetCurrent gives NULL, cuEventCreate and handle 1 fail with CUDA_ERROR_INVALID_CONTEXT."""
    fake = FakeDriver(devices=2, current_device=0)
    fake.cuInit(0)
    results = {}

    def probe():
        results["current"] = int(fake.cuCtxGetCurrent()[1])
        results["create"] = fake.cuEventCreate(2)[0].name
        results["wait"] = fake.cuStreamWaitEvent(1, 0, 0)[0].name

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(10)
    assert results == {
        "current": 0, "create": "CUDA_ERROR_INVALID_CONTEXT", "wait": "CUDA_ERROR_INVALID_CONTEXT",
    }
    assert fake.current_context() == fake.primary_contexts[0]  # the constructing thread's


def test_fake_default_handles_resolve_at_call_time_and_records_stay_in_their_context():
    """In the fake handle 1 is the legacy stream of the context current at each call; an event records only on streams of its own context, and any stream may wait on it."""
    fake = FakeDriver(devices=2, current_device=0)
    fake.cuInit(0)
    ctx1 = fake.primary_contexts[1]
    _, event0 = fake.cuEventCreate(2)
    assert fake.cuEventRecord(event0, 1)[0].name == "CUDA_SUCCESS"
    fake.set_current(ctx1)
    assert fake.stream(1) is fake.context_of(ctx1).legacy_stream
    assert fake.cuEventRecord(event0, 1)[0].name == "CUDA_ERROR_INVALID_HANDLE"
    assert fake.cuStreamWaitEvent(1, event0, 0)[0].name == "CUDA_SUCCESS"  # across devices
    assert int(fake.cuCtxGetDevice()[1]) == 1


def test_fake_primary_context_reset_keeps_the_handle_and_kills_events_and_streams():
    """In the fake cuDevicePrimaryCtxReset keeps the primary context's handle and destroys its events and streams; retain gives the same handle; live events are counted."""
    fake = FakeDriver(devices=2, current_device=0)
    fake.cuInit(0)
    ctx0 = fake.primary_contexts[0]
    _, event = fake.cuEventCreate(2)
    stream = fake.new_stream(ctx0)
    fake.enqueue_write(1, "lost")
    assert fake.live_events() == 1
    assert fake.cuDevicePrimaryCtxReset(0)[0].name == "CUDA_SUCCESS"
    assert fake.live_events() == 0
    assert fake.cuEventRecord(event, stream)[0].name == "CUDA_ERROR_INVALID_HANDLE"
    assert fake.cuStreamGetCtx(stream)[0].name == "CUDA_ERROR_INVALID_HANDLE"
    assert fake.cuDevicePrimaryCtxRetain(0)[1] == ctx0
    assert fake.current_context() == ctx0
    _, fresh = fake.cuEventCreate(2)
    assert fake.cuEventRecord(fresh, 1)[0].name == "CUDA_SUCCESS"
    assert fake.enqueue_read(1) == frozenset()  # the reset's work is gone
    assert fake.cuEventDestroy(fresh)[0].name == "CUDA_SUCCESS"
    assert fake.live_events() == 0 and len(fake.created_events) == 2
