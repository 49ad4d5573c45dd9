"""Every fast path gives exactly the view the general path gives.

The fast paths: a producer type's DLPack C exchange API (torch), numpy arrays read
through their own layout (no ``__dlpack__`` call, no capsule), interned shape/stride
tuples.  The general path
(``__dlpack_device__`` then ``__dlpack__``, a capsule, fresh tuples) is reached with
``stridedview._view._set_fast_paths_enabled(False)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridedview import StridedMemoryView, _view
import producers
from numpy_export import NUMPY_REWRITES_DEGENERATE_STRIDES, addressing_strides
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


def fields_of(view, skip=()):
    fields = {name: getattr(view, name) for name in FIELDS if name not in skip} | {
        "exporting_obj": view.exporting_obj,
        "ready_stream": view.ready_stream,
    }
    fields["strides"] = addressing_strides(view.shape, view.strides)  # numpy_export.py
    return fields


def assert_same_view_both_ways(obj, stream_ptr=None):
    """The fast and the general path agree on every field of ``obj``'s view."""
    fast = StridedMemoryView(obj, stream_ptr)
    with general_path():
        general = StridedMemoryView(obj, stream_ptr)
    fast_fields, general_fields = fields_of(fast), fields_of(general)
    if fast_fields != general_fields:
        raise AssertionError(f"fast {fast_fields!r} != general {general_fields!r}")
    if repr(fast) != repr(general) and not NUMPY_REWRITES_DEGENERATE_STRIDES:  # reprs show strides
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
    # The repr shows the strides: compared only where numpy exports the array's own.
    return ("view", fields_of(view), None if NUMPY_REWRITES_DEGENERATE_STRIDES else repr(view))


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


@pytest.mark.slow
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
        # Byte offsets past int64 (numpy's as_strided allows them): refused both ways.
        lambda: np.lib.stride_tricks.as_strided(np.zeros(2), (3,), (2**62,)),
        lambda: np.lib.stride_tricks.as_strided(np.zeros(2), (2, 3), (8, 2**62)),
        # C-contiguous, a huge stride on an axis that never steps: viewed both ways.
        lambda: np.lib.stride_tricks.as_strided(np.zeros(4), (1, 4), (2**62, 8)),
    ],
    ids=["0-d", "empty", "empty-reversed", "one-element-odd-stride", "extent-1-odd-stride",
         "c-contiguous-odd-stride", "masked", "offsets-past-int64",
         "offsets-past-int64-2d", "c-contiguous-huge-extent-1-stride"],
)
def test_numpy_adapter_edge_layouts(make):
    """numpy's own stride rule (extent-1 axes, one-element and C-contiguous arrays are not
    checked), byte offsets past int64 (the adapter checks them for any array that is not
    C-contiguous) and subclasses: the adapter answers exactly as the capsule path."""
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


@pytest.mark.torch
@pytest.mark.interop
@pytest.mark.parametrize("name", list(torch_cases))
def test_torch_exchange_api_matches_dlpack(name):
    """torch's exchange-API view equals its __dlpack__ view, field by field."""
    torch = pytest.importorskip("torch")
    assert_same_view_both_ways(torch_cases[name](torch))


@pytest.mark.torch
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


@pytest.mark.torch
@pytest.mark.interop
def test_torch_resolved_bits_are_viewed():
    """Once resolved, the same tensors are viewed, with memory holding their values."""
    torch = pytest.importorskip("torch")
    tensor = torch._neg_view(torch.arange(3.0)).resolve_neg()
    view = StridedMemoryView(tensor)
    values = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * 3).from_address(view.ptr))
    if values.tolist() != [-0.0, -1.0, -2.0]:
        raise AssertionError(values.tolist())


@pytest.mark.torch
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


@pytest.mark.jax
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


# --- the exchange API: trusted only as DLPack 1.3 defines it -------------------------------

_FAILING_CALLS = []


@producers.DLTensorFromPyObject
def _fail_without_error(address, out):
    _FAILING_CALLS.append(address)
    return -1


class SilentFailure:
    """A producer whose exchange API fails without setting a Python exception."""

    _table, __dlpack_c_exchange_api__ = producers.exchange_api(_fail_without_error)

    def __dlpack__(self, **kwargs):
        raise AssertionError("__dlpack__ called: the exchange API was not used")

    def __dlpack_device__(self):
        raise AssertionError("__dlpack_device__ called: the exchange API was not used")


def test_exchange_api_failure_without_an_error_is_a_buffer_error():
    """An exchange API returning -1 with no Python exception set gives BufferError, not SystemError."""
    del _FAILING_CALLS[:]
    with pytest.raises(
        BufferError,
        match=r"^dlpack: the exchange API of 'SilentFailure' failed in "
        r"dltensor_from_py_object_no_sync without setting an error$",
    ) as info:
        StridedMemoryView(SilentFailure())
    assert type(info.value) is BufferError
    assert len(_FAILING_CALLS) == 1


@pytest.mark.torch
@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "make, says, way_out",
    [
        (lambda torch: torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,)), "doesn't have storage",
         "a torch.sparse_coo tensor has no strides; view a dense copy (tensor.to_dense())"),
        (lambda torch: torch.eye(3).to_sparse_csr(), "doesn't have storage",
         "a torch.sparse_csr tensor has no strides; view a dense copy (tensor.to_dense())"),
        (lambda torch: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
         "QUInt/QInt types are not supported by dlpack",
         "view the dequantized values (tensor.dequantize(), a copy)"),
        (lambda torch: torch.ones(3, device="meta"), "Cannot pack tensors on meta",
         "a meta tensor has no data; make it on a real device first"),
        (lambda torch: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "",
         "a nested tensor has no single layout; view each part (tensor.unbind())"),
    ],
    ids=["sparse", "sparse-csr", "quantized", "meta", "nested"],
)
def test_torch_tensors_the_exchange_api_cannot_export_give_one_line_buffer_error(make, says, way_out):
    """Sparse, quantized, meta and nested tensors give a one-line BufferError, torch's reason
    quoted, that says what to view instead (no word of the exchange API the refusal came through)."""
    torch = pytest.importorskip("torch")
    tensor = make(torch)
    with pytest.raises(BufferError) as info:
        StridedMemoryView(tensor)
    message = str(info.value)
    assert type(info.value) is BufferError
    assert message.startswith("dlpack: the producer refused to export a 'Tensor' object (")
    assert says in message and message.endswith("): " + way_out)
    assert "exchange API" not in message
    assert "\n" not in message and len(message) < 300
    assert info.value.__suppress_context__


_LENT = {}


@producers.DLTensorFromPyObject
def _lend_tensor(address, out):
    out[0] = _LENT[address].tensor
    return 0


@pytest.mark.slow
def test_int_exchange_api_attribute_is_ignored():
    """A type with an int ``__c_dlpack_exchange_api__`` (the 1.2-era attribute) is viewed through __dlpack__, the int never read."""
    code = textwrap.dedent(
        """
        import producers
        from stridedview import StridedMemoryView

        class IntAttribute(producers.DLPackProducer):
            __c_dlpack_exchange_api__ = 0x1234  # not a table: dereferencing it crashes

        producer = IntAttribute("versioned", shape=(4,), hold_capsules=False)
        view = StridedMemoryView(producer)
        names = [name for name, _ in producer.calls]
        assert view.shape == (4,) and names == ["__dlpack_device__", "__dlpack__"], names
        print("ok")
        """
    )
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


class WrongName(producers.DLPackProducer):
    """A capsule of the right table under another name: not DLPack 1.3's."""

    _table, _capsule = producers.exchange_api(_lend_tensor)
    __dlpack_c_exchange_api__ = producers._PyCapsule_New(
        ctypes.addressof(_table), producers._name_bytes("dlpack_exchange_api_v2"), producers.PyCapsuleDestructor()
    )


class MajorVersion2(producers.DLPackProducer):
    """A "dlpack_exchange_api" capsule whose table says major version 2."""

    _table, __dlpack_c_exchange_api__ = producers.exchange_api(_lend_tensor, version=(2, 0))


@pytest.mark.parametrize("cls", [WrongName, MajorVersion2])
def test_exchange_api_capsule_other_than_dlpack_1_3_is_ignored(cls):
    """An exchange capsule with another name or major version is not used: __dlpack__ is."""
    producer = cls("versioned", shape=(4,))
    view = StridedMemoryView(producer)
    assert view.shape == (4,)
    assert [name for name, _ in producer.calls] == ["__dlpack_device__", "__dlpack__"]


@pytest.mark.torch
@pytest.mark.interop
@pytest.mark.parametrize("method", ["__dlpack__", "__dlpack_device__"])
def test_torch_subclass_overriding_a_dlpack_method_has_it_called(method):
    """A torch.Tensor subclass overriding __dlpack__ or __dlpack_device__ is viewed through its own methods, not torch's exchange API."""
    torch = pytest.importorskip("torch")
    calls = []

    def recorded(self, *args, **kwargs):
        calls.append(method)
        return getattr(torch.Tensor, method)(self, *args, **kwargs)

    Sub = type("Sub", (torch.Tensor,), {method: recorded})
    tensor = torch.arange(6.0).as_subclass(Sub)
    view = StridedMemoryView(tensor)
    assert calls == [method]
    assert view.shape == (6,) and view.ptr == tensor.data_ptr()


@pytest.mark.torch
@pytest.mark.interop
def test_torch_subclass_keeping_torch_methods_keeps_the_exchange_api():
    """A torch.Tensor subclass that keeps torch's DLPack methods still takes the exchange API (its __dlpack__ is not called)."""
    torch = pytest.importorskip("torch")

    class Plain(torch.Tensor):
        pass

    from torch.overrides import TorchFunctionMode

    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    tensor = torch.arange(6.0).as_subclass(Plain)
    with Record():
        view = StridedMemoryView(tensor)
    assert view.shape == (6,) and view.ptr == tensor.data_ptr()
    assert "is_neg" in seen and "__dlpack__" not in seen and "__dlpack_device__" not in seen, seen


class _LyingMeta(type):
    """A metaclass whose instances all claim to be equal, with one hash."""

    def __eq__(cls, other):
        return True

    def __hash__(cls):
        return 1


def test_producer_type_cache_matches_types_by_identity():
    """Two types whose metaclass makes them == with one hash get their own descriptions."""
    Speaks = _LyingMeta("Speaks", (producers.DLPackProducer,), {})
    Silent = _LyingMeta("Silent", (), {})
    assert Speaks == Silent and hash(Speaks) == hash(Silent)
    view = StridedMemoryView(Speaks("versioned", shape=(3,)))
    assert view.shape == (3,)
    StridedMemoryView(np.zeros(2))  # another type in between: the cache's last answer moves on
    with pytest.raises(BufferError, match="^stridedview: 'Silent' object supports none of DLPack"):
        StridedMemoryView(Silent())


# --- no Python code runs between borrowing the lent DLTensor and copying it ----------------

@pytest.mark.torch
@pytest.mark.interop
def test_exchange_api_layout_borrowed_after_a_method_moves_the_storage():
    """A torch subclass whose is_neg (run by the view) moves the tensor's storage gets the
    layout the tensor has after the move: the checks that run Python come before the borrow."""
    torch = pytest.importorskip("torch")

    class Moving(torch.Tensor):
        def is_neg(self):
            self.set_(torch.zeros(4096))
            return False

    tensor = torch.arange(4.0).as_subclass(Moving)
    old_ptr = tensor.data_ptr()
    view = StridedMemoryView(tensor)
    assert tensor.shape == (4096,)  # it did move
    assert (view.ptr, view.shape, view.strides) == (tensor.data_ptr(), (4096,), (1,))
    assert view.ptr != old_ptr


@pytest.mark.torch
@pytest.mark.interop
def test_exchange_api_layout_borrowed_after_a_torch_mode_moves_the_storage():
    """A TorchFunctionMode that moves the storage when is_neg is asked gets the new pointer
    with the new layout, never the old pointer with either."""
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    class MoveOnIsNeg(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.is_neg:
                args[0].set_(torch.zeros(8, 8192))
            return func(*args, **(kwargs or {}))

    tensor = torch.arange(6.0).reshape(2, 3)
    old_ptr = tensor.data_ptr()
    with MoveOnIsNeg():
        view = StridedMemoryView(tensor)
    assert tensor.shape == (8, 8192)
    assert (view.ptr, view.shape, view.strides) == (tensor.data_ptr(), (8, 8192), (8192, 1))
    assert view.ptr != old_ptr


def _constructor_forms(obj, stream_ptr, read=fields_of):
    """The fields (as ``read`` reads them) of obj's view made in every way the
    constructor is called."""
    made_bare = StridedMemoryView.__new__(StridedMemoryView)
    made_bare.__init__(obj, stream_ptr=stream_ptr)  # Cython's own argument parsing
    # A keyword name that is equal to the interned one but not the same object.
    name = "".join(["stream", "_ptr"])
    return [
        read(view)
        for view in (
            StridedMemoryView(obj, stream_ptr),
            StridedMemoryView(obj, stream_ptr=stream_ptr),
            StridedMemoryView(obj, **{name: stream_ptr}),
            StridedMemoryView(obj=obj, stream_ptr=stream_ptr),
            made_bare,
        )
    ]


@pytest.mark.parametrize("name", ["c", "slice", "0-d", "readonly"])
@pytest.mark.parametrize("stream_ptr", [-1, None])
def test_constructor_by_keyword_is_the_positional_view(name, stream_ptr):
    """StridedMemoryView(obj, stream_ptr=s), the form users write, takes the constructor's
    own vectorcall and gives the view every other form of the call gives; calls it does
    not take are parsed and refused as __init__ refuses them."""
    obj = numpy_layouts()[name]
    first, *others = _constructor_forms(obj, stream_ptr)
    assert all(other == first for other in others)
    with pytest.raises(TypeError, match="multiple values for keyword argument 'stream_ptr'"):
        StridedMemoryView(obj, -1, stream_ptr=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'stream'"):
        StridedMemoryView(obj, stream=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'stream'"):
        StridedMemoryView(obj, stream_ptr=-1, stream=-1)


@pytest.mark.torch
def test_constructor_by_keyword_is_the_positional_view_for_torch_and_the_cai():
    """The same for a torch tensor (the exchange API) and a CAI producer (a stream is
    needed: None is refused alike in every form)."""
    torch = pytest.importorskip("torch")
    from test_cai import CAIProducer

    first, *others = _constructor_forms(torch.arange(12.0).reshape(3, 4)[:, ::2], -1)
    assert all(other == first for other in others)

    def without_device(view):  # a CAI view's device_id asks the driver
        return fields_of(view, skip=("device_id",))

    first, *others = _constructor_forms(CAIProducer(), -1, without_device)
    assert all(other == first for other in others)
    messages = set()
    for call in (
        lambda: StridedMemoryView(CAIProducer(), None),
        lambda: StridedMemoryView(CAIProducer(), stream_ptr=None),
    ):
        with pytest.raises(BufferError) as raised:
            call()
        messages.add(str(raised.value))
    assert len(messages) == 1


def _decorated_views(*objs, stream_ptr=None):
    """The views a launcher decorated for every argument makes of ``objs``."""
    from stridedview import args_viewable_as_strided_memory

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b=None, c=None):
        return [arg.view(stream_ptr) for arg in (a, b, c) if arg is not None]

    return launch(*objs)


def _decorated_cases():
    cases = {
        "numpy 2-D": lambda: np.arange(12.0).reshape(3, 4),
        "numpy slice": lambda: np.arange(24, dtype=np.int16).reshape(4, 6)[1:, ::2],
        "numpy read-only": lambda: np.frombuffer(b"abcd", dtype=np.uint8),
        "ctypes producer": lambda: from_numpy("versioned", np.arange(6.0).reshape(2, 3)),
        "memoryview": lambda: memoryview(bytearray(8)),
    }
    return cases


@pytest.mark.parametrize("name", list(_decorated_cases()))
def test_decorated_view_matches_constructor_view_on_both_paths(name):
    """A launcher argument's view (its producer type kept from wrapping) equals the constructor's, on the fast and the general path."""
    obj = _decorated_cases()[name]()
    for context in (contextlib.nullcontext, general_path):
        with context():
            decorated = _decorated_views(obj)[0]
            direct = StridedMemoryView(obj)
        if fields_of(decorated) != fields_of(direct):
            raise AssertionError(f"{fields_of(decorated)!r} != {fields_of(direct)!r}")


@pytest.mark.torch
@pytest.mark.interop
def test_decorated_torch_views_match_constructor_views_and_refuse_lazy_bits():
    """Decorated torch arguments are viewed as the constructor views them, and a negative-bit tensor is refused."""
    torch = pytest.importorskip("torch")
    tensors = [torch.arange(16.0).reshape(4, 4), torch.arange(16.0).reshape(4, 4)[1:, ::2],
               torch.tensor(1.5)]
    for tensor, decorated in zip(tensors, _decorated_views(*tensors)):
        if fields_of(decorated) != fields_of(StridedMemoryView(tensor)):
            raise AssertionError(tensor)
    with pytest.raises(BufferError, match="^dlpack: the torch tensor has its negative bit set"):
        _decorated_views(torch._neg_view(torch.arange(3.0)))


def test_viewable_argument_follows_a_class_change_after_wrapping():
    """An argument whose class changes between wrapping and view() is viewed as its new class says."""
    from stridedview import args_viewable_as_strided_memory

    class Plain(np.ndarray):
        pass

    class Asked(np.ndarray):
        def __dlpack__(self, **kwargs):
            raise BufferError("asked its own __dlpack__")

    array = np.arange(3.0).view(Plain)
    StridedMemoryView(array)  # Plain's description is cached

    @args_viewable_as_strided_memory((0,))
    def launch(arg):
        array.__class__ = Asked
        return arg.view(-1)

    with pytest.raises(BufferError, match="asked its own __dlpack__"):
        launch(array)


def exact_byte_offsets_fit(extents, strides, itemsize):
    """The int64 byte-offset rule in Python integers: every element's byte offset from
    element 0 lies within [-(2**63 - 1), 2**63 - 1]."""
    if 0 in extents:
        return True
    itemsize = max(itemsize, 1)
    if strides is None:
        size = 1
        for extent in extents:
            size *= extent
        return (size - 1) * itemsize <= 2**63 - 1
    above = sum((e - 1) * s for e, s in zip(extents, strides) if e > 1 and s > 0)
    below = sum((e - 1) * -s for e, s in zip(extents, strides) if e > 1 and s < 0)
    return max(above, below) * itemsize <= 2**63 - 1


int64s = st.one_of(
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.integers(-(2**33), 2**33),
    st.sampled_from([0, 1, -1, 2**31, 2**32 - 1, 2**62, -(2**62), 2**63 - 1, -(2**63) + 1]),
)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(
    layout=st.integers(1, 6).flatmap(
        lambda ndim: st.tuples(
            st.lists(st.one_of(st.integers(0, 4), st.integers(0, 2**63 - 1)), min_size=ndim,
                     max_size=ndim),
            st.one_of(st.none(), st.lists(int64s, min_size=ndim, max_size=ndim)),
        )
    ),
    itemsize=st.sampled_from([0, 1, 2, 4, 8, 16, 32]),
)
def test_byte_offsets_check_128_bit_and_portable_agree_with_exact_integers(layout, itemsize):
    """The int64 byte-offset check gives the exact answer in both its forms (the 128-bit one
    every view takes here, the portable one other compilers get)."""
    extents, strides = layout
    size = 1
    for extent in extents:
        size *= extent
    if strides is None and size > 2**63 - 1:
        return  # no producer can describe more than int64 elements
    expected = exact_byte_offsets_fit(extents, strides, itemsize)
    fast, portable = _view._byte_offsets_fit_both_ways(extents, strides, itemsize)
    if fast not in (-1, expected) or portable != expected:
        raise AssertionError((extents, strides, itemsize, fast, portable, expected))


@pytest.mark.torch
def test_managed_dict_read_agrees_with_the_instance_dict_check():
    """The managed-dict read (CPython 3.11/3.12 with the GIL) proves "no instance attribute"
    only where the general instance-dict check finds no DLPack method, and proves it for a
    fresh torch tensor; elsewhere it says nothing."""
    torch = pytest.importorskip("torch")
    from stridedview import _view

    class Plain:
        pass

    def states():
        tensor = torch.arange(3.0)
        yield "fresh tensor", tensor, True
        other = torch.arange(3.0)
        other.note = 1
        yield "tensor with an attribute", other, False
        emptied = torch.arange(3.0)
        emptied.note = 1
        del emptied.note
        yield "tensor whose attribute was deleted", emptied, None
        owned = torch.arange(3.0)
        owned.__dlpack__ = torch.Tensor.__dlpack__.__get__(owned)
        yield "tensor with its own __dlpack__", owned, False
        device = torch.arange(3.0)
        device.__dlpack_device__ = lambda: (1, 0)
        yield "tensor with its own __dlpack_device__", device, False
        yield "parameter", torch.nn.Parameter(torch.arange(3.0)), None
        yield "plain object", Plain(), None
        yield "numpy array", np.arange(3.0), False

    compiled = _view._managed_dict_read()
    for name, obj, proven in states():
        fast, general = _view._instance_dict_answers(obj)
        if fast and general:
            raise AssertionError(f"{name}: the read proves no attribute, the dict holds one")
        if not compiled and fast:
            raise AssertionError(f"{name}: the read answered though not compiled in")
        if compiled and proven is not None and fast != proven:
            raise AssertionError(f"{name}: the read says {fast}, expected {proven}")


@pytest.mark.torch
def test_torch_tensor_given_its_own_dlpack_after_a_view_is_asked():
    """A torch tensor viewed on the lean path, then given an instance __dlpack__, is viewed
    through that method (the managed-dict read sees the new attribute)."""
    torch = pytest.importorskip("torch")
    tensor = torch.arange(6.0).reshape(2, 3)
    assert StridedMemoryView(tensor, stream_ptr=-1).shape == (2, 3)

    def own(**kwargs):
        raise BufferError("asked its own __dlpack__")

    tensor.__dlpack__ = own
    with pytest.raises(BufferError, match="asked its own __dlpack__"):
        StridedMemoryView(tensor, stream_ptr=-1)
    del tensor.__dlpack__  # the dict stays, empty: the general check answers
    assert StridedMemoryView(tensor, stream_ptr=-1).shape == (2, 3)
