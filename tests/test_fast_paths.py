"""Every fast path gives exactly the view the general path gives.

The fast paths: a producer type's DLPack C exchange API (torch), numpy arrays read
through their own layout (no ``__dlpack__`` call, no capsule), interned shape/stride
tuples.  The general path
(``__dlpack_device__`` then ``__dlpack__``, a capsule, fresh tuples) is reached with
``stridedview._view._set_fast_paths_enabled(False)``.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridedview import StridedMemoryView, _view
from producers import KINDS, from_numpy, make_producer

FIELDS = ("ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly")


@contextlib.contextmanager
def general_path():
    """Within the block every view takes the general path."""
    _view._set_fast_paths_enabled(False)
    try:
        yield
    finally:
        _view._set_fast_paths_enabled(True)


def fields_of(view):
    return {name: getattr(view, name) for name in FIELDS} | {
        "exporting_obj": view.exporting_obj,
        "ready_stream": view.ready_stream,
    }


def assert_same_view_both_ways(obj, stream_ptr=None):
    """The fast and the general path agree on every field of ``obj``'s view."""
    fast = StridedMemoryView(obj, stream_ptr)
    with general_path():
        general = StridedMemoryView(obj, stream_ptr)
    fast_fields, general_fields = fields_of(fast), fields_of(general)
    if fast_fields != general_fields:
        raise AssertionError(f"fast {fast_fields!r} != general {general_fields!r}")
    if repr(fast) != repr(general):
        raise AssertionError(f"{fast!r} != {general!r}")


def numpy_layouts():
    base = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    return {
        "c": base,
        "f": np.asfortranarray(base),
        "slice": base[1:, ::2, 1::3],
        "negative": base[::-1, :, ::-2],
        "zero-stride": np.broadcast_to(np.arange(6.0), (3, 6)),
        "0-d": np.array(2.5),
        "empty": np.empty((0, 3)),
        "readonly": np.frombuffer(b"\x01\x02\x03\x04", dtype=np.uint8),
        "bool": np.array([True, False]),
        "complex": np.arange(4, dtype=np.complex128),
        "9-d": np.zeros((1, 2, 1, 2, 1, 2, 1, 2, 1)),
    }


@pytest.mark.parametrize("name", list(numpy_layouts()))
def test_numpy_fast_path_matches_general_path(name):
    """A numpy array's view (no __dlpack_device__ call) equals the general path's."""
    assert_same_view_both_ways(numpy_layouts()[name])


def test_numpy_subclass_overriding_dlpack_device_is_asked():
    """A numpy subclass that overrides __dlpack_device__ is asked, not assumed host."""
    calls = []

    class Asked(np.ndarray):
        def __dlpack_device__(self):
            calls.append("device")
            return super().__dlpack_device__()

    array = np.arange(6.0).view(Asked)
    StridedMemoryView(array)
    if calls != ["device"]:
        raise AssertionError(calls)


def outcome(obj, stream_ptr=None):
    """The fields of ``obj``'s view, or the type and message of the exception it raises."""
    try:
        view = StridedMemoryView(obj, stream_ptr)
    except Exception as exc:  # noqa: BLE001 - any refusal is compared
        return ("raised", type(exc), str(exc))
    return ("view", fields_of(view), repr(view))


def assert_same_outcome_both_ways(obj):
    """The fast and the general path give the same view, or refuse with the same error."""
    fast = outcome(obj)
    with general_path():
        general = outcome(obj)
    if fast != general:
        raise AssertionError(f"fast {fast!r} != general {general!r}")
    return fast


# --- numpy: the adapter reading the array's own layout ---------------------------

class Plain(np.ndarray):
    """A numpy subclass keeping ndarray's DLPack methods (the adapter reads it)."""

    def __array_finalize__(self, obj):
        self.note = getattr(obj, "note", None)


class OwnDevice(np.ndarray):
    """A numpy subclass with its own __dlpack_device__ (the general path only)."""

    def __dlpack_device__(self):
        return super().__dlpack_device__()


#: What numpy exports, refuses or maps: every built-in numeric type name (long and
#: longlong are distinct type numbers of one size), swapped byte order, padded and
#: non-numeric types, structured and metadata-carrying dtypes.
NUMPY_DTYPES = [
    "?", "b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "F", "D",
    "g", "G", ">f4", "<f4", ">i2", "<u8", "=i4", "|u1", "M8[s]", "m8[ns]", "O", "U3", "S2",
    "V4", [("a", "<i4")], np.dtype("f4", metadata={"unit": "m"}),
]


def numpy_dtypes():
    import ml_dtypes  # a dependency of stridedview: numpy cannot export its dtypes

    return [np.dtype(d) for d in NUMPY_DTYPES] + [
        np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)
    ]


@st.composite
def numpy_arrays(draw):
    """Arrays of every dtype above in every layout: sliced (negative steps too),
    transposed, broadcast (zero strides), 0-d, empty, read-only, strides that are
    not a multiple of the item size, subclasses."""
    dtype = draw(st.sampled_from(numpy_dtypes()))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    base = np.zeros(shape, dtype=dtype)
    if draw(st.booleans()) and base.ndim:
        steps = draw(st.lists(st.sampled_from([1, 2, -1, -2, 3]), min_size=base.ndim,
                              max_size=base.ndim))
        base = base[tuple(slice(None, None, step) for step in steps)]
    if draw(st.booleans()) and base.ndim > 1:
        base = base.transpose(draw(st.permutations(range(base.ndim))))
    if draw(st.booleans()):
        base = np.broadcast_to(base, (2, *base.shape))  # read-only, a zero stride
    if draw(st.booleans()) and base.itemsize > 1 and dtype.fields is None:
        # Packed after a one-byte field: byte strides not a multiple of the item size.
        packed = np.zeros(base.shape, dtype=[("pad", "u1"), ("x", dtype)])
        base = packed["x"]
    if draw(st.booleans()) and base.flags.writeable:
        base.flags.writeable = False
    kind = draw(st.sampled_from(["ndarray", "plain", "own-device", "instance-attr"]))
    if kind == "plain":
        base = base.view(Plain)
    elif kind == "own-device":
        base = base.view(OwnDevice)
    elif kind == "instance-attr":
        base = base.view(Plain)
        base.__dlpack_device__ = lambda: (1, 0)
    return base


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array=numpy_arrays())
def test_numpy_adapter_matches_general_path(array):
    """Any numpy array: the adapter's view equals the capsule path's, or both refuse alike."""
    assert_same_outcome_both_ways(array)


@pytest.mark.parametrize("dtype", numpy_dtypes(), ids=str)
def test_numpy_adapter_matches_general_path_for_each_dtype(dtype):
    """Every dtype, in a strided 2-D layout: the same view or the same refusal both ways."""
    assert_same_outcome_both_ways(np.zeros((3, 4), dtype=dtype)[::-1, ::2])


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.array(2.5),
        lambda: np.zeros((0, 3)),
        lambda: np.zeros((3, 0), dtype=np.int8)[::-1],
        lambda: np.zeros(4, dtype=[("pad", "u1"), ("x", "<f4")])["x"][:1],
        lambda: np.zeros((1, 4), dtype=[("pad", "u1"), ("x", "<f4")])["x"][:, :1],
        lambda: np.lib.stride_tricks.as_strided(np.zeros(8, np.int32), (1, 2), (6, 4)),
        lambda: np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
    ],
    ids=["0-d", "empty", "empty-reversed", "one-element-odd-stride", "extent-1-odd-stride",
         "c-contiguous-odd-stride", "masked"],
)
def test_numpy_adapter_edge_layouts(make):
    """numpy's own stride rule (extent-1 axes, one-element and C-contiguous arrays are not
    checked) and subclasses: the adapter answers exactly as the capsule path."""
    assert_same_outcome_both_ways(make())


def test_numpy_adapter_takes_no_capsule():
    """The adapter holds the array once (exporting_obj); a capsule would hold it twice."""
    array = np.arange(6.0).reshape(2, 3)
    before = sys.getrefcount(array)
    fast = StridedMemoryView(array)
    fast_refs = sys.getrefcount(array) - before
    with general_path():
        general = StridedMemoryView(array)
    general_refs = sys.getrefcount(array) - before - fast_refs
    if (fast_refs, general_refs) != (1, 2):
        raise AssertionError((fast_refs, general_refs))
    del fast, general
    if sys.getrefcount(array) != before:
        raise AssertionError("a view leaked a reference to its array")


def test_numpy_array_imported_from_pinned_memory_keeps_its_device():
    """A numpy array numpy imported from CUDAHost memory is viewed as device-accessible.

    numpy's __dlpack_device__ reports the device of memory it imported through DLPack;
    the fast path must not take every ndarray for CPU memory.
    """
    producer = make_producer("versioned", device=(3, 0), hold_capsules=False)
    array = np.from_dlpack(producer)
    if array.__dlpack_device__() != (3, 0):
        pytest.fail(f"numpy no longer reports the imported device: {array.__dlpack_device__()}")
    view = StridedMemoryView(array)
    if (view.device_id, view.is_device_accessible) != (0, True):
        raise AssertionError((view.device_id, view.is_device_accessible))
    assert_same_view_both_ways(array)


def test_interned_tuples_are_equal_and_shared_safely():
    """Views of one layout may share shape tuples; their values never mix."""
    first = StridedMemoryView(np.zeros((3, 4), dtype=np.float32))
    second = StridedMemoryView(np.zeros((3, 4), dtype=np.float32))
    other = StridedMemoryView(np.zeros((4, 3), dtype=np.float32))
    if first.shape != (3, 4) or second.shape != (3, 4) or other.shape != (4, 3):
        raise AssertionError((first.shape, second.shape, other.shape))
    if first.strides != (4, 1) or other.strides != (3, 1):
        raise AssertionError((first.strides, other.strides))


def test_interned_tuples_survive_many_layouts():
    """Cycling through more layouts than the cache holds gives exact tuples every time."""
    arrays = [np.zeros((i % 7 + 1, i % 5 + 1, i % 3 + 1)) for i in range(300)]
    for array in arrays:
        view = StridedMemoryView(array)
        want = tuple(s // array.itemsize for s in array.strides)
        if view.shape != array.shape or view.strides != want:
            raise AssertionError((view.shape, array.shape, view.strides, want))


@pytest.mark.parametrize("kind", KINDS)
def test_ctypes_producer_takes_the_general_path_either_way(kind):
    """A producer with no fast path gives the same view with fast paths on and off."""
    base = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    producer = from_numpy(kind, base)
    fast = StridedMemoryView(producer)
    with general_path():
        general = StridedMemoryView(producer)
    if fields_of(fast) != fields_of(general):
        raise AssertionError((fields_of(fast), fields_of(general)))


# --- torch: the DLPack C exchange API ---------------------------------------------

torch_cases = {
    "float32": lambda torch: torch.arange(12.0).reshape(3, 4),
    "transposed": lambda torch: torch.arange(12.0).reshape(3, 4).T,
    "sliced": lambda torch: torch.arange(24.0).reshape(4, 6)[1:, ::2],
    "storage-offset": lambda torch: torch.arange(10, dtype=torch.int32)[3:],
    "expanded": lambda torch: torch.arange(4.0).expand(3, 4),
    "0-d": lambda torch: torch.tensor(1.5),
    "empty": lambda torch: torch.zeros(0, 3),
    "bfloat16": lambda torch: torch.arange(6, dtype=torch.bfloat16),
    "float8_e4m3fn": lambda torch: torch.zeros(4, dtype=torch.float8_e4m3fn),
    "bool": lambda torch: torch.tensor([True, False]),
    "complex64": lambda torch: torch.arange(4.0).to(torch.complex64),
    "requires-grad": lambda torch: torch.ones(3, requires_grad=True),
}


@pytest.mark.interop
@pytest.mark.parametrize("name", list(torch_cases))
def test_torch_exchange_api_matches_dlpack(name):
    """torch's exchange-API view equals its __dlpack__ view, field by field."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.fail("torch 2.13 exposes __dlpack_c_exchange_api__; this one does not")
    assert_same_view_both_ways(torch_cases[name](torch))


@pytest.mark.interop
@pytest.mark.parametrize("fast", [True, False], ids=["exchange-api", "dlpack"])
@pytest.mark.parametrize(
    "make, bit",
    [
        (lambda torch: torch._neg_view(torch.arange(3.0)), "negative"),
        (lambda torch: torch.arange(3.0).to(torch.complex64).conj(), "conjugate"),
        (lambda torch: torch.arange(3.0).to(torch.complex64).conj().imag, "negative"),
    ],
    ids=["neg-view", "conj", "conj-imag"],
)
def test_torch_lazy_bits_refused_on_both_paths(make, bit, fast):
    """A torch tensor whose memory does not hold its values is refused by both paths."""
    torch = pytest.importorskip("torch")
    tensor = make(torch)
    context = contextlib.nullcontext() if fast else general_path()
    with context, pytest.raises(BufferError, match=f"^dlpack: the torch tensor has its {bit} bit set"):
        StridedMemoryView(tensor)


@pytest.mark.interop
def test_torch_resolved_bits_are_viewed():
    """Once resolved, the same tensors are viewed, with memory holding their values."""
    torch = pytest.importorskip("torch")
    tensor = torch._neg_view(torch.arange(3.0)).resolve_neg()
    view = StridedMemoryView(tensor)
    values = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 3).from_address(view.ptr))
    if values.tolist() != [-0.0, -1.0, -2.0]:
        raise AssertionError(values.tolist())


@pytest.mark.interop
def test_torch_exchange_api_keeps_tensor_alive_and_borrows_nothing():
    """The exchange path holds the tensor (the borrowed DLTensor lives as long)."""
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6.0)
    before = sys.getrefcount(tensor)
    view = StridedMemoryView(tensor)
    if sys.getrefcount(tensor) != before + 1:
        raise AssertionError((before, sys.getrefcount(tensor)))
    del view
    if sys.getrefcount(tensor) != before:
        raise AssertionError((before, sys.getrefcount(tensor)))


@pytest.mark.interop
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_general_path_is_the_only_path(dtype):
    """jax has no fast path: its views agree with fast paths on and off."""
    jnp = pytest.importorskip("jax.numpy")
    assert_same_view_both_ways(jnp.arange(6, dtype=dtype).reshape(2, 3))


@pytest.mark.interop
def test_array_api_strict_views_agree():
    """array-api-strict arrays give the same view with fast paths on and off."""
    xp = pytest.importorskip("array_api_strict")
    assert_same_view_both_ways(xp.reshape(xp.arange(6, dtype=xp.float64), (2, 3)))
