"""The CUDA Array Interface consumer, driven by a CAI producer over host memory.

Each test sets or removes one key of a producer's ``__cuda_array_interface__``
dict and checks one rule of the CUDA Array Interface as docs/concepts.md and
docs/errors.md state it.  No GPU is needed: the data pointer is a numpy buffer's,
and the driver is either forbidden (the autouse fixture: any driver call fails
the test) or the modelling fake of ``fake_driver.py``.  Stream ordering itself is
tested in test_stream_ordering.py.
"""

import ctypes
import gc
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest

import stridedview
from conftest import NO_LIBCUDA_SKIP_REASON
from fake_driver import FakeDriver
from producers import assert_view, make_producer
from stridedview import CUDAError, StridedMemoryView
from stridedview import _driver

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent

#: A value for CAIProducer keys meaning "remove this key".
ABSENT = object()

#: A consumer stream handle (never ordered in this module: the producer gives no stream).
CONSUMER = 0x7000

pytestmark = pytest.mark.usefixtures("forbidden_driver")


class CAIProducer:
    """An object exporting a numpy array through ``__cuda_array_interface__``.

    ``interface`` is the dict handed out (the same object each time); every key
    can be set, or removed with ``ABSENT``, through the constructor or ``set``,
    and ``interface`` itself may be replaced by anything.  ``reads`` counts the
    accesses to the attribute.  The dict starts as CuPy's would: version 3,
    ``descr`` the default one, ``strides`` None for a C-contiguous array, and no
    ``stream`` key.
    """

    def __init__(self, array=None, **keys):
        if array is None:
            array = np.arange(6, dtype=np.float32).reshape(2, 3)
        self.array = array
        host = array.__array_interface__
        self.interface = {
            "version": 3,
            "shape": tuple(array.shape),
            "typestr": host["typestr"],
            "descr": array.dtype.descr,
            "data": (host["data"][0], False),
            "strides": host["strides"],
        }
        self.reads = 0
        self.set(**keys)

    def set(self, **keys):
        """Set (or, with ``ABSENT``, remove) keys of the interface; return self."""
        for key, value in keys.items():
            if value is ABSENT:
                self.interface.pop(key, None)
            else:
                self.interface[key] = value
        return self

    @property
    def ptr(self):
        """The address of the array's element 0."""
        return self.array.__array_interface__["data"][0]

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return self.interface

    def __repr__(self):
        return f"CAIProducer({self.interface!r})"


class BothProtocols(type(make_producer())):
    """A DLPack producer (host memory) that also exports a CAI dict, counting its reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cai_reads = 0
        self.cai = CAIProducer(np.zeros((2, 3), dtype=np.float32)).interface

    @property
    def __cuda_array_interface__(self):
        self.cai_reads += 1
        return self.cai


class DLPackWithoutDevice(CAIProducer):
    """A CAI producer with ``__dlpack__`` but no ``__dlpack_device__``: not a DLPack producer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dlpack_calls = 0

    def __dlpack__(self, **kwargs):
        self.dlpack_calls += 1
        raise AssertionError("__dlpack__ must not be called without __dlpack_device__")


class NoneCAI:
    """An object whose ``__cuda_array_interface__`` is None: it has no CAI."""

    __cuda_array_interface__ = None


class CudaStream:
    """An object speaking ``__cuda_stream__``."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)





@pytest.fixture(
    params=[StridedMemoryView, StridedMemoryView.from_cuda_array_interface],
    ids=["constructor", "from_cuda_array_interface"],
)
def entry(request):
    """Both ways into the CAI path."""
    return request.param


def driver_calls(fake):
    """The calls that touch driver state (cuGetErrorName, used to name errors, left out)."""
    return [(name, args) for name, args in fake.calls if name != "cuGetErrorName"]


# --- dispatch ------------------------------------------------------------------

def test_dlpack_preferred_when_both_protocols_exist():
    """An object with __dlpack__, __dlpack_device__ and a CAI is viewed through DLPack, its CAI never read."""
    producer = BothProtocols()
    view = StridedMemoryView(producer, stream_ptr=None)
    assert [name for name, _ in producer.calls] == ["__dlpack_device__", "__dlpack__"]
    assert producer.cai_reads == 0
    assert view.ptr == producer.expected_ptr
    assert view.device_id == -1
    assert view.exporting_obj is producer


def test_cai_used_when_no_dlpack():
    """An object with only a CAI is viewed through it by the constructor, the dict read exactly once."""
    producer = CAIProducer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert producer.reads == 1
    assert view.ptr == producer.ptr
    assert view.exporting_obj is producer


def test_cai_used_when_dlpack_is_incomplete():
    """__dlpack__ without __dlpack_device__ is not DLPack: the constructor takes the CAI."""
    producer = DLPackWithoutDevice()
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert producer.dlpack_calls == 0
    assert producer.reads == 1
    assert view.shape == (2, 3)


def test_from_cuda_array_interface_forces_cai():
    """from_cuda_array_interface reads the CAI of an object that also speaks DLPack and never calls DLPack."""
    producer = BothProtocols()
    view = StridedMemoryView.from_cuda_array_interface(producer, stream_ptr=-1)
    assert producer.calls == []
    assert producer.cai_reads == 1
    assert view.ptr == producer.cai["data"][0]
    assert view.exporting_obj is producer


@pytest.mark.parametrize("obj", [[1, 2], NoneCAI()], ids=["list", "cai_is_none"])
def test_neither_protocol_is_a_buffer_error_naming_both(obj):
    """An object with no protocol (a None CAI counts as none) is a BufferError naming the type and every protocol."""
    name = type(obj).__name__
    prefix = f"stridedview: '{name}' object supports none of DLPack"
    with pytest.raises(BufferError, match="^" + re.escape(prefix)) as excinfo:
        StridedMemoryView(obj, stream_ptr=-1)
    assert excinfo.type is BufferError
    message = str(excinfo.value)
    assert "__dlpack__" in message
    assert "__cuda_array_interface__" in message
    assert "CUDA Array Interface" in message
    assert "__array_interface__" in message
    assert "buffer protocol" in message


@pytest.mark.parametrize("obj", [[1, 2], NoneCAI()], ids=["list", "cai_is_none"])
def test_from_cuda_array_interface_without_cai(obj):
    """from_cuda_array_interface on an object without a CAI is a BufferError naming the type."""
    prefix = f"cuda array interface: '{type(obj).__name__}' object has no __cuda_array_interface__"
    with pytest.raises(BufferError, match="^" + re.escape(prefix)) as excinfo:
        StridedMemoryView.from_cuda_array_interface(obj, stream_ptr=-1)
    assert excinfo.type is BufferError


@pytest.mark.parametrize("stream_ptr", ["5", 1.5, True, object()], ids=repr)
def test_stream_ptr_type_checked_before_the_interface_is_read(entry, stream_ptr):
    """A stream_ptr of a wrong type is a TypeError raised before __cuda_array_interface__ is read."""
    producer = CAIProducer()
    prefix = "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got "
    with pytest.raises(TypeError, match="^" + re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is TypeError
    assert producer.reads == 0


@pytest.mark.parametrize("stream_ptr", [-2, 2**64], ids=repr)
def test_stream_ptr_value_checked_before_the_interface_is_read(entry, stream_ptr):
    """A stream_ptr below -1 or past 2**64 is a ValueError raised before __cuda_array_interface__ is read."""
    producer = CAIProducer()
    prefix = "stream: stream_ptr must be -1 or a stream handle >= 0 (got "
    with pytest.raises(ValueError, match="^" + re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is ValueError
    assert producer.reads == 0


def test_stream_ptr_may_be_a_cuda_stream_object(entry):
    """A __cuda_stream__ object is accepted as the consumer stream of a CAI view."""
    producer = CAIProducer()
    view = entry(producer, stream_ptr=CudaStream(CONSUMER))
    assert view.ready_stream == CONSUMER


# --- versions ------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_versions_0_to_3_accepted(entry, version):
    """Every CAI version from 0 to 3 gives the same view."""
    producer = CAIProducer(version=version)
    view = entry(producer, stream_ptr=CONSUMER)
    assert (view.ptr, view.shape, view.strides, view.dtype) == (
        producer.ptr, (2, 3), (3, 1), np.dtype(np.float32)
    )
    assert view.ready_stream == CONSUMER


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("stream", [0, -5, "junk", 0x5000, 2**70], ids=repr)
def test_stream_key_ignored_below_version_3(entry, version, stream):
    """Below version 3 the 'stream' key is neither checked nor used: no error and no driver call."""
    producer = CAIProducer(version=version, stream=stream)
    view = entry(producer, stream_ptr=CONSUMER)
    assert view.ready_stream == CONSUMER
    assert view.shape == (2, 3)


def test_pytorch_style_version_2_dict():
    """A PyTorch-style v2 dict (no stream, no descr, bfloat16 as '<V2') is viewed as a V2 array."""
    buffer = np.zeros((4, 5), dtype=np.uint16)
    interface = {
        "typestr": "<V2",
        "shape": (4, 5),
        "strides": None,
        "data": (buffer.__array_interface__["data"][0], False),
        "version": 2,
    }
    producer = CAIProducer(buffer)
    producer.interface = interface
    view = StridedMemoryView(producer, stream_ptr=CONSUMER)
    assert view.dtype == np.dtype("V2")
    assert view.dtype.itemsize == 2
    assert view.dtype.names is None
    assert (view.shape, view.strides) == ((4, 5), (5, 1))
    assert view.ready_stream == CONSUMER


# --- the fields of a view --------------------------------------------------------

def _check(view, producer, fake, *, shape, strides, dtype, readonly=False, device=1):
    """assert_view with the producer's pointer registered on ``device`` in the fake driver."""
    fake.register_pointer(producer.ptr, max(producer.array.nbytes, 1), device)
    assert_view(
        view,
        ptr=producer.interface["data"][0],
        shape=shape,
        strides=strides,
        dtype=dtype,
        device_id=device,
        is_device_accessible=True,
        readonly=readonly,
        exporting_obj=producer,
    )


def test_every_field_of_a_c_contiguous_view(entry, fake):
    """A C-contiguous float32 array gives every field: ptr, shape, element strides, dtype, device_id, flags, owner."""
    producer = CAIProducer()
    view = entry(producer, stream_ptr=-1)
    _check(view, producer, fake, shape=(2, 3), strides=(3, 1), dtype=np.float32)
    assert (view.ndim, view.size, view.itemsize, view.nbytes) == (2, 6, 4, 24)
    assert view.is_c_contiguous and not view.is_f_contiguous


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24, dtype=np.float64).reshape(2, 3, 4).transpose(2, 0, 1),
        lambda: np.arange(12, dtype=np.int16).reshape(3, 4)[::-1, ::2],
        lambda: np.broadcast_to(np.arange(3, dtype=np.int32), (4, 3)),
        lambda: np.asfortranarray(np.ones((3, 5), dtype=np.complex64)),
        lambda: np.array(7.5, dtype=np.float32),
        lambda: np.zeros((2, 0, 3), dtype=np.uint8),
        lambda: np.array([True, False, True]),
        lambda: np.arange(10, dtype=np.int64)[::3],
    ],
    ids=["transposed", "negative", "broadcast", "fortran", "0-d", "empty", "bool", "step3"],
)
def test_byte_strides_become_element_strides(fake, make):
    """Byte strides of any sign (and zero) are divided by the item size; ptr is element 0's address."""
    array = make()
    producer = CAIProducer(array)
    view = StridedMemoryView(producer, stream_ptr=-1)
    byte_strides = producer.interface["strides"]  # None when numpy calls the array C-contiguous
    if array.size == 0:
        expected = (0,) * array.ndim  # an empty view's strides are all 0
    elif byte_strides is None:
        expected = tuple(int(np.prod(array.shape[i + 1:])) for i in range(array.ndim))
    else:
        expected = tuple(s // array.itemsize for s in byte_strides)
    _check(view, producer, fake, shape=array.shape, strides=expected, dtype=array.dtype)
    assert view.is_c_contiguous == array.flags.c_contiguous
    assert view.is_f_contiguous == array.flags.f_contiguous


@pytest.mark.parametrize("strides", [None, ABSENT], ids=["none", "absent"])
@pytest.mark.parametrize(
    "shape, expected",
    [((2, 3), (3, 1)), ((4,), (1,)), ((), ()), ((2, 0, 3), (0, 0, 0)), ((5, 1, 2), (2, 2, 1))],
    ids=repr,
)
def test_no_strides_means_c_contiguous(entry, strides, shape, expected):
    """'strides' None or absent means C-contiguous element strides (an empty view's are 0)."""
    producer = CAIProducer(np.zeros(max(1, int(np.prod(shape))), dtype=np.float32))
    producer.set(shape=shape, strides=strides)
    view = entry(producer, stream_ptr=-1)
    assert view.strides == expected
    assert type(view.strides) is tuple
    assert all(type(s) is int for s in view.strides)


def test_shape_as_list_accepted():
    """A list shape (some producers send one) is accepted and returned as a tuple."""
    producer = CAIProducer(shape=[2, 3])
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.shape == (2, 3)
    assert type(view.shape) is tuple


@pytest.mark.parametrize(
    "shape, strides, expected",
    [
        ((1, 3), (7, 4), None),
        ((3, 1), (4, 5), None),
        ((0, 3), (5, 4), None),
        ((3, 0), (4, 6), None),
        ((1, 1), (3, 5), None),
    ],
    ids=repr,
)
def test_odd_strides_allowed_on_extent_0_and_1(shape, strides, expected):
    """A stride that is no multiple of the item size is allowed on a dimension of extent 0 or 1."""
    producer = CAIProducer(np.zeros(4, dtype=np.float32), shape=shape, strides=strides)
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.shape == shape
    for extent, byte_stride, element_stride in zip(shape, strides, view.strides):
        assert type(element_stride) is int
        if view.size == 0:
            assert element_stride == 0  # an empty view's strides are all 0
        elif extent > 1:
            assert element_stride * 4 == byte_stride


@pytest.mark.parametrize("strides", [(12, 6), (6, 1), (-6, 4), (12, 2)], ids=repr)
def test_non_divisible_strides_refused(entry, strides):
    """A stride not divisible by the item size on a dimension of extent > 1 is refused, not floor-divided."""
    producer = CAIProducer(strides=strides)
    prefix = f"cuda array interface: 'strides' {strides!r} are not multiples of the item size 4"
    with pytest.raises(BufferError, match="^" + re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=-1)
    assert excinfo.type is BufferError


def test_strides_past_2_63_in_magnitude_accepted_when_they_fit():
    """Strides of 2**63 - 1 (and its negative) fit in int64 and are accepted on an extent-1 dimension."""
    for stride in (2**63 - 1, -(2**63 - 1)):
        producer = CAIProducer(np.zeros(3, dtype=np.uint8), shape=(1, 3), strides=(stride, 1))
        view = StridedMemoryView(producer, stream_ptr=-1)
        assert view.strides == (stride, 1)


def test_stride_int64_min_accepted():
    """The byte stride -2**63 fits in int64 (the message's own rule) and is accepted on an extent-1 dimension."""
    producer = CAIProducer(np.zeros(3, dtype=np.uint8), shape=(1, 3), strides=(-(2**63), 1))
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.strides == (-(2**63), 1)


def test_v2_typestr_without_descr_stays_v2():
    """'<V2' with no descr is numpy's V2, not a structured dtype."""
    producer = CAIProducer(np.zeros(3, dtype=np.uint16), typestr="<V2", descr=ABSENT)
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.dtype == np.dtype("V2")
    assert view.dtype.names is None
    assert view.strides == (1,)


@pytest.mark.parametrize("descr", [ABSENT, None, [("", "<f4")]], ids=["absent", "none", "default"])
def test_default_descr_is_not_structured(descr):
    """A missing, None or default descr ([('', typestr)]) leaves the plain dtype of typestr."""
    producer = CAIProducer(descr=descr)
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.dtype == np.dtype(np.float32)
    assert view.dtype.names is None


def test_structured_descr_gives_structured_dtype(fake):
    """A real descr gives that structured dtype, with the strides divided by its item size."""
    dtype = np.dtype([("x", "<f4"), ("y", "<i4")])
    array = np.zeros((3, 2), dtype=dtype)
    producer = CAIProducer(array)
    assert producer.interface["typestr"] == "|V8"
    view = StridedMemoryView(producer, stream_ptr=-1)
    _check(view, producer, fake, shape=(3, 2), strides=(2, 1), dtype=dtype)
    assert view.dtype.names == ("x", "y")


def test_padded_structured_descr():
    """A descr with a padding entry (numpy's ('', '|V4')) gives a structured dtype with the fields at their offsets."""
    dtype = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "offsets": [0, 8], "itemsize": 16})
    producer = CAIProducer(np.zeros(2, dtype=dtype))
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.dtype.itemsize == 16
    assert view.dtype.fields["a"][1] == 0
    assert view.dtype.fields["b"][1] == 8
    assert view.strides == (1,)


@pytest.mark.parametrize(
    "typestr, dtype",
    [("|b1", np.bool_), ("<c16", np.complex128), ("<f2", np.float16), ("|u1", np.uint8),
     ("<i8", np.int64), ("=f4", np.float32), ("|i1", np.int8)],
    ids=repr,
)
def test_typestr_kinds(typestr, dtype):
    """The usual typestr kinds and byte orders ('<', '|', '=') map to the numpy dtype."""
    producer = CAIProducer(np.zeros(4, dtype=dtype), typestr=typestr, descr=ABSENT)
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.dtype == np.dtype(dtype)
    assert view.itemsize == np.dtype(dtype).itemsize


@pytest.mark.parametrize("readonly", [True, False])
def test_readonly_from_data(entry, readonly):
    """readonly is data[1], as a bool."""
    producer = CAIProducer()
    producer.set(data=(producer.ptr, readonly))
    view = entry(producer, stream_ptr=-1)
    assert view.readonly is readonly


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 0, 5)], ids=repr)
def test_null_pointer_allowed_for_zero_size(entry, shape):
    """ptr 0 is allowed for a zero-size array."""
    producer = CAIProducer(shape=shape, data=(0, False))
    view = entry(producer, stream_ptr=-1)
    assert view.ptr == 0
    assert view.size == 0
    assert view.shape == shape


@pytest.mark.parametrize("ptr", [2**63, 2**64 - 1], ids=["2**63", "2**64-1"])
def test_pointer_past_2_63_accepted(ptr):
    """Addresses are unsigned: a pointer of 2**63 or 2**64 - 1 is kept exactly (for a zero-size view nothing is read)."""
    producer = CAIProducer(shape=(0, 3), data=(ptr, False))
    view = StridedMemoryView(producer, stream_ptr=-1)
    assert view.ptr == ptr
    assert type(view.ptr) is int
    assert f"ptr={ptr:#x}" in repr(view)


@pytest.mark.slow
def test_exporting_obj_kept_alive():
    """The view keeps the producer alive (the CAI has no owner slot) and lets it go with the view."""
    producer = CAIProducer()
    ref = weakref.ref(producer)
    view = StridedMemoryView(producer, stream_ptr=-1)
    del producer
    gc.collect()
    assert ref() is not None
    assert view.exporting_obj is ref()
    del view
    gc.collect()
    assert ref() is None


def test_view_unaffected_by_later_dict_changes():
    """Later changes to the producer's dict do not change a view already made."""
    producer = CAIProducer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    producer.set(shape=(6,), typestr="<i4", data=(producer.ptr, True))
    assert (view.shape, view.dtype, view.readonly) == ((2, 3), np.dtype(np.float32), False)


def test_ready_stream_without_any_stream():
    """With stream_ptr=-1 and no producer stream there is no stream to be ready on: ready_stream is None."""
    view = StridedMemoryView(CAIProducer(), stream_ptr=-1)
    assert view.ready_stream is None


# --- the error table -------------------------------------------------------------

_PTR = "ptr"  # placeholder for the producer's own pointer in a row
_AI = "cuda array interface: "

# (id, changes to the dict (or "__interface__" / "__stream_ptr__"), exception, message prefix)
ERROR_ROWS = [
    ("stream_ptr_none", {"__stream_ptr__": None}, BufferError,
     _AI + "stream_ptr=None is ambiguous: pass a stream handle, or -1 to opt out"),
    ("interface_list", {"__interface__": [("version", 3)]}, TypeError,
     _AI + "__cuda_array_interface__ must be a dict (got "),
    ("interface_tuple", {"__interface__": ()}, TypeError,
     _AI + "__cuda_array_interface__ must be a dict (got "),
    ("interface_str", {"__interface__": "x"}, TypeError,
     _AI + "__cuda_array_interface__ must be a dict (got "),
    ("version_missing", {"version": ABSENT}, BufferError, _AI + "'version' is missing"),
    ("version_bool", {"version": True}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_str", {"version": "3"}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_float", {"version": 3.0}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_none", {"version": None}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_-1", {"version": -1}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_4", {"version": 4}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("version_2**64", {"version": 2**64}, BufferError,
     _AI + "'version' must be an int from 0 to 3 (got "),
    ("shape_missing", {"shape": ABSENT}, BufferError, _AI + "'shape' is missing"),
    ("shape_none", {"shape": None}, TypeError, _AI + "'shape' must be a tuple of ints (got "),
    ("shape_int", {"shape": 6}, TypeError, _AI + "'shape' must be a tuple of ints (got "),
    ("shape_str", {"shape": "23"}, TypeError, _AI + "'shape' must be a tuple of ints (got "),
    ("shape_float_item", {"shape": (2.0, 3)}, TypeError,
     _AI + "'shape' must be a tuple of ints (got "),
    ("shape_bool_item", {"shape": (True, 3)}, TypeError,
     _AI + "'shape' must be a tuple of ints (got "),
    ("shape_str_item", {"shape": (2, "3")}, TypeError,
     _AI + "'shape' must be a tuple of ints (got "),
    ("shape_numpy_item", {"shape": (np.float64(2), 3)}, TypeError,
     _AI + "'shape' must be a tuple of ints (got "),
    ("shape_negative", {"shape": (-1, 3)}, BufferError, _AI + "'shape' extents must be >= 0 (got "),
    ("shape_huge_negative", {"shape": (2, -(2**70))}, BufferError,
     _AI + "'shape' extents must be >= 0 (got "),
    ("shape_2**63", {"shape": (2**63,)}, BufferError,
     _AI + "'shape' extents must fit in int64 (got "),
    ("shape_2**64", {"shape": (2**64, 1)}, BufferError,
     _AI + "'shape' extents must fit in int64 (got "),
    ("shape_2**64_with_zero", {"shape": (0, 2**64)}, BufferError,
     _AI + "'shape' extents must fit in int64 (got "),
    ("typestr_missing", {"typestr": ABSENT}, BufferError, _AI + "'typestr' is missing"),
    ("typestr_int", {"typestr": 4}, TypeError, _AI + "'typestr' must be a str (got "),
    ("typestr_bytes", {"typestr": b"<f4"}, TypeError, _AI + "'typestr' must be a str (got "),
    ("typestr_dtype", {"typestr": np.dtype("<f4")}, TypeError,
     _AI + "'typestr' must be a str (got "),
    ("typestr_no_byte_order", {"typestr": "f4"}, BufferError,
     _AI + "'typestr' must be <byte order><kind><item size>"),
    ("typestr_empty", {"typestr": ""}, BufferError,
     _AI + "'typestr' must be <byte order><kind><item size>"),
    ("typestr_bad_order", {"typestr": "!f4"}, BufferError,
     _AI + "'typestr' must be <byte order><kind><item size>"),
    ("typestr_unknown", {"typestr": "<q9"}, BufferError,
     _AI + "'typestr' '<q9' is not a numpy type string"),
    ("typestr_bad_size", {"typestr": "<f3"}, BufferError,
     _AI + "'typestr' '<f3' is not a numpy type string"),
    ("typestr_big_endian", {"typestr": ">f4"}, BufferError,
     _AI + "'typestr' '>f4' is not native-endian"),
    ("typestr_big_endian_int", {"typestr": ">i8"}, BufferError,
     _AI + "'typestr' '>i8' is not native-endian"),
    ("typestr_object", {"typestr": "|O8"}, BufferError,
     _AI + "'typestr' '|O8' holds Python objects"),
    ("descr_not_numpy", {"typestr": "|V8", "descr": [("x", "zz")]}, BufferError,
     _AI + "'descr' [('x', 'zz')] is not a numpy descr"),
    ("descr_garbage", {"typestr": "|V8", "descr": [1, 2]}, BufferError,
     _AI + "'descr' [1, 2] is not a numpy descr"),
    ("descr_item_size", {"typestr": "|V8", "descr": [("x", "<f4")]}, BufferError,
     _AI + "'descr' [('x', '<f4')] has item size"),
    ("descr_objects", {"typestr": "|V8", "descr": [("x", "|O")]}, BufferError,
     _AI + "'descr' [('x', '|O')] holds Python objects"),
    ("typestr_v0", {"typestr": "|V0", "descr": ABSENT}, BufferError,
     _AI + "'typestr' '|V0' has item size 0"),
    ("count_overflow", {"shape": (2**62, 4)}, BufferError,
     _AI + "element count overflows int64 (shape "),
    ("count_overflow_square", {"shape": (2**32, 2**32)}, BufferError,
     _AI + "element count overflows int64 (shape "),
    ("count_overflow_max_by_2", {"shape": (2**63 - 1, 2)}, BufferError,
     _AI + "element count overflows int64 (shape "),
    ("data_missing", {"data": ABSENT}, BufferError, _AI + "'data' is missing"),
    ("data_none", {"data": None}, TypeError, _AI + "'data' must be a (ptr, readonly) tuple (got "),
    ("data_int", {"data": 4096}, TypeError, _AI + "'data' must be a (ptr, readonly) tuple (got "),
    ("data_list", {"data": [_PTR, False]}, TypeError,
     _AI + "'data' must be a (ptr, readonly) tuple (got "),
    ("data_1_tuple", {"data": (_PTR,)}, TypeError,
     _AI + "'data' must be a (ptr, readonly) tuple (got "),
    ("data_3_tuple", {"data": (_PTR, False, 0)}, TypeError,
     _AI + "'data' must be a (ptr, readonly) tuple (got "),
    ("ptr_float", {"data": (4096.0, False)}, TypeError, _AI + "'data' pointer must be an int (got "),
    ("ptr_str", {"data": ("0x1000", False)}, TypeError, _AI + "'data' pointer must be an int (got "),
    ("ptr_bool", {"data": (True, False)}, TypeError, _AI + "'data' pointer must be an int (got "),
    ("ptr_none", {"data": (None, False)}, TypeError, _AI + "'data' pointer must be an int (got "),
    ("ptr_negative", {"data": (-1, False)}, BufferError,
     _AI + "'data' pointer must be an address >= 0 (got "),
    ("ptr_2**64", {"data": (2**64, False)}, BufferError,
     _AI + "'data' pointer must be an address >= 0 (got "),
    ("ptr_2**70", {"data": (2**70, False)}, BufferError,
     _AI + "'data' pointer must be an address >= 0 (got "),
    ("ptr_null_non_empty", {"data": (0, False)}, BufferError,
     _AI + "'data' pointer is 0 for a non-empty array (shape "),
    ("readonly_str", {"data": (_PTR, "no")}, TypeError,
     _AI + "'data' readonly flag must be a bool (got "),
    ("readonly_none", {"data": (_PTR, None)}, TypeError,
     _AI + "'data' readonly flag must be a bool (got "),
    ("readonly_float", {"data": (_PTR, 0.0)}, TypeError,
     _AI + "'data' readonly flag must be a bool (got "),
    ("strides_str", {"strides": "12,4"}, TypeError,
     _AI + "'strides' must be None or a tuple of ints (got "),
    ("strides_int", {"strides": 12}, TypeError,
     _AI + "'strides' must be None or a tuple of ints (got "),
    ("strides_float_item", {"strides": (12.0, 4)}, TypeError,
     _AI + "'strides' must be None or a tuple of ints (got "),
    ("strides_bool_item", {"strides": (12, True)}, TypeError,
     _AI + "'strides' must be None or a tuple of ints (got "),
    ("strides_short", {"strides": (8,)}, BufferError,
     _AI + "'strides' (8,) and 'shape' (2, 3) differ in length"),
    ("strides_long", {"strides": (12, 4, 4)}, BufferError,
     _AI + "'strides' (12, 4, 4) and 'shape' (2, 3) differ in length"),
    ("strides_2**63", {"strides": (2**63, 4)}, BufferError, _AI + "'strides' must fit in int64 (got "),
    ("strides_2**64", {"strides": (12, 2**64)}, BufferError,
     _AI + "'strides' must fit in int64 (got "),
    ("strides_below_int64", {"strides": (-(2**63) - 1, 4)}, BufferError,
     _AI + "'strides' must fit in int64 (got "),
    ("strides_2**64_on_extent_1", {"shape": (1, 3), "strides": (2**64, 4)}, BufferError,
     _AI + "'strides' must fit in int64 (got "),
    ("strides_not_multiple", {"strides": (6, 1)}, BufferError,
     _AI + "'strides' (6, 1) are not multiples of the item size 4"),
    ("mask_object", {"mask": object()}, BufferError, _AI + "masked arrays are not supported ('mask' is "),
    ("mask_cai_dict", {"mask": {"shape": (2, 3), "typestr": "|b1", "data": (0, False), "version": 3}},
     BufferError, _AI + "masked arrays are not supported ('mask' is "),
    ("stream_str", {"stream": "1"}, TypeError, _AI + "'stream' must be None or an int (got "),
    ("stream_float", {"stream": 1.0}, TypeError, _AI + "'stream' must be None or an int (got "),
    ("stream_bool", {"stream": True}, TypeError, _AI + "'stream' must be None or an int (got "),
    ("stream_0", {"stream": 0}, BufferError, _AI + "'stream' 0 is disallowed"),
    ("stream_-1", {"stream": -1}, BufferError,
     _AI + "'stream' must be None or a stream handle > 0 (got "),
    ("stream_-2", {"stream": -2}, BufferError,
     _AI + "'stream' must be None or a stream handle > 0 (got "),
    ("stream_2**64", {"stream": 2**64}, BufferError,
     _AI + "'stream' must be None or a stream handle > 0 (got "),
]


def _apply(producer, changes):
    """Apply one row's changes to a fresh producer; return the stream_ptr to use."""
    stream_ptr = CONSUMER
    for key, value in changes.items():
        if key == "__stream_ptr__":
            stream_ptr = value
        elif key == "__interface__":
            producer.interface = value
        else:
            if isinstance(value, tuple) and key == "data":
                value = tuple(producer.ptr if item == _PTR else item for item in value)
            elif isinstance(value, list) and key == "data":
                value = [producer.ptr if item == _PTR else item for item in value]
            producer.set(**{key: value})
    return stream_ptr


@pytest.mark.parametrize(
    "changes, exc_type, prefix",
    [row[1:] for row in ERROR_ROWS],
    ids=[row[0] for row in ERROR_ROWS],
)
def test_error_table(entry, changes, exc_type, prefix):
    """Each malformed CAI dict raises exactly the contract's exception type with its message prefix, and no driver call."""
    producer = CAIProducer()
    stream_ptr = _apply(producer, changes)
    with pytest.raises(exc_type, match="^" + re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is exc_type  # not a subclass, not KeyError/AssertionError/SystemError
    assert producer.reads == 1


@pytest.mark.parametrize(
    "changes, exc_type, prefix",
    [row[1:] for row in ERROR_ROWS if "stream" in row[1] and "__stream_ptr__" not in row[1]],
    ids=[row[0] for row in ERROR_ROWS if "stream" in row[1] and "__stream_ptr__" not in row[1]],
)
def test_stream_key_checked_even_when_opting_out(changes, exc_type, prefix):
    """A malformed v3 'stream' key is refused even with stream_ptr=-1 (the dict is checked before ordering is skipped)."""
    producer = CAIProducer()
    _apply(producer, changes)
    with pytest.raises(exc_type, match="^" + re.escape(prefix)) as excinfo:
        StridedMemoryView(producer, stream_ptr=-1)
    assert excinfo.type is exc_type


def test_checks_run_in_the_contract_order():
    """Starting from a dict wrong everywhere, each fix reveals the next check of the contract's list, in order."""
    producer = CAIProducer()
    ptr = producer.ptr
    # (changes that make the previous check pass and this one fail, expected prefix)
    steps = [
        ({"__stream_ptr__": None, "__interface__": ["not", "a", "dict"]}, BufferError,
         "stream_ptr=None is ambiguous"),
        ({"__interface__": ["not", "a", "dict"]}, TypeError, "__cuda_array_interface__ must be a dict"),
        ({"__interface__": {"shape": "x", "typestr": 1, "data": None, "strides": "x",
                            "mask": object(), "stream": 0}}, BufferError, "'version' is missing"),
        ({"version": 9}, BufferError, "'version' must be an int from 0 to 3"),
        ({"version": 3, "shape": ABSENT}, BufferError, "'shape' is missing"),
        ({"shape": "x"}, TypeError, "'shape' must be a tuple of ints"),
        ({"shape": (-1, 2**64)}, BufferError, "'shape' extents must be >= 0"),
        ({"shape": (2**64, 4)}, BufferError, "'shape' extents must fit in int64"),
        ({"shape": (2**62, 4), "typestr": ABSENT}, BufferError, "'typestr' is missing"),
        ({"typestr": 1}, TypeError, "'typestr' must be a str"),
        ({"typestr": "f4"}, BufferError, "'typestr' must be <byte order><kind><item size>"),
        ({"typestr": "<q9"}, BufferError, "'typestr' '<q9' is not a numpy type string"),
        ({"typestr": ">f4"}, BufferError, "'typestr' '>f4' is not native-endian"),
        ({"typestr": "|O8"}, BufferError, "'typestr' '|O8' holds Python objects"),
        ({"typestr": "|V4", "descr": [("x", "zz")]}, BufferError, "'descr' [('x', 'zz')] is not"),
        ({"descr": [("x", "<f8")]}, BufferError, "'descr' [('x', '<f8')] has item size"),
        ({"typestr": "|V0", "descr": ABSENT}, BufferError, "'typestr' '|V0' has item size 0"),
        ({"typestr": "<f4"}, BufferError, "element count overflows int64"),
        ({"shape": (2, 3), "data": ABSENT}, BufferError, "'data' is missing"),
        ({"data": None}, TypeError, "'data' must be a (ptr, readonly) tuple"),
        ({"data": (1.5, "x")}, TypeError, "'data' pointer must be an int"),
        ({"data": (-1, "x")}, BufferError, "'data' pointer must be an address >= 0"),
        ({"data": (0, "x")}, BufferError, "'data' pointer is 0 for a non-empty array"),
        ({"data": (ptr, "x")}, TypeError, "'data' readonly flag must be a bool"),
        ({"data": (ptr, False)}, TypeError, "'strides' must be None or a tuple of ints"),
        ({"strides": (8,)}, BufferError, "'strides' (8,) and 'shape' (2, 3) differ in length"),
        ({"strides": (2**63, 1)}, BufferError, "'strides' must fit in int64"),
        ({"strides": (6, 1)}, BufferError, "'strides' (6, 1) are not multiples of the item size 4"),
        ({"strides": (12, 4)}, BufferError, "masked arrays are not supported"),
        ({"mask": None}, BufferError, "'stream' 0 is disallowed"),
        ({"stream": "x"}, TypeError, "'stream' must be None or an int"),
        ({"stream": -3}, BufferError, "'stream' must be None or a stream handle > 0"),
    ]
    for changes, exc_type, fragment in steps:
        stream_ptr = _apply(producer, changes)
        with pytest.raises(exc_type) as excinfo:
            StridedMemoryView(producer, stream_ptr=stream_ptr)
        message = str(excinfo.value)
        assert excinfo.type is exc_type, (changes, message)
        assert message.startswith(_AI + fragment), (changes, message)
    _apply(producer, {"stream": None})
    view = StridedMemoryView(producer, stream_ptr=CONSUMER)
    assert (view.shape, view.strides, view.readonly) == ((2, 3), (3, 1), False)


WEIRD_VALUES = [
    None, object(), 2**70, -(2**70), -1, 0, 3, "x", "", b"x", [], {}, (), 1.5, float("nan"),
    True, (None,), ("x", "y"), [1, 2], (1, 2, 3), (2**64, False), (-1, 2**70), [("", "")],
    [("x", "<f4", "bad")], [("x",)], {"a": 1}, np.int64(3), np.float32(1), (np.int64(2), 3),
]


@pytest.mark.parametrize("key", ["version", "shape", "typestr", "descr", "data", "strides", "mask", "stream"])
def test_no_unexpected_exception_type_for_any_value(key):
    """Whatever value a key holds, the CAI path raises only BufferError or TypeError (never KeyError, AssertionError, SystemError...)."""
    for value in WEIRD_VALUES:
        for typestr in ("<f4", "|V8"):
            producer = CAIProducer(typestr=typestr)
            producer.set(**{key: value})
            try:
                StridedMemoryView(producer, stream_ptr=-1)
            except (BufferError, TypeError) as exc:
                assert type(exc) in (BufferError, TypeError), (key, value, exc)
                assert str(exc).startswith(_AI), (key, value, str(exc))
            except Exception as exc:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{key}={value!r} (typestr {typestr}) raised {type(exc).__name__}: {exc}")


def test_no_unexpected_exception_type_when_keys_are_removed():
    """Removing any subset of the keys raises only BufferError or TypeError, or succeeds."""
    keys = ["version", "shape", "typestr", "descr", "data", "strides"]
    for count in range(len(keys) + 1):
        for removed in itertools.combinations(keys, count):
            producer = CAIProducer(**{key: ABSENT for key in removed})
            try:
                StridedMemoryView(producer, stream_ptr=-1)
            except (BufferError, TypeError):
                pass
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"removing {removed} raised {type(exc).__name__}: {exc}")


# --- no driver needed --------------------------------------------------------------

@pytest.mark.parametrize(
    "keys, stream_ptr",
    [
        ({"stream": 0x5000}, -1),
        ({"stream": None}, CONSUMER),
        ({}, CONSUMER),
        ({"version": 2, "stream": 0x5000}, CONSUMER),
        ({"stream": 0x5000}, 0x5000),
    ],
    # Producer 1 vs consumer 0 needs the driver: they are one stream only when the current
    # context is the data device's (test_stream_ordering.py::test_same_default_stream_orders_nothing).
    ids=["opt-out", "stream-none", "stream-absent", "v2", "same-stream"],
)
def test_no_driver_call_without_ordering(forbidden_driver, keys, stream_ptr):
    """A view whose streams need no ordering makes no driver call at all (the installed driver fails on any use)."""
    producer = CAIProducer(**keys)
    view = StridedMemoryView(producer, stream_ptr=stream_ptr)
    repr(view)
    (view.ptr, view.shape, view.strides, view.dtype, view.readonly, view.exporting_obj,
     view.is_device_accessible, view.ready_stream, view.size, view.nbytes,
     view.is_c_contiguous, view.is_f_contiguous)
    assert forbidden_driver.used == []


def _run_python(code, timeout=120, env=None):
    """Run ``code`` in a fresh interpreter (tests/ on sys.path, ``env`` its environment when
    given); return its last stdout line as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_SUBPROCESS_PRELUDE = f"""
import ctypes, json, sys
sys.path.insert(0, {str(TESTS_DIR)!r})
import numpy as np

class CAI:
    def __init__(self, stream=None, shape=(2, 3)):
        self.array = np.zeros((2, 3), dtype=np.float32)
        self.__cuda_array_interface__ = {{
            "version": 3, "shape": shape, "typestr": "<f4", "strides": None,
            "data": (0 if 0 in shape else self.array.ctypes.data, False), "stream": stream,
        }}

def block_cuda_bindings():
    # Simulates a machine without cuda-bindings: importing it raises ImportError.
    for name in list(sys.modules):
        if name == "cuda" or name.startswith("cuda."):
            del sys.modules[name]
    sys.modules["cuda"] = None
    sys.modules["cuda.bindings"] = None

def libcuda_loadable():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False

def attempt(fn):
    from stridedview import CUDAError
    try:
        fn()
    except CUDAError as exc:
        return {{"type": type(exc).__name__, "name": exc.name, "message": str(exc),
                "runtime_error": isinstance(exc, RuntimeError)}}
    except BaseException as exc:
        return {{"type": type(exc).__name__, "message": str(exc)}}
    return {{"type": None}}
"""


def test_cai_view_never_imports_cuda_bindings():
    """In a fresh process, CAI views with stream_ptr=-1, no producer stream or a v2 dict never import cuda.bindings."""
    result = _run_python(_SUBPROCESS_PRELUDE + """
from stridedview import StridedMemoryView
views = [
    StridedMemoryView(CAI(stream=0x5000), stream_ptr=-1),
    StridedMemoryView(CAI(stream=None), stream_ptr=0x7000),
    StridedMemoryView.from_cuda_array_interface(CAI(stream=0x5000), stream_ptr=0x5000),
]
text = [repr(v) for v in views]
fields = [(v.ptr, v.shape, v.strides, str(v.dtype), v.readonly, v.ready_stream) for v in views]
print(json.dumps({"cuda": sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda.")),
                  "repr": text}))
""")
    assert result["cuda"] == []
    assert all("device_id=?" in text for text in result["repr"])


def test_release_driver_resources_without_a_driver_loads_none():
    """``stridedview.release_driver_resources()`` in a process that never ordered a stream
    imports no cuda.bindings and raises nothing, even where cuda-bindings cannot be loaded."""
    result = _run_python(_SUBPROCESS_PRELUDE + """
import stridedview
stridedview.release_driver_resources()
before = sorted(m for m in sys.modules if m == "cuda" or m.startswith("cuda."))
block_cuda_bindings()
stridedview.release_driver_resources()
print(json.dumps({"cuda": before, "view": list(StridedMemoryView(CAI(), stream_ptr=-1).shape)}))
""".replace("import stridedview", "import stridedview\nfrom stridedview import StridedMemoryView", 1))
    assert result == {"cuda": [], "view": [2, 3]}


def test_missing_cuda_bindings_is_cuda_error_no_driver():
    """Without cuda-bindings, ordering raises CUDAError CUDA_ERROR_NO_DRIVER naming stream_ptr=-1; opting out still works."""
    result = _run_python(_SUBPROCESS_PRELUDE + """
block_cuda_bindings()
from stridedview import StridedMemoryView
ordered = attempt(lambda: StridedMemoryView(CAI(stream=0x5000), stream_ptr=0x7000))
opted_out = StridedMemoryView(CAI(stream=0x5000), stream_ptr=-1)
device = attempt(lambda: opted_out.device_id)
print(json.dumps({"ordered": ordered, "opted_out_shape": list(opted_out.shape),
                  "ready": opted_out.ready_stream, "device": device}))
""")
    ordered = result["ordered"]
    assert ordered["type"] == "CUDAError"
    assert ordered["name"] == "CUDA_ERROR_NO_DRIVER"
    assert ordered["runtime_error"] is True
    assert "stream_ptr=-1" in ordered["message"]
    assert result["opted_out_shape"] == [2, 3]
    assert result["ready"] == 0x5000
    assert result["device"]["type"] == "CUDAError"
    assert result["device"]["name"] == "CUDA_ERROR_NO_DRIVER"


def test_missing_driver_library_is_cuda_error_no_driver():
    """With cuda-bindings but no libcuda (this machine), ordering raises CUDAError CUDA_ERROR_NO_DRIVER naming stream_ptr=-1."""
    result = _run_python(_SUBPROCESS_PRELUDE + """
# Only the real bindings without a driver library are tested here; where a driver
# is present, calling it with made-up stream handles is not safe, so the missing
# driver is simulated by hiding cuda-bindings instead.
mode = "real-bindings"
if libcuda_loadable():
    block_cuda_bindings()
    mode = "blocked-import"
from stridedview import StridedMemoryView, _driver
_driver.use_api(None)
ordered = attempt(lambda: StridedMemoryView(CAI(stream=0x5000), stream_ptr=0x7000))
again = attempt(lambda: StridedMemoryView(CAI(stream=0x5000), stream_ptr=0x7000))
view = StridedMemoryView(CAI(stream=0x5000), stream_ptr=-1)
device = attempt(lambda: view.device_id)
print(json.dumps({"mode": mode, "ordered": ordered, "again": again, "device": device,
                  "repr": repr(view)}))
""")
    for outcome in (result["ordered"], result["again"]):
        assert outcome["type"] == "CUDAError", outcome
        assert outcome["name"] == "CUDA_ERROR_NO_DRIVER"
        assert "stream_ptr=-1" in outcome["message"]
    assert result["device"]["type"] == "CUDAError"
    assert result["device"]["name"] == "CUDA_ERROR_NO_DRIVER"
    assert "device_id=?" in result["repr"]


def test_process_with_no_libcuda_is_cuda_error_no_driver(tmp_path):
    """In a process whose library path holds no libcuda.so.1, the real bindings' ordering raises
    CUDAError CUDA_ERROR_NO_DRIVER naming stream_ptr=-1, and views that need no driver work."""
    empty = tmp_path / "no-driver"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("LD_PRELOAD", "SIMGPU_LIB_DIR")}
    env["LD_LIBRARY_PATH"] = str(empty)  # the simulator's folder, if any, no longer searched
    result = _run_python(_SUBPROCESS_PRELUDE + """
if libcuda_loadable():
    print(json.dumps({"loadable": True}))
    raise SystemExit
from stridedview import StridedMemoryView, _driver
ordered = attempt(lambda: StridedMemoryView(CAI(stream=0x5000), stream_ptr=0x7000))
again = attempt(lambda: StridedMemoryView(CAI(stream=0x5000), stream_ptr=0x7000))
producer = CAI(stream=0x5000)
opted_out = StridedMemoryView(producer, stream_ptr=-1)
device = attempt(lambda: opted_out.device_id)
host = StridedMemoryView(np.arange(6, dtype=np.float32).reshape(2, 3))
print(json.dumps({
    "loadable": False, "ordered": ordered, "again": again, "device": device,
    "bindings": "cuda.bindings.driver" in sys.modules,
    "opted_out": [list(opted_out.shape), opted_out.ready_stream,
                  opted_out.ptr == producer.array.ctypes.data],
    "host": [list(host.shape), host.is_device_accessible, host.device_id],
}))
""", env=env)
    if result["loadable"]:
        pytest.skip(NO_LIBCUDA_SKIP_REASON)
    assert result["bindings"] is True  # the real bindings were loaded and found no driver
    for outcome in (result["ordered"], result["again"]):
        assert outcome["type"] == "CUDAError", outcome
        assert outcome["name"] == "CUDA_ERROR_NO_DRIVER"
        assert outcome["runtime_error"] is True
        assert "stream_ptr=-1" in outcome["message"]
    assert result["device"]["name"] == "CUDA_ERROR_NO_DRIVER"
    assert result["opted_out"] == [[2, 3], 0x5000, True]
    assert result["host"] == [[2, 3], False, -1]


def test_no_driver_error_from_a_bindings_module_that_raises():
    """A bindings module whose calls raise (libcuda missing) turns into CUDAError CUDA_ERROR_NO_DRIVER naming stream_ptr=-1."""

    class Unloadable:
        def __getattr__(self, name):
            def call(*args):
                raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found')
            return call

    _driver.use_api(Unloadable())
    with pytest.raises(CUDAError) as excinfo:
        StridedMemoryView(CAIProducer(stream=0x5000), stream_ptr=CONSUMER)
    assert excinfo.value.name == "CUDA_ERROR_NO_DRIVER"
    assert "stream_ptr=-1" in str(excinfo.value)
    assert isinstance(excinfo.value, RuntimeError)
    assert stridedview.CUDAError is CUDAError


# --- device_id ----------------------------------------------------------------------------
# Reading device_id asks the real driver (cuPointerGetAttribute): tests/test_gpu_interop.py,
# on the simulated device or a GPU.

def test_real_bindings_refuse_an_int_pointer_attribute():
    """The real cuda-bindings refuse a plain int attribute in cuPointerGetAttribute, and so does the fake (enum_attributes)."""
    driver = pytest.importorskip("cuda.bindings.driver")

    with pytest.raises(AttributeError):
        driver.cuPointerGetAttribute(9, 0x1000)
    fake = FakeDriver(enum_attributes=True)
    with pytest.raises(AttributeError):
        fake.cuPointerGetAttribute(9, 0x1000)
    fake.cuInit(0)
    fake.register_pointer(0x1000, 16, device=1)
    attribute = fake.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    assert fake.cuPointerGetAttribute(attribute, 0x1000) == (0, 1)


# --- every reachable byte offset fits int64 ---------------------------------------------

@pytest.mark.parametrize(
    "shape, strides",
    [
        ((3,), (2**62,)),  # 2 steps of 2**62 bytes: 2**63
        ((3,), (-(2**62),)),
        ((2**61,), None),  # row-major float64: the last element 2**64 - 8 bytes away
        ((2, 2), (2**62, 2**62)),
    ],
    ids=["steps", "negative", "row-major", "sum"],
)
def test_cai_byte_offsets_past_int64_refused(shape, strides):
    """A CAI layout reaching an element more than 2**63 - 1 bytes from the first is refused, naming the values."""
    producer = CAIProducer(np.zeros(1), shape=shape, strides=strides, typestr="<f8", descr=[("", "<f8")], data=(0x10000, False))
    message = (
        "cuda array interface: byte offsets from the first element must fit in int64 "
        f"(got 'shape' {shape}, 'strides' {strides}, item size 8)"
    )
    with pytest.raises(BufferError, match="^" + re.escape(message) + "$") as excinfo:
        StridedMemoryView(producer, stream_ptr=-1)
    assert excinfo.type is BufferError


@pytest.mark.parametrize(
    "shape, strides",
    [((2,), (2**63 - 8,)), ((1, 3), (2**63 - 8, 8)), ((0, 2), (2**63 - 8, 2**63 - 8))],
    ids=["largest", "extent-1", "empty"],
)
def test_cai_byte_offsets_within_int64_accepted(shape, strides):
    """CAI layouts whose byte offsets fit int64 are viewed with their strides in elements (an
    empty one's all 0)."""
    producer = CAIProducer(np.zeros(1), shape=shape, strides=strides, typestr="<f8", descr=[("", "<f8")], data=(0x10000, False))
    view = StridedMemoryView(producer, stream_ptr=-1)
    expected = (0,) * len(shape) if 0 in shape else tuple(s // 8 for s in strides)
    assert view.strides == expected
