"""The view as a producer of DLPack 1.3's C exchange API (``__dlpack_c_exchange_api__``).

The table is driven through ctypes as a C consumer would; PYFUNCTYPE keeps the GIL
and lets a function's Python exception reach the test as itself.  Real consumers:
our own (a view of a view through the table equals the original) and tvm-ffi.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys

import numpy as np
import pytest

from producers import DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor
from stridedview import StridedMemoryView

pytestmark = pytest.mark.usefixtures("forbidden_driver")

_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_GetPointer.restype = ctypes.c_void_p
_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
_IsValid.restype = ctypes.c_int


Version = DLPackVersion
Device = DLDevice
DataType = DLDataType
ManagedTensor = DLManagedTensorVersioned

SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
ALLOCATOR = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p
)
FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


class Header(ctypes.Structure):
    _fields_ = [("version", Version), ("prev_api", ctypes.c_void_p)]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", Header),
        ("managed_tensor_allocator", ALLOCATOR),
        ("managed_tensor_from_py_object_no_sync", FROM_PY),
        ("managed_tensor_to_py_object_no_sync", TO_PY),
        ("dltensor_from_py_object_no_sync", DLTENSOR_FROM_PY),
        ("current_work_stream", WORK_STREAM),
    ]


def api() -> ExchangeAPI:
    capsule = StridedMemoryView.__dlpack_c_exchange_api__
    return ExchangeAPI.from_address(_GetPointer(capsule, b"dlpack_exchange_api"))


def host_views():
    """(id, view) of host views of several layouts, writable."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return [
        ("2d", StridedMemoryView(base)),
        ("transposed", StridedMemoryView(base.T)),
        ("negative", StridedMemoryView(base[::-1, ::2])),
        ("0d", StridedMemoryView(np.array(3, dtype=np.int16))),
        ("empty", StridedMemoryView(np.zeros((0, 4), dtype=np.uint8))),
        ("bytearray", StridedMemoryView(bytearray(b"abc"))),
        ("complex", StridedMemoryView(np.arange(4, dtype=np.complex128))),
    ]


HOST_VIEWS = host_views()


def _fields(view):
    return (view.ptr if view.size else None, view.shape, view.strides, view.dtype, view.readonly,
            view.__dlpack_device__(), view.device_id)


def _to_view(tensor_address):
    """managed_tensor_to_py_object_no_sync on a tensor: the new view (its reference handed to us)."""
    out = ctypes.c_void_p()
    assert api().managed_tensor_to_py_object_no_sync(tensor_address, ctypes.byref(out)) == 0
    view = ctypes.cast(out, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(view))  # the function gave us a new reference
    return view


def test_capsule_on_the_type_with_version_1_3():
    """The type carries a "dlpack_exchange_api" capsule whose header says DLPack 1.3 and no older table."""
    capsule = StridedMemoryView.__dlpack_c_exchange_api__
    assert _IsValid(capsule, b"dlpack_exchange_api") == 1
    assert "__dlpack_c_exchange_api__" in vars(StridedMemoryView)
    assert StridedMemoryView.__c_dlpack_exchange_api__ is capsule  # the 1.2-era name, as cuda.core
    table = api()
    assert (table.header.version.major, table.header.version.minor) == (1, 3)
    assert table.header.prev_api is None
    for name, _ in ExchangeAPI._fields_[1:]:
        assert ctypes.cast(getattr(table, name), ctypes.c_void_p).value, name


@pytest.mark.parametrize("view", [pytest.param(v, id=i) for i, v in HOST_VIEWS])
def test_dltensor_from_py_object_lends_the_views_layout(view):
    """dltensor_from_py_object_no_sync fills a DLTensor with the view's pointer, layout and type."""
    out = DLTensor()
    assert api().dltensor_from_py_object_no_sync(view, ctypes.byref(out)) == 0
    assert (out.device.device_type, out.device.device_id) == view.__dlpack_device__()
    assert out.ndim == view.ndim
    assert [out.shape[i] for i in range(out.ndim)] == list(view.shape)
    assert [out.strides[i] for i in range(out.ndim)] == list(view.strides)
    assert out.byte_offset == 0
    assert (out.data or 0) == (view.ptr if view.size else 0)
    capsule_dtype = np.from_dlpack(view).dtype if view.size or view.ndim else view.dtype
    assert capsule_dtype == view.dtype
    assert out.dtype.lanes == 1 and out.dtype.bits == view.itemsize * 8


def test_dltensor_from_py_object_for_device_memory_asks_no_stream(fake):
    """A device view is lent with its device; nothing is ordered (no_sync) and no stream is touched."""
    fake.register_pointer(0x10000, 1 << 16, device=1)

    class Cai:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0x10000, False), "version": 3}

    view = StridedMemoryView(Cai(), stream_ptr=-1)
    out = DLTensor()
    assert api().dltensor_from_py_object_no_sync(view, ctypes.byref(out)) == 0
    assert (out.device.device_type, out.device.device_id) == (2, 1)
    assert [name for name in fake.names() if name not in ("cuInit", "cuPointerGetAttribute")] == []


@pytest.mark.parametrize("obj", [object(), np.zeros(3), None], ids=["object", "ndarray", "None"])
def test_table_functions_refuse_other_objects(obj):
    """A py_object that is not a StridedMemoryView is a TypeError (rc -1), never read as one."""
    message = re.escape("dlpack: StridedMemoryView's exchange API takes a StridedMemoryView (got ")
    with pytest.raises(TypeError, match=message):
        api().dltensor_from_py_object_no_sync(obj, ctypes.byref(DLTensor()))
    out = ctypes.c_void_p(123)
    with pytest.raises(TypeError, match=message):
        api().managed_tensor_from_py_object_no_sync(obj, ctypes.byref(out))
    assert out.value is None


def test_dltensor_from_py_object_refuses_read_only_views():
    """A read-only view cannot be lent as a flagless DLTensor (BufferError); a managed tensor says it."""
    view = StridedMemoryView(b"abcd")
    with pytest.raises(BufferError, match=re.escape("dlpack: a read-only view cannot be lent as a DLTensor")):
        api().dltensor_from_py_object_no_sync(view, ctypes.byref(DLTensor()))


def test_dltensor_from_py_object_refuses_padded_sub_byte_views():
    """A padded float4 view cannot be lent as a flagless DLTensor (its padding would be lost)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    view = StridedMemoryView.from_buffer(bytearray(4), (4,), dtype=ml_dtypes.float4_e2m1fn)
    with pytest.raises(BufferError, match=re.escape("dlpack: a padded sub-byte view cannot be lent as a DLTensor")):
        api().dltensor_from_py_object_no_sync(view, ctypes.byref(DLTensor()))


@pytest.mark.parametrize("view", [pytest.param(v, id=i) for i, v in HOST_VIEWS])
def test_managed_tensor_round_trip_gives_the_same_view(view):
    """from_py_object then to_py_object: a view of the view through the table equals the original."""
    tensor = ctypes.c_void_p()
    assert api().managed_tensor_from_py_object_no_sync(view, ctypes.byref(tensor)) == 0
    managed = ManagedTensor.from_address(tensor.value)
    assert (managed.version.major, managed.version.minor) == (1, 3)
    assert managed.flags & 1 == int(view.readonly)
    again = _to_view(tensor.value)
    assert type(again) is StridedMemoryView
    assert _fields(again) == _fields(view)
    np.testing.assert_array_equal(np.from_dlpack(again), np.from_dlpack(view))


@pytest.mark.slow
def test_managed_tensor_keeps_the_view_alive_and_is_deleted_once():
    """The managed tensor holds the view; the view made from it calls the deleter once, at its end."""
    view = StridedMemoryView(np.arange(5.0))
    before = sys.getrefcount(view)
    tensor = ctypes.c_void_p()
    api().managed_tensor_from_py_object_no_sync(view, ctypes.byref(tensor))
    assert sys.getrefcount(view) == before + 1
    again = _to_view(tensor.value)
    assert sys.getrefcount(view) == before + 1
    del again
    gc.collect()
    assert sys.getrefcount(view) == before


def test_view_from_a_managed_tensor_cannot_be_initialised_again():
    """A view owning a bare managed tensor (no exporting object) refuses __init__, which would leak it."""
    tensor = ctypes.c_void_p()
    api().managed_tensor_from_py_object_no_sync(StridedMemoryView(np.arange(2.0)), ctypes.byref(tensor))
    view = _to_view(tensor.value)
    assert view.exporting_obj is None
    with pytest.raises(TypeError, match="StridedMemoryView is already initialised"):
        view.__init__(np.zeros(3))


def test_read_only_view_round_trips_read_only():
    """A read-only view's managed tensor carries READ_ONLY, and the view made from it is read-only."""
    view = StridedMemoryView(b"abcdef")
    tensor = ctypes.c_void_p()
    api().managed_tensor_from_py_object_no_sync(view, ctypes.byref(tensor))
    assert _to_view(tensor.value).readonly is True


def test_to_py_object_refuses_null_and_calls_the_deleter_on_failure():
    """to_py_object steals the tensor: a NULL one is a BufferError, a bad one is deleted, then refused."""
    out = ctypes.c_void_p(123)
    with pytest.raises(BufferError, match=re.escape("dlpack: managed_tensor_to_py_object_no_sync was handed a NULL tensor")):
        api().managed_tensor_to_py_object_no_sync(None, ctypes.byref(out))
    assert out.value is None
    view = StridedMemoryView(np.arange(3.0))
    before = sys.getrefcount(view)
    tensor = ctypes.c_void_p()
    api().managed_tensor_from_py_object_no_sync(view, ctypes.byref(tensor))
    ManagedTensor.from_address(tensor.value).version.major = 2
    with pytest.raises(BufferError, match=re.escape("dlpack: unsupported DLPack version 2.3 (major version must be 1)")):
        api().managed_tensor_to_py_object_no_sync(tensor.value, ctypes.byref(out))
    assert sys.getrefcount(view) == before  # the deleter ran
    api().managed_tensor_from_py_object_no_sync(view, ctypes.byref(tensor))
    ManagedTensor.from_address(tensor.value).dl_tensor.device.device_type = 4  # OpenCL
    with pytest.raises(BufferError, match=re.escape("dlpack: unsupported device type 4 (OpenCL)")):
        api().managed_tensor_to_py_object_no_sync(tensor.value, ctypes.byref(out))
    assert sys.getrefcount(view) == before


def test_current_work_stream_is_null_for_every_device():
    """current_work_stream answers 0 and NULL (a view has no per-device current stream)."""
    for device_type in (1, 2, 3, 13):
        out = ctypes.c_void_p(123)
        assert api().current_work_stream(device_type, 0, ctypes.byref(out)) == 0
        assert out.value is None


def _prototype(shape, dtype=(2, 32, 1), device=(1, 0)):
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    tensor = DLTensor()
    tensor.device = Device(*device)
    tensor.ndim = len(shape)
    tensor.dtype = DataType(*dtype)
    tensor.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    tensor._dims = dims  # keep alive
    return tensor


def test_allocator_makes_a_row_major_host_tensor():
    """managed_tensor_allocator allocates a writable, aligned, row-major host tensor a view owns."""
    out = ctypes.c_void_p()
    assert api().managed_tensor_allocator(ctypes.byref(_prototype((3, 4))), ctypes.byref(out), None, None) == 0
    managed = ManagedTensor.from_address(out.value)
    assert managed.dl_tensor.data % 256 == 0
    view = _to_view(out.value)
    assert (view.shape, view.strides, view.dtype, view.readonly, view.device_id) == (
        (3, 4), (4, 1), np.float32, False, -1
    )
    array = np.from_dlpack(view)
    array[:] = np.arange(12).reshape(3, 4)
    assert array.sum() == 66


def test_allocator_reports_errors_through_set_error():
    """A device prototype is refused through set_error (kind, message), leaving no Python error."""
    seen = []
    set_error = SET_ERROR(lambda ctx, kind, message: seen.append((ctx, kind, message)))
    out = ctypes.c_void_p(123)
    rc = api().managed_tensor_allocator(
        ctypes.byref(_prototype((2,), device=(2, 0))), ctypes.byref(out), 77,
        ctypes.cast(set_error, ctypes.c_void_p),
    )
    assert rc == -1
    assert out.value is None
    assert seen == [(77, b"BufferError", b"dlpack: stridedview's allocator makes host (CPU) tensors only (got device type 2 (CUDA))")]


def test_allocator_without_set_error_raises():
    """With no set_error, the allocator's refusal is a Python exception (here a bad dtype)."""
    out = ctypes.c_void_p()
    with pytest.raises(BufferError, match=re.escape("dlpack: dtype Bfloat must have 16 bits (got 32)")):
        api().managed_tensor_allocator(ctypes.byref(_prototype((2,), dtype=(4, 32, 1))), ctypes.byref(out), None, None)
    with pytest.raises(BufferError, match=re.escape("dlpack: managed_tensor_allocator was handed a NULL prototype")):
        api().managed_tensor_allocator(None, ctypes.byref(out), None, None)


def test_our_consumer_does_not_borrow_from_views():
    """Viewing a view (from_dlpack) keeps READ_ONLY: the flagless borrowed DLTensor is not used."""
    original = StridedMemoryView(b"abcd")
    again = StridedMemoryView.from_dlpack(original)
    assert _fields(again) == _fields(original)


def test_tvm_ffi_takes_a_view_through_the_exchange_api():
    """tvm-ffi's from_dlpack takes a view through the table: a read-only view, which __dlpack__()
    (legacy, what tvm-ffi falls back to) refuses, arrives with the same memory."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    source = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    source.setflags(write=False)
    view = StridedMemoryView(source)
    with pytest.raises(BufferError):
        view.__dlpack__()
    tensor = tvm_ffi.from_dlpack(view)
    assert tensor.shape == (3, 2)
    assert tensor.data_ptr() == view.ptr
    np.testing.assert_array_equal(np.from_dlpack(tensor), source)


@pytest.mark.torch
def test_torch_from_dlpack_reads_views_through_dlpack():
    """torch 2.13's from_dlpack ignores exchange-API producers; it still takes a view through __dlpack__."""
    torch = pytest.importorskip("torch")
    view = StridedMemoryView.from_buffer(bytearray(np.arange(4, dtype=np.float32).tobytes()), dtype=np.float32)
    tensor = torch.from_dlpack(view)
    assert tensor.data_ptr() == view.ptr
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0]
