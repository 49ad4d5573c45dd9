"""Host memory without DLPack: numpy's array interface, the buffer protocol, from_buffer.

Every view is checked against numpy reading the same object (the oracle), and no test
here may reach the CUDA driver (``forbidden_driver``): host memory needs none.
"""

from __future__ import annotations

import array
import ctypes
import gc
import mmap
import re
import sys

import numpy as np
import pytest

from stridedview import StridedMemoryView

pytestmark = pytest.mark.usefixtures("forbidden_driver")


def assert_host_view_matches(view, expected: np.ndarray, obj, *, readonly=None):
    """``view`` has exactly the layout numpy gives ``expected``, as host memory of ``obj``."""
    itemsize = expected.dtype.itemsize
    assert view.ptr == expected.__array_interface__["data"][0]
    assert view.shape == expected.shape
    if expected.size:  # an empty array's strides address nothing: any will do
        assert view.strides == tuple(s // itemsize for s in expected.strides)
    assert view.dtype == expected.dtype
    assert view.itemsize == itemsize
    assert view.size == expected.size
    assert view.readonly is (not expected.flags.writeable if readonly is None else readonly)
    assert view.device_id == -1
    assert view.is_device_accessible is False
    assert view.ready_stream is None
    assert view.exporting_obj is obj


# --- the buffer protocol -------------------------------------------------------------------


class Point(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_char), ("x", ctypes.c_double)]  # 7 bytes of padding


def _buffer_objects():
    """(id, object, numpy's reading of it) for every kind of buffer exporter."""
    grid = np.arange(24, dtype=np.float64).reshape(4, 6)
    ints = (ctypes.c_int32 * 5)(*range(5))
    nested = ((ctypes.c_double * 3) * 2)()
    points = (Point * 3)()
    out = [
        ("bytes", b"stridedview", lambda o: np.frombuffer(o, np.uint8)),
        ("bytearray", bytearray(b"0123456789"), lambda o: np.frombuffer(o, np.uint8)),
        ("empty-bytearray", bytearray(), lambda o: np.frombuffer(o, np.uint8)),
        ("memoryview-2d", memoryview(grid), np.asarray),
        ("memoryview-strided", memoryview(grid)[::2], np.asarray),
        ("memoryview-transposed", memoryview(np.asfortranarray(grid)), np.asarray),
        ("memoryview-negative", memoryview(grid[::-1, ::-2]), np.asarray),
        ("memoryview-cast-int32", memoryview(bytearray(16)).cast("i"), np.asarray),
        ("memoryview-cast-2d", memoryview(bytearray(24)).cast("h", (3, 4)), np.asarray),
        ("memoryview-0d", memoryview(np.array(2.5)), np.asarray),
        ("memoryview-readonly", memoryview(b"abcdefgh").cast("q"), np.asarray),
        ("memoryview-structured", memoryview(np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])), np.asarray),
        ("memoryview-bool", memoryview(np.array([True, False])), np.asarray),
        ("memoryview-complex", memoryview(np.arange(3, dtype=np.complex64)), np.asarray),
        ("ctypes-int32", ints, np.ctypeslib.as_array),
        ("ctypes-nested", nested, np.ctypeslib.as_array),
        ("ctypes-structure", points, lambda o: np.frombuffer(o, np.dtype(Point))),
    ]
    for code in "bBhHiIlLqQfd":
        out.append((f"array-{code}", array.array(code, range(4)), lambda o: np.frombuffer(o, o.typecode)))
    return out


BUFFER_OBJECTS = _buffer_objects()


@pytest.mark.parametrize("obj, oracle", [pytest.param(o, f, id=i) for i, o, f in BUFFER_OBJECTS])
def test_buffer_protocol_view_matches_numpy(obj, oracle):
    """The constructor views any buffer exporter exactly as numpy reads it, as host memory."""
    expected = oracle(obj)
    view = StridedMemoryView(obj)
    assert_host_view_matches(view, expected, obj, readonly=memoryview(obj).readonly)


@pytest.mark.slow
def test_buffer_protocol_mmap_is_held_until_the_view_goes():
    """A view of an mmap keeps its buffer exported: close() is refused until the view is gone."""
    mapped = mmap.mmap(-1, 4096)
    view = StridedMemoryView(mapped)
    assert_host_view_matches(view, np.frombuffer(mapped, np.uint8), mapped, readonly=False)
    with pytest.raises(BufferError):
        mapped.close()
    del view
    gc.collect()
    mapped.close()


@pytest.mark.slow
def test_buffer_is_released_exactly_once_per_view():
    """Each view releases its own buffer once: a bytearray resizes only after the last view goes."""
    data = bytearray(64)
    first = StridedMemoryView(data)
    second = StridedMemoryView(data)
    derived = StridedMemoryView(first)  # a view of a view holds the root, not a second export
    del first
    gc.collect()
    with pytest.raises(BufferError):
        data.extend(b"x")  # second (and the root held by derived) still export
    del second, derived
    gc.collect()
    data.extend(b"x")
    assert len(data) == 65


@pytest.mark.slow
def test_buffer_holds_the_exporter_and_drops_it():
    """The held buffer keeps its exporter alive and gives its reference back at deallocation."""
    data = bytearray(32)
    before = sys.getrefcount(data)
    view = StridedMemoryView(data)
    assert sys.getrefcount(data) > before
    del view
    gc.collect()
    assert sys.getrefcount(data) == before


@pytest.mark.slow
def test_memoryview_cannot_be_released_under_a_view():
    """A viewed memoryview refuses release() while the view lives (the memory stays valid)."""
    mv = memoryview(bytearray(16))
    view = StridedMemoryView(mv)
    with pytest.raises(BufferError):
        mv.release()
    del view
    gc.collect()
    mv.release()


def test_ctypes_structure_with_padding_uses_numpy_dtype_of_the_type():
    """A ctypes structure array (whose PEP 3118 format omits padding) gets numpy's dtype of the type."""
    points = (Point * 2)()
    view = StridedMemoryView(points)
    assert view.dtype == np.dtype(Point)
    assert view.dtype.itemsize == ctypes.sizeof(Point)
    assert view.strides == (1,)


@pytest.mark.torch
def test_buffer_view_exports_to_numpy_and_torch():
    """A buffer-protocol view hands the same memory on through DLPack (numpy and torch read it)."""
    data = array.array("f", [1.0, 2.0, 3.0, 4.0])
    view = StridedMemoryView(data)
    out = np.from_dlpack(view)
    assert out.__array_interface__["data"][0] == view.ptr
    np.testing.assert_array_equal(out, np.frombuffer(data, np.float32))
    torch = pytest.importorskip("torch")
    tensor = torch.from_dlpack(view)
    assert tensor.data_ptr() == view.ptr
    assert tensor.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_readonly_buffer_exports_read_only():
    """A view of bytes is read-only and its versioned capsule says so (numpy imports it read-only)."""
    view = StridedMemoryView(b"abcd")
    assert view.readonly is True
    assert np.from_dlpack(view).flags.writeable is False


def test_decorator_accepts_host_protocols():
    """args_viewable_as_strided_memory wraps buffer-protocol and array-interface arguments too."""
    from stridedview import args_viewable_as_strided_memory

    @args_viewable_as_strided_memory((0, 1))
    def launch(a, b):
        return a.view(5), b.view(5)

    data = bytearray(8)
    first, second = launch(data, HasArrayInterface(np.zeros(2)))
    assert (first.exporting_obj, first.shape) == (data, (8,))
    assert second.shape == (2,)


def test_host_protocols_ignore_the_stream():
    """Host memory has no stream: any stream_ptr is accepted and nothing is ordered."""
    view = StridedMemoryView(bytearray(4), stream_ptr=5)
    assert view.ready_stream is None
    view = StridedMemoryView(HasArrayInterface(np.zeros(3)), stream_ptr=7)
    assert view.ready_stream is None


@pytest.mark.parametrize(
    "make, message",
    [
        pytest.param(lambda: _testbuffer_ndarray(format=">i"), "buffer: format '>i' is not native-endian", id="big-endian"),
        pytest.param(lambda: _testbuffer_ndarray(format="P"), "buffer: format 'P' (itemsize 8) has no numpy dtype (", id="no-numpy-dtype"),
        pytest.param(lambda: memoryview(np.array([None], dtype=object)), "buffer: format 'O' holds Python objects", id="objects"),
        pytest.param(lambda: _testbuffer_pil(), "buffer: indirect buffers (PIL-style suboffsets) cannot be viewed (suboffsets ", id="suboffsets"),
    ],
)
def test_buffer_protocol_refusals(make, message):
    """Formats and layouts a view cannot describe are a BufferError quoting the format or layout."""
    with pytest.raises(BufferError, match="^" + re.escape(message)):
        StridedMemoryView(make())


def _testbuffer_ndarray(**kwargs):
    testbuffer = pytest.importorskip("_testbuffer")
    return testbuffer.ndarray(list(range(4)), shape=[4], **kwargs)


def _testbuffer_pil():
    testbuffer = pytest.importorskip("_testbuffer")
    return testbuffer.ndarray(list(range(12)), shape=[3, 4], format="i", flags=testbuffer.ND_PIL)


def test_buffer_strides_not_multiple_of_itemsize_refused():
    """Byte strides that are not a multiple of the item size are refused, not floor-divided."""
    with pytest.raises(BufferError, match=re.escape("buffer: strides (3,) are not multiples of the item size 2")):
        StridedMemoryView(_misaligned())
    # An extent-1 dimension never steps: any stride will do there.
    assert StridedMemoryView(_misaligned(extent=1)).shape == (1,)


def _misaligned(extent=3):
    """A memoryview of 2-byte elements 3 bytes apart: numpy allows it, element strides cannot say it."""
    raw = np.zeros(16, dtype=np.uint8)
    return memoryview(np.lib.stride_tricks.as_strided(raw.view(np.int16), shape=(extent,), strides=(3,)))


# --- numpy's array interface ---------------------------------------------------------------


class HasArrayInterface:
    """An object exporting only ``interface`` (or an array's) as ``__array_interface__``."""

    def __init__(self, source=None, **interface):
        self.source = source
        self.__array_interface__ = dict(source.__array_interface__) if source is not None else {}
        for key, value in interface.items():
            if value is ...:
                self.__array_interface__.pop(key, None)
            else:
                self.__array_interface__[key] = value


def _numpy_arrays():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    readonly = np.arange(4.0)
    readonly.setflags(write=False)
    return [
        ("c-contiguous", base),
        ("transposed", base.T),
        ("sliced", base[::2, 1:, ::-2]),
        ("0-d", np.array(7, dtype=np.int64)),
        ("zero-size", np.zeros((0, 3), dtype=np.int16)),
        ("broadcast", np.broadcast_to(np.arange(3.0), (4, 3))),
        ("structured", np.zeros(4, dtype=[("x", "<f4"), ("y", "<i8")])),
        ("datetime", np.arange(3).astype("datetime64[s]")),
        ("readonly", readonly),
        ("bool", np.array([True, False, True])),
        ("complex", np.arange(4, dtype=np.complex128)),
    ]


@pytest.mark.parametrize("source", [pytest.param(a, id=i) for i, a in _numpy_arrays()])
def test_array_interface_view_matches_numpy(source):
    """The constructor (and from_array_interface) view an array interface exactly as numpy does."""
    obj = HasArrayInterface(source)
    assert_host_view_matches(StridedMemoryView(obj), source, obj)
    assert_host_view_matches(StridedMemoryView.from_array_interface(obj), source, obj)
    assert_host_view_matches(StridedMemoryView.from_array_interface(source), source, source)


@pytest.mark.slow
def test_array_interface_buffer_data_with_offset():
    """'data' given as a buffer object is held; 'offset' bytes in is element [0]."""
    storage = bytearray(range(32))
    obj = HasArrayInterface(
        shape=(2, 3), typestr="|u1", data=storage, offset=4, strides=(8, 2), version=3
    )
    view = StridedMemoryView(obj)
    expected = np.ndarray((2, 3), np.uint8, buffer=storage, offset=4, strides=(8, 2))
    assert view.ptr == expected.__array_interface__["data"][0]
    assert (view.shape, view.strides, view.readonly) == ((2, 3), (8, 2), False)
    np.testing.assert_array_equal(np.from_dlpack(view), expected)
    with pytest.raises(BufferError):
        storage.extend(b"x")  # the view holds the buffer
    del view
    gc.collect()
    storage.extend(b"x")


def test_array_interface_data_none_uses_the_objects_own_buffer():
    """With 'data' None, the object's own buffer is the memory (numpy's rule)."""

    class Bytes(bytearray):
        @property
        def __array_interface__(self):
            return {"shape": (2,), "typestr": "<u2", "data": None, "version": 3, "offset": 2}

    obj = Bytes(b"\x01\x00\x02\x00\x03\x00")
    view = StridedMemoryView(obj)
    np.testing.assert_array_equal(np.from_dlpack(view), [2, 3])
    expected = np.frombuffer(obj, np.uint16, count=2, offset=2)
    assert view.ptr == expected.__array_interface__["data"][0]


def test_pil_image_through_the_array_interface():
    """A PIL image (array interface with bytes data) is viewed with numpy's values and layout."""
    image_module = pytest.importorskip("PIL.Image")
    image = image_module.new("RGB", (5, 3), color=(10, 20, 30))
    view = StridedMemoryView(image)
    expected = np.asarray(image)
    assert view.shape == expected.shape == (3, 5, 3)
    assert view.dtype == np.uint8
    assert view.device_id == -1
    np.testing.assert_array_equal(np.from_dlpack(view), expected)


def test_constructor_order_cai_before_array_interface_before_buffer():
    """The constructor takes the array interface over the buffer protocol, and the CAI over both."""

    class Both(bytearray):
        __array_interface__ = property(
            lambda self: {"shape": (1,), "typestr": "<u4", "data": None, "version": 3}
        )

    both = Both(8)
    assert StridedMemoryView(both).shape == (1,)  # the interface, not the 8-byte buffer

    class WithCai(Both):
        __cuda_array_interface__ = property(
            lambda self: {"shape": (5,), "typestr": "<f4", "data": (0x1000, False), "version": 3}
        )

    assert StridedMemoryView(WithCai(8), stream_ptr=-1).shape == (5,)


def test_numpy_arrays_still_go_through_dlpack():
    """A numpy array is viewed through DLPack first: its array interface is never read."""

    class NoInterface(np.ndarray):
        @property
        def __array_interface__(self):
            raise AssertionError("the array interface must not be read")

    source = np.arange(6.0).view(NoInterface)
    assert StridedMemoryView(source).ptr == source.ctypes.data


ARRAY_INTERFACE_ERRORS = [
    ("not-dict", dict(replace=[1]), TypeError, "array interface: __array_interface__ must be a dict (got "),
    ("version-missing", dict(version=...), BufferError, "array interface: 'version' is missing"),
    ("version-2", dict(version=2), BufferError, "array interface: 'version' must be 3 (got 2)"),
    ("typestr-0", dict(typestr="|V0"), BufferError, "array interface: 'typestr' '|V0' has item size 0"),
    ("big-endian", dict(typestr=">f4"), BufferError, "array interface: 'typestr' '>f4' is not native-endian"),
    ("mask", dict(mask=np.zeros(3)), BufferError, "array interface: masked arrays are not supported ('mask' is "),
    ("offset-float", dict(offset=1.5), TypeError, "array interface: 'offset' must be an int (got "),
    ("data-list", dict(data=[1, 2]), TypeError, "array interface: 'data' must be a (ptr, readonly) tuple or an object with the buffer protocol (got "),
    ("data-3-tuple", dict(data=(1, 2, 3)), TypeError, "array interface: 'data' must be a (ptr, readonly) tuple (got "),
    ("ptr-float", dict(data=(1.5, False)), TypeError, "array interface: 'data' pointer must be an int (got 1.5)"),
    ("ptr-negative", dict(data=(-8, False)), BufferError, "array interface: 'data' pointer must be an address >= 0 (got -8)"),
    ("ptr-0", dict(data=(0, False)), BufferError, "array interface: 'data' pointer is 0 for a non-empty array (shape (3,))"),
    ("readonly-str", dict(data=(0x1000, "no")), TypeError, "array interface: 'data' readonly flag must be a bool (got 'no')"),
    ("offset-with-tuple", dict(offset=8), BufferError, "array interface: 'offset' applies to a buffer 'data' only (got offset 8 with a (ptr, readonly) tuple)"),
    ("outside-buffer", dict(data=bytearray(8)), BufferError, "array interface: the array (bytes 0 to 12 of its buffer) does not lie inside the buffer's 8 bytes"),
    ("strides-odd", dict(strides=(3,)), BufferError, "array interface: 'strides' (3,) are not multiples of the item size 4"),
    ("shape-missing", dict(shape=...), BufferError, "array interface: 'shape' is missing"),
]


@pytest.mark.parametrize("changes, kind, message", [pytest.param(*e[1:], id=e[0]) for e in ARRAY_INTERFACE_ERRORS])
def test_array_interface_refusals(changes, kind, message):
    """A malformed array interface is refused with the documented type and message."""
    replace = changes.pop("replace", None)
    interface = {"shape": (3,), "typestr": "<f4", "data": (0x1000, False), "version": 3}
    for key, value in changes.items():
        if value is ...:
            interface.pop(key)
        else:
            interface[key] = value
    obj = HasArrayInterface(**interface)
    if replace is not None:
        obj.__array_interface__ = replace
    with pytest.raises(kind, match="^" + re.escape(message)) as info:
        StridedMemoryView.from_array_interface(obj)
    assert type(info.value) is kind


def test_from_array_interface_without_the_attribute():
    """from_array_interface on an object without __array_interface__ names its type."""
    with pytest.raises(BufferError, match=re.escape("array interface: no __array_interface__ on a 'bytes' object")):
        StridedMemoryView.from_array_interface(b"ab")


@pytest.mark.gpu
def test_array_interface_matches_cuda_core_from_array_interface():
    """cuda.core's from_array_interface (the oracle; it needs a driver even for numpy) agrees."""
    utils = pytest.importorskip("cuda.core.utils")
    source = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    theirs = utils.StridedMemoryView.from_array_interface(source)
    ours = StridedMemoryView.from_array_interface(source)
    assert (ours.ptr, ours.shape, ours.strides, ours.dtype) == (
        theirs.ptr, theirs.shape, theirs.strides, theirs.dtype
    )


# --- from_any_interface --------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [np.arange(6.0).reshape(2, 3), bytearray(b"abc"), HasArrayInterface(np.zeros((2, 2)))],
    ids=["numpy", "bytearray", "array-interface"],
)
def test_from_any_interface_is_the_constructor(obj):
    """from_any_interface gives the constructor's view (cuda.core's name for it)."""
    ours = StridedMemoryView.from_any_interface(obj, stream_ptr=-1)
    plain = StridedMemoryView(obj, stream_ptr=-1)
    assert (ours.ptr, ours.shape, ours.strides, ours.dtype, ours.readonly) == (
        plain.ptr, plain.shape, plain.strides, plain.dtype, plain.readonly
    )
    assert ours.exporting_obj is obj


def test_from_any_interface_refuses_like_the_constructor():
    """from_any_interface refuses an object with no protocol with the constructor's error."""
    with pytest.raises(BufferError, match="^" + re.escape("stridedview: 'list' object supports none of ")):
        StridedMemoryView.from_any_interface([1, 2])


# --- from_buffer ---------------------------------------------------------------------------


class DuckBuffer:
    """An object with cuda.core's Buffer attributes over some memory."""

    def __init__(self, ptr, size, *, device=False, device_id=-1, host=True, managed=False):
        self.handle = ptr
        self.size = size
        self.is_device_accessible = device
        self.is_host_accessible = host
        self.is_managed = managed
        self.device_id = device_id


def test_from_buffer_over_duck_host_buffer():
    """from_buffer lays a shape/strides/dtype over a Buffer's bytes: element [0] is its first byte."""
    backing = np.arange(10, dtype=np.float32)
    buffer = DuckBuffer(backing.ctypes.data, backing.nbytes)
    view = StridedMemoryView.from_buffer(buffer, (5,), (2,), dtype=np.float32)
    assert_host_view_matches(view, backing[::2], buffer, readonly=False)
    view = StridedMemoryView.from_buffer(buffer, (2, 5), dtype="float32", is_readonly=True)
    assert_host_view_matches(view, backing.reshape(2, 5), buffer, readonly=True)


@pytest.mark.parametrize(
    "kind, expected_device",
    [("device", (2, 3)), ("pinned", (3, 0)), ("managed", (13, 0))],
)
def test_from_buffer_over_device_buffers(kind, expected_device):
    """A device, pinned or managed Buffer gives a device-accessible view, with no driver call."""
    flags = {
        "device": dict(device=True, device_id=3, host=False),
        "pinned": dict(device=True, device_id=-1, host=True),
        "managed": dict(device=True, device_id=0, host=True, managed=True),
    }[kind]
    buffer = DuckBuffer(0x10000, 4096, **flags)
    view = StridedMemoryView.from_buffer(buffer, (16, 16), dtype=np.float32)
    assert view.__dlpack_device__() == expected_device
    assert view.is_device_accessible is True
    assert view.ptr == 0x10000
    assert view.__cuda_array_interface__["shape"] == (16, 16)
    assert view.ready_stream is None


@pytest.fixture
def host_resource():
    """A cuda.core MemoryResource handing out host memory: real Buffers with no driver."""
    core = pytest.importorskip("cuda.core")

    class HostResource(core.MemoryResource):
        def __init__(self):
            self.blocks = {}

        def allocate(self, size, *, stream=None):
            block = np.zeros(max(size, 1), np.uint8)
            self.blocks[block.ctypes.data] = block
            return core.Buffer.from_handle(block.ctypes.data, size, mr=self)

        def deallocate(self, ptr, size, *, stream=None):
            self.blocks.pop(int(ptr), None)

        is_device_accessible = property(lambda self: False)
        is_host_accessible = property(lambda self: True)
        is_managed = property(lambda self: False)
        device_id = property(lambda self: -1)

    return HostResource()


def _dense_strides(shape, order):
    strides, step = [0] * len(shape), 1
    for axis in (reversed(range(len(shape))) if order == "C" else range(len(shape))):
        strides[axis] = step
        step *= shape[axis]
    return tuple(strides)


@pytest.mark.parametrize("shape", [(), (2, 3), (10, 10), (10, 13, 11)])
@pytest.mark.parametrize("itemsize", [1, 4])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("readonly", [True, False])
def test_from_buffer_dense_layouts_over_a_cuda_core_buffer(host_resource, shape, itemsize, order, readonly):
    """Dense C and F layouts over a Buffer of exactly their size give the layout asked (cuda.core's cases)."""
    buffer = host_resource.allocate(int(np.prod(shape)) * itemsize)
    strides = _dense_strides(shape, order)
    view = StridedMemoryView.from_buffer(buffer, shape, strides, itemsize=itemsize, is_readonly=readonly)
    assert view.exporting_obj is buffer
    assert view.ptr == int(buffer.handle)
    assert (view.shape, view.strides, view.itemsize) == (shape, strides, itemsize)
    assert (view.device_id, view.is_device_accessible, view.readonly) == (-1, False, readonly)
    with pytest.raises(ValueError, match=re.escape("buffer: the layout needs ")):
        StridedMemoryView.from_buffer(buffer, (int(np.prod(shape)) + 1,), itemsize=itemsize)


def test_from_buffer_itemsize_alone_cannot_be_exported():
    """Opaque elements (itemsize without dtype) have no DLPack type: __dlpack__ refuses, naming the dtype."""
    view = StridedMemoryView.from_buffer(DuckBuffer(0x1000, 16), (16,), itemsize=1)
    with pytest.raises(BufferError, match=re.escape("dlpack: dtype |V1 has no DLPack equivalent")):
        view.__dlpack__()


def test_from_buffer_with_a_real_cuda_core_buffer(host_resource):
    """A real cuda.core Buffer (host memory from a host-only resource, no driver) is viewed."""
    resource = host_resource
    buffer = resource.allocate(48)
    ours = StridedMemoryView.from_buffer(buffer, (3, 4), dtype=np.dtype(np.int32))
    theirs = pytest.importorskip("cuda.core.utils").StridedMemoryView.from_buffer(
        buffer, (3, 4), dtype=np.dtype(np.int32)
    )
    assert (ours.ptr, ours.shape, ours.dtype, ours.device_id, ours.readonly) == (
        theirs.ptr, theirs.shape, theirs.dtype, theirs.device_id, theirs.readonly
    )
    assert ours.strides == (4, 1)
    assert ours.exporting_obj is buffer
    np.from_dlpack(ours)[:] = 7
    assert resource.blocks[int(buffer.handle)].view(np.int32).tolist() == [7] * 12
    with pytest.raises(ValueError):
        theirs.from_buffer(buffer, (13,), dtype=np.dtype(np.int32))
    with pytest.raises(ValueError, match=re.escape("buffer: the layout needs 52 bytes, the buffer has 48")):
        StridedMemoryView.from_buffer(buffer, (13,), dtype=np.int32)


@pytest.mark.gpu
def test_from_buffer_with_device_memory_from_cuda_core():
    """A cuda.core device allocation is viewed on its device, and the layout checked against its size."""
    core = pytest.importorskip("cuda.core")
    device = core.Device()
    device.set_current()
    buffer = device.memory_resource.allocate(64, stream=device.default_stream)
    view = StridedMemoryView.from_buffer(buffer, (4, 4), dtype=np.float32)
    assert view.device_id == device.device_id
    assert view.ptr == int(buffer.handle)
    with pytest.raises(ValueError, match=re.escape("buffer: the layout needs 68 bytes, the buffer has 64")):
        StridedMemoryView.from_buffer(buffer, (17,), dtype=np.float32)


def test_from_buffer_shape_none_takes_the_buffers_own_layout():
    """shape=None keeps a buffer's own shape, strides and type; another item size reads flat bytes."""
    grid = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    own = StridedMemoryView.from_buffer(memoryview(grid))
    assert (own.shape, own.strides, own.dtype) == ((3, 2), (4, 2), np.int16)
    flat = StridedMemoryView.from_buffer(bytearray(12), dtype=np.float32)
    assert (flat.shape, flat.strides, flat.dtype) == ((3,), (1,), np.float32)
    relabelled = StridedMemoryView.from_buffer(array.array("i", [1, 2]), dtype=np.uint32)
    assert (relabelled.shape, relabelled.dtype) == ((2,), np.uint32)
    duck = StridedMemoryView.from_buffer(DuckBuffer(0x2000, 64), itemsize=8)
    assert (duck.shape, duck.dtype) == ((8,), np.dtype("V8"))


def test_from_buffer_layouts_against_numpy():
    """Every layout from_buffer accepts addresses exactly numpy's ndarray over the same bytes."""
    data = bytearray(range(96))
    for shape, strides in [((4, 3), None), ((2, 3), (6, 1)), ((3,), (0,)), ((0, 5), (100, 1)), ((), ())]:
        view = StridedMemoryView.from_buffer(data, shape, strides, dtype=np.int32)
        byte_strides = None if strides is None else tuple(s * 4 for s in strides)
        expected = np.ndarray(shape, np.int32, buffer=data, strides=byte_strides)
        assert_host_view_matches(view, expected, data, readonly=False)
        np.testing.assert_array_equal(np.from_dlpack(view), expected)


def test_from_buffer_readonly():
    """A read-only buffer always gives a read-only view; is_readonly marks a writable one read-only."""
    assert StridedMemoryView.from_buffer(b"abcd", (4,)).readonly is True
    assert StridedMemoryView.from_buffer(bytearray(4), (4,)).readonly is False
    assert StridedMemoryView.from_buffer(bytearray(4), (4,), is_readonly=True).readonly is True


FROM_BUFFER_ERRORS = [
    ("not-a-buffer", ([1, 2], (2,)), {}, TypeError, "buffer: from_buffer needs a cuda.core Buffer or an object with the buffer protocol (got "),
    ("too-small", (bytearray(40), (11,)), dict(dtype=np.float32), ValueError, "buffer: the layout needs 44 bytes, the buffer has 40 (shape (11,), strides (1,), itemsize 4)"),
    ("strided-too-small", (bytearray(40), (6,), (2,)), dict(dtype=np.float32), ValueError, "buffer: the layout needs 44 bytes, the buffer has 40"),
    ("negative-stride", (bytearray(40), (5,), (-2,)), dict(dtype=np.float32), ValueError, "buffer: the layout reaches 32 bytes before the buffer's start"),
    ("itemsize-dtype", (bytearray(40), (5,)), dict(dtype=np.float64, itemsize=4), ValueError, "buffer: itemsize 4 differs from dtype float64's 8"),
    ("itemsize-zero", (bytearray(40), (5,)), dict(itemsize=0), ValueError, "buffer: itemsize must be > 0 (got 0)"),
    ("itemsize-float", (bytearray(40), (5,)), dict(itemsize=4.0), TypeError, "buffer: itemsize must be an int (got "),
    ("dtype-bad", (bytearray(40), (5,)), dict(dtype="nope"), TypeError, "buffer: dtype must be a numpy dtype (got 'nope'"),
    ("dtype-object", (bytearray(40), (5,)), dict(dtype=object), ValueError, "buffer: dtype object cannot describe raw memory"),
    ("duck-no-dtype", (DuckBuffer(0x1000, 8), (2,)), {}, ValueError, "buffer: a cuda.core Buffer needs dtype or itemsize"),
    ("duck-size", (DuckBuffer(0x1000, -1), (2,)), dict(itemsize=1), TypeError, "buffer: Buffer.size must be an int >= 0 (got "),
    ("duck-handle", (DuckBuffer(-5, 8), (2,)), dict(itemsize=1), BufferError, "buffer: Buffer.handle must be an address >= 0 (got -5)"),
    ("duck-device-id", (DuckBuffer(0x1000, 8, device=True, host=False, device_id=-1), (2,)), dict(itemsize=1), BufferError, "buffer: a device-accessible Buffer must have a device_id >= 0 (got -1)"),
    ("strides-no-shape", (bytearray(8), None, (1,)), {}, ValueError, "buffer: strides were given without a shape"),
    ("flat-remainder", (bytearray(10), None), dict(dtype=np.float32), ValueError, "buffer: the buffer's 10 bytes are not a whole number of 4-byte elements"),
    ("flat-non-contiguous", (memoryview(np.zeros(8, np.uint8))[::2], None), dict(dtype=np.uint16), ValueError, "buffer: a non-contiguous buffer keeps its own item size (got itemsize 2, the buffer's is 1)"),
    ("shape-non-contiguous", (memoryview(np.zeros(8, np.uint8))[::2], (2,)), {}, ValueError, "buffer: a shape can only be laid over a contiguous buffer (its bytes in one run)"),
    ("shape-str", (bytearray(8), "8"), {}, TypeError, "buffer: shape must be a tuple of ints (got "),
    ("shape-negative", (bytearray(8), (-1,)), {}, ValueError, "buffer: shape extents must be from 0 to 2**63 - 1 (got (-1,))"),
    ("shape-65", (bytearray(8), (1,) * 65), {}, ValueError, "buffer: shape has 65 dimensions, more than 64"),
    ("count-overflow", (bytearray(8), (2**32, 2**32)), {}, ValueError, "buffer: element count overflows int64 (shape "),
    ("strides-length", (bytearray(8), (2,), (1, 1)), {}, ValueError, "buffer: strides (1, 1) and shape (2,) differ in length"),
    ("strides-past-int64", (bytearray(8), (1,), (2**63,)), {}, ValueError, "buffer: strides must fit in int64 (got "),
]


@pytest.mark.parametrize("args, kwargs, kind, message", [pytest.param(*e[1:], id=e[0]) for e in FROM_BUFFER_ERRORS])
def test_from_buffer_refusals(args, kwargs, kind, message):
    """A layout that does not fit, or a malformed argument, is refused with the byte counts or value."""
    with pytest.raises(kind, match="^" + re.escape(message)) as info:
        StridedMemoryView.from_buffer(*args, **kwargs)
    assert type(info.value) is kind


@pytest.mark.slow
def test_from_buffer_holds_and_releases_the_buffer():
    """from_buffer holds a buffer-protocol object's buffer for the view's life, and only then."""
    data = bytearray(16)
    view = StridedMemoryView.from_buffer(data, (4,), dtype=np.float32)
    with pytest.raises(BufferError):
        data.extend(b"x")
    del view
    gc.collect()
    data.extend(b"x")
    with pytest.raises(ValueError):
        StridedMemoryView.from_buffer(data, (40,), dtype=np.float32)
    data.extend(b"y")  # a refused layout released the buffer at once


# --- from_buffer against numpy on random layouts ----------------------------------------------

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def buffer_layouts(draw):
    """(nbytes, shape, element strides, itemsize): any small layout, fitting its buffer or not."""
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(-6, 6), min_size=ndim, max_size=ndim)))
    itemsize = draw(st.sampled_from([1, 2, 4, 8]))
    nbytes = draw(st.integers(0, 160))
    return nbytes, shape, strides, itemsize


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(buffer_layouts())
@example((0, (4, 5, 5), (6, 6, 6), 8))  # found by hypothesis: past a 512-byte margin
@example((0, (5, 5, 5, 5), (6, 6, 6, 6), 8))  # the widest spans above and below
@example((0, (5, 5, 5, 5), (-6, -6, -6, -6), 8))
def test_from_buffer_accepts_exactly_the_layouts_inside_the_buffer(layout):
    """from_buffer accepts a layout iff numpy's byte bounds of it lie in the buffer, then reads numpy's elements."""
    nbytes, shape, strides, itemsize = layout
    dtype = np.dtype(f"u{itemsize}")
    byte_strides = tuple(s * itemsize for s in strides)
    # Room on both sides, so that numpy can build any of these layouts: up to 4 axes of
    # 4 steps of 6 elements of 8 bytes (768 bytes) and an element, each way.
    margin = 1024
    base = np.arange(nbytes + 2 * margin, dtype=np.uint8)
    probe = np.ndarray(shape, dtype, buffer=base, offset=margin, strides=byte_strides)
    low, high = np.lib.array_utils.byte_bounds(probe)
    start = base.ctypes.data + margin
    fits = probe.size == 0 or (low >= start and high <= start + nbytes)
    data = bytearray(base[margin : margin + nbytes].tobytes())
    if not fits:
        with pytest.raises(ValueError, match=r"^buffer: the layout (needs|reaches) "):
            StridedMemoryView.from_buffer(data, shape, strides, dtype=dtype)
        return
    view = StridedMemoryView.from_buffer(data, shape, strides, dtype=dtype)
    expected_strides = strides if probe.size else (0,) * len(shape)  # an empty view's are 0
    assert (view.shape, view.strides, view.dtype) == (shape, expected_strides, dtype)
    if probe.size:
        expected = np.ndarray(shape, dtype, buffer=data, strides=byte_strides)
        np.testing.assert_array_equal(np.from_dlpack(view), expected)
