"""Pickling views, and the allocation facts and readiness of host views, with no driver.

Host views pickle by value (a copy of their elements, whatever their layout and element
type); device views go through CUDA IPC (tests/test_gpu_ipc.py), refused here with no
driver in a message naming what pickling needs.  ``view.allocation`` of host memory is the
span (the driver is not asked when none can be loaded); ``view.synchronize()`` of a view
with nothing pending returns without a driver.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from stridedview import StridedMemoryView
from stridedview._errors import CUDAError

LAYOUTS = {
    "c": lambda a: a,
    "reversed rows": lambda a: a[::-1],
    "every other column, reversed": lambda a: a[:, ::-2],
    "transposed": lambda a: a.T,
    "0-d": lambda a: a[1, 2, ...],
    "empty": lambda a: a[:0],
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
@pytest.mark.parametrize("dtype", ["<i2", "f8", "c8", "?", [("x", "<i4"), ("y", "<f8")]], ids=str)
def test_host_views_pickle_by_value(forbidden_driver, layout, dtype):
    """The unpickled view holds a copy of the elements: equal values, shape and dtype, not
    the same memory, no driver asked."""
    base = np.zeros((3, 4), dtype)
    base.view(np.uint8)[...] = np.arange(base.nbytes, dtype=np.uint8).reshape(3, -1)
    array = LAYOUTS[layout](base)
    if array.dtype.isnative and array.dtype.fields is None:
        view = StridedMemoryView(array, stream_ptr=-1)
    else:  # what DLPack cannot carry, numpy's array interface does
        view = StridedMemoryView.from_array_interface(array)
    copy = pickle.loads(pickle.dumps(view))
    # readonly as the view's (a numpy scalar, the 0-d case, is read-only from numpy 2.5 on)
    assert (copy.shape, copy.dtype, copy.readonly) == (view.shape, view.dtype, view.readonly)
    assert np.asarray(copy).tobytes() == np.ascontiguousarray(array).tobytes()
    if view.size:
        assert copy.ptr != view.ptr


def test_a_read_only_host_view_pickles_read_only(forbidden_driver):
    array = np.arange(6.0)
    array.flags.writeable = False
    assert pickle.loads(pickle.dumps(StridedMemoryView(array, stream_ptr=-1))).readonly


def test_a_host_view_numpy_cannot_name_keeps_its_dlpack_type(forbidden_driver):
    """bfloat16 (ml_dtypes) strided: the copy has the exact DLPack type and the same bits."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.arange(12, dtype=ml_dtypes.bfloat16).reshape(3, 4)[::-1, ::2]
    view = StridedMemoryView(array, stream_ptr=-1)
    copy = pickle.loads(pickle.dumps(view))
    assert copy.dlpack_dtype == view.dlpack_dtype and copy.shape == (3, 2)
    assert np.asarray(copy.view(dtype=np.uint16)).tobytes() == np.ascontiguousarray(array).view(np.uint16).tobytes()


def test_a_device_view_with_no_driver_says_what_pickling_needs(fake):
    """A device view (a CUDA Array Interface producer) pickled where the driver cannot be
    used: CUDAError naming CUDA IPC, not the stream hint."""
    from stridedview import _driver

    class Device:
        __cuda_array_interface__ = {"version": 3, "shape": (4,), "typestr": "<f4", "data": (0x1000, False), "stream": None}

    view = StridedMemoryView(Device(), stream_ptr=-1)
    _driver.use_api(None)
    _driver._api = _NoDriver()
    try:
        with pytest.raises(CUDAError, match="pickling a device view shares its memory through CUDA IPC"):
            pickle.dumps(view)
    finally:
        _driver.use_api(None)


class _NoDriver:
    """cuda-bindings whose library cannot be loaded: every call raises RuntimeError."""

    def __getattr__(self, name):
        def call(*args):
            raise RuntimeError("libcuda.so.1: cannot open shared object file")

        return call


def test_allocation_of_host_memory_is_its_span_without_a_driver(forbidden_driver):
    array = np.arange(20, dtype=np.int32).reshape(4, 5)[1:3, ::-2]
    view = StridedMemoryView(array, stream_ptr=-1)
    facts = view.allocation
    low, high = view.byte_bounds
    assert (facts.base, facts.size, facts.kind, facts.shareable, facts.device_id) == (low, high - low, "host", False, -1)


def test_synchronize_with_nothing_pending_needs_no_driver(forbidden_driver):
    view = StridedMemoryView(np.ones(3), stream_ptr=-1)
    assert view.ready_stream is None
    assert view.synchronize() is None


def test_an_unpickled_record_from_this_process_or_another_version_is_refused(forbidden_driver):
    """The record says where it came from: this process (use the view itself) or a record
    version this stridedview does not read: BufferError before any driver call."""
    import os

    from stridedview import _ipc

    with pytest.raises(BufferError, match="in the process that pickled it"):
        _ipc._receive({"version": _ipc._RECORD_VERSION, "pid": os.getpid()})
    with pytest.raises(BufferError, match="record version 99"):
        _ipc._receive({"version": 99, "pid": 1})
