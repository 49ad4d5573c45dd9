"""Each supported torch gets the readers the project claims for it (tests/torch_expectations.py):
the suite runs on several torch releases (CI: 2.13.0 and 2.14.1), and each asserts its own."""

from __future__ import annotations

import numpy as np
import pytest

from stridedview import StridedMemoryView, _view
from torch_expectations import (
    LAYOUT_READERS,
    expected_bits_reader,
    expected_fields_readers,
    expected_layout_reader,
    expected_offset_proof,
    has_exchange_api,
    torch_release,
)

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.interop, pytest.mark.torch]


def test_this_torch_is_one_the_project_claims():
    """The running torch is in the table of supported releases (a new one is looked at first)."""
    assert torch_release(torch) in LAYOUT_READERS, torch.__version__


def test_readers_after_a_first_view_are_the_claimed_ones():
    """Calibrated afresh by a first view, this torch's layout and bits readers are those claimed."""
    _view._reset_torch_bits_calibration()
    tensor = torch.arange(12.0).reshape(3, 4)[:, 1:]
    view = StridedMemoryView(tensor)
    assert (view.ptr, view.shape, view.strides) == (tensor.data_ptr(), (3, 3), (4, 1))
    assert _view._torch_layout_reader() == expected_layout_reader(torch)
    assert _view._torch_bits_reader() == expected_bits_reader(torch)
    assert _view._torch_fields_reader() in expected_fields_readers(torch)


def test_exchange_api_presence_matches_the_claim():
    """A torch claimed to give capsules has no exchange API, and every other one has it."""
    assert has_exchange_api(torch) is (LAYOUT_READERS[torch_release(torch)] != "capsule")


@pytest.mark.parametrize("direct", [True, False], ids=["direct-bits", "method-bits"])
def test_every_reader_gives_numpy_s_view_of_the_same_memory(direct):
    """Whichever readers this torch gets, a view of a tensor made from numpy equals the view of
    the numpy array itself, field by field but exporting_obj."""
    array = np.arange(24, dtype=np.float32).reshape(4, 6)[1:, ::2]
    tensor = torch.from_numpy(array)
    _view._set_torch_bits_direct_enabled(direct)
    try:
        got = StridedMemoryView(tensor)
    finally:
        _view._set_torch_bits_direct_enabled(True)
    want = StridedMemoryView(array)
    fields = ("ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly")
    assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields]


class _PythonDispatchTensor(torch.Tensor):
    """A wrapper subclass whose sizes and strides torch asks its Python __torch_dispatch__
    for (dispatch_sizes_strides_policy="sizes"), as tensor subclasses of torch.compile and
    FSDP are: each operator it is asked is recorded, and any but dim/size/stride refused."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), dtype=inner.dtype,
            dispatch_sizes_strides_policy="sizes",
        )

    def __init__(self, inner):
        self.inner = inner
        self.asked = []

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args[0].asked.append(str(func))
        if func in (torch.ops.aten.sym_size.default, torch.ops.aten.size.default):
            return args[0].inner.shape
        if func in (torch.ops.aten.sym_stride.default, torch.ops.aten.stride.default):
            return args[0].inner.stride()
        if func is torch.ops.aten.dim.default:
            return args[0].inner.dim()
        raise NotImplementedError(f"wrapper refuses {func}")


def test_a_python_dispatch_subclass_is_asked_through_torch_s_own_export_only():
    """A __torch_dispatch__ subclass is never read by the direct readers, whose stable-ABI
    getters would run its Python code where none may run (they asked aten.dim and aten.size
    first, and a refusal there left an exception set): torch's exchange API alone asks it
    (aten.numel first, on 2.13 and 2.14), and its refusal is a BufferError that says where
    the producer's own reason is (torch's exchange API passes on an empty RuntimeError)."""
    StridedMemoryView(torch.ones(2), stream_ptr=-1)  # the readers calibrated first
    wrapper = _PythonDispatchTensor(torch.ones(2, 3))
    with pytest.raises(BufferError) as excinfo:
        StridedMemoryView(wrapper, stream_ptr=-1)
    message = str(excinfo.value)
    assert message.startswith("dlpack: the producer refused to export a '_PythonDispatchTensor' object (")
    assert "object ()" not in message
    layout_operators = {
        "aten.dim.default", "aten.size.default", "aten.stride.default",
        "aten.sym_size.default", "aten.sym_stride.default",
    }
    assert wrapper.asked and not layout_operators & set(wrapper.asked), wrapper.asked


def test_a_dtype_the_shim_does_not_map_is_not_probed():
    """A torch that has a dtype its stable C shim maps no function for (torch 2.11 and
    float8_e8m0fnu): the calibration probes only what the shim maps, so the readers claimed
    for this torch are still calibrated, and a tensor of that dtype is viewed by the general
    path, as torch's own export gives it."""
    name = "float8_e8m0fnu"
    dtype = getattr(torch, name)  # (every supported torch has it)
    try:
        _view._reset_torch_bits_calibration(hidden_dtypes=(name,))
        StridedMemoryView(torch.arange(4.0))
        assert _view._torch_layout_reader() == expected_layout_reader(torch)
        tensor = torch.ones(6).to(dtype)[1:]
        view = StridedMemoryView(tensor)
        assert (view.ptr, view.shape, view.strides, view.dlpack_dtype) == (
            tensor.data_ptr(), (5,), (1,), (14, 8, 1)
        )
    finally:
        _view._reset_torch_bits_calibration()


def test_the_tensor_offset_is_proven_against_torchs_supported_route_where_it_exists():
    """Where torch exports torch_tensor_from_pyobject (2.14 and later), the calibrated offset
    of a tensor's at::Tensor is also proven against it (the handle it returns names the same
    TensorImpl for every probe); before, against the methods alone."""
    _view._reset_torch_bits_calibration()
    StridedMemoryView(torch.arange(4.0))
    assert _view._torch_offset_proof() == expected_offset_proof(torch)
