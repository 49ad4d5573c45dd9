"""Re-export: a StridedMemoryView handed on through DLPack and the CUDA Array Interface.

The rules of docs/concepts.md ("Handing a view on") and docs/errors.md ("Export").
Three levels:

- round trips through real consumers on the CPU (numpy, torch and jax each consume
  views of numpy, torch and jax arrays): same values, same memory, same strides
  and dtype, read-only kept;
- the capsule itself, read back with ctypes: its name, version, flags and every
  DLTensor field, and the lifetime of the view and of the original object;
- the CUDA Array Interface of device-accessible views and the stream ordering of
  an export, against the modelling fake driver (no GPU needed).

Producer quirks (docs/interop.md): torch 2.13.0 aborts the process on negative-stride
DLPack input, so only positive-stride views are ever handed to torch; jax copies
host buffers that are not 64-byte aligned instead of sharing them; numpy cannot
import bfloat16 or float8.
"""

from __future__ import annotations

import ctypes
import gc
import re
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

from jax_dlpack import jax_asks_for_versioned
from producers import (
    DTYPES,
    IS_SUBBYTE_TYPE_PADDED,
    READ_ONLY,
    DLManagedTensor,
    DLManagedTensorVersioned,
    capsule_name,
    deleter_calls,
    make_producer,
)
from stridedview import StridedMemoryView

#: jax shares a host buffer only when it is aligned to this many bytes (measured: it copies otherwise).
JAX_ALIGNMENT = 64

pytestmark = pytest.mark.usefixtures("forbidden_driver")


# --- helpers -------------------------------------------------------------------------

_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def read_capsule(capsule):
    """Every field of an unconsumed DLPack capsule, read with ctypes, as a dict."""
    name = capsule_name(capsule)
    address = _PyCapsule_GetPointer(capsule, name.encode())
    if name == "dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(address)
        version = (managed.version.major, managed.version.minor)
        flags = managed.flags
    elif name == "dltensor":
        managed = DLManagedTensor.from_address(address)
        version = flags = None
    else:
        raise AssertionError(f"unexpected capsule name {name!r}")
    tensor = managed.dl_tensor
    ndim = tensor.ndim
    return {
        "name": name,
        "version": version,
        "flags": flags,
        "manager_ctx": managed.manager_ctx,
        "has_deleter": bool(managed.deleter),
        "data": tensor.data or 0,
        "device": (tensor.device.device_type, tensor.device.device_id),
        "ndim": ndim,
        "dtype": (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes),
        "shape": None if not tensor.shape else tuple(tensor.shape[i] for i in range(ndim)),
        "strides": None if not tensor.strides else tuple(tensor.strides[i] for i in range(ndim)),
        "byte_offset": tensor.byte_offset,
    }


class CapsuleHolder:
    """Hands a ready-made capsule to a consumer that wants an object with ``__dlpack__``."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule = capsule
        self.device = device

    def __dlpack__(self, **kwargs):
        capsule, self.capsule = self.capsule, None
        return capsule

    def __dlpack_device__(self):
        return self.device


class HostCAI:
    """A CUDA Array Interface producer over a numpy array (host memory); every key settable.

    ``keys`` replace (or, with value ``DROP``, remove) keys of the version-3 dict
    numpy's ``__array_interface__`` suggests.
    """

    DROP = object()

    def __init__(self, array=None, **keys):
        if array is None:
            array = np.arange(6, dtype=np.float32).reshape(2, 3)
        self.array = array
        host = array.__array_interface__
        self.interface = {
            "version": 3,
            "shape": tuple(array.shape),
            "typestr": host["typestr"],
            "data": (host["data"][0], False),
            "strides": host["strides"],
        }
        for key, value in keys.items():
            if value is HostCAI.DROP:
                self.interface.pop(key, None)
            else:
                self.interface[key] = value

    @property
    def ptr(self):
        return self.array.__array_interface__["data"][0]

    @property
    def __cuda_array_interface__(self):
        return self.interface


def aligned(shape, dtype=np.float32, *, offset=0):
    """A zero-filled numpy array whose data start ``offset`` bytes past a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(nbytes + 2 * JAX_ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % JAX_ALIGNMENT + offset
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def fields(view, *, device_id=True):
    """The fields two views of the same memory share (exporting_obj aside)."""
    result = (
        view.ptr, view.shape, view.strides, view.dtype, view.is_device_accessible, view.readonly
    )
    return result + (view.device_id,) if device_id else result





def cai_view(fake, array=None, *, stream_ptr=-1, device=0, readonly=False, **keys):
    """A view of a HostCAI producer whose pointer the fake driver knows as device memory."""
    producer = HostCAI(array, **keys)
    if readonly:
        producer.interface["data"] = (producer.ptr, True)
    fake.register_pointer(producer.ptr, max(producer.array.nbytes, 1), device=device)
    return StridedMemoryView(producer, stream_ptr), producer


# --- round trips through real consumers --------------------------------------------

LAYOUTS = ["matrix", "slice", "transpose", "unaligned"]


def _numpy_make(layout):
    if layout == "matrix":
        array = aligned((3, 3))
    elif layout == "slice":
        array = aligned((6, 6))[::2, ::2]  # positive steps only
    elif layout == "transpose":
        array = aligned((3, 3)).T
    else:
        array = aligned((3, 3), offset=16)  # jax copies such a buffer
    array[...] = np.arange(array.size, dtype=np.float32).reshape(array.shape) * 1.5
    return array


def _torch_make(layout):
    import torch

    if layout == "matrix":
        return torch.arange(9, dtype=torch.float32).reshape(3, 3) * 1.5
    if layout == "slice":
        return (torch.arange(36, dtype=torch.float32).reshape(6, 6) * 1.5)[::2, ::2]
    if layout == "transpose":
        return (torch.arange(9, dtype=torch.float32).reshape(3, 3) * 1.5).T
    raise ValueError(layout)


def _jax_make(layout):
    import jax.numpy as jnp

    base = jnp.arange(36, dtype=jnp.float32).reshape(6, 6) * 1.5
    if layout == "matrix":
        return base[:3, :3]
    if layout == "slice":
        return base[::2, ::2]  # jax materialises slices: compact row-major
    if layout == "transpose":
        return base[:3, :3].T
    raise ValueError(layout)


def _numpy_truth(array):
    """(address, element strides, values, dtype name) of a numpy array."""
    itemsize = array.dtype.itemsize
    return (
        array.__array_interface__["data"][0],
        tuple(s // itemsize for s in array.strides),
        array.tolist(),
        array.dtype.name,
    )


def _torch_truth(tensor):
    return (tensor.data_ptr(), tuple(tensor.stride()), tensor.float().tolist(), str(tensor.dtype).removeprefix("torch."))


def _jax_truth(array):
    # jax has no stride API: the layout is what jax itself exports through DLPack.
    exported = np.from_dlpack(array) if array.dtype.name in ("float32", "int32") else None
    strides = None if exported is None else tuple(s // exported.itemsize for s in exported.strides)
    return (array.unsafe_buffer_pointer(), strides, np.asarray(array, dtype=np.float32).tolist(), array.dtype.name)


PRODUCERS = {
    "numpy": ("numpy", _numpy_make, _numpy_truth),
    "torch": ("torch", _torch_make, _torch_truth),
    "jax": ("jax", _jax_make, _jax_truth),
}


LEGACY_READ_ONLY = re.escape("dlpack: a read-only view cannot be exported as a legacy capsule")


def _consume_numpy(view):
    return np.from_dlpack(view)


def _consume_torch(view):
    import torch

    return torch.from_dlpack(view)


def _consume_jax(view):
    import jax.numpy as jnp

    return jnp.from_dlpack(view)


CONSUMERS = {
    "numpy": ("numpy", _consume_numpy, _numpy_truth),
    "torch": ("torch", _consume_torch, _torch_truth),
    "jax": ("jax", _consume_jax, _jax_truth),
}


def _compact(shape, strides):
    """Whether element strides are a permutation of a dense row-major layout (what jax accepts)."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    expected = 1
    for stride, extent in dims:
        if stride != expected:
            return False
        expected *= extent
    return True


# "unaligned" only for numpy: torch's and jax's allocators always align to 64 bytes.
ROUND_TRIPS = [
    pytest.param(
        producer, consumer, layout, id=f"{producer}->{consumer}-{layout}",
        marks=[getattr(pytest.mark, name) for name in ("torch", "jax") if name in (producer, consumer)],
    )
    for producer in PRODUCERS
    for consumer in CONSUMERS
    for layout in LAYOUTS
    if layout != "unaligned" or producer == "numpy"
]


@pytest.mark.interop
@pytest.mark.parametrize("producer, consumer, layout", ROUND_TRIPS)
def test_round_trip(producer, consumer, layout):
    """A consumer sees the producer's values in the same memory, with the same strides and dtype, through the view."""
    module, make, truth = PRODUCERS[producer]
    pytest.importorskip(module)
    consumer_module, consume, consumer_truth = CONSUMERS[consumer]
    pytest.importorskip(consumer_module)
    source = make(layout)
    address, strides, values, dtype_name = truth(source)
    view = StridedMemoryView(source)
    assert view.ptr == address
    if strides is not None:
        assert view.strides == strides
    assert view.dtype.name == dtype_name
    if layout == "slice" and producer != "jax":
        assert view.strides == (12, 2)
    if layout == "transpose" and producer != "jax":
        assert view.strides == (1, 3)

    if producer == "jax" and consumer == "jax" and not jax_asks_for_versioned():
        # A jax array's view is read-only, and this jax asks for a legacy capsule back,
        # which cannot carry READ_ONLY: refused, never made writable.
        with pytest.raises(BufferError, match=LEGACY_READ_ONLY):
            consume(view)
        return
    if consumer == "jax" and not _compact(view.shape, view.strides):
        # jax imports dense layouts only (any axis order); a gapped one is refused,
        # never misread.
        with pytest.raises(Exception, match="(?i)strid"):
            consume(view)
        return
    received = consume(view)
    got_address, got_strides, got_values, got_dtype = consumer_truth(received)
    if consumer == "jax" and got_values != values:
        # jax 0.6 (the newest for Python 3.10) misreads a zero-copy import whose strides are
        # not row-major, from any producer: the view must then hand jax exactly what the
        # producer's own capsule gives it, and nothing else may differ.
        direct = consumer_truth(consume(source))[2]
        assert direct != values, "jax reads the producer's own capsule right but not the view's"
        assert got_values == direct
        assert layout == "transpose"
        return
    assert got_values == values
    assert got_dtype == dtype_name
    if consumer != "jax":
        assert got_strides == view.strides
    if consumer == "jax" and view.ptr % JAX_ALIGNMENT:
        # jax copies host buffers that are not 64-byte aligned: only the values are
        # guaranteed (the report lists such cells as copies).
        return
    assert got_address == view.ptr


@pytest.mark.interop
@pytest.mark.parametrize("consumer", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_round_trip_writes_show_in_the_source(consumer):
    """A write through the consumer's array lands in the producer's memory (numpy and torch import writable)."""
    pytest.importorskip(CONSUMERS[consumer][0])
    source = _numpy_make("slice")
    received = CONSUMERS[consumer][1](StridedMemoryView(source))
    received[1, 1] = -7.0
    assert source[1, 1] == -7.0


LOW_PRECISION = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]


def _low_precision(producer, dtype_name):
    if producer == "torch":
        torch = pytest.importorskip("torch")
        return torch.arange(9, dtype=torch.float32).reshape(3, 3).to(getattr(torch, dtype_name))
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(9, dtype=jnp.float32).reshape(3, 3).astype(dtype_name)


def _as_floats(array):
    if hasattr(array, "float"):
        return array.float().tolist()
    return np.asarray(array, dtype=np.float32).tolist()


@pytest.mark.jax
@pytest.mark.torch
@pytest.mark.interop
@pytest.mark.parametrize("dtype_name", LOW_PRECISION)
@pytest.mark.parametrize("consumer", ["torch", "jax"])
@pytest.mark.parametrize("producer", ["torch", "jax"])
def test_round_trip_low_precision(producer, consumer, dtype_name):
    """bfloat16 and float8 keep their dtype and memory through a view between torch and jax (numpy cannot import them)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    pytest.importorskip(producer)
    pytest.importorskip(CONSUMERS[consumer][0])
    source = _low_precision(producer, dtype_name)
    view = StridedMemoryView(source)
    assert view.dtype == np.dtype(getattr(ml_dtypes, dtype_name))
    if producer == "jax" and consumer == "jax" and not jax_asks_for_versioned():
        # read-only, and this jax asks for a legacy capsule
        with pytest.raises(BufferError, match=LEGACY_READ_ONLY):
            CONSUMERS[consumer][1](view)
        return
    received = CONSUMERS[consumer][1](view)
    got_address, _, _, got_dtype = CONSUMERS[consumer][2](received)
    assert got_dtype == dtype_name
    assert _as_floats(received) == _as_floats(source)
    assert got_address == view.ptr  # torch and jax allocations are 64-byte aligned


@pytest.mark.torch
@pytest.mark.interop
def test_numpy_cannot_import_bfloat16_view():
    """numpy refuses a bfloat16 capsule (its own limit); the view exports (4, 16, 1) all the same."""
    torch = pytest.importorskip("torch")
    view = StridedMemoryView(torch.zeros(3, dtype=torch.bfloat16))
    assert read_capsule(view.__dlpack__(max_version=(1, 3)))["dtype"] == (4, 16, 1)
    with pytest.raises((BufferError, RuntimeError, TypeError)):
        np.from_dlpack(view)


def test_readonly_kept_through_numpy():
    """A read-only numpy array gives a read-only view, and numpy.from_dlpack of the view a non-writeable array."""
    source = np.arange(6, dtype=np.float64).reshape(2, 3)
    source.flags.writeable = False
    view = StridedMemoryView(source)
    assert view.readonly is True
    received = np.from_dlpack(view)
    assert received.flags.writeable is False
    assert received.__array_interface__["data"][0] == view.ptr
    assert received.tolist() == source.tolist()


def test_writable_stays_writable_through_numpy():
    """A writable view is imported by numpy (versioned capsule, no READ_ONLY) as writable."""
    source = np.zeros(3)
    received = np.from_dlpack(StridedMemoryView(source))
    assert received.flags.writeable is True


@pytest.mark.jax
@pytest.mark.interop
def test_jax_takes_a_readonly_view_only_through_a_versioned_capsule():
    """A jax that asks for a legacy capsule (no max_version, jax 0.10) is refused a read-only
    view (a legacy capsule cannot carry READ_ONLY); one that asks for a versioned capsule
    (jax 0.12) gets it flagged READ_ONLY, and the same memory."""
    jnp = pytest.importorskip("jax.numpy")
    source = aligned((2, 3))
    source.flags.writeable = False
    view = StridedMemoryView(source)
    if not jax_asks_for_versioned():
        with pytest.raises(BufferError, match=LEGACY_READ_ONLY):
            jnp.from_dlpack(view)
        return
    taken = jnp.from_dlpack(view)
    assert np.asarray(taken).tolist() == source.tolist()
    assert taken.unsafe_buffer_pointer() == source.ctypes.data


# --- the capsule ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "max_version, name, version",
    [
        (None, "dltensor", None),
        ((0, 8), "dltensor", None),
        ((1, 0), "dltensor_versioned", (1, 0)),
        ((1, 1), "dltensor_versioned", (1, 1)),
        ((1, 3), "dltensor_versioned", (1, 3)),
        ((1, 9), "dltensor_versioned", (1, 3)),
        ((2, 0), "dltensor_versioned", (1, 3)),
    ],
    ids=["None", "0.8", "1.0", "1.1", "1.3", "1.9", "2.0"],
)
def test_capsule_kind_and_version(max_version, name, version):
    """max_version picks the capsule: legacy below 1.0, else versioned (1, min(3, minor)), or (1, 3) for a newer major."""
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = StridedMemoryView(source)
    capsule = view.__dlpack__(max_version=max_version)
    got = read_capsule(capsule)
    assert got["name"] == name
    assert got["version"] == version
    if version is not None:
        assert got["flags"] == 0
    assert got["data"] == view.ptr
    assert got["device"] == (1, 0)
    assert got["ndim"] == 2
    assert got["dtype"] == (2, 32, 1)
    assert got["shape"] == (2, 3)
    assert got["strides"] == (3, 1)  # explicit even when C-contiguous
    assert got["byte_offset"] == 0
    assert got["has_deleter"]


@pytest.mark.parametrize("max_version", [(1, 3), (1, 0)], ids=["1.3", "1.0"])
def test_readonly_flag_set(max_version):
    """A read-only view's versioned capsule carries READ_ONLY, and nothing else."""
    source = np.arange(4.0)
    source.flags.writeable = False
    got = read_capsule(StridedMemoryView(source).__dlpack__(max_version=max_version))
    assert got["flags"] == READ_ONLY


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24, dtype=np.int16).reshape(4, 6)[1:, 2::2],
        lambda: np.arange(24, dtype=np.int16).reshape(4, 6)[::-1, ::-2],
        lambda: np.arange(6, dtype=np.complex128).reshape(3, 2).T,
        lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    ],
    ids=["offset-slice", "negative-strides", "transposed", "broadcast"],
)
def test_capsule_byte_offset_folded_and_strides_explicit(make):
    """data is the view's ptr (the first element) with byte_offset 0; shape and element strides written as viewed."""
    source = make()
    view = StridedMemoryView(source)
    got = read_capsule(view.__dlpack__(max_version=(1, 3)))
    assert got["data"] == view.ptr == source.__array_interface__["data"][0]
    assert got["byte_offset"] == 0
    assert got["shape"] == view.shape == source.shape
    assert got["strides"] == view.strides == tuple(s // source.itemsize for s in source.strides)


def test_capsule_of_producer_with_byte_offset():
    """A DLPack producer's byte_offset is folded into data on re-export."""
    producer = make_producer(byte_offset=24)
    view = StridedMemoryView(producer)
    for max_version in (None, (1, 3)):
        got = read_capsule(view.__dlpack__(max_version=max_version))
        assert got["data"] == producer.expected_ptr == producer.data + 24
        assert got["byte_offset"] == 0
    del view
    producer.release_capsules()


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0, 2)], ids=["0", "0x3", "3x0x2"])
def test_capsule_data_null_for_size_0(max_version, shape):
    """A zero-size view exports a NULL data pointer, whatever the producer's pointer."""
    view = StridedMemoryView(np.zeros(shape, dtype=np.float32))
    got = read_capsule(view.__dlpack__(max_version=max_version))
    assert got["data"] == 0
    assert got["shape"] == shape
    assert got["strides"] == view.strides


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_capsule_0d_has_null_shape_and_strides(max_version):
    """A 0-d view exports ndim 0 with NULL shape and strides and a real data pointer."""
    source = np.array(2.5)
    view = StridedMemoryView(source)
    got = read_capsule(view.__dlpack__(max_version=max_version))
    assert got["ndim"] == 0
    assert got["shape"] is None
    assert got["strides"] is None
    assert got["data"] == view.ptr != 0
    assert np.from_dlpack(view).tolist() == 2.5


_BYTE_TYPES = [name for name, (_, bits) in DTYPES.items() if bits >= 8]
_SUB_BYTE_TYPES = [name for name, (_, bits) in DTYPES.items() if bits < 8]


@pytest.mark.parametrize("dtype_name", _BYTE_TYPES)
def test_capsule_dtype_mapped_back(dtype_name):
    """Every DLPack dtype the view reads (bfloat16 and float8 kinds included) is written back with the same code and bits."""
    producer = make_producer(dtype=dtype_name)
    view = StridedMemoryView(producer)
    code, bits = DTYPES[dtype_name]
    for max_version in (None, (1, 3)):
        assert read_capsule(view.__dlpack__(max_version=max_version))["dtype"] == (code, bits, 1)
    del view
    producer.release_capsules()


@pytest.mark.parametrize("dtype_name", _SUB_BYTE_TYPES)
def test_capsule_subbyte_padded(dtype_name):
    """A padded sub-byte view exports versioned with IS_SUBBYTE_TYPE_PADDED; as a legacy capsule it is refused."""
    producer = make_producer(dtype=dtype_name, flags=IS_SUBBYTE_TYPE_PADDED)
    view = StridedMemoryView(producer)
    code, bits = DTYPES[dtype_name]
    got = read_capsule(view.__dlpack__(max_version=(1, 3)))
    assert got["dtype"] == (code, bits, 1)
    assert got["flags"] == IS_SUBBYTE_TYPE_PADDED
    # Not in the contract's error list; DLPack's rule: a legacy capsule cannot say "padded".
    with pytest.raises(BufferError, match=re.escape("dlpack: a padded sub-byte view cannot be exported as a legacy capsule")):
        view.__dlpack__()
    del view
    producer.release_capsules()


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_capsule_holds_a_reference_to_the_view(max_version):
    """Each capsule adds one reference to the view, dropped when the unconsumed capsule dies."""
    view = StridedMemoryView(np.arange(3.0))
    before = sys.getrefcount(view)
    capsule = view.__dlpack__(max_version=max_version)
    assert read_capsule(capsule)["manager_ctx"] == id(view)
    assert sys.getrefcount(view) == before + 1
    second = view.__dlpack__(max_version=max_version)
    assert sys.getrefcount(view) == before + 2
    del capsule
    assert sys.getrefcount(view) == before + 1
    del second
    assert sys.getrefcount(view) == before


_PyCapsule_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
# A capsule keeps a bare pointer to its name: these bytes live as long as the module.
_USED_NAMES = {"dltensor_versioned": b"used_dltensor_versioned", "dltensor": b"used_dltensor"}


def consume_by_hand(capsule):
    """Take ownership as a C consumer does: rename to "used_*"; return the managed tensor's address and struct."""
    name = capsule_name(capsule)
    address = _PyCapsule_GetPointer(capsule, name.encode())
    if _PyCapsule_SetName(capsule, _USED_NAMES[name]) != 0:
        raise AssertionError("PyCapsule_SetName failed")
    struct = DLManagedTensorVersioned if name == "dltensor_versioned" else DLManagedTensor
    return address, struct.from_address(address)


@pytest.mark.slow
@pytest.mark.parametrize("in_thread", [False, True], ids=["this-thread", "other-thread"])
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
def test_consumer_calls_deleter_without_the_gil(max_version, in_thread):
    """A consumed capsule's destructor leaves the tensor alone; the consumer's deleter call, made without the GIL, drops the view."""
    import threading

    source = np.arange(6.0).view(_Sub)
    source_ref = weakref.ref(source)
    view = StridedMemoryView(source)
    before = sys.getrefcount(view)
    capsule = view.__dlpack__(max_version=max_version)
    address, managed = consume_by_hand(capsule)
    del capsule  # renamed: its destructor must not call the deleter
    gc.collect()
    assert sys.getrefcount(view) == before + 1
    deleter = managed.deleter  # a CFUNCTYPE: ctypes releases the GIL around the call
    if in_thread:
        worker = threading.Thread(target=deleter, args=(address,))
        worker.start()
        worker.join()
    else:
        deleter(address)
    assert sys.getrefcount(view) == before
    del view, source
    gc.collect()
    assert source_ref() is None


class _Sub(np.ndarray):
    """A numpy subclass (weak-referenceable like any object with a __dict__)."""


def _numpy_sub():
    return np.arange(6, dtype=np.float32).view(_Sub)


def _torch_tensor():
    torch = pytest.importorskip("torch")
    return torch.arange(6, dtype=torch.float32)


def _consume_with_numpy(capsule):
    return np.from_dlpack(CapsuleHolder(capsule))


def _consume_with_torch(capsule):
    torch = pytest.importorskip("torch")
    return torch.from_dlpack(capsule)


SOURCES = [
    pytest.param(_numpy_sub, id="numpy-subclass"),
    pytest.param(_torch_tensor, id="torch", marks=pytest.mark.torch),
]
CAPSULE_CONSUMERS = [
    pytest.param(_consume_with_numpy, id="numpy"),
    pytest.param(_consume_with_torch, id="torch", marks=pytest.mark.torch),
]


@pytest.mark.slow
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("make", SOURCES)
def test_unconsumed_capsule_keeps_original_alive_then_releases(make, max_version):
    """The capsule alone keeps the view and the original object alive; dropping it unconsumed frees both."""
    source = make()
    source_ref = weakref.ref(source)
    view = StridedMemoryView(source)
    capsule = view.__dlpack__(max_version=max_version)
    del view, source
    gc.collect()
    assert source_ref() is not None
    del capsule
    gc.collect()
    assert source_ref() is None


@pytest.mark.slow
@pytest.mark.parametrize("consume", CAPSULE_CONSUMERS)
@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("make", SOURCES)
def test_consumed_capsule_released_when_the_consumer_array_dies(make, max_version, consume):
    """After consumption the consumer's array keeps the original alive; when it dies the view's reference goes too."""
    source = make()
    source_ref = weakref.ref(source)
    view = StridedMemoryView(source)
    view_refs = sys.getrefcount(view)
    capsule = view.__dlpack__(max_version=max_version)
    received = consume(capsule)
    assert capsule_name(capsule).startswith("used_")
    del capsule
    gc.collect()
    assert sys.getrefcount(view) == view_refs + 1  # held by the consumer's array
    assert list(received.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del view, source
    gc.collect()
    assert source_ref() is not None
    del received
    gc.collect()
    assert source_ref() is None


@pytest.mark.slow
def test_view_of_dlpack_producer_released_through_the_chain():
    """A producer's deleter runs once, when the last capsule of the re-exported view is gone."""
    producer = make_producer()
    view = StridedMemoryView(producer)
    capsule = view.__dlpack__(max_version=(1, 3))
    del view
    gc.collect()
    assert deleter_calls(producer) == 0
    received = np.from_dlpack(CapsuleHolder(capsule))
    del capsule
    gc.collect()
    assert deleter_calls(producer) == 0
    del received
    gc.collect()
    assert deleter_calls(producer) == 1
    producer.release_capsules()
    assert deleter_calls(producer) == 1


# --- errors ---------------------------------------------------------------------------

def _host():
    return StridedMemoryView(np.arange(6, dtype=np.float32).reshape(2, 3))


def _host_readonly():
    source = np.arange(6, dtype=np.float32)
    source.flags.writeable = False
    return StridedMemoryView(source)


def _cai(**keys):
    def make(fake):
        return cai_view(fake, **keys)[0]

    return make


def _structured(fake):
    array = np.zeros(3, dtype=[("x", "<f4")])
    return cai_view(fake, array, typestr="|V4", descr=[("x", "<f4")])[0]


def _opaque(fake):
    array = np.zeros(3, dtype=np.uint16)
    return cai_view(fake, array, version=2, typestr="<V2")[0]


ERRORS = [
    # (id, make view (fake -> view), kwargs, exception, message prefix)
    ("copy-true-host", lambda f: _host(), {"copy": True}, BufferError,
     "dlpack: a view never copies (got copy=True)"),
    ("copy-true-cai", _cai(), {"copy": True, "stream": -1}, BufferError,
     "dlpack: a view never copies (got copy=True)"),
    ("dl-device-cuda-for-host", lambda f: _host(), {"dl_device": (2, 0)}, BufferError,
     "dlpack: the view lives on device (1, 0), not (2, 0) (a view never copies)"),
    ("dl-device-cpu-for-cai", _cai(), {"dl_device": (1, 0), "stream": -1}, BufferError,
     "dlpack: the view lives on device (2, 0), not (1, 0) (a view never copies)"),
    ("dl-device-other-gpu", _cai(), {"dl_device": (2, 1), "stream": -1}, BufferError,
     "dlpack: the view lives on device (2, 0), not (2, 1) (a view never copies)"),
    ("readonly-legacy-none", lambda f: _host_readonly(), {}, BufferError,
     "dlpack: a read-only view cannot be exported as a legacy capsule"),
    ("readonly-legacy-0.8", lambda f: _host_readonly(), {"max_version": (0, 8)}, BufferError,
     "dlpack: a read-only view cannot be exported as a legacy capsule"),
    ("readonly-legacy-cai", _cai(readonly=True), {"stream": -1}, BufferError,
     "dlpack: a read-only view cannot be exported as a legacy capsule"),
    ("max-version-list", lambda f: _host(), {"max_version": [1, 0]}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("max-version-int", lambda f: _host(), {"max_version": 1}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("max-version-short", lambda f: _host(), {"max_version": (1,)}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("max-version-long", lambda f: _host(), {"max_version": (1, 0, 0)}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("max-version-str", lambda f: _host(), {"max_version": "1.0"}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("max-version-float", lambda f: _host(), {"max_version": (1, 0.5)}, TypeError,
     "dlpack: max_version must be None or a (major, minor) tuple (got "),
    ("structured-dtype", _structured, {"max_version": (1, 3), "stream": -1}, BufferError,
     "dlpack: dtype [('x', '<f4')] has no DLPack equivalent"),
    ("opaque-dtype", _opaque, {"max_version": (1, 3), "stream": -1}, BufferError,
     "dlpack: dtype |V2 has no DLPack equivalent"),
    ("host-stream-5", lambda f: _host(), {"stream": 5}, BufferError,
     "dlpack: stream must be None for host memory (got 5)"),
    ("host-stream-0", lambda f: _host(), {"stream": 0}, BufferError,
     "dlpack: stream must be None for host memory (got 0)"),
    ("host-stream-2", lambda f: _host(), {"stream": 2, "max_version": (1, 3)}, BufferError,
     "dlpack: stream must be None for host memory (got 2)"),
    ("device-stream-0", _cai(), {"stream": 0, "max_version": (1, 3)}, BufferError,
     "dlpack: stream 0 is disallowed"),
    ("device-stream-0-ready", _cai(stream=5), {"stream": 0, "max_version": (1, 3)}, BufferError,
     "dlpack: stream 0 is disallowed"),
]


@pytest.mark.parametrize(
    "make, kwargs, exc_type, prefix",
    [pytest.param(*row[1:], id=row[0]) for row in ERRORS],
)
def test_export_error_table(fake, make, kwargs, exc_type, prefix):
    """Each refused export raises the contract's exception type and message prefix, orders no stream and leaks no reference."""
    view = make(fake)
    if view.is_device_accessible:
        view.device_id  # resolve the device before counting calls
    fake.clear_calls()
    before = sys.getrefcount(view)
    with pytest.raises(exc_type, match="^" + re.escape(prefix)) as info:
        view.__dlpack__(**kwargs)
    assert type(info.value) is exc_type
    assert sys.getrefcount(view) == before
    assert [n for n in fake.names() if n in ("cuEventRecord", "cuStreamWaitEvent")] == []


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"copy": False}, {"copy": None}, {"dl_device": (1, 0)}, {"stream": None}, {"stream": -1},
     {"stream": -1, "max_version": (1, 3), "dl_device": (1, 0), "copy": False}],
    ids=["nothing", "copy-false", "copy-none", "own-device", "stream-none", "stream-minus-1", "all"],
)
def test_host_export_accepts(kwargs):
    """A host view exports with copy False/None, its own device, and stream None or -1."""
    view = _host()
    capsule = view.__dlpack__(**kwargs)
    assert read_capsule(capsule)["data"] == view.ptr


def test_export_arguments_are_keyword_only():
    """__dlpack__ takes its arguments by keyword only, as the array API standard says."""
    with pytest.raises(TypeError):
        _host().__dlpack__(None)


# --- __dlpack_device__ --------------------------------------------------------------------

@pytest.mark.interop
@pytest.mark.parametrize(
    "module",
    ["numpy", pytest.param("torch", marks=pytest.mark.torch), pytest.param("jax.numpy", marks=pytest.mark.jax)],
)
def test_dlpack_device_of_host_views(module):
    """A view of a host array reports (1, 0), as DLPack's CPU device."""
    xp = pytest.importorskip(module)
    view = StridedMemoryView(xp.arange(3))
    assert view.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize(
    "device, stream_ptr",
    [((2, 0), 0x5000), ((2, 3), 0x5000), ((3, 0), None), ((13, 0), 0x5000)],
    ids=["cuda-0", "cuda-3", "pinned", "managed"],
)
def test_dlpack_device_of_dlpack_device_views(device, stream_ptr):
    """A view of a DLPack device producer reports the producer's (device_type, device_id), without the driver."""
    producer = make_producer(device=device)
    view = StridedMemoryView(producer, stream_ptr)
    assert view.__dlpack_device__() == device
    assert read_capsule(view.__dlpack__(max_version=(1, 3), stream=-1))["device"] == device
    del view
    producer.release_capsules()


def test_dlpack_device_of_cai_view_asks_the_driver(fake):
    """A CAI view reports (2, device_id), device_id found by the driver from the pointer."""
    view, producer = cai_view(fake, device=1)
    assert view.__dlpack_device__() == (2, 1)
    assert "cuPointerGetAttribute" in fake.names()
    got = read_capsule(view.__dlpack__(max_version=(1, 3), stream=-1))
    assert got["device"] == (2, 1)
    assert got["data"] == producer.ptr


# --- __cuda_array_interface__ ------------------------------------------------------------

@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: np.arange(3.0), id="numpy"),
        pytest.param(lambda: pytest.importorskip("torch").arange(3.0), id="torch",
                     marks=[pytest.mark.interop, pytest.mark.torch]),
        pytest.param(lambda: pytest.importorskip("jax.numpy").arange(3.0), id="jax",
                     marks=[pytest.mark.interop, pytest.mark.jax]),
        pytest.param(lambda: make_producer(), id="ctypes"),
    ],
)
def test_no_cuda_array_interface_on_host_views(make):
    """A host-only view has no __cuda_array_interface__: hasattr is False and reading it is an AttributeError."""
    source = make()
    view = StridedMemoryView(source)
    assert hasattr(view, "__cuda_array_interface__") is False
    with pytest.raises(AttributeError):
        view.__cuda_array_interface__


def _expected_cai(producer, **overrides):
    """The contract's normalised dict for a view of ``producer`` (stream_ptr=-1)."""
    array = producer.array
    strides = producer.interface.get("strides")
    if array.size == 0:  # an empty view's strides are all 0
        strides = (0,) * array.ndim
    elif strides is None:  # absent or None: C-contiguous, made explicit in bytes
        step, strides = array.dtype.itemsize, []
        for extent in reversed(array.shape):
            strides.insert(0, step)
            step *= extent
    expected = {
        "version": 3,
        "shape": tuple(array.shape),
        "typestr": array.dtype.str,
        "data": (producer.ptr if array.size else 0, bool(producer.interface["data"][1])),
        "strides": tuple(strides),
        "stream": None,
    }
    expected.update(overrides)
    return expected


CAI_CASES = [
    # (id, array, interface keys, overrides of the expected dict)
    ("c-contiguous-no-strides", None, {"strides": None}, {}),
    ("strides-absent", None, {"strides": HostCAI.DROP}, {}),
    ("explicit-strides", np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2], {}, {}),
    ("readonly", None, {"data": None}, {}),
    ("stream", None, {"stream": 0x5000}, {"stream": 0x5000}),
    ("stream-1", None, {"stream": 1}, {"stream": 1}),
    ("stream-2", None, {"stream": 2}, {"stream": 2}),
    ("v2-torch-style", np.zeros((2, 2), dtype=np.uint16), {"version": 2, "typestr": "<V2", "stream": 0x5000}, {}),
    ("v0", None, {"version": 0}, {}),
    ("native-typestr", None, {"typestr": "=f4"}, {}),
    ("bool", np.array([True, False]), {}, {}),
    ("complex128", np.zeros(3, dtype=np.complex128), {}, {}),
    ("zero-size", np.zeros((0, 3), dtype=np.float32), {}, {}),
    ("zero-size-null", np.zeros((0, 3), dtype=np.float32), {"data": (0, False)}, {}),
    ("0-d", np.array(1.5, dtype=np.float64), {}, {}),
    ("extent-1", np.zeros((1, 3), dtype=np.float32), {}, {}),
    ("descr-default", None, {"descr": [("", "<f4")]}, {}),
]


@pytest.mark.parametrize(
    "array, keys, overrides",
    [pytest.param(*row[1:], id=row[0]) for row in CAI_CASES],
)
def test_cuda_array_interface_of_cai_view(forbidden_driver, array, keys, overrides):
    """A view of a CAI producer (stream_ptr=-1) exports the producer's dict, normalised: v3, byte strides, typestr, data, stream; no driver call."""
    if keys.get("data", 1) is None:  # read-only data: the producer's own array's address
        if array is None:  # HostCAI's default array, made here so that the address stays valid
            array = np.arange(6, dtype=np.float32).reshape(2, 3)
        keys = dict(keys, data=(array.__array_interface__["data"][0], True))
    producer = HostCAI(array, **keys)
    if producer.interface["data"][0] == 0:
        overrides = dict(overrides, data=(0, False))
    view = StridedMemoryView(producer, -1)
    expected = _expected_cai(producer, **overrides)
    if producer.array.dtype.str != np.dtype(producer.interface["typestr"]).str:
        expected["typestr"] = np.dtype(producer.interface["typestr"]).str  # e.g. '<V2' -> '|V2'
    got = view.__cuda_array_interface__
    assert got == expected
    assert "descr" not in got
    assert type(got["shape"]) is tuple and type(got["strides"]) is tuple
    assert forbidden_driver.used == []


def test_cuda_array_interface_structured_has_descr():
    """A structured dtype exports its descr and the '|V<n>' typestr."""
    array = np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")])
    producer = HostCAI(array, typestr="|V8", descr=[("x", "<f4"), ("y", "<i4")])
    got = StridedMemoryView(producer, -1).__cuda_array_interface__
    assert got["typestr"] == "|V8"
    assert got["descr"] == [("x", "<f4"), ("y", "<i4")]
    assert got["strides"] == (8,)


def test_cuda_array_interface_is_consumable(forbidden_driver):
    """The exported dict is read back by the CAI path into a view with the same fields."""
    producer = HostCAI(np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::3], stream=0x5000)
    view = StridedMemoryView(producer, -1)
    again = StridedMemoryView.from_cuda_array_interface(view, -1)
    assert fields(again, device_id=False) == fields(view, device_id=False)
    assert again.ready_stream == view.ready_stream == 0x5000
    assert again.exporting_obj is view


@pytest.mark.parametrize(
    "stream_ptr, expected",
    [(-1, None), (0, 1), (1, 1), (2, 2), (0x5000, 0x5000)],
    ids=["opt-out", "0-as-1", "legacy", "per-thread", "handle"],
)
def test_cuda_array_interface_stream_of_dlpack_device_view(stream_ptr, expected):
    """A DLPack CUDA view's exported stream is the caller's stream (0 as 1), None after -1."""
    producer = make_producer(device=(2, 0))
    view = StridedMemoryView(producer, stream_ptr)
    got = view.__cuda_array_interface__
    assert got["stream"] == expected
    assert got["data"] == (producer.expected_ptr, False)
    assert got["strides"] == (12, 4)
    del view
    producer.release_capsules()


def test_cuda_array_interface_of_pinned_view():
    """A pinned (CUDAHost) view is device-accessible: it has a CAI, with no stream to wait for."""
    producer = make_producer(device=(3, 0))
    view = StridedMemoryView(producer, 0x5000)
    got = view.__cuda_array_interface__
    assert got["stream"] is None
    assert got["version"] == 3
    del view
    producer.release_capsules()


# --- a view of a view ----------------------------------------------------------------------

def _readonly_array():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: np.arange(12, dtype=np.float32).reshape(3, 4), id="numpy"),
        pytest.param(lambda: np.arange(24, dtype=np.int8).reshape(4, 6)[::-1, 1::2], id="numpy-negative"),
        pytest.param(lambda: np.arange(6, dtype=np.complex64).reshape(2, 3).T, id="numpy-transposed"),
        pytest.param(_readonly_array, id="numpy-readonly"),
        pytest.param(lambda: np.array(3, dtype=np.uint64), id="numpy-0d"),
        pytest.param(lambda: pytest.importorskip("torch").arange(6.0).reshape(2, 3).T, id="torch",
                     marks=[pytest.mark.interop, pytest.mark.torch]),
        pytest.param(lambda: pytest.importorskip("jax.numpy").arange(6.0).reshape(2, 3), id="jax",
                     marks=[pytest.mark.interop, pytest.mark.jax]),
    ],
)
def test_view_of_host_view_identical(make):
    """A view of a view has the same fields as the view, and the same exporting_obj (views never chain)."""
    source = make()
    view = StridedMemoryView(source)
    again = StridedMemoryView(view)
    assert fields(again) == fields(view)
    assert again.exporting_obj is source
    assert StridedMemoryView.from_dlpack(view).strides == view.strides


def test_view_of_zero_size_view():
    """A view of a zero-size view keeps every field of the view, its ptr included."""
    view = StridedMemoryView(np.zeros((0, 3), dtype=np.float32))
    again = StridedMemoryView(view)
    assert fields(again) == fields(view)


@pytest.mark.slow
def test_view_of_view_keeps_chain_alive():
    """A view of a view keeps the first view and the original alive."""
    source = np.arange(6.0).view(_Sub)
    source_ref = weakref.ref(source)
    again = StridedMemoryView(StridedMemoryView(source))
    del source
    gc.collect()
    assert source_ref() is not None
    assert np.from_dlpack(again).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del again
    gc.collect()
    assert source_ref() is None


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_view_of_cai_view_identical(fake, readonly):
    """A view (stream_ptr=-1) of a CAI view has the same fields, device_id and readonly included."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1::2]
    view, producer = cai_view(fake, array, device=1, data=(array.ctypes.data, readonly), stream=0x5000)
    again = StridedMemoryView(view, -1)
    assert fields(again) == fields(view)
    assert again.device_id == 1
    assert again.readonly is readonly
    assert again.__dlpack_device__() == (2, 1)
    through_cai = StridedMemoryView.from_cuda_array_interface(view, -1)
    assert fields(through_cai) == fields(view)


@pytest.mark.slow
@pytest.mark.parametrize("kind_of_capsule", ["versioned", "legacy"])
def test_view_of_view_takes_no_capsule(kind_of_capsule):
    """A view of a view consumes no capsule of its own: the producer's one deleter runs once, when the last view dies."""
    producer = make_producer(kind_of_capsule)
    view = StridedMemoryView(producer)
    again = StridedMemoryView(view)
    deeper = StridedMemoryView.from_dlpack(again)
    assert len(producer.tensor_ids) == 1
    assert deeper.exporting_obj is producer
    del view, again
    gc.collect()
    assert deleter_calls(producer) == 0
    assert deeper.ptr == producer.expected_ptr
    del deeper
    gc.collect()
    assert deleter_calls(producer) == 1


@pytest.mark.slow
def test_dropping_400000_nested_views_does_not_crash():
    """400,000 views each of the one before, dropped at once: no recursion, nothing left alive (run in a child process)."""
    code = textwrap.dedent(
        """
        import gc, weakref
        import numpy as np
        from stridedview import StridedMemoryView

        class Source(np.ndarray):
            pass

        source = np.arange(6.0).view(Source)
        alive = weakref.ref(source)
        view = StridedMemoryView(source)
        views = [view]
        for _ in range(400_000):
            views.append(StridedMemoryView(views[-1]))
        last = views[-1]
        del views, view, source
        gc.collect()
        kept = alive() is not None
        owner_is_source = last.exporting_obj is alive()
        del last
        gc.collect()
        assert kept and owner_is_source and alive() is None
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


def test_view_of_cai_view_needs_no_driver(forbidden_driver):
    """A view of a CUDA Array Interface view needs no driver: stream -1, or the stream it is ready on."""
    array = np.arange(6, dtype=np.float32)
    producer = HostCAI(array, stream=0x5000)
    view = StridedMemoryView(producer, -1)
    for stream_ptr in (-1, 0x5000):
        again = StridedMemoryView(view, stream_ptr)
        assert (again.ptr, again.shape, again.strides, again.dtype) == (view.ptr, view.shape, view.strides, view.dtype)
        assert again.ready_stream == 0x5000
        assert again.exporting_obj is producer
    assert repr(again).endswith("device_id=?, readonly=False)")


def test_view_of_device_view_with_stream_none_is_ambiguous(fake):
    """A view of a device view with stream_ptr=None is refused as ambiguous, as for any device memory."""
    view, _ = cai_view(fake, stream=7)
    with pytest.raises(BufferError, match=re.escape("dlpack: stream_ptr=None is ambiguous for CUDA memory")):
        StridedMemoryView(view)


def test_view_of_uninitialised_view_is_refused():
    """Viewing a StridedMemoryView made with __new__ alone (no fields) is a BufferError."""
    empty = StridedMemoryView.__new__(StridedMemoryView)
    with pytest.raises(BufferError, match=re.escape("stridedview: the StridedMemoryView to view is not initialised")):
        StridedMemoryView(empty)


# --- stream ordering of an export -----------------------------------------------------------
# Only what orders nothing runs here (no driver call at all).  An export that orders runs on the
# simulated device: what the consumer then sees (a slow producer write read complete,
# stream=None as the legacy stream, a view of a view) and a ready stream other than 1 exported
# with stream=None (tests/test_gpu_interop.py), the warm export's one record and one wait
# (tests/test_gpu_driver_door.py).

@pytest.fixture
def streams(fake):
    """Stream handles 7 and 9 (no driver is asked about them: nothing here orders)."""
    return 7, 9


def _ready_view(fake, ready):
    """A CAI view whose ready_stream is ``ready`` (the producer's stream, stream_ptr=-1), device resolved."""
    view, _ = cai_view(fake, stream=ready)
    assert view.ready_stream == ready
    view.device_id
    fake.clear_calls()
    return view


@pytest.mark.parametrize(
    "ready, stream",
    [(7, -1), (7, 7), (1, None), (1, 1), (2, 2), (None, 9), (None, None)],
    ids=["opt-out", "same", "none-is-1", "1-vs-1", "2-vs-2", "no-ready-stream", "no-ready-none"],
)
def test_export_orders_nothing(fake, streams, ready, stream):
    """-1, the same stream (None counting as 1), or a view with no ready stream: no driver call at all."""
    view = _ready_view(fake, ready)
    capsule = view.__dlpack__(stream=stream, max_version=(1, 3))
    assert fake.calls == []
    assert read_capsule(capsule)["device"] == (2, 0)


def test_export_stream_0_refused(fake, streams):
    """stream=0 is refused on a device view, before any ordering."""
    view = _ready_view(fake, 7)
    with pytest.raises(BufferError, match="^" + re.escape("dlpack: stream 0 is disallowed")):
        view.__dlpack__(stream=0, max_version=(1, 3))
    assert fake.calls == []


@pytest.mark.parametrize("stream", [None, -1, 1, 5, 0x5000], ids=["None", "-1", "1", "5", "handle"])
def test_pinned_export_accepts_any_stream_and_orders_nothing(forbidden_driver, stream):
    """A pinned (CUDAHost) view exports with any stream and never reaches the driver."""
    producer = make_producer(device=(3, 0))
    view = StridedMemoryView(producer, 0x5000)
    capsule = view.__dlpack__(stream=stream, max_version=(1, 3))
    assert read_capsule(capsule)["device"] == (3, 0)
    assert forbidden_driver.used == []
    del view, capsule
    producer.release_capsules()


@pytest.mark.parametrize("stream", [None, -1], ids=["None", "-1"])
def test_host_export_accepts_none_and_minus_1(forbidden_driver, stream):
    """A host view exports with stream None or -1, without the driver."""
    capsule = _host().__dlpack__(stream=stream)
    assert read_capsule(capsule)["device"] == (1, 0)
    assert forbidden_driver.used == []


@pytest.mark.parametrize("stream", [5, 1, 2, 0x5000], ids=["5", "1", "2", "handle"])
def test_host_export_refuses_a_stream(forbidden_driver, stream):
    """A host view refuses any stream but None and -1 (numpy's rule for CPU data), without the driver."""
    with pytest.raises(BufferError, match=re.escape(f"dlpack: stream must be None for host memory (got {stream})")):
        _host().__dlpack__(stream=stream)
    assert forbidden_driver.used == []


# --- exports never emit a stride whose bytes pass int64 -------------------------------------

def test_export_gives_0_for_a_never_stepping_stride_past_int64():
    """An extent-1 dimension with stride 2**61 (2**64 bytes of float64) is exported as stride 0, through DLPack and the CAI."""
    producer = make_producer("versioned", shape=(1, 3), strides=(2**61, 1), dtype="float64", device=(2, 0), data=0x10000)
    view = StridedMemoryView(producer, -1)
    assert view.strides == (2**61, 1)
    assert view.__cuda_array_interface__["strides"] == (0, 8)
    capsule = view.__dlpack__(stream=-1, max_version=(1, 3))
    assert read_capsule(capsule)["strides"] == (0, 1)
    del capsule
    again = StridedMemoryView(HostCAI(np.zeros(3), shape=(1, 3), strides=(0, 8), typestr="<f8", data=(0x10000, False)), -1)
    assert again.strides == (0, 1)


def test_export_of_empty_view_keeps_byte_strides_in_int64():
    """An empty float64 view with strides of 2**62 elements has, and exports, strides of 0 (no
    element is addressed)."""
    producer = make_producer("versioned", shape=(0, 2), strides=(2**62, 1), dtype="float64", device=(2, 0), data=0)
    view = StridedMemoryView(producer, -1)
    assert view.strides == (0, 0)
    assert view.__cuda_array_interface__["strides"] == (0, 0)
    assert read_capsule(view.__dlpack__(stream=-1, max_version=(1, 3)))["strides"] == (0, 0)


# --- the CAI has no typestr for bfloat16 and the float8/6/4 kinds ---------------------------

ML_DTYPE_NAMES = [name for name, (code, bits) in DTYPES.items() if code in (4,) or code >= 7]


@pytest.mark.parametrize("name", ML_DTYPE_NAMES)
def test_cai_export_of_ml_dtypes_refused_dlpack_kept(name):
    """A device view of bfloat16 or a float8/6/4 kind has no CAI (BufferError, not '<V2'), and still exports through DLPack."""
    code, bits = DTYPES[name]
    flags = IS_SUBBYTE_TYPE_PADDED if bits < 8 else 0
    producer = make_producer("versioned", shape=(4,), dtype=name, device=(2, 0), flags=flags)
    view = StridedMemoryView(producer, -1)
    import ml_dtypes  # here: test_dtypes runs read_capsule from here where it is hidden

    shown = name
    if not hasattr(ml_dtypes, name):  # bcomplex32 before ml_dtypes 0.6: the void fallback,
        shown = "Bcomplex (bits 32, lanes 1)"  # which the error names by its DLPack type
        name = "void32"
    assert view.dtype.name == name
    message = f"cuda array interface: dtype {shown} has no typestr ({view.dtype.str!r} names another type or none); export it through DLPack"
    with pytest.raises(BufferError, match="^" + re.escape(message) + "$"):
        view.__cuda_array_interface__
    got = read_capsule(view.__dlpack__(stream=-1, max_version=(1, 3)))
    assert got["dtype"] == (code, bits, 1)


def test_cai_export_of_plain_void_kept():
    """A view of anonymous void from the CAI ('|V4') still exports its own typestr."""
    view = StridedMemoryView(HostCAI(np.zeros(3, dtype="V4")), -1)
    assert view.__cuda_array_interface__["typestr"] == "|V4"
