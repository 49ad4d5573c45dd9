"""A host view as a Python buffer (PEP 3118) and through numpy's array interface.

Checked against real consumers: memoryview, numpy (no copy, shared memory), struct,
hashlib, PIL and the C API's PyObject_GetBuffer with each request flag (through
ctypes).  Device views refuse both, with the reason.
"""

from __future__ import annotations

import ctypes
import gc
import struct
import sys

import numpy as np
import pytest

from stridedview import StridedMemoryView

# PyBUF_* request flags (CPython's values).
PyBUF_SIMPLE = 0
PyBUF_WRITABLE = 0x1
PyBUF_FORMAT = 0x4
PyBUF_ND = 0x8
PyBUF_STRIDES = 0x10 | PyBUF_ND
PyBUF_C_CONTIGUOUS = 0x20 | PyBUF_STRIDES
PyBUF_F_CONTIGUOUS = 0x40 | PyBUF_STRIDES
PyBUF_ANY_CONTIGUOUS = 0x80 | PyBUF_STRIDES


class Py_buffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)), ("internal", ctypes.c_void_p),
    ]


def get_buffer(obj, flags):
    """PyObject_GetBuffer(obj, flags) through the C API: the filled fields, released after."""
    buffer = Py_buffer()
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
    get(obj, ctypes.byref(buffer), flags)
    try:
        ndim = buffer.ndim
        return {
            "buf": buffer.buf or 0, "len": buffer.len, "itemsize": buffer.itemsize,
            "readonly": bool(buffer.readonly), "ndim": ndim,
            "format": buffer.format,
            "shape": None if not buffer.shape else tuple(buffer.shape[i] for i in range(ndim)),
            "strides": None if not buffer.strides else tuple(buffer.strides[i] for i in range(ndim)),
        }
    finally:
        release = ctypes.pythonapi.PyBuffer_Release
        release.argtypes = [ctypes.POINTER(Py_buffer)]
        release(ctypes.byref(buffer))


DTYPES = ["?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "g", "F", "D", "G",
          "V4", "S3", "U2", [("a", "<i4"), ("b", "<f8")]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_format_is_numpys_own(dtype):
    """The exported format is exactly the one numpy's own buffer gives for that dtype."""
    array = np.zeros(3, dtype)
    view = StridedMemoryView.from_buffer(array, dtype=array.dtype)
    assert memoryview(view).format == memoryview(array).format
    assert memoryview(view).itemsize == array.itemsize


@pytest.mark.parametrize("index", [np.s_[:, :], np.s_[::2, 1:], np.s_[:, ::-1], np.s_[::-1, ::3], np.s_[1]])
def test_memoryview_layout_and_values(index):
    """memoryview of a strided view (negative strides too) has numpy's shape, byte strides and values."""
    base = np.arange(30, dtype=np.float64).reshape(5, 6)
    array = base[index]
    m = memoryview(StridedMemoryView(array))
    assert m.shape == array.shape and m.strides == array.strides
    assert m.tolist() == array.tolist()
    assert not m.readonly


def test_numpy_takes_the_view_without_copy():
    """np.asarray of a view shares its memory, writes through it, and keeps the view's memory alive."""
    array = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    view = StridedMemoryView(array)
    seen = np.asarray(view)
    assert np.shares_memory(seen, array)
    assert seen.__array_interface__["data"][0] == view.ptr
    seen[1, 1] = -5
    assert array[1, 1] == -5
    before = sys.getrefcount(view)
    also = np.asarray(view)
    assert sys.getrefcount(view) == before + 1  # numpy's array holds the view (its buffer's obj)
    del also
    assert sys.getrefcount(view) == before


def test_array_interface_v3_keeps_the_view():
    """__array_interface__ is version 3 with byte strides; numpy's array from it keeps the view alive."""
    array = np.arange(6.0).reshape(2, 3).T
    view = StridedMemoryView(array)
    interface = view.__array_interface__
    assert interface["version"] == 3 and interface["strides"] == array.strides
    assert interface["data"] == (view.ptr, False)

    class Only:  # only the array interface, so numpy must read it
        pass

    holder = Only()
    holder.__array_interface__ = interface
    holder.view = view
    seen = np.asarray(holder)
    assert np.shares_memory(seen, array) and seen.tolist() == array.tolist()
    # The view itself through numpy's interface path (its buffer refused: a format-less dtype).
    ml_dtypes = pytest.importorskip("ml_dtypes")
    raw = StridedMemoryView.from_buffer(bytearray(8), dtype=ml_dtypes.bfloat16)
    with pytest.raises(BufferError, match="array interface: dtype bfloat16 has no typestr"):
        np.asarray(raw)


def test_readonly_is_honoured():
    """A read-only view exports a read-only buffer and refuses a writable request with BufferError."""
    array = np.arange(4.0)
    array.setflags(write=False)
    view = StridedMemoryView(array)
    assert memoryview(view).readonly
    assert view.__array_interface__["data"][1] is True
    assert not np.asarray(view).flags.writeable
    with pytest.raises(BufferError, match="buffer: the view is read-only"):
        get_buffer(view, PyBUF_WRITABLE)
    with pytest.raises(TypeError):
        struct.pack_into("d", view, 0, 1.0)
    writable = StridedMemoryView(np.zeros(2))
    struct.pack_into("d", writable, 8, 2.5)
    assert np.asarray(writable)[1] == 2.5


def test_request_flags():
    """Each request gets the fields it asked for; contiguity requests are checked against the layout."""
    array = np.arange(12, dtype=np.int16).reshape(3, 4)
    view = StridedMemoryView(array)
    simple = get_buffer(view, PyBUF_SIMPLE)
    assert simple["format"] is None and simple["shape"] is None and simple["len"] == 24
    full = get_buffer(view, PyBUF_STRIDES | PyBUF_FORMAT)
    assert full["format"] == b"h" and full["shape"] == (3, 4) and full["strides"] == (8, 2)
    assert full["buf"] == view.ptr
    transposed = StridedMemoryView(array.T)
    assert get_buffer(transposed, PyBUF_F_CONTIGUOUS)["strides"] == (2, 8)
    assert get_buffer(transposed, PyBUF_ANY_CONTIGUOUS)["shape"] == (4, 3)
    with pytest.raises(BufferError, match="is not C-contiguous"):
        get_buffer(transposed, PyBUF_C_CONTIGUOUS)
    with pytest.raises(BufferError, match="is not C-contiguous"):
        get_buffer(transposed, PyBUF_SIMPLE)
    with pytest.raises(BufferError, match="is not Fortran-contiguous"):
        get_buffer(view, PyBUF_F_CONTIGUOUS)
    with pytest.raises(BufferError, match="is not contiguous"):
        get_buffer(StridedMemoryView(array[:, ::2]), PyBUF_ANY_CONTIGUOUS)


def test_struct_and_hashlib_read_the_bytes():
    """struct.unpack_from and hashlib read the view's bytes as they are in memory."""
    import hashlib

    array = np.array([1.5, -2.0, 3.25])
    view = StridedMemoryView(array)
    assert struct.unpack_from("3d", view) == (1.5, -2.0, 3.25)
    assert hashlib.sha256(view).digest() == hashlib.sha256(array.tobytes()).digest()


def test_pil_image_from_the_view():
    """PIL's Image.frombuffer reads an image out of a view's buffer without numpy's help."""
    image_module = pytest.importorskip("PIL.Image")
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    image = image_module.frombuffer("RGB", (6, 4), StridedMemoryView(pixels), "raw", "RGB", 0, 1)
    assert np.array_equal(np.asarray(image), pixels)


def test_formatless_dtypes_export_raw_bytes_only():
    """bfloat16 and float8 (no PEP 3118 format, numpy refuses them too) export as raw bytes only."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        with pytest.raises(ValueError):
            memoryview(np.zeros(2, dtype))  # numpy's own refusal: no fallback to copy
        data = bytearray(range(8))
        view = StridedMemoryView.from_buffer(data, dtype=dtype)
        with pytest.raises(BufferError, match=f"buffer: dtype {np.dtype(dtype)} has no PEP 3118 format"):
            memoryview(view)
        raw = get_buffer(view, PyBUF_SIMPLE)
        assert raw["len"] == 8 and raw["format"] is None
        assert bytes(memoryview(view.view(dtype=np.uint8))) == bytes(data)


@pytest.mark.slow
def test_buffer_keeps_the_memory_and_releases_once():
    """A memoryview keeps the view alive while it lives; releasing it frees the export (no leak)."""
    data = bytearray(16)
    view = StridedMemoryView(data)
    m = memoryview(view)
    del view
    gc.collect()
    with pytest.raises(BufferError):
        data.append(0)  # the view lives on in the memoryview, holding the bytearray's buffer
    m.release()
    gc.collect()
    data.append(0)  # released: the view is gone and its buffer with it


def test_empty_and_0d():
    """An empty view and a 0-d view export as numpy exports them."""
    empty = np.zeros((0, 3), np.float32)
    assert np.asarray(StridedMemoryView(empty)).shape == (0, 3)
    scalar = np.array(7, np.int64)
    m = memoryview(StridedMemoryView(scalar))
    assert m.shape == () and m.tolist() == 7


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(0), np.zeros((3, 0)), np.zeros((0, 3)), np.zeros((1, 4)), np.zeros((4, 1)),
        np.zeros((4, 6))[:, :1], np.zeros((6, 4))[:1, :], np.asfortranarray(np.zeros((3, 4))),
        np.asfortranarray(np.zeros((3, 1))), np.zeros((4, 6))[::2], np.zeros(5)[::-1],
    ],
    ids=["0", "3x0", "0x3", "1x4", "4x1", "column", "row", "F3x4", "F3x1", "every-other-row", "reversed"],
)
def test_contiguity_reads_from_the_exported_strides_as_from_numpys(array):
    """memoryview reads contiguity from a buffer's strides: a view's export says C- or
    Fortran-contiguous exactly where numpy's export of the same array does (an empty 1-d
    view exported stride 0, which memoryview calls non-contiguous), and a C-contiguous one
    gives numpy's strides and casts to bytes."""
    ours, theirs = memoryview(StridedMemoryView(array)), memoryview(array)
    assert (ours.c_contiguous, ours.f_contiguous, ours.contiguous) == (
        theirs.c_contiguous, theirs.f_contiguous, theirs.contiguous
    )
    assert ours.shape == theirs.shape and ours.nbytes == theirs.nbytes
    if theirs.c_contiguous:
        assert ours.strides == theirs.strides
        if theirs.ndim == 1 or 0 not in theirs.shape:  # (memoryview casts no 0 of several axes)
            assert ours.cast("B").tobytes() == theirs.cast("B").tobytes()
    elif not theirs.f_contiguous:
        assert ours.strides == theirs.strides


def test_device_views_refuse(fake):
    """A device view refuses the buffer protocol and the array interface with BufferError saying why."""

    class Device:
        __cuda_array_interface__ = {
            "version": 3, "shape": (4,), "typestr": "<f4", "data": (0x10000, False), "strides": None,
        }

    fake.register_pointer(0x10000, 16, device=0)
    view = StridedMemoryView(Device(), stream_ptr=-1)
    with pytest.raises(BufferError, match="buffer: the view holds CUDA device memory"):
        memoryview(view)
    with pytest.raises(BufferError, match="array interface: the view holds CUDA device memory"):
        view.__array_interface__
    with pytest.raises(BufferError, match="array interface: the view holds CUDA device memory"):
        np.asarray(view)  # numpy reports the reason instead of making an object array


def test_an_unknown_device_pointer_names_the_view_and_the_pointer(fake):
    """A CUDA Array Interface view whose pointer the driver does not know: reading its
    device_id is a CUDAError naming the exporter's type, the pointer and the driver's answer,
    the driver's error name kept; a known pointer's device_id still reads."""
    from stridedview import CUDAError

    class Unknown:
        __cuda_array_interface__ = {
            "version": 3, "shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "strides": None,
        }

    view = StridedMemoryView(Unknown(), stream_ptr=-1)
    with pytest.raises(CUDAError) as caught:
        view.device_id
    message = str(caught.value)
    assert "'Unknown' object points at 0xdead0000" in message
    assert "cuPointerGetAttribute failed: CUDA_ERROR_INVALID_VALUE" in message
    assert caught.value.name == "CUDA_ERROR_INVALID_VALUE"
    fake.register_pointer(0xDEAD0000, 16, device=0)
    assert StridedMemoryView(Unknown(), stream_ptr=-1).device_id == 0
