"""A torch tensor's DLTensor, taken from torch's stable C ABI (or ``at::toDLPackNonOwning``)
or torch's exchange API alike.

Once calibrated (src/stridedview/_torch_bits.pxi), the stable ABI's ``aoti_torch_get_*``
functions are called on the tensor object's own at::Tensor (they catch their own C++
exceptions); where they refuse, the exchange API is asked and reports the error.  The private
``at::toDLPackNonOwning`` is a second choice, only where the stable ABI is not proven.
Both fast readers are called "direct" below.
``_view._set_torch_layout_direct_enabled(False)`` makes every torch view go through the
exchange API, so each test compares the two.
"""

from __future__ import annotations

import contextlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory

from test_launch_reuse import _parked_views
from torch_expectations import (
    expected_bits_reader,
    expected_fields_readers,
    expected_layout_reader,
    expected_storage_readers,
    has_exchange_api,
)

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.torch,
    pytest.mark.usefixtures("forbidden_driver"),
    # The direct reader stands in for the exchange API: nothing to compare without one
    # (torch 2.9; test_torch_readers.py asserts that such a torch gets capsules).
    pytest.mark.skipif(not has_exchange_api(torch), reason="this torch has no exchange API"),
]

FIELDS = ("ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly")
IS_NEG = "_ZN2at6native6is_negERKNS_6TensorE"


@contextlib.contextmanager
def layout(kind):
    """Within the block torch tensors' DLTensors come from ``kind`` ("direct" or "exchange api")."""
    _view._set_torch_layout_direct_enabled(kind == "direct")
    try:
        yield
    finally:
        _view._set_torch_layout_direct_enabled(True)


GETTERS = (
    "aoti_torch_get_layout", "aoti_torch_get_dtype", "aoti_torch_get_device_type",
    "aoti_torch_get_device_index", "aoti_torch_get_dim", "aoti_torch_get_sizes",
    "aoti_torch_get_strides", "aoti_torch_get_data_ptr",
)


@contextlib.contextmanager
def calibration(layout_symbol, getters=None):
    """Within the block the calibration is made afresh, resolving ``layout_symbol`` for the
    private layout function and ``getters`` for the stable ABI's (torch's own when None);
    afterwards it is made afresh with torch's own symbols."""
    _view._reset_torch_bits_calibration(layout_symbol=layout_symbol, getters=getters)
    try:
        yield
    finally:
        _view._reset_torch_bits_calibration()


def outcome(tensor, entry="constructor"):
    """The fields of ``tensor``'s view, or the type and message of the error it raises."""
    try:
        if entry == "constructor":
            view = StridedMemoryView(tensor, -1)
        else:
            view = args_viewable_as_strided_memory((0,))(lambda arg: arg.view(-1))(tensor)
    except Exception as exc:  # noqa: BLE001 - any refusal is compared
        return ("raised", type(exc), str(exc))
    assert view.exporting_obj is tensor
    return ("view", {name: getattr(view, name) for name in FIELDS}, repr(view))


def assert_same_both_ways(tensor, entry="constructor"):
    """The direct read and the exchange API give the same view, or the same error."""
    with layout("direct"):
        direct = outcome(tensor, entry)
    with layout("exchange api"):
        lent = outcome(tensor, entry)
    assert direct == lent
    return direct


class Plain(torch.Tensor):
    """A subclass keeping torch.Tensor's exchange table (read directly)."""


def test_direct_read_in_use_after_the_first_torch_view():
    """On Linux the calibration approves at::toDLPackNonOwning and views use it."""
    with calibration(None):
        assert _view._torch_layout_reader() == "uncalibrated"
        StridedMemoryView(torch.ones(2), -1)
        expected = expected_layout_reader(torch)
        assert _view._torch_layout_reader() == expected
        with layout("exchange api"):
            assert _view._torch_layout_reader() == "exchange api"


LAYOUTS = {
    "contiguous": lambda: torch.arange(12.0).reshape(3, 4),
    "transposed": lambda: torch.arange(12.0).reshape(3, 4).T,
    "sliced": lambda: torch.arange(60.0).reshape(3, 4, 5)[1:, ::2, 3:],
    "storage-offset": lambda: torch.arange(10, dtype=torch.int32)[7:],
    "expanded": lambda: torch.arange(4.0).expand(3, 4),
    "0-d": lambda: torch.tensor(2.5),
    "empty": lambda: torch.zeros(0, 3),
    "size-1-dims": lambda: torch.zeros(1, 5, 1)[:, ::2],
    "requires-grad": lambda: torch.ones(3, requires_grad=True),
    "parameter": lambda: torch.nn.Parameter(torch.ones(2, 2)),
    "subclass": lambda: torch.arange(6.0).reshape(2, 3).as_subclass(Plain)[:, 1:],
    "bool": lambda: torch.tensor([True, False]),
    "int16": lambda: torch.arange(5, dtype=torch.int16),
    "uint64": lambda: torch.zeros(5, dtype=torch.uint64),
    "float16": lambda: torch.arange(5, dtype=torch.float16),
    "bfloat16": lambda: torch.arange(5, dtype=torch.bfloat16),
    "float8_e5m2": lambda: torch.zeros(4, dtype=torch.float8_e5m2),
    "complex128": lambda: torch.arange(4.0, dtype=torch.float64).to(torch.complex128),
    "from-numpy": lambda: torch.from_numpy(__import__("numpy").arange(8.0)[::3]),
    "9-d": lambda: torch.zeros((2,) * 9)[..., ::2],
    "channels-last": lambda: torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last),
}


@pytest.mark.parametrize("entry", ["constructor", "launcher"])
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_direct_read_gives_the_exchange_api_view(name, entry):
    """Every layout, dtype and origin gives the same view read directly as through the exchange API."""
    kind, *_ = assert_same_both_ways(LAYOUTS[name](), entry)
    assert kind == "view"


def _fields(view):
    return {name: getattr(view, name) for name in FIELDS}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_stable_abi_read_into_the_view_is_the_exchange_api_view(name):
    """_view_from_torch (the stable ABI read straight into the view) reads every layout of up to 8 dims itself, giving the exchange API's view and C layout; a 9-d tensor it leaves to the general path."""
    from test_hot_path_review import assert_c_layout_matches

    StridedMemoryView(torch.ones(1), -1)  # the stable-ABI reader proven
    assert _view._torch_layout_reader() == expected_layout_reader(torch)
    tensor = LAYOUTS[name]()
    direct = _view._view_from_torch_alone(tensor)
    if tensor.dim() > 8:
        assert direct is None
        return
    assert direct is not None
    with layout("exchange api"):
        lent = StridedMemoryView(tensor, -1)
    assert _fields(direct) == _fields(lent)
    assert_c_layout_matches(direct)


REFUSED = {
    "sparse": lambda: torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (3,)),
    "sparse-csr": lambda: torch.eye(3).to_sparse_csr(),
    "quantized": lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
    "meta": lambda: torch.ones(3, device="meta"),
    "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
    "negative-bit": lambda: torch._neg_view(torch.arange(3.0)),
    "conjugate-bit": lambda: torch.arange(3.0).to(torch.complex64).conj(),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", [name for name in REFUSED if not name.endswith("-bit")])
def test_stable_abi_read_into_the_view_leaves_what_it_cannot_read(name):
    """A tensor torch cannot export (sparse, quantized, meta, nested) is left to the general path, which raises, never read into the view."""
    StridedMemoryView(torch.ones(1), -1)
    assert _view._view_from_torch_alone(REFUSED[name]()) is None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("entry", ["constructor", "launcher"])
@pytest.mark.parametrize("name", list(REFUSED))
def test_tensors_torch_cannot_export_are_refused_alike(name, entry):
    """A tensor torch's C++ code throws on (or that carries a lazy bit) gives the same BufferError both ways."""
    kind, error_type, message = assert_same_both_ways(REFUSED[name](), entry)
    assert (kind, error_type) == ("raised", BufferError)
    assert message.startswith("dlpack: ")
    assert "\n" not in message


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_thrown_errors_are_caught_every_time():
    """A thousand refusals thrown in C++ on the direct read each end in the exchange API's BufferError."""
    sparse = REFUSED["sparse"]()
    for _ in range(1000):
        with pytest.raises(BufferError, match="^dlpack: the producer refused to export a 'Tensor' object"):
            StridedMemoryView(sparse, -1)
    assert _view._torch_layout_reader() == expected_layout_reader(torch)


MUTATIONS = {
    "data-assigned": lambda t: setattr(t, "data", torch.arange(24.0).reshape(4, 6)[:, 1::2]),
    "resized": lambda t: t.resize_(2, 2),
    "as-strided": lambda t: t.as_strided_((2, 3), (1, 2), 1),
    "set-storage": lambda t: t.set_(torch.arange(5.0)),
    "transposed-in-place": lambda t: t.t_(),
    "unsqueezed-in-place": lambda t: t.unsqueeze_(0),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_layout_changed_in_place_is_read_anew(name):
    """A tensor whose layout or storage changes in place is viewed with its new layout both ways."""
    tensor = torch.arange(12.0).reshape(3, 4)
    before = StridedMemoryView(tensor, -1)
    MUTATIONS[name](tensor)
    kind, fields, _ = assert_same_both_ways(tensor)
    assert kind == "view"
    assert (fields["ptr"], fields["shape"], fields["strides"]) == (
        tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())
    )
    assert (fields["ptr"], fields["shape"], fields["strides"]) != (
        before.ptr, before.shape, before.strides
    )


@pytest.mark.parametrize(
    "symbol",
    [IS_NEG, "_ZN2at17noSuchFunctionEv"],
    ids=["disagreeing-function", "missing-symbol"],
)
def test_calibration_refuses_a_function_that_is_not_proven(symbol):
    """A layout function that does not lend the exchange API's DLTensor, or is absent, is not used; the bits still are read directly."""
    # The stable ABI's getters made unusable too (sizes asked for strides: a disagreement).
    getters = GETTERS[:5] + (GETTERS[6],) + GETTERS[6:]
    with calibration(symbol, getters):
        kind, fields, _ = outcome(LAYOUTS["sliced"]())
        assert kind == "view"
        assert _view._torch_layout_reader() == "exchange api"
        assert _view._torch_bits_reader() == expected_bits_reader(torch)
        tensor = LAYOUTS["sliced"]()
        assert outcome(tensor) == assert_same_both_ways(tensor)


@pytest.mark.parametrize(
    "swap",
    [(5, "aoti_torch_get_strides"), (7, "aoti_torch_get_sizes"), (4, "aoti_torch_no_such_getter")],
    ids=["strides-for-sizes", "sizes-for-data", "missing-getter"],
)
def test_stable_abi_reader_not_proven_is_not_used(swap):
    """A stable-ABI getter that disagrees with the exchange API, or is absent, leaves the stable-ABI reader off for good; views stay right."""
    index, name = swap
    getters = GETTERS[:index] + (name,) + GETTERS[index + 1:]
    with calibration(None, getters):
        tensor = LAYOUTS["sliced"]()
        kind, fields, _ = outcome(tensor)
        assert kind == "view"
        assert (fields["shape"], fields["strides"]) == (tuple(tensor.shape), tuple(tensor.stride()))
        assert _view._torch_layout_reader() not in ("stable abi", "uncalibrated")
        assert outcome(tensor) == assert_same_both_ways(tensor)


def test_stable_abi_reader_is_preferred_to_the_private_symbol():
    """Where the stable ABI is proven, it is the reader, whatever the private symbol does."""
    with calibration(IS_NEG):
        StridedMemoryView(torch.ones(2), -1)
        assert _view._torch_layout_reader() == expected_layout_reader(torch) == "stable abi"
        _view._set_torch_layout_stable_enabled(False)
        try:
            assert _view._torch_layout_reader() == "exchange api"  # the private one refused
        finally:
            _view._set_torch_layout_stable_enabled(True)


def test_subclass_with_its_own_exchange_table_has_it_called():
    """A torch subclass whose exchange table is not torch.Tensor's own is never read directly."""
    table = StridedMemoryView.__dict__["__dlpack_c_exchange_api__"]

    class OwnTable(torch.Tensor):
        __dlpack_c_exchange_api__ = table
        __dlpack__ = torch.Tensor.__dlpack__
        __dlpack_device__ = torch.Tensor.__dlpack_device__

    tensor = torch.arange(4.0).as_subclass(OwnTable)
    StridedMemoryView(torch.ones(1), -1)  # calibrated: the direct read is available
    # The view's own table refuses anything but a view: proof that it was the one asked.
    with pytest.raises(BufferError, match="StridedMemoryView's exchange API takes a StridedMemoryView"):
        StridedMemoryView(tensor, -1)


DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int32, torch.int64, torch.bool, torch.complex64,
]


@st.composite
def strided_tensors(draw):
    """A tensor of 0 to 5 dims, sliced with steps and offsets, maybe permuted or expanded."""
    ndim = draw(st.integers(0, 5))
    shape = draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim))
    dtype = draw(st.sampled_from(DTYPES))
    tensor = torch.zeros(shape, dtype=dtype)
    index = tuple(
        slice(draw(st.integers(0, 2)), None, draw(st.integers(1, 3))) for _ in range(ndim)
    )
    tensor = tensor[index]
    if ndim > 1 and draw(st.booleans()):
        tensor = tensor.permute(*draw(st.permutations(range(ndim))))
    if draw(st.booleans()):
        tensor = tensor.unsqueeze(0).expand(draw(st.integers(1, 3)), *tensor.shape)
    return tensor


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor=strided_tensors())
def test_direct_read_and_exchange_api_agree(tensor):
    """For any strided tensor the direct read and the exchange API give the same view."""
    kind, fields, _ = assert_same_both_ways(tensor)
    assert kind == "view"
    assert fields["shape"] == tuple(tensor.shape)
    if tensor.numel():
        assert fields["strides"] == tuple(tensor.stride())
    else:  # an empty view's strides are all 0
        assert fields["strides"] == (0,) * tensor.dim()


@contextlib.contextmanager
def fields_reader(enabled):
    """Within the block the fields reader (a TensorImpl's fields read in C) is on or off."""
    _view._set_torch_fields_enabled(enabled)
    try:
        yield
    finally:
        _view._set_torch_fields_enabled(True)


def assert_same_with_and_without_fields(tensor, entry="constructor"):
    """The fields reader and the stable ABI's getters give the same view, or the same error."""
    with fields_reader(True):
        read = outcome(tensor, entry)
    with fields_reader(False):
        asked = outcome(tensor, entry)
    assert read == asked
    return read


def fields_expected_in_use():
    StridedMemoryView(torch.ones(1), -1)  # calibrated
    expected = expected_fields_readers(torch)
    assert _view._torch_fields_reader() in expected
    if _view._torch_fields_reader() != "fields":
        pytest.skip(f"the fields reader is {_view._torch_fields_reader()!r} on this torch")


def _inference_tensor():
    with torch.inference_mode():
        return torch.arange(12.0).reshape(3, 4)[:, 1:]


def _copy_on_write():
    return torch._lazy_clone(torch.arange(6.0).reshape(2, 3))


# Plain CPU tensors of up to five dimensions (the TensorImpl's inline arrays): read.
FIELDS_READ = {
    name: LAYOUTS[name]
    for name in LAYOUTS
    if name not in ("9-d",)
} | {
    "inference-mode": _inference_tensor,
    "5-d": lambda: torch.zeros(2, 3, 1, 4, 2)[:, ::2, :, 1:],
    "copy-on-write": _copy_on_write,
    "float8_e4m3fn": lambda: torch.zeros(3, dtype=torch.float8_e4m3fn),
    "uint16": lambda: torch.zeros(3, dtype=torch.uint16),
}


def _batched(tensor):
    """The view of a tensor inside torch.vmap (a BatchedTensorImpl under a plain
    torch.Tensor object), each way, and what the fields reader reads of it."""
    seen = []

    def body(x):
        seen.append((_view._torch_fields_read(x), assert_same_with_and_without_fields(x)))
        return x

    torch.vmap(body)(tensor)
    return seen[0]


def _functionalized(tensor):
    """The same inside torch.func.functionalize (a FunctionalTensorWrapper)."""
    seen = []

    def body(x):
        seen.append((_view._torch_fields_read(x), assert_same_with_and_without_fields(x)))
        return x

    torch.func.functionalize(body)(tensor)
    return seen[0]


def test_fields_reader_in_use_after_the_first_torch_view():
    """On 64-bit Linux the calibration proves the TensorImpl's fields on the releases claimed."""
    with calibration(None):
        assert _view._torch_fields_reader() == "uncalibrated"
        StridedMemoryView(torch.ones(2), -1)
        assert _view._torch_fields_reader() in expected_fields_readers(torch)
        with fields_reader(False):
            assert _view._torch_fields_reader() == "off"
        with layout("exchange api"):
            assert _view._torch_fields_reader() == "off"


SWITCHES = {
    "fields": _view._set_torch_fields_enabled,
    "stable-abi": _view._set_torch_layout_stable_enabled,
    "layout-direct": _view._set_torch_layout_direct_enabled,
    "bits-direct": _view._set_torch_bits_direct_enabled,
}


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_lean_path_needs_every_reader_it_stands_on(switch):
    """The lean path (a plain tensor's bits and layout from its fields) is in use only while the bits' C reads, the stable ABI and the fields reader are all proven and allowed, and a view is the same with it off."""
    fields_expected_in_use()
    assert _view._torch_lean_path()
    tensor = LAYOUTS["sliced"]()
    lean = outcome(tensor)
    SWITCHES[switch](False)
    try:
        assert not _view._torch_lean_path()
        assert outcome(tensor) == lean
    finally:
        SWITCHES[switch](True)
    assert _view._torch_lean_path()


def test_lean_path_off_until_calibrated_and_where_the_bits_are_not_proven():
    """Before the calibration, and after one that leaves the bits to the methods, the lean path is off."""
    from test_torch_bits import SYMBOLS

    fields_expected_in_use()
    _view._reset_torch_bits_calibration(symbols=(SYMBOLS[1], SYMBOLS[0], SYMBOLS[2]))
    try:
        assert not _view._torch_lean_path()
        tensor = LAYOUTS["sliced"]()
        assert outcome(tensor)[0] == "view"
        assert _view._torch_bits_reader() == "methods"
        assert not _view._torch_lean_path()
    finally:
        _view._reset_torch_bits_calibration()
    StridedMemoryView(torch.ones(1), -1)
    assert _view._torch_lean_path()


@pytest.mark.parametrize("name", list(FIELDS_READ))
def test_fields_reader_reads_plain_cpu_tensors_as_torch_says(name):
    """A plain CPU tensor of up to five dims is read from its TensorImpl: torch's own pointer, extents, strides and dtype."""
    fields_expected_in_use()
    tensor = FIELDS_READ[name]()
    read = _view._torch_fields_read(tensor)
    assert read is not None
    data, shape, strides, dtype = read
    assert shape == tuple(tensor.shape)
    assert strides == tuple(tensor.stride())
    if tensor.numel():
        assert data == tensor.data_ptr()
    assert dtype[1] == tensor.element_size() * 8


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("entry", ["constructor", "launcher"])
@pytest.mark.parametrize("name", list(FIELDS_READ) + list(REFUSED) + ["9-d"])
def test_fields_reader_gives_the_getters_view(name, entry):
    """Every tensor gives the same view (or error) with the fields reader as through the stable ABI's getters alone, and as through the exchange API."""
    fields_expected_in_use()
    tensor = (FIELDS_READ.get(name) or REFUSED.get(name) or LAYOUTS.get(name))()
    read = assert_same_with_and_without_fields(tensor, entry)
    if name in FIELDS_READ:
        assert read[0] == "view"
        with fields_reader(True):
            assert outcome(tensor, entry) == assert_same_both_ways(tensor, entry)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", list(REFUSED) + ["9-d"])
def test_fields_reader_declines_what_is_not_a_plain_inline_cpu_tensor(name):
    """Sparse, quantized, meta, nested tensors, lazy negative or conjugate bits, and more dims than the inline arrays hold are declined (the getters or the general path read them)."""
    fields_expected_in_use()
    tensor = (REFUSED.get(name) or LAYOUTS.get(name))()
    assert _view._torch_fields_read(tensor) is None


@pytest.mark.parametrize("wrap", [_batched, _functionalized], ids=["vmap", "functionalize"])
def test_fields_reader_declines_wrapped_impls_under_a_plain_tensor(wrap):
    """A plain torch.Tensor object whose impl is torch's batching or functionalization wrapper is declined by the fields reader, and viewed alike either way."""
    fields_expected_in_use()
    read, _ = wrap(torch.arange(6.0).reshape(2, 3))
    assert read is None


def test_fields_reader_declines_a_python_dispatch_subclass():
    """A __torch_dispatch__ wrapper subclass's impl carries the Python key: declined."""
    from test_torch_readers import _PythonDispatchTensor

    fields_expected_in_use()
    wrapper = _PythonDispatchTensor(torch.arange(4.0))
    assert _view._torch_fields_read(wrapper) is None


def test_fields_reader_refuses_what_is_not_a_tensor():
    """The test entry refuses an object with no TensorImpl rather than reading it."""
    with pytest.raises(TypeError, match="a torch tensor, not 'list'"):
        _view._torch_fields_read([1.0])


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_fields_reader_reads_a_layout_changed_in_place_anew(name):
    """A tensor whose layout or storage changes in place is read with its new layout from its fields."""
    fields_expected_in_use()
    tensor = torch.arange(12.0).reshape(3, 4)
    StridedMemoryView(tensor, -1)
    MUTATIONS[name](tensor)
    _, shape, strides, _ = _view._torch_fields_read(tensor)
    assert (shape, strides) == (tuple(tensor.shape), tuple(tensor.stride()))
    kind, fields, _ = assert_same_with_and_without_fields(tensor)
    assert (fields["ptr"], fields["shape"]) == (tensor.data_ptr(), tuple(tensor.shape))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor=strided_tensors())
def test_fields_reader_and_getters_agree(tensor):
    """For any strided tensor the fields reader and the getters give the same view."""
    kind, fields, _ = assert_same_with_and_without_fields(tensor)
    assert kind == "view"


@contextlib.contextmanager
def storage_read(enabled):
    """Within the block the data pointer is read from the StorageImpl (True) or asked of
    the getter (False)."""
    _view._set_torch_storage_enabled(enabled)
    try:
        yield
    finally:
        _view._set_torch_storage_enabled(True)


def storage_expected_in_use():
    fields_expected_in_use()
    assert _view._torch_storage_reader() in expected_storage_readers(torch)
    if _view._torch_storage_reader() != "storage":
        pytest.skip(f"the data pointer's reader is {_view._torch_storage_reader()!r} on this torch")


def test_storage_read_in_use_after_the_first_torch_view():
    """On the releases claimed the calibration proves the data pointer's read from the StorageImpl, and the switch turns it off."""
    with calibration(None):
        assert _view._torch_storage_reader() == "uncalibrated"
        StridedMemoryView(torch.ones(2), -1)
        assert _view._torch_storage_reader() in expected_storage_readers(torch)
        with storage_read(False):
            assert _view._torch_storage_reader() == "getter"


OFFSET_TENSORS = {
    "whole": lambda: torch.arange(64.0),
    "offset-1": lambda: torch.arange(64.0)[1:],
    "offset-9": lambda: torch.arange(64.0)[9:],
    "2-d-offset": lambda: torch.arange(64.0).reshape(8, 8)[3:, 2:],
    "int16-strided": lambda: torch.arange(30, dtype=torch.int16)[7:][::3],
    "complex128-offset": lambda: torch.arange(30.0).to(torch.complex128)[5:],
    "empty": lambda: torch.empty(0),
    "empty-past-the-data": lambda: torch.arange(8.0)[8:],
    "0-d": lambda: torch.tensor(2.5),
}


@pytest.mark.parametrize("name", list(OFFSET_TENSORS))
def test_storage_read_gives_the_getters_pointer(name):
    """The data pointer read from the StorageImpl is the getter's: the storage's data plus the storage offset in elements, and an empty tensor's as the getter gives it."""
    storage_expected_in_use()
    tensor = OFFSET_TENSORS[name]()
    with storage_read(True):
        read = _view._torch_fields_read(tensor)
        by_storage = outcome(tensor)
    with storage_read(False):
        asked = _view._torch_fields_read(tensor)
        by_getter = outcome(tensor)
    assert read == asked and by_storage == by_getter
    if tensor.numel():
        assert read[0] == tensor.data_ptr() == (
            tensor.untyped_storage().data_ptr() + tensor.storage_offset() * tensor.element_size()
        )


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_storage_read_follows_a_storage_changed_in_place(name):
    """After a tensor's storage or offset changes in place, the data pointer read from the StorageImpl is the new one."""
    storage_expected_in_use()
    tensor = torch.arange(12.0).reshape(3, 4)
    StridedMemoryView(tensor, -1)
    MUTATIONS[name](tensor)
    assert _view._torch_fields_read(tensor)[0] == tensor.data_ptr()
    assert StridedMemoryView(tensor, -1).ptr == tensor.data_ptr()


@pytest.mark.parametrize("entry", ["constructor", "launcher"])
def test_storage_read_leaves_a_copy_on_write_storage_to_the_getter(entry):
    """A copy-on-write tensor's view is of its own materialised memory, as the getter gives it: writing through the view leaves the tensor it was lazily cloned from as it was."""
    numpy = pytest.importorskip("numpy")
    storage_expected_in_use()
    source = torch.arange(6.0)
    clone = torch._lazy_clone(source)
    if entry == "constructor":
        view = StridedMemoryView(clone, -1)
    else:
        view = args_viewable_as_strided_memory((0,))(lambda arg: arg.view(-1))(clone)
    assert view.ptr == clone.data_ptr() != source.data_ptr()
    numpy.from_dlpack(view)[0] = 100.0
    assert source[0].item() == 0.0 and clone[0].item() == 100.0


@pytest.mark.parametrize("flag", ["throw", "warn"])
def test_storage_read_leaves_a_checked_storage_to_the_getter(flag):
    """A storage that throws or warns on mutable access is asked through the getter: the view is the same with the storage read on or off."""
    storage_expected_in_use()
    tensor = torch.arange(6.0)
    if flag == "throw":
        torch._C._set_throw_on_mutable_data_ptr(tensor)
    else:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(tensor)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with storage_read(True):
            on = outcome(tensor)
        with storage_read(False):
            off = outcome(tensor)
    assert on == off


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor=strided_tensors())
def test_storage_read_and_getter_agree(tensor):
    """For any strided tensor the data pointer read from the StorageImpl and the getter's give the same view."""
    with storage_read(True):
        on = outcome(tensor)
    with storage_read(False):
        off = outcome(tensor)
    assert on == off


def _fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


@pytest.mark.parametrize(
    "context",
    [_fake_tensor_mode, lambda: torch.device("meta"), torch.inference_mode],
    ids=["fake-tensor-mode", "meta-default-device", "inference-mode"],
)
def test_calibration_in_the_callers_torch_context_still_proves_the_direct_read(context):
    """A first torch view made under a dispatch mode, a default device or inference mode calibrates on real CPU probes."""
    real = torch.arange(6.0).reshape(2, 3)
    with calibration(None):
        with context():
            view = StridedMemoryView(real, -1)
        assert (view.ptr, view.shape, view.strides) == (real.data_ptr(), (2, 3), (3, 1))
        assert _view._torch_layout_reader() == expected_layout_reader(torch)
        assert _view._torch_fields_reader() in expected_fields_readers(torch)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_fake_tensor_is_refused_alike():
    """A FakeTensor (no real memory) gives the same outcome read directly as through the exchange API."""
    with _fake_tensor_mode():
        fake = torch.ones(3)
    kind, error_type, _ = assert_same_both_ways(fake)
    assert (kind, error_type) == ("raised", BufferError)


# --- The reader's memo in a launcher's kept view ----------------------------------------
# A launcher's proxy keeps its view, emptied, for the next launch (test_launch_reuse.py).
# When the torch reader filled it, the emptying keeps that layout's address, size and
# type beside its extents and strides, and the next fill from a tensor of exactly that
# layout keeps the ptr, shape, strides and dtype objects instead of making them again
# (_from_torch.pxi, _view_from_memo).  Every view so filled must equal a new view of the
# same tensor.


def _memo_fields(view):
    from test_hot_path_review import assert_c_layout_matches

    assert_c_layout_matches(view)
    return (
        {name: getattr(view, name) for name in FIELDS},
        view.size, view.nbytes, view.exporting_obj, view.ready_stream,
    )


def _memo_expected():
    """Whether launches keep views (the fast paths) and torch's stable-ABI reader, which
    alone leaves a memo, is in use: else no parked view ever holds one."""
    StridedMemoryView(torch.ones(1), -1)  # calibrated before the question
    return _view.fast_paths and _view._torch_layout_reader() == "stable abi"


def _memo_rounds():
    """Launches of three tensors, each argument passing from one layout to a near one:
    the same tensor again, the same address with another shape, strides or dtype, the
    same layout at another address, ranks past the memo's (7 and 8), empty tensors whose
    strides the view zeroes, a numpy array between two tensors."""
    import numpy as np

    base = torch.arange(64.0, dtype=torch.float32)
    square = base[:16].reshape(4, 4)
    other = torch.arange(64.0, dtype=torch.float32) + 1
    high = torch.zeros((2,) * 8)
    candidates = [
        square, square, square.T, base[:12].reshape(3, 4), base[:12].reshape(4, 3),
        square.view(torch.int32), other[:16].reshape(4, 4), base[1:17].reshape(4, 4),
        torch.tensor(1.5), torch.tensor(2.5), base[:16].reshape(2, 2, 2, 2, 1, 1),
        high[0], high, torch.zeros(0, 3), torch.zeros(0, 3).T, base[:0],
        base[:16].reshape(4, 4)[:, ::2], np.arange(16.0).reshape(4, 4),
    ]
    generator = np.random.default_rng(36)
    return [
        tuple(candidates[k] for k in generator.integers(0, len(candidates), size=3))
        for _ in range(150)
    ] + [(square, torch.tensor(1.5), other)] * 3


def test_a_kept_view_filled_from_the_readers_memo_is_a_new_view():
    """Launch after launch, each argument's view (its proxy's kept view, filled again and
    from the memo where the layout is the one it last held) equals a new view of the same
    tensor, C layout, size and exporting object included; and the memo is taken (three
    parked views keep one after a last launch of tensors of 2, 0 and 1 dimensions)."""
    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        return [
            (_memo_fields(arg.view(stream_ptr=-1)), _memo_fields(StridedMemoryView(arg.obj, -1)))
            for arg in (a, b, c)
        ]

    for arguments in _memo_rounds():
        for got, fresh in launch(*arguments):
            assert got == fresh
    memos = sorted(_view._reader_memo(view) for view in _parked_views())
    if _memo_expected():
        assert memos == [0, 1, 2]
    else:
        assert all(memo is None for memo in memos)


def test_the_memo_is_kept_only_for_a_layout_the_reader_wrote():
    """After a launch, a parked view keeps a memo where the torch reader filled it (a plain
    tensor of at most 6 dimensions, under a TorchFunctionMode too) and none where anything
    else did: a numpy array, a 7-d tensor, a tensor read through the exchange API, a view
    whose fill raised.  (Where no memo is expected, none is found.)"""
    import numpy as np

    class PassingMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        for arg in (a, b, c):
            try:
                arg.view(stream_ptr=-1)
            except BufferError:  # caught here, so that the traceback keeps no proxy
                pass

    expected = _memo_expected()

    def expect_memos(wanted):
        found = sorted((memo is None, memo) for memo in map(_view._reader_memo, _parked_views()))
        if expected:
            assert found == wanted
        else:
            assert all(memo is None for _, memo in found)

    plain = torch.arange(12.0).reshape(3, 4)
    launch(plain, torch.tensor(1.0), torch.zeros((2,) * 6))
    expect_memos([(False, 0), (False, 2), (False, 6)])
    with layout("exchange api"):
        launch(np.arange(3.0), torch.zeros((1,) * 7), plain)
    expect_memos([(True, None)] * 3)
    launch(plain, plain, plain)
    launch(plain, REFUSED["negative-bit"](), plain)
    expect_memos([(False, 2), (False, 2), (True, None)])
    launch(plain, plain, plain)
    with layout("exchange api"):
        launch(plain, plain, plain)
    expect_memos([(True, None)] * 3)
    # Under a mode the getters read the tensor once the mode has been asked for its
    # bits: the reader's, so the memo is kept.
    with PassingMode():
        launch(plain, plain, plain)
    expect_memos([(False, 2)] * 3)


def test_a_parked_view_filled_from_outside_forgets_its_memo():
    """A parked view filled by _fill_parked_view (what code that finds it through the
    collector could do) holds no memo afterwards, even where the fill raised half-way, so
    that the proxy's next fill cannot trust objects that no longer match it.  (Where no
    memo is expected, none is found.)"""

    @args_viewable_as_strided_memory((0,))
    def launch(a):
        a.view(stream_ptr=-1)

    tensor = torch.arange(12.0).reshape(3, 4)
    launch(tensor)
    with_memo = [view for view in _parked_views() if _view._reader_memo(view) == 2]
    if not _memo_expected():
        assert with_memo == []
        return
    parked = with_memo[0]
    with pytest.raises(BufferError):
        _view._fill_parked_view(parked, REFUSED["negative-bit"]())
    assert _view._reader_memo(parked) is None
