"""The defects a review of 5c7bc5b found, each pinned by a test that failed
before its fix: a view of memory that only an interface dict kept alive, a per-type cache never
refreshed, a failed exchange-API call without an exception, Python run between borrowing a torch
layout and using it, an uninitialised launcher, a CAI 'descr' of the wrong type, and
from_buffer's ``itemsize``.  (Legacy capsules read as read-only: tests/test_dlpack.py and
tests/test_interop.py.)"""

from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

import producers
from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory


def _float64_at(address):
    return np.frombuffer(ctypes.string_at(address, 8), dtype=np.float64)[0]


# --- 1. what keeps the memory alive ------------------------------------------------------


@pytest.mark.parametrize("value", [1.5, -2.25, 1e300])
def test_numpy_scalar_view_keeps_its_temporary_array_alive(value):
    """A numpy scalar's __array_interface__ describes a temporary array that only the dict's
    '__ref' keeps alive: the view keeps it, so after thousands of allocations its memory still
    holds the scalar's value."""
    view = StridedMemoryView(np.float64(value))
    assert view.shape == () and view.dtype == np.float64
    clutter = [np.full(1, 7.0) for _ in range(3000)]
    assert _float64_at(view.ptr) == value
    del clutter


class _InterfaceOwner:
    """An object whose interface dict alone holds the array that owns the memory."""

    def __init__(self, protocol):
        self.protocol = protocol
        self.owner_ref = None

    def _interface(self):
        owner = np.arange(4.0)
        self.owner_ref = weakref.ref(owner)
        interface = {
            "version": 3,
            "shape": (4,),
            "typestr": "<f8",
            "data": (owner.ctypes.data, False),
            "strides": None,
            "owner": owner,
        }
        if self.protocol == "cai":
            interface["stream"] = None
        return interface

    @property
    def __array_interface__(self):
        if self.protocol != "ai":
            raise AttributeError("__array_interface__")
        return self._interface()

    @property
    def __cuda_array_interface__(self):
        if self.protocol != "cai":
            raise AttributeError("__cuda_array_interface__")
        return self._interface()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["ai", "cai"])
def test_view_keeps_the_interface_dict_and_what_it_holds_alive(protocol):
    """For an array interface or a CUDA Array Interface producer whose dict owns the memory,
    the view keeps that owner alive as long as it lives, and no longer."""
    producer = _InterfaceOwner(protocol)
    view = StridedMemoryView(producer, stream_ptr=-1)
    gc.collect()
    assert producer.owner_ref() is not None
    derived = view[1:]
    del view
    gc.collect()
    assert producer.owner_ref() is not None  # a derived view keeps the root's owner
    del derived
    gc.collect()
    assert producer.owner_ref() is None


# --- 2. the per-type cache follows the type ----------------------------------------------


def test_numpy_subclass_given_dlpack_after_its_first_view_is_asked():
    """A numpy subclass viewed once through the numpy adapter, then given __dlpack__, has its
    new __dlpack__ called, as the general path would."""
    calls = []

    class Late(np.ndarray):
        pass

    array = np.arange(4.0).view(Late)
    StridedMemoryView(array)

    def dlpack(self, **kwargs):
        calls.append(kwargs)
        return np.ndarray.__dlpack__(self, **kwargs)

    Late.__dlpack__ = dlpack
    view = StridedMemoryView(array)
    assert len(calls) == 1 and view.ptr == array.ctypes.data
    del Late.__dlpack__
    StridedMemoryView(array)
    assert len(calls) == 1  # numpy's own again: the adapter, no call


@pytest.mark.torch
def test_torch_subclass_given_dlpack_after_its_first_view_is_asked():
    """A torch subclass viewed once through the exchange API or the direct reader, then given
    __dlpack__, has its new __dlpack__ called."""
    torch = pytest.importorskip("torch")
    calls = []

    class Late(torch.Tensor):
        pass

    tensor = torch.arange(4.0).as_subclass(Late)
    StridedMemoryView(tensor)

    def dlpack(self, *args, **kwargs):
        calls.append(kwargs)
        return torch.Tensor.__dlpack__(self, *args, **kwargs)

    Late.__dlpack__ = dlpack
    view = StridedMemoryView(tensor)
    assert len(calls) == 1 and view.ptr == tensor.data_ptr()


@pytest.mark.torch
def test_torch_subclass_given_torch_function_after_its_first_view_has_it_called():
    """A torch subclass given __torch_function__ after its first view has the bits asked
    through it (its is_neg goes through __torch_function__), as a subclass defined with it."""
    torch = pytest.importorskip("torch")
    seen = []

    class Late(torch.Tensor):
        pass

    tensor = torch.arange(4.0).as_subclass(Late)
    StridedMemoryView(tensor)

    @classmethod
    def handler(cls, func, types, args=(), kwargs=None):
        seen.append(getattr(func, "__name__", func))
        return super(Late, cls).__torch_function__(func, types, args, kwargs or {})

    Late.__torch_function__ = handler
    StridedMemoryView(tensor)
    assert "is_neg" in seen


@pytest.mark.torch
def test_torch_instance_dlpack_is_honoured():
    """An instance-level __dlpack__ on a torch tensor is called, as Python looks methods up,
    like the numpy adapter honours one on a numpy array."""
    torch = pytest.importorskip("torch")
    calls = []
    for obj in (torch.arange(4.0), np.arange(4.0).view(type("Sub", (np.ndarray,), {}))):
        own = type(obj).__dlpack__

        def dlpack(*args, _own=own, _obj=obj, **kwargs):
            calls.append(type(_obj).__name__)
            return _own(_obj, *args, **kwargs)

        obj.__dlpack__ = dlpack
        view = StridedMemoryView(obj)
        assert view.shape == (4,)
    assert calls == ["Tensor", "Sub"]


# --- 4. a failed exchange-API call without an exception -----------------------------------

_LENT = {}


@producers.DLTensorFromPyObject
def _lend(address, out):
    out[0] = _LENT[address]
    return 0


@producers.CurrentWorkStream
def _work_stream_fails_silently(device_type, device_id, out):
    return -1  # as a 1.2-era table documents: failed, and no exception set


class _SilentWorkStreamFailure:
    _table, __dlpack_c_exchange_api__ = producers.exchange_api(_lend, _work_stream_fails_silently)

    def __init__(self):
        self.shape = (ctypes.c_int64 * 1)(4)
        tensor = producers.DLTensor()
        tensor.data = 0x10000
        tensor.device = producers.DLDevice(2, 0)  # CUDA: a stream is ordered
        tensor.ndim = 1
        tensor.dtype = producers.DLDataType(2, 32, 1)
        tensor.shape = self.shape
        _LENT[id(self)] = tensor

    def __dlpack__(self, **kwargs):
        raise AssertionError("the exchange API must be used")

    def __dlpack_device__(self):
        return (2, 0)


def test_exchange_api_failure_without_an_exception_is_a_buffer_error():
    """current_work_stream returning -1 with no exception set is a BufferError naming the
    producer and the function (it was a SystemError: -1 returned, no error set)."""
    producer = _SilentWorkStreamFailure()
    try:
        with pytest.raises(
            BufferError,
            match="^dlpack: the exchange API of '_SilentWorkStreamFailure' failed in "
            "current_work_stream without setting an error$",
        ):
            StridedMemoryView(producer, stream_ptr=7)
    finally:
        _LENT.pop(id(producer))


# --- 5. no Python between borrowing a torch layout and using it ---------------------------


@pytest.mark.torch
def test_torch_tensor_resized_by_its_is_neg_is_viewed_as_it_is_afterwards():
    """A subclass whose is_neg resizes the tensor (Python run by the bits check) is viewed with
    the layout it has once the check is done: the check runs before the layout is borrowed."""
    torch = pytest.importorskip("torch")

    class Resizing(torch.Tensor):
        def is_neg(self):
            with torch._C.DisableTorchFunction():
                self.resize_(4096)  # a new, larger allocation; the old memory is freed
                return torch.Tensor.is_neg(self)

    tensor = torch.zeros(2).as_subclass(Resizing)
    view = StridedMemoryView(tensor)
    assert view.shape == (4096,)
    assert view.ptr == tensor.data_ptr()


# --- 6. a launcher made without __init__ --------------------------------------------------


def test_launcher_made_without_init_refuses_to_be_called():
    """type(launcher).__new__ gives a launcher whose call is a TypeError, never a read of None
    as a tuple."""

    @args_viewable_as_strided_memory((0,))
    def launch(x):
        return x

    bare = type(launch).__new__(type(launch))
    with pytest.raises(TypeError, match="this launcher was never initialised"):
        bare(np.zeros(3))
    with pytest.raises(TypeError, match="this launcher was never initialised"):
        bare(x=np.zeros(3))


# --- 7. a CAI or array interface 'descr' that is not a list -------------------------------


class _Described:
    def __init__(self, protocol, descr):
        self.array = np.arange(4, dtype=np.float32)
        interface = dict(self.array.__array_interface__, descr=descr)
        if protocol == "cai":
            interface["stream"] = None
            self.__cuda_array_interface__ = interface
        else:
            self.__array_interface__ = interface


@pytest.mark.parametrize("protocol, prefix", [("cai", "cuda array interface"), ("ai", "array interface")])
@pytest.mark.parametrize("descr", [42, "x", ("", "<f4")], ids=repr)
def test_descr_that_is_not_a_list_is_refused(protocol, prefix, descr):
    """A 'descr' that is not a list is a TypeError quoting it (it was ignored)."""
    with pytest.raises(TypeError, match=f"^{prefix}: 'descr' must be a list of"):
        StridedMemoryView(_Described(protocol, descr), stream_ptr=-1)


# --- 8. from_buffer(..., itemsize=n) without a dtype --------------------------------------


@pytest.mark.parametrize("source", [bytearray(16), np.arange(4, dtype=np.float32)], ids=["bytes", "float32"])
def test_from_buffer_itemsize_alone_gives_opaque_elements(source):
    """itemsize without a dtype gives opaque V<n> elements, as documented, even where the
    buffer's own elements have that size (it gave the buffer's own format then)."""
    view = StridedMemoryView.from_buffer(source, itemsize=4)
    assert view.dtype == np.dtype("V4")
    assert view.shape == (4,)
    assert StridedMemoryView.from_buffer(source).dtype == np.dtype(memoryview(source).format)
