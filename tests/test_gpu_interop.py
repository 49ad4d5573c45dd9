"""Views of real CUDA arrays (CuPy, Numba, torch) through DLPack and the CUDA Array Interface,
and views handed on to another library.

Each view is checked field by field against what the producer itself reports: the
pointer of element [0, 0], shape, strides in elements, dtype, device, and that a
consumer of the view gets the same memory and values.  Run on a machine with a GPU and
the ``gpu`` extra (a missing library fails there, ``conftest.gpu_import``); without a
GPU every test here skips with the reason "needs a CUDA GPU and driver".
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TWO_GPUS_SKIP_REASON, gpu_import
from stridedview import StridedMemoryView, _driver

pytestmark = pytest.mark.gpu

HOST = np.arange(24, dtype=np.float32).reshape(4, 6)
#: HOST[:, ::2]: shape (4, 3), strides (6, 2) in elements.
EXPECTED = HOST[:, ::2]


@pytest.fixture(autouse=True)
def real_driver():
    """The real CUDA driver behind the seam, whatever an earlier test installed."""
    _driver.use_api(None)
    yield
    _driver.use_api(None)


def _torch():
    torch = gpu_import("torch")
    if not torch.cuda.is_available():
        pytest.fail("this machine has a CUDA GPU but torch has no CUDA: install torch with CUDA")
    return torch


def _cupy_array(device=0):
    cp = gpu_import("cupy")
    with cp.cuda.Device(device):
        return cp.asarray(HOST)[:, ::2]


def _numba_array(device=0):
    numba_cuda = gpu_import("numba.cuda")
    with numba_cuda.gpus[device]:
        return numba_cuda.to_device(HOST)[:, ::2]


def _torch_tensor(device=0):
    return _torch().as_tensor(HOST, device=f"cuda:{device}")[:, ::2]


#: name -> (make(device), address of element [0, 0], device ordinal, values as numpy)
PRODUCERS = {
    "cupy": (_cupy_array, lambda a: a.data.ptr, lambda a: a.device.id, lambda a: a.get()),
    "numba": (
        _numba_array, lambda a: a.__cuda_array_interface__["data"][0],
        lambda a: gpu_import("cupy").cuda.runtime.pointerGetAttributes(
            a.__cuda_array_interface__["data"][0]
        ).device,
        lambda a: a.copy_to_host(),
    ),
    "torch": (_torch_tensor, lambda t: t.data_ptr(), lambda t: t.device.index, lambda t: t.cpu().numpy()),
}

#: Which protocols each producer speaks.
PROTOCOLS = [("cupy", "dlpack"), ("cupy", "cai"), ("numba", "cai"), ("torch", "dlpack"), ("torch", "cai")]


def _view(obj, protocol, stream_ptr=-1):
    if protocol == "dlpack":
        return StridedMemoryView.from_dlpack(obj, stream_ptr=stream_ptr)
    return StridedMemoryView.from_cuda_array_interface(obj, stream_ptr=stream_ptr)


def _check_fields(view, obj, name, device):
    make, address, device_of, values = PRODUCERS[name]
    assert view.ptr == address(obj)
    assert view.shape == (4, 3)
    assert view.strides == (6, 2)
    assert view.dtype == np.dtype("float32")
    assert view.device_id == device == device_of(obj)
    assert view.is_device_accessible is True
    assert view.exporting_obj is obj
    np.testing.assert_array_equal(values(obj), EXPECTED)


@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_fields_match_the_producer(name, protocol):
    """A strided CUDA array viewed through each protocol it speaks has the producer's pointer, shape, strides, dtype and device."""
    obj = PRODUCERS[name][0](0)
    _check_fields(_view(obj, protocol), obj, name, 0)


@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_on_the_second_device(name, protocol):
    """An array on device 1, viewed while device 0 is current, reports device 1 and its own pointer."""
    cp = gpu_import("cupy")
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip(TWO_GPUS_SKIP_REASON)
    obj = PRODUCERS[name][0](1)
    with cp.cuda.Device(0):
        view = _view(obj, protocol)
    _check_fields(view, obj, name, 1)


def _consume_cupy_dlpack(view):
    cp = gpu_import("cupy")
    return cp.from_dlpack(view), lambda a: a.data.ptr, lambda a: a.get()


def _consume_cupy_cai(view):
    cp = gpu_import("cupy")
    return cp.asarray(view), lambda a: a.data.ptr, lambda a: a.get()


def _consume_numba_cai(view):
    numba_cuda = gpu_import("numba.cuda")
    return (
        numba_cuda.as_cuda_array(view),
        lambda a: a.__cuda_array_interface__["data"][0],
        lambda a: a.copy_to_host(),
    )


def _consume_torch_dlpack(view):
    torch = _torch()
    return torch.from_dlpack(view), lambda t: t.data_ptr(), lambda t: t.cpu().numpy()


CONSUMERS = {
    "cupy-dlpack": _consume_cupy_dlpack,
    "cupy-cai": _consume_cupy_cai,
    "numba-cai": _consume_numba_cai,
    "torch-dlpack": _consume_torch_dlpack,
}


@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize(("name", "protocol"), PROTOCOLS, ids=[f"{n}-{p}" for n, p in PROTOCOLS])
def test_gpu_view_handed_on_to_another_library(name, protocol, consumer):
    """A view of each producer, handed on to each consumer, gives it the same memory and the same values."""
    cp = gpu_import("cupy")
    obj = PRODUCERS[name][0](0)
    view = _view(obj, protocol, stream_ptr=cp.cuda.get_current_stream().ptr)
    received, address, values = CONSUMERS[consumer](view)
    assert address(received) == view.ptr
    np.testing.assert_array_equal(values(received), EXPECTED)


def test_gpu_numba_to_torch_bridge_writes_through():
    """Numba (CAI only) to torch (DLPack) through a view: a write in torch is seen by Numba."""
    torch = _torch()
    numba_cuda = gpu_import("numba.cuda")
    array = numba_cuda.to_device(np.zeros(8, dtype=np.float32))
    view = StridedMemoryView(array, stream_ptr=-1)
    tensor = torch.from_dlpack(view)
    tensor += 3
    torch.cuda.synchronize()
    np.testing.assert_array_equal(array.copy_to_host(), np.full(8, 3, dtype=np.float32))
