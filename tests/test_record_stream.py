"""Hand-overs without a GPU: the arguments of ``view.record_stream``, ``release_pending`` and
the decorator's ``record_stream=True``, the memory that needs no hand-over, and what a
hand-over does with a fake driver installed, none of which may call a driver.

Every hand-over is recorded, queried and released by the driver door
(src/stridedview/_driver_door.h), which calls the libcuda.so.1 that cuda-bindings loaded: the
holds themselves (released once, only after the stream's work, never before: gates hold the
streams, marker bytes show a release before the work ran) are tested on the simulated device,
in tests/test_gpu_record_stream.py (with real memory reused by real stream-ordered
allocators), tests/test_gpu_hold_rule.py (answers that say neither done nor gone),
tests/test_gpu_driver_door.py (the calls each hand-over makes) and tests/test_gpu_graphs.py
(captures).
"""

from __future__ import annotations

import sys
import weakref

import numpy as np
import pytest

import producers
from stridedview import (
    CUDAError,
    StridedMemoryView,
    _view,
    args_viewable_as_strided_memory,
    release_pending,
)


class Device:
    """A CUDA Array Interface producer of "device" memory (no stream of its own; nothing reads
    it), weak-referenceable, so a test can see when the last reference to it goes."""

    def __init__(self, nbytes=64, ptr=0x7F0000A00000):
        self.ptr = ptr
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "stream": None,
        }


def device_capsule_producer(kind="versioned"):
    """A ctypes DLPack producer exporting "CUDA" memory (its own host buffer: nothing reads
    it), its deleter calls counted."""
    return producers.make_producer(kind, device=(2, 0), shape=(16,), dtype="uint8")


def pending():
    """(entries, holds) pending now."""
    return _view._pending_holds()[:2]


# --- arguments and memory that needs no hand-over -------------------------------------------


@pytest.mark.parametrize(
    "stream, error, message",
    [
        (None, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got None)"),
        (True, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got True)"),
        (1.5, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got 1.5)"),
        ("7", TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got '7')"),
        (-1, ValueError, "record_stream: stream must be a stream handle >= 0 (got -1): -1 names no stream"),
        (-2, ValueError, "record_stream: stream must be a stream handle >= 0 (got -2)"),
        (1 << 64, ValueError, "record_stream: stream must be a stream handle >= 0 (got 18446744073709551616)"),
    ],
    ids=["None", "bool", "float", "str", "minus-one", "minus-two", "too-big"],
)
@pytest.mark.parametrize("memory", ["host", "device"])
def test_record_stream_refuses_what_is_not_a_stream(forbidden_driver, stream, error, message, memory):
    """A stream that is not a handle >= 0 or a __cuda_stream__ object is refused, before any
    driver call, whatever the memory; the view is unchanged and still releases normally."""
    array = np.zeros(4) if memory == "host" else Device()
    view = StridedMemoryView(array, stream_ptr=-1)
    with pytest.raises(error) as info:
        view.record_stream(stream)
    assert str(info.value) == message
    assert view.exporting_obj is array and pending() == (0, 0)


def test_record_stream_refuses_a_bad_cuda_stream_object(forbidden_driver):
    """``__cuda_stream__`` must return (version, handle), as for stream_ptr."""

    class Bad:
        def __cuda_stream__(self):
            return (0, "x")

    with pytest.raises(TypeError, match=r"^stream: __cuda_stream__\(\) must return \(version, handle\)"):
        StridedMemoryView(Device(), stream_ptr=-1).record_stream(Bad())


def test_host_view_records_nothing(forbidden_driver):
    """A view of host-only memory records nothing and calls no driver: the array goes with the
    view, as without record_stream."""
    array = np.arange(8)
    gone = weakref.ref(array)
    view = StridedMemoryView(array)
    view.record_stream(0x1234)
    del array, view
    assert gone() is None
    assert pending() == (0, 0)


def test_release_pending_with_nothing_pending(forbidden_driver):
    """release_pending() with nothing handed over releases nothing and calls no driver."""
    assert release_pending() == 0
    assert release_pending(wait=True) == 0


@pytest.mark.parametrize("wait", [1, None, "yes"])
def test_release_pending_wait_must_be_a_bool(forbidden_driver, wait):
    """wait is a bool: anything else is a TypeError quoting it."""
    with pytest.raises(TypeError, match=r"^release_pending: wait must be a bool \(got "):
        release_pending(wait=wait)


def test_record_stream_under_a_fake_driver_is_a_cuda_error(fake):
    """With a fake driver installed (use_api), record_stream on device memory raises CUDAError
    CUDA_ERROR_NO_DRIVER at once (the driver door hands over only through the driver
    cuda-bindings loaded), not silently at release: the view records nothing, and its memory
    goes with it."""
    device = Device()
    gone = weakref.ref(device)
    view = StridedMemoryView(device, stream_ptr=-1)
    with pytest.raises(CUDAError, match=r"^stream ordering and hand-overs go through the CUDA driver") as info:
        view.record_stream(0x1234)
    assert info.value.name == "CUDA_ERROR_NO_DRIVER"
    assert set(fake.names()) <= {"cuInit"}
    del device, view
    assert gone() is None and pending() == (0, 0)


def test_set_pending_limit_refuses_zero(forbidden_driver):
    """The bound is at least one hand-over."""
    with pytest.raises(ValueError, match=r"^_set_pending_limit: limit must be >= 1 \(got 0\)$"):
        _view._set_pending_limit(0)


# --- the decorator's record_stream=True ----------------------------------------------------


def test_decorator_record_stream_must_be_a_bool():
    """record_stream is a keyword-only bool."""
    with pytest.raises(
        TypeError, match=r"^args_viewable_as_strided_memory: record_stream must be a bool \(got 1\)$"
    ):
        args_viewable_as_strided_memory((0,), record_stream=1)
    with pytest.raises(TypeError):
        args_viewable_as_strided_memory((0,), True)  # type: ignore[misc]


def test_decorator_without_the_option_hands_nothing_over(forbidden_driver):
    """The control: without record_stream the arguments are released when the launch ends,
    and no driver is called (nothing to order: the capsules name no stream)."""
    stream = 0x1234

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c, stream):
        for arg in (a, b, c):
            arg.view(stream)

    assert not launch.record_stream
    made = [device_capsule_producer() for _ in range(3)]
    launch(made[0], made[1], made[2], stream)
    assert [producers.deleter_calls(p) for p in made] == [1, 1, 1]
    assert pending() == (0, 0)


@pytest.mark.parametrize("how", ["minus-one", "host", "no-stream"])
def test_decorator_hands_over_only_views_on_a_stream_of_device_memory(forbidden_driver, how):
    """-1 (nothing the library knows is enqueued), host memory and view() with no stream (host
    memory) hand nothing over: no driver call, nothing pending."""
    stream = 0x1234
    made = np.zeros(4) if how != "minus-one" else device_capsule_producer()

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a):
        if how == "minus-one":
            a.view(-1)
        elif how == "host":
            a.view(stream)
        else:
            a.view()

    launch(made)
    assert forbidden_driver.used == []
    assert pending() == (0, 0)


class _IntHandle(int):
    """An int subclass (not an exact int): read by a Python compare, not in C."""


@pytest.mark.parametrize(
    "value, kind",
    [(-1, "opt-out"), (0, "default"), (1, "default"), (2, "default"), (3, "ordinary"),
     (255, "ordinary"), (2**30 - 1, "ordinary"), (2**30, "ordinary"), (2**31 + 2, "ordinary"),
     (2**60, "ordinary"), (2**63 + 1, "ordinary"), (2**64 - 1, "ordinary")],
)
def test_a_launch_view_reads_a_stream_handle_in_c_as_its_value(value, kind):
    """sv_handle_kind (what _join_group reads a normalized stream as, without a Python
    compare) gives each int's value its kind, for the int itself and an equal one made
    anew, on either side of every size an int's storage changes at (one digit, compact);
    an int subclass is left to the Python compare (as every int is on 3.10, whose int
    internals it does not read)."""
    if sys.version_info < (3, 11):
        kind = "unknown"
    assert _view._stream_handle_kind(value) == kind
    assert _view._stream_handle_kind(int(str(value))) == kind
    assert _view._stream_handle_kind(_IntHandle(value)) == "unknown"
