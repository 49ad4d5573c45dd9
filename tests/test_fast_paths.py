"""Every fast path gives exactly the view the general path gives.

The fast paths: a producer type's DLPack C exchange API (torch), numpy arrays
skipping ``__dlpack_device__``, interned shape/stride tuples.  The general path
(``__dlpack_device__`` then ``__dlpack__``, a capsule, fresh tuples) is reached with
``stridedview._view._set_fast_paths_enabled(False)``.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest

from stridedview import StridedMemoryView, _view
from producers import KINDS, from_numpy

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
