"""Fuzzing both parsers with hypothesis: hostile CAI dicts and crafted DLPack tensors.

Every input must give a view or one of the documented exceptions (docs/errors.md), never a
crash and never another exception type; every DLPack capsule handed out must have its
deleter called exactly once by the end.  The tests go further than "no crash": a small
reference model of each parser, written from docs/errors.md and docs/concepts.md, predicts for each
input either the exception (type and message prefix, so the order of the checks is tested
too) or every field of the view; a view that is made is then read, exported again through
DLPack (versioned and legacy) and the CUDA Array Interface, and viewed again.

Three entries are fuzzed: the general DLPack path (``__dlpack_device__`` + ``__dlpack__``,
capsules from the ctypes producer of producers.py), the DLPack C exchange API path (a
ctypes-built ``__dlpack_c_exchange_api__`` lending a DLTensor), and the CAI path.  The
fake driver (tests/fake_driver.py) is installed, so CAI ``device_id`` runs too; an input that
would order streams raises the CUDAError that says the driver in use is not the one
cuda-bindings loaded (every ordering goes through the driver door, which calls the real
libcuda.so.1): the model predicts exactly which inputs order.  The orderings themselves run
on the simulated device (tests/test_gpu_streams.py, test_gpu_ordering.py,
test_gpu_stream_ordering.py: CAI, DLPack and exchange-API producers, every default stream).

Pointers stay safe: data pointers are never real memory (the view only computes with
them), while shape and strides arrays always hold at least ndim entries (a producer
lying about ndim beyond its own arrays cannot be detected by any consumer).

What the fuzzers found is kept below as named regression tests (``test_found_*``): five
package bugs, all fixed since (a wrapped data pointer, device_id -2 taken for "not yet
asked", strides past int64 for empty views and the capsule block leaked when their export
failed, a CAI ``strides`` sequence whose ``len()`` lies), and the edges each fuzzer must keep
covering (``test_*_edges``).  A package bug found later is reported and its regression test
marked ``xfail(strict=True)``, and the fuzz runs skip its inputs until it is fixed.
"""

from __future__ import annotations

import ctypes
import gc
import operator
import os
import re
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import producers
import strategies as S
from fake_driver import FakeDriver
from producers import (
    DELETER_CALLS,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackProducer,
    DLPackVersion,
    DLTensor,
    OldStyleProducer,
)
from stridedview import CUDAError, DLPackDType, StridedMemoryView
from stridedview import _driver
from test_errors_contract import documented_prefixes

#: Multiplies every example count: STRIDEDVIEW_FUZZ_SCALE=20 for a long hunt.
SCALE = float(os.environ.get("STRIDEDVIEW_FUZZ_SCALE", "1"))


def examples(count):
    return max(1, int(count * SCALE))


#: Bounded runs: about 60 s for the three fuzzers together on this machine kind (hypothesis
#: itself costs 1-7 ms per example here, the checks well under 1 ms).
FUZZ = settings(
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,  # no_fake only resets the seam at the end
    ],
)

INT64_MIN, INT64_MAX = S.INT64_MIN, S.INT64_MAX
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
SUPPORTED_DEVICES = (CPU, CUDA, CUDA_HOST, CUDA_MANAGED)
READ_ONLY, SUBBYTE_PADDED = producers.READ_ONLY, producers.IS_SUBBYTE_TYPE_PADDED
STANDARD_NAMES = ("dltensor_versioned", "dltensor")

#: (code) -> (DLPack name, allowed bits)
DLPACK_CODES = {
    0: ("Int", (1, 2, 4, 8, 16, 32, 64)), 1: ("UInt", (1, 2, 4, 8, 16, 32, 64)),
    2: ("Float", (16, 32, 64)), 3: ("OpaqueHandle", ()), 4: ("Bfloat", (16,)),
    5: ("Complex", (32, 64, 128)), 6: ("Bool", (8,)),
    7: ("Float8_e3m4", (8,)), 8: ("Float8_e4m3", (8,)), 9: ("Float8_e4m3b11fnuz", (8,)),
    10: ("Float8_e4m3fn", (8,)), 11: ("Float8_e4m3fnuz", (8,)), 12: ("Float8_e5m2", (8,)),
    13: ("Float8_e5m2fnuz", (8,)), 14: ("Float8_e8m0fnu", (8,)), 15: ("Float6_e2m3fn", (6,)),
    16: ("Float6_e3m2fn", (6,)), 17: ("Float4_e2m1fn", (4,)), 18: ("Bcomplex", (32,)),
}
DTYPE_NAMES = {(code, bits): name for name, (code, bits) in producers.DTYPES.items()}


def numpy_dtype(code, bits):
    """The dtype a one-lane view of (code, bits) has: ml_dtypes' where it has the type,
    numpy's own name otherwise, else (complex32 and bcomplex32 before ml_dtypes 0.6, as on
    the free-threaded stage's 0.5.4) the void dtype of its bytes the library falls back on."""
    name = DTYPE_NAMES[(code, bits)]
    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(f"V{max(bits // 8, 1)}", metadata={"dlpack_dtype": DLPackDType(code, bits, 1)})


def _note(text):
    """hypothesis.note inside a fuzz run; nothing in a plain regression test."""
    try:
        note(text)
    except InvalidArgument:
        pass


# --- the fake driver ---------------------------------------------------------------------------

#: What an ordering raises with a fake driver installed: the driver door, which makes every
#: ordering, calls only the driver cuda-bindings loaded (src/stridedview/_driver_door.pxi).
DOOR_OFF = (
    "stream ordering and hand-overs go through the CUDA driver cuda-bindings loaded, and the "
    "driver in use (installed with stridedview._driver.use_api) is not it: "
)

@pytest.fixture
def no_fake():
    """Reset the driver seam after a test that installs fakes itself."""
    yield
    _driver.use_api(None)


#: Devices of the fake driver, and the handles naming a default stream (0 is the NULL stream).
DEVICES = 2
DEFAULT_STREAMS = (0, 1, 2)
#: An ordinary stream handle the fuzzers name as the producer's own (no driver sees it: an
#: ordering under the fake is refused before any driver call).
OWN_STREAM = 0x7F0000005000


def new_fake():
    """A fresh modelling fake, installed; SAFE_PTR's range is device 1's memory."""
    fake = FakeDriver(devices=DEVICES)  # device 0's primary context current in this thread
    fake.register_pointer(S.SAFE_PTR, 8 * S.SAFE_SPAN + 1, device=1)
    _driver.use_api(fake)
    return fake


def check_fake(fake):
    if fake.unserved:
        raise AssertionError(f"driver calls the fake does not serve: {fake.unserved}")


# --- the reference model ----------------------------------------------------------------------

class Refused(Exception):
    """The model's prediction that the package raises ``kind`` with a message starting ``prefix``."""

    def __init__(self, kind, prefix, *, same_object=None, bug=None):
        super().__init__(kind, prefix)
        self.kind = kind
        self.prefix = prefix
        self.same_object = same_object  # the producer's own exception, propagated unchanged
        self.bug = bug


def model_stream(stream_ptr):
    """What _normalize_stream gives (None, -1 or a handle), or Refused."""
    prefix = "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got "
    if stream_ptr is None:
        return None
    if type(stream_ptr) is int:
        handle = stream_ptr
    elif isinstance(stream_ptr, bool):
        raise Refused(TypeError, prefix)
    elif hasattr(stream_ptr, "__cuda_stream__"):
        result = stream_ptr.__cuda_stream__()
        if (
            type(result) is not tuple
            or len(result) != 2
            or isinstance(result[1], bool)
            or not isinstance(result[1], int)
        ):
            raise Refused(TypeError, "stream: __cuda_stream__() must return (version, handle) (got ")
        handle = int(result[1])
    else:
        try:
            handle = operator.index(stream_ptr)
        except TypeError:
            raise Refused(TypeError, prefix) from None
    if handle < -1 or handle >= 2**64:
        raise Refused(ValueError, "stream: stream_ptr must be -1 or a stream handle >= 0 (got ")
    return handle


def c_strides(shape):
    """Row-major element strides; an empty shape's are all 0 (its view's are, whatever the
    producer sent)."""
    if 0 in shape:
        return (0,) * len(shape)
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def view_strides(shape, strides):
    """The strides a view of a layout has: the layout's, or all 0 if it is empty."""
    return (0,) * len(shape) if 0 in shape else tuple(strides)


def byte_offsets_fit(shape, strides, itemsize):
    """Every element within 2**63 - 1 bytes of element 0, above and below counted apart."""
    if 0 in shape:
        return True
    above = sum((n - 1) * s * itemsize for n, s in zip(shape, strides) if n > 1 and s > 0)
    below = sum((n - 1) * -s * itemsize for n, s in zip(shape, strides) if n > 1 and s < 0)
    return above <= INT64_MAX and below <= INT64_MAX


def has_own_typestr(dtype):
    """Whether the CAI can name ``dtype``: not ml_dtypes' kinds (bfloat16, float8/6/4, int4,
    complex32 ...), nor a DLPack vector's void dtype, nor packed elements' None."""
    if dtype is None or (dtype.metadata and "dlpack_dtype" in dtype.metadata):
        return False
    return dtype.type.__module__ != "ml_dtypes"


def element_bytes(view):
    """Bytes per element for byte arithmetic: a packed view's elements count as one byte
    (as the package's own checks count them)."""
    return max(view.itemsize_bits // 8, 1)


def exported_stride(stride, itemsize):
    """The stride an export gives: 0 where its bytes pass int64 (only a never-stepping one can)."""
    return stride if -INT64_MAX <= stride * itemsize <= INT64_MAX else 0


def contiguous(shape, strides, reverse):
    if any(n == 0 for n in shape):
        return True
    expected = 1
    axes = range(len(shape) - 1, -1, -1) if reverse else range(len(shape))
    for i in axes:
        if shape[i] != 1:
            if strides[i] != expected:
                return False
            expected *= shape[i]
    return True


def model_dlpack_stream(device_type, stream):
    """The stream handed to __dlpack__ (None for host memory), or Refused."""
    if device_type in (CPU, CUDA_HOST):
        return None
    if stream is None:
        raise Refused(BufferError, "dlpack: stream_ptr=None is ambiguous for ")
    return 1 if stream == 0 else stream


def model_tensor(device, ndim, shape, strides, data, byte_offset, dtype, flags):
    """_fill_from_dltensor: the view's fields, or Refused."""
    if ndim < 0:
        raise Refused(BufferError, "dlpack: ndim must be >= 0 (got ")
    if ndim > 0 and shape is None:
        raise Refused(BufferError, "dlpack: shape is NULL with ndim ")
    extents = tuple(shape[:ndim]) if ndim > 0 else ()
    for extent in extents:
        if extent < 0:
            raise Refused(BufferError, "dlpack: shape[")
    size = 1
    for extent in extents:
        size *= extent
    if size > INT64_MAX:
        raise Refused(BufferError, "dlpack: element count overflows int64 (shape ")
    if ndim > 0 and strides is not None:
        element_strides = tuple(strides[:ndim])
    else:
        element_strides = c_strides(extents)
    if size > 0 and data == 0:
        raise Refused(BufferError, "dlpack: data is NULL for a tensor of ")
    if data + byte_offset >= 2**64:
        raise Refused(BufferError, "dlpack: data + byte_offset passes the end of the address space")
    if device[0] != CPU and device[1] < 0:
        raise Refused(BufferError, "dlpack: device_id must be >= 0 (got ")
    code, bits, lanes = dtype
    if lanes == 0:
        raise Refused(BufferError, "dlpack: dtype lanes must be >= 1 (got 0)")
    if code not in DLPACK_CODES:
        raise Refused(BufferError, "dlpack: unsupported dtype code ")
    name, allowed = DLPACK_CODES[code]
    if not allowed:
        raise Refused(BufferError, "dlpack: unsupported dtype code ")
    if bits not in allowed:
        raise Refused(BufferError, f"dlpack: dtype {name} must have ")
    # DLPack: an element is bits * lanes bits; sub-byte ones are packed (element i at bit
    # i * bits) unless IS_SUBBYTE_TYPE_PADDED (one-lane ones only) gives each a byte.
    padded = bool(flags & SUBBYTE_PADDED)
    if padded and bits < 8 and lanes != 1:
        raise Refused(BufferError, "dlpack: IS_SUBBYTE_TYPE_PADDED is set on dtype ")
    element_bits = bits * lanes
    if element_bits % 8 == 0:
        itemsize = element_bits // 8
        dtype_out = numpy_dtype(code, bits) if lanes == 1 else np.dtype(f"V{itemsize}")
    elif padded and element_bits < 8:
        itemsize, dtype_out = 1, numpy_dtype(code, bits)
    else:
        itemsize, dtype_out = 0, None
        if size != 0 and not contiguous(extents, view_strides(extents, element_strides), True):
            raise Refused(BufferError, "dlpack: packed sub-byte dtype ")
    if not byte_offsets_fit(extents, element_strides, max(itemsize, 1)):
        raise Refused(BufferError, "dlpack: byte offsets from element 0 must fit in int64 (got shape ")
    if size * itemsize > INT64_MAX:
        raise Refused(BufferError, "dlpack: nbytes (size * itemsize) must fit in int64 (got shape ")
    device_type, device_id = device
    return {
        "ptr": data + byte_offset,
        "shape": extents,
        "strides": view_strides(extents, element_strides),
        "dtype": dtype_out,
        "dlpack_dtype": (code, bits, lanes),
        "nbytes": size * itemsize if itemsize else (size * element_bits + 7) // 8,
        "size": size,
        "device_type": device_type,
        "device_id": -1 if device_type == CPU else device_id,
        "is_device_accessible": device_type != CPU,
        "readonly": bool(flags & READ_ONLY),
    }


def model_reported_device(reported):
    prefix = "dlpack: __dlpack_device__() must return (device_type, device_id) (got "
    if type(reported) is not tuple or len(reported) != 2:
        raise Refused(BufferError, prefix)
    if not all(isinstance(v, int) for v in reported):
        raise Refused(BufferError, prefix)
    if not all(-(2**31) <= v < 2**31 for v in reported):
        raise Refused(BufferError, prefix)
    return int(reported[0]), int(reported[1])


def model_dlpack(spec, stream_ptr, raised):
    """The general DLPack path for a ctypes producer described by ``spec``.

    Returns (fields, number of __dlpack__ calls, whether the capsule ends up renamed);
    raises Refused.  ``raised`` is the exception object the producer raises in mode "raise".
    """
    stream = model_stream(stream_ptr)
    device_type, device_id = model_reported_device(spec["reported_device"])
    if device_type not in SUPPORTED_DEVICES:
        raise Refused(BufferError, "dlpack: unsupported device type ")
    dl_stream = model_dlpack_stream(device_type, stream)
    if spec["mode"] == "raise":  # propagated unchanged (after one retry if it names max_version)
        raise Refused(type(raised), "", same_object=raised)
    if spec["mode"] == "not_capsule":
        raise Refused(BufferError, "dlpack: __dlpack__() must return a PyCapsule (got an object of type ")
    name = spec["capsule_name"]
    if name == S.NULL_NAME or name not in STANDARD_NAMES:
        if name != S.NULL_NAME and name.startswith("used_"):
            raise Refused(BufferError, "dlpack: capsule was already consumed (name ")
        raise Refused(BufferError, "dlpack: capsule name must be 'dltensor_versioned' or 'dltensor' (got ")
    versioned = name == "dltensor_versioned"
    if versioned and spec["version"][0] != 1:
        raise Refused(BufferError, "dlpack: unsupported DLPack version ")
    if versioned and spec["flags"] & producers.IS_COPIED:
        raise Refused(BufferError, "dlpack: the producer copied the data (IS_COPIED flag set)")
    if tuple(spec["device"]) != (device_type, device_id):
        raise Refused(BufferError, "dlpack: capsule device (")
    fields = model_tensor(
        spec["device"], spec["ndim"], spec["shape"], spec["strides"], spec["data"],
        spec["byte_offset"], spec["dtype"], spec["flags"] if versioned else 0,
    )
    fields["ready_stream"] = None if dl_stream is None or dl_stream == -1 else stream
    if not versioned:
        fields["readonly"] = True  # a legacy capsule cannot say: taken as read-only
    return fields


def dlpack_calls_expected(spec, raised):
    """How many times __dlpack__ is called: twice only when the first refusal names max_version
    or 'copy' (asked again without them; a second refusal then propagates)."""
    if spec["old_api"]:
        return 2
    message = str(raised)
    if spec["mode"] == "raise" and isinstance(raised, TypeError) and ("max_version" in message or "'copy'" in message):
        return 2
    return 1


# --- checking what the package did ----------------------------------------------------------

_PREFIXES = None


def assert_documented(exc):
    """``exc`` is a type with a row in docs/errors.md whose prefix starts its message."""
    global _PREFIXES
    if _PREFIXES is None:
        _PREFIXES = documented_prefixes()
    prefixes = _PREFIXES.get(type(exc).__name__, ())
    message = str(exc)
    if not any(message.startswith(p) for p in prefixes):
        raise AssertionError(f"undocumented exception {type(exc).__name__}: {message!r}")


def assert_refused(exc, expected):
    """``exc`` (what the package raised, or None) is what the model predicted."""
    if exc is None:
        raise AssertionError(f"expected {expected.kind.__name__} {expected.prefix!r}, got a view")
    if expected.same_object is not None:
        if exc is not expected.same_object:
            raise AssertionError(f"the producer's exception was not propagated unchanged: {exc!r}")
        return
    if type(exc) is not expected.kind or not str(exc).startswith(expected.prefix):
        raise AssertionError(
            f"expected {expected.kind.__name__} starting {expected.prefix!r}, "
            f"got {type(exc).__name__}: {exc}"
        ) from exc
    assert_documented(exc)


def assert_fields(view, fields, obj, *, check_device_id=True):
    problems = []
    for name in ("shape", "strides", "readonly", "is_device_accessible", "ready_stream", "size"):
        got, want = getattr(view, name), fields[name]
        if got != want:
            problems.append(f"{name}: expected {want!r}, got {got!r}")
    if view.ptr != fields["ptr"] or type(view.ptr) is not int:
        problems.append(f"ptr: expected {fields['ptr']:#x}, got {view.ptr!r}")
    if fields["dtype"] is None:
        if view.dtype is not None:
            problems.append(f"dtype: expected None (packed), got {view.dtype!r}")
    elif view.dtype != fields["dtype"] or view.dtype.name != fields["dtype"].name:
        problems.append(f"dtype: expected {fields['dtype']!r}, got {view.dtype!r}")
    if "dlpack_dtype" in fields and view.dlpack_dtype != fields["dlpack_dtype"]:
        problems.append(f"dlpack_dtype: expected {fields['dlpack_dtype']}, got {view.dlpack_dtype}")
    if check_device_id and view.device_id != fields["device_id"]:
        problems.append(f"device_id: expected {fields['device_id']}, got {view.device_id}")
    if view.exporting_obj is not obj:
        problems.append("exporting_obj is not the producer")
    for name in ("shape", "strides"):
        value = getattr(view, name)
        if type(value) is not tuple or any(type(v) is not int for v in value):
            problems.append(f"{name} is not a tuple of ints: {value!r}")
    if view.ndim != len(fields["shape"]):
        problems.append(f"ndim {view.ndim}")
    nbytes = fields["nbytes"] if "nbytes" in fields else fields["size"] * fields["dtype"].itemsize
    if view.nbytes != nbytes:
        problems.append(f"nbytes {view.nbytes}")
    if view.is_c_contiguous is not contiguous(fields["shape"], fields["strides"], True):
        problems.append(f"is_c_contiguous {view.is_c_contiguous}")
    if view.is_f_contiguous is not contiguous(fields["shape"], fields["strides"], False):
        problems.append(f"is_f_contiguous {view.is_f_contiguous}")
    text = repr(view)
    if not text.startswith("StridedMemoryView(ptr=") or "\n" in text:
        problems.append(f"repr {text!r}")
    if problems:
        raise AssertionError("view mismatch:\n  " + "\n  ".join(problems))


class CAIHolder:
    """Exports a given ``__cuda_array_interface__`` value (any object)."""

    def __init__(self, interface):
        self.interface = interface

    @property
    def __cuda_array_interface__(self):
        return self.interface

    def __repr__(self):
        return f"CAIHolder({self.interface!r})"


class _Exporter:
    """Hands on a view's DLPack methods, so that viewing it consumes the view's capsule."""

    def __init__(self, view):
        self.view = view

    def __dlpack__(self, **kwargs):
        return self.view.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()


def exercise_exports(view):
    """Re-export a view every way and view it again; nothing leaks, fields survive.

    For a device view the consumer passes -1 (nothing ordered); a host view gets None.
    """
    host = view.__dlpack_device__()[0] in (CPU, CUDA_HOST)
    stream = None if host else -1
    size = view.size
    before = sys.getrefcount(view)

    # A view of the view: every field taken as it is, no capsule.
    same = StridedMemoryView(view, stream)
    for name in ("ptr", "shape", "strides", "dtype", "readonly", "is_device_accessible", "exporting_obj", "ready_stream"):
        if getattr(same, name) is not getattr(view, name) and getattr(same, name) != getattr(view, name):
            raise AssertionError(f"view of the view: {name} {getattr(same, name)!r} != {getattr(view, name)!r}")
    del same

    # DLPack, versioned: the view's capsule consumed by another view.
    try:
        again = StridedMemoryView.from_dlpack(_Exporter(view), stream)
    except BufferError as exc:
        assert_documented(exc)
        if not str(exc).startswith("dlpack: dtype "):  # only CAI dtypes lack a DLPack code
            raise
    else:
        for name in ("shape", "dtype", "readonly", "device_id", "is_device_accessible"):
            if getattr(again, name) != getattr(view, name):
                raise AssertionError(f"re-exported {name}: {getattr(again, name)!r} != {getattr(view, name)!r}")
        exported = tuple(exported_stride(s, element_bytes(view)) for s in view.strides)
        if again.strides != exported:
            raise AssertionError(f"re-exported strides: {again.strides!r} != {exported!r}")
        if again.ptr != (view.ptr if size else 0):
            raise AssertionError(f"re-exported ptr {again.ptr:#x} != {view.ptr:#x}")
        del again

    # DLPack, legacy: refused for read-only and sub-byte views, else a capsule dropped unconsumed.
    try:
        capsule = view.__dlpack__(stream=stream)
    except BufferError as exc:
        assert_documented(exc)
        message = str(exc)
        dl_type = view.dlpack_dtype
        sub_byte = dl_type is not None and view.itemsize_bits == 8 and dl_type[1] * dl_type[2] < 8
        if not (
            message.startswith("dlpack: a ") and (view.readonly or sub_byte)
            or message.startswith("dlpack: dtype ") and "has no DLPack equivalent" in message
        ):
            raise
    else:
        if producers.capsule_name(capsule) != "dltensor":
            raise AssertionError(producers.capsule_name(capsule))
        del capsule

    # The CUDA Array Interface, viewed again; none for dtypes numpy's typestr cannot name.
    if view.is_device_accessible and not has_own_typestr(view.dtype):
        try:
            view.__cuda_array_interface__
        except BufferError as exc:
            assert_documented(exc)
        else:
            raise AssertionError(f"a CAI for dtype {view.dtype}")
    elif view.is_device_accessible:
        interface = view.__cuda_array_interface__
        itemsize = element_bytes(view)
        exported = tuple(exported_stride(s, itemsize) for s in view.strides)
        byte_strides = tuple(s * itemsize for s in exported)
        if interface["strides"] != byte_strides or interface["shape"] != view.shape:
            raise AssertionError(f"CAI export {interface!r}")
        if interface["data"] != ((view.ptr if size else 0), view.readonly):
            raise AssertionError(f"CAI export data {interface['data']!r}")
        try:
            again = StridedMemoryView.from_cuda_array_interface(CAIHolder(interface), -1)
        except BufferError as exc:
            # The CAI cannot say everything DLPack can: ndim > 64.
            assert_documented(exc)
            too_deep = view.ndim > 64 and str(exc).startswith(CAI + "'shape' has ")
            if not too_deep:
                raise
        else:
            if again.shape != view.shape or again.strides != exported:
                raise AssertionError(f"CAI round trip {again!r} != {view!r}")
            if view.dtype.kind != "V" and again.dtype != view.dtype:
                raise AssertionError(f"CAI round trip dtype {again.dtype} != {view.dtype}")
            del again
    elif hasattr(view, "__cuda_array_interface__"):
        raise AssertionError("a host view has a CUDA Array Interface")

    if sys.getrefcount(view) != before:
        gc.collect()
    if sys.getrefcount(view) != before:
        raise AssertionError(f"exports leaked references to the view: {before} -> {sys.getrefcount(view)}")


# --- the DLPack producers --------------------------------------------------------------------

_PyCapsule_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
_UNSET = object()


class _ForcedName:
    """Give each capsule a name the base producer cannot: NULL or the empty string."""

    forced_name = _UNSET

    def _new_capsule(self):
        capsule = super()._new_capsule()
        if self.forced_name is not _UNSET:
            _PyCapsule_SetName(capsule, self.forced_name)
        return capsule


class FuzzProducer(_ForcedName, DLPackProducer):
    pass


class OldFuzzProducer(_ForcedName, OldStyleProducer):
    pass


def build_producer(spec):
    cls = OldFuzzProducer if spec["old_api"] else FuzzProducer
    name = spec["capsule_name"]
    wrong = {"versioned": "dltensor", "legacy": "dltensor_versioned"}[spec["kind"]]
    if name == wrong:
        # The name is the only type tag of a capsule: a consumer cannot detect a struct of
        # the other kind behind it, and would read past it or call a garbage deleter.
        raise ValueError(f"a {spec['kind']} tensor named {name!r} is not a fuzz case")
    raises_type, raises_message = spec["raises"]
    producer = cls(
        spec["kind"],
        shape=spec["shape"],
        strides=None if spec["strides"] is None else tuple(spec["strides"]),
        dtype=tuple(spec["dtype"]),
        version=spec["version"],
        flags=spec["flags"],
        device=spec["device"],
        reported_device=spec["reported_device"],
        data=spec["data"],
        ndim=spec["ndim"],
        byte_offset=spec["byte_offset"],
        capsule_name=None if name in (S.NULL_NAME, "") else name,
        null_deleter=spec["null_deleter"],
        mode=spec["mode"],
        returns=spec["returns"],
        raises=raises_type(raises_message),
        hold_capsules=True,
    )
    if name == S.NULL_NAME:
        producer.forced_name = None
    elif name == "":
        producer.forced_name = producers._name_bytes("")
    return producer


def release_as_producer(producer, spec):
    """Drop the producer's capsules, releasing (as a producer would) the ones nobody took.

    The shared capsule destructor only knows the two standard names: for a capsule
    the producer itself named otherwise, which the consumer must have left alone, the
    harness calls the deleter.
    """
    name = spec["capsule_name"]
    original = None if name == S.NULL_NAME else name
    struct = DLManagedTensorVersioned if spec["kind"] == "versioned" else DLManagedTensor
    for capsule in producer.capsules:
        current = producers.capsule_name(capsule)
        if current == original and original not in STANDARD_NAMES:
            key = None if current is None else producers._name_bytes(current)
            address = producers._PyCapsule_GetPointer_raw(id(capsule), key)
            managed = struct.from_address(address)
            if managed.deleter:
                managed.deleter(address)
    producer.release_capsules()


def check_dlpack(spec, stream_ptr, *, exports=True):
    """One fuzz case of the general DLPack path; see the module docstring."""
    fake = new_fake()
    producer = build_producer(spec)
    raised = producer.raises
    try:
        expected = model_dlpack(spec, stream_ptr, raised)
    except Refused as refused:
        expected = refused
    _note(f"model: {expected!r}")
    exc = view = None
    try:
        view = StridedMemoryView(producer, stream_ptr)
    except Exception as error:  # noqa: BLE001 - every type is checked against the model
        exc = error

    if isinstance(expected, Refused):
        assert_refused(exc, expected)
    else:
        if exc is not None:
            raise AssertionError(f"expected a view, got {type(exc).__name__}: {exc}") from exc
        assert_fields(view, expected, producer)
        if exports:
            exercise_exports(view)

    # The protocol calls: __dlpack_device__ once (unless stream_ptr was refused first),
    # __dlpack__ once (twice only for a refusal naming max_version).
    names = [name for name, _ in producer.calls]
    dlpack = names.count("__dlpack__")
    if names and names[0] != "__dlpack_device__":
        raise AssertionError(f"protocol calls {names}")
    if dlpack not in (0, dlpack_calls_expected(spec, raised)):
        raise AssertionError(f"__dlpack__ called {dlpack} times")

    # Ownership: renamed if and only if the view took the capsule (or refused its version).
    consumed = view is not None or (
        isinstance(expected, Refused) and expected.prefix.startswith("dlpack: unsupported DLPack version")
    )
    original = None if spec["capsule_name"] == S.NULL_NAME else spec["capsule_name"]
    names = [producers.capsule_name(capsule) for capsule in producer.capsules]
    if names != [("used_" + original) if consumed else original] * len(names):
        raise AssertionError(f"capsule names {names} (consumed: {consumed})")

    del view, exc
    release_as_producer(producer, spec)
    want = 0 if spec["null_deleter"] else 1
    counts = [DELETER_CALLS[i] for i in producer.tensor_ids]
    if any(c != want for c in counts):
        gc.collect()
        counts = [DELETER_CALLS[i] for i in producer.tensor_ids]
    if any(c != want for c in counts):
        raise AssertionError(f"deleter calls per capsule {counts}, expected {want} each")
    producers.forget(producer)
    check_fake(fake)


# --- the DLPack C exchange API ---------------------------------------------------------------

#: id(object) -> object, for the objects whose DLTensor is being lent.
_LENDERS = {}
#: The handle current_work_stream reports (set per case).
_WORK_STREAM = [0]
#: How often each callback ran.
EXCHANGE_CALLS = {"dltensor": 0, "work_stream": 0}


@producers.DLTensorFromPyObject
def _dltensor_from_py_object(address, out):
    EXCHANGE_CALLS["dltensor"] += 1
    out[0] = _LENDERS[address].tensor
    return 0


@producers.CurrentWorkStream
def _current_work_stream(device_type, device_id, out):
    EXCHANGE_CALLS["work_stream"] += 1
    out[0] = _WORK_STREAM[0]
    return 0


def _exchange_api_capsule(with_work_stream):
    return producers.exchange_api(
        _dltensor_from_py_object, _current_work_stream if with_work_stream else None
    )


class ExchangeProducer:
    """Lends a DLTensor through ``__dlpack_c_exchange_api__``; the general path must not be used."""

    _table, __dlpack_c_exchange_api__ = _exchange_api_capsule(True)

    def __init__(self, spec):
        self.spec = spec
        tensor = DLTensor()
        tensor.data = spec["data"]
        tensor.device = DLDevice(*spec["device"])
        tensor.ndim = spec["ndim"]
        tensor.dtype = DLDataType(*spec["dtype"])
        self._shape = self._strides = None
        if spec["shape"] is not None:
            self._shape = (ctypes.c_int64 * len(spec["shape"]))(*spec["shape"])
            tensor.shape = self._shape
        if spec["strides"] is not None:
            self._strides = (ctypes.c_int64 * len(spec["strides"]))(*spec["strides"])
            tensor.strides = self._strides
        tensor.byte_offset = spec["byte_offset"]
        self.tensor = tensor
        _LENDERS[id(self)] = self

    def close(self):
        _LENDERS.pop(id(self), None)

    def __dlpack__(self, **kwargs):
        raise AssertionError("the exchange API producer's __dlpack__ was called")

    def __dlpack_device__(self):
        raise AssertionError("the exchange API producer's __dlpack_device__ was called")


class ExchangeProducerNoWorkStream(ExchangeProducer):
    """An exchange API whose current_work_stream slot is NULL."""

    _table, __dlpack_c_exchange_api__ = _exchange_api_capsule(False)


def model_exchange(spec, stream_ptr, producer_stream):
    stream = model_stream(stream_ptr)
    device_type, device_id = spec["device"]
    if device_type not in SUPPORTED_DEVICES:
        raise Refused(BufferError, "dlpack: unsupported device type ")
    on_device = device_type in (CUDA, CUDA_MANAGED)
    if on_device:
        model_dlpack_stream(device_type, stream)  # the ambiguity check comes first
    # The lent tensor is validated before any stream is ordered.
    fields = model_tensor(
        spec["device"], spec["ndim"], spec["shape"], spec["strides"], spec["data"],
        spec["byte_offset"], spec["dtype"], 0,
    )
    ready = None
    if on_device and stream != -1:
        if spec["work_stream"] is None:
            raise Refused(BufferError, "dlpack: the exchange API of ")
        # A default work stream (0, 1, 2) is the tensor's device's, which the driver decides;
        # another is ordered unless it is the consumer's own stream.
        if producer_stream in DEFAULT_STREAMS or producer_stream != stream:
            raise Refused(CUDAError, DOOR_OFF)
        ready = stream
    fields["ready_stream"] = ready
    return fields


def check_exchange(spec, stream_choice):
    fake = new_fake()
    handles = {"fake": OWN_STREAM, "unknown": S.UNKNOWN_STREAM}
    work = spec["work_stream"]
    _WORK_STREAM[0] = handles.get(work, work if work is not None else 0)
    stream_ptr = handles.get(stream_choice, stream_choice) if isinstance(stream_choice, str) else stream_choice
    cls = ExchangeProducer if work is not None else ExchangeProducerNoWorkStream
    obj = cls(spec)
    try:
        try:
            expected = model_exchange(spec, stream_ptr, _WORK_STREAM[0])
        except Refused as refused:
            expected = refused
        _note(f"model: {expected!r}")
        exc = view = None
        try:
            view = StridedMemoryView(obj, stream_ptr)
        except Exception as error:  # noqa: BLE001
            exc = error
        if isinstance(expected, Refused):
            assert_refused(exc, expected)
        else:
            if exc is not None:
                raise AssertionError(f"expected a view, got {type(exc).__name__}: {exc}") from exc
            assert_fields(view, expected, obj)
            exercise_exports(view)
        del view, exc
        check_fake(fake)
    finally:
        obj.close()


# --- the CUDA Array Interface ------------------------------------------------------------------

CAI = "cuda array interface: "


def model_cai_dtype(typestr, descr):
    if descr is not None and type(descr) is not list:
        raise Refused(TypeError, CAI + "'descr' must be a list of (name, type) tuples (got ")
    # An object array's typestr has no item size ("|O"): refused below as holding objects.
    if (len(typestr) < 3 and typestr[1:] != "O") or typestr[0] not in "<>|=":
        raise Refused(BufferError, CAI + "'typestr' must be <byte order><kind><item size>, e.g. '<f4' (got ")
    try:
        dtype = np.dtype(typestr)
    except (TypeError, ValueError):
        raise Refused(BufferError, CAI + "'typestr' ") from None
    if dtype.byteorder == ">":
        raise Refused(BufferError, CAI + "'typestr' ")
    if dtype.hasobject:
        raise Refused(BufferError, CAI + "'typestr' ")
    structured = isinstance(descr, list) and bool(descr) and not (
        len(descr) == 1 and isinstance(descr[0], tuple) and len(descr[0]) == 2 and descr[0][0] == ""
    )
    if structured:
        try:
            full = np.dtype(descr)
        except (TypeError, ValueError):
            raise Refused(BufferError, CAI + "'descr' ") from None
        if full.itemsize != dtype.itemsize or full.hasobject:
            raise Refused(BufferError, CAI + "'descr' ")
        return full
    return dtype


def model_int64(value, what):
    if value < INT64_MIN and what == "'shape' extents":
        raise Refused(BufferError, CAI + "'shape' extents must be >= 0 (got ")
    if not INT64_MIN <= value <= INT64_MAX:
        raise Refused(BufferError, CAI + f"{what} must fit in int64 (got ")
    return value


def model_cai(interface, stream_ptr):
    """The CAI path: the view's fields, or Refused (the contract's order of checks)."""
    stream = model_stream(stream_ptr)
    if interface is None:  # no CAI at all: neither protocol
        raise Refused(BufferError, "stridedview: ")
    if stream is None:
        raise Refused(BufferError, CAI + "stream_ptr=None is ambiguous")
    if not isinstance(interface, dict):
        raise Refused(TypeError, CAI + "__cuda_array_interface__ must be a dict (got ")
    if "version" not in interface:
        raise Refused(BufferError, CAI + "'version' is missing")
    version = interface["version"]
    if type(version) is not int or not 0 <= version <= 3:
        raise Refused(BufferError, CAI + "'version' must be an int from 0 to 3 (got ")
    if "shape" not in interface:
        raise Refused(BufferError, CAI + "'shape' is missing")
    shape = interface["shape"]
    if not isinstance(shape, (tuple, list)):
        raise Refused(TypeError, CAI + "'shape' must be a tuple of ints (got ")
    shape = tuple(shape)
    if len(shape) > 64:
        raise Refused(BufferError, CAI + "'shape' has ")
    for extent in shape:
        if type(extent) is not int:
            raise Refused(TypeError, CAI + "'shape' must be a tuple of ints (got ")
        model_int64(extent, "'shape' extents")
        if extent < 0:
            raise Refused(BufferError, CAI + "'shape' extents must be >= 0 (got ")
    if "typestr" not in interface:
        raise Refused(BufferError, CAI + "'typestr' is missing")
    typestr = interface["typestr"]
    if type(typestr) is not str:
        raise Refused(TypeError, CAI + "'typestr' must be a str (got ")
    dtype = model_cai_dtype(typestr, interface.get("descr"))
    if dtype.itemsize == 0:
        raise Refused(BufferError, CAI + "'typestr' ")
    size = 0 if 0 in shape else 1
    if size:
        for extent in shape:
            size *= extent
        if size > INT64_MAX:
            raise Refused(BufferError, CAI + "element count overflows int64 (shape ")
    if "data" not in interface:
        raise Refused(BufferError, CAI + "'data' is missing")
    data = interface["data"]
    if type(data) is not tuple or len(data) != 2:
        raise Refused(TypeError, CAI + "'data' must be a (ptr, readonly) tuple (got ")
    ptr, readonly = data
    if type(ptr) is not int:
        raise Refused(TypeError, CAI + "'data' pointer must be an int (got ")
    if not 0 <= ptr < 2**64:
        raise Refused(BufferError, CAI + "'data' pointer must be an address >= 0 (got ")
    if ptr == 0 and size != 0:
        raise Refused(BufferError, CAI + "'data' pointer is 0 for a non-empty array (shape ")
    if not isinstance(readonly, (bool, int)):
        raise Refused(TypeError, CAI + "'data' readonly flag must be a bool (got ")
    strides = interface.get("strides")
    if strides is None:
        element_strides = c_strides(shape)
    else:
        if not isinstance(strides, (tuple, list)):
            raise Refused(TypeError, CAI + "'strides' must be None or a tuple of ints (got ")
        if len(strides) != len(shape):
            raise Refused(BufferError, CAI + "'strides' ")
        element_strides = []
        for extent, stride in zip(shape, strides):
            if type(stride) is not int:
                raise Refused(TypeError, CAI + "'strides' must be None or a tuple of ints (got ")
            model_int64(stride, "'strides'")
            if stride % dtype.itemsize and extent > 1:
                raise Refused(BufferError, CAI + "'strides' ")
            element_strides.append(stride // dtype.itemsize)
        element_strides = tuple(element_strides)
    if not byte_offsets_fit(shape, element_strides, dtype.itemsize):
        raise Refused(BufferError, CAI + "byte offsets from the first element must fit in int64 (got ")
    if size * dtype.itemsize > INT64_MAX:
        raise Refused(BufferError, CAI + "nbytes (size * itemsize) must fit in int64 (got shape ")
    if interface.get("mask") is not None:
        raise Refused(BufferError, CAI + "masked arrays are not supported ('mask' is ")
    producer_stream = None
    if version >= 3:
        producer_stream = interface.get("stream")
        if producer_stream is not None:
            if type(producer_stream) is not int:
                raise Refused(TypeError, CAI + "'stream' must be None or an int (got ")
            if producer_stream == 0:
                raise Refused(BufferError, CAI + "'stream' 0 is disallowed")
            if not 0 < producer_stream < 2**64:
                raise Refused(BufferError, CAI + "'stream' must be None or a stream handle > 0 (got ")
    if ptr == 0:
        device_id = 0  # the current device
    elif S.SAFE_PTR <= ptr <= S.SAFE_PTR + 8 * S.SAFE_SPAN:
        device_id = 1
    else:
        device_id = None  # the driver does not know the pointer: CUDAError
    if stream == -1:
        ready = producer_stream
    else:
        # A default producer stream (1, 2) is the data device's, which the driver decides;
        # another is ordered unless it is the consumer's own stream.
        if producer_stream is not None and (producer_stream in DEFAULT_STREAMS or producer_stream != stream):
            raise Refused(CUDAError, DOOR_OFF)
        ready = stream
    return {
        "ptr": ptr, "shape": shape, "strides": view_strides(shape, element_strides), "dtype": dtype, "size": size,
        "readonly": bool(readonly), "is_device_accessible": True, "ready_stream": ready,
        "device_id": device_id, "producer_stream": producer_stream,
    }


def check_cai(interface, stream_choice):
    fake = new_fake()
    handles = {"producer": OWN_STREAM, "consumer": OWN_STREAM + 0x100}
    if isinstance(interface, dict) and interface.get("stream") == "producer":
        interface["stream"] = OWN_STREAM
    stream_ptr = handles.get(stream_choice, stream_choice) if isinstance(stream_choice, str) else stream_choice
    obj = CAIHolder(interface)
    try:
        expected = model_cai(interface, stream_ptr)
    except Refused as refused:
        expected = refused
    _note(f"model: {expected!r}")
    exc = view = None
    try:
        view = StridedMemoryView(obj, stream_ptr)
    except Exception as error:  # noqa: BLE001
        exc = error
    if isinstance(expected, Refused):
        assert_refused(exc, expected)
    else:
        if exc is not None:
            raise AssertionError(f"expected a view, got {type(exc).__name__}: {exc}") from exc
        if "device_id=?" not in repr(view):
            raise AssertionError(f"device_id resolved before it was read: {view!r}")
        if expected["device_id"] is None:
            with pytest.raises(CUDAError):
                view.device_id
        assert_fields(view, expected, obj, check_device_id=expected["device_id"] is not None)
        if expected["device_id"] is not None:
            exercise_exports(view)
    del view, exc
    check_fake(fake)


# --- the fuzz tests ------------------------------------------------------------------------------

@pytest.mark.slow
@settings(FUZZ, max_examples=examples(2500))
@given(spec=S.dlpack_specs(), stream_ptr=S.stream_args())
@example(  # products just past 2**63: refused, never wrapped
    spec={**{"kind": "versioned", "old_api": False, "version": (1, 2), "flags": 0, "device": (1, 0),
             "reported_device": (1, 0), "dtype": (2, 32, 1), "shape": [3037000500, 3037000500],
             "ndim": 2, "strides": None, "byte_offset": 0, "data": S.SAFE_PTR,
             "capsule_name": "dltensor_versioned", "null_deleter": False, "mode": "capsule",
             "returns": None, "raises": (BufferError, "x")}},
    stream_ptr=None,
)
def test_fuzz_dlpack_capsules(no_fake, spec, stream_ptr):
    """Any crafted capsule gives the model's view or exception, and its deleter runs exactly once."""
    check_dlpack(spec, stream_ptr)


@pytest.mark.slow
@settings(FUZZ, max_examples=examples(1000))
@given(spec=S.exchange_specs(), stream_choice=st.one_of(
    st.sampled_from([-1, -1, 0, 1, 2, "fake", "unknown", None]), S.stream_args()))
def test_fuzz_dlpack_exchange_api(no_fake, spec, stream_choice):
    """Any DLTensor lent through the C exchange API gives the model's view or exception."""
    check_exchange(spec, stream_choice)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Data type alias 'a' was deprecated:DeprecationWarning")
@settings(FUZZ, max_examples=examples(3000))
@given(
    interface=S.cai_dicts(known_streams=("producer",)),
    stream_choice=st.one_of(
        st.sampled_from([-1, -1, -1, "consumer", "producer", 1, 2, 0]), S.stream_args()
    ),
)
def test_fuzz_cuda_array_interface(no_fake, interface, stream_choice):
    """Any CAI value gives the model's view or exception; device_id goes through the fake, an
    ordering is the CUDAError of a fake driver (the door orders only on the real one)."""
    check_cai(interface, stream_choice)


# --- regressions: what the fuzzers found, and the edges they must keep covering ----------------

def _spec(**changes):
    """A valid versioned CPU capsule spec (2x3 float32 at SAFE_PTR), with ``changes``."""
    spec = {
        "kind": "versioned", "old_api": False, "version": (1, 2), "flags": 0, "device": (1, 0),
        "reported_device": (1, 0), "dtype": (2, 32, 1), "shape": [2, 3], "ndim": 2, "strides": None,
        "byte_offset": 0, "data": S.SAFE_PTR, "capsule_name": "dltensor_versioned",
        "null_deleter": False, "mode": "capsule", "returns": None, "raises": (BufferError, "unused"),
    }
    spec.update(changes)
    if "device" in changes and "reported_device" not in changes:
        spec["reported_device"] = spec["device"]
    if "shape" in changes and "ndim" not in changes:
        spec["ndim"] = len(changes["shape"] or ())
    return spec


@pytest.mark.parametrize(
    "changes, stream_ptr",
    [
        pytest.param({"shape": [3037000499, 3037000499]}, None, id="count-just-below-2**63"),
        pytest.param({"shape": [3037000500, 3037000500]}, None, id="count-just-above-2**63"),
        pytest.param({"shape": [2**31, 2**32]}, None, id="count-exactly-2**63"),
        pytest.param({"shape": [2**63 - 1]}, None, id="extent-int64-max"),
        pytest.param({"shape": [2**63 - 1, 2, 0]}, None, id="empty-despite-overflowing-extents"),
        pytest.param({"shape": [2**40, 2**40, 0, -1], "strides": [1, 1, 1, 1]}, None, id="negative-after-overflow"),
        pytest.param({"shape": [2, 3], "strides": [INT64_MAX, INT64_MIN]}, None, id="strides-int64-limits"),
        pytest.param({"shape": [1] * 5000, "strides": None}, None, id="ndim-5000"),
        pytest.param({"shape": [1] * 65, "strides": [7] * 65, "device": (2, 0)}, -1, id="ndim-65-device"),
        pytest.param({"shape": [0, 3], "data": 0}, None, id="empty-null-data"),
        pytest.param({"shape": None, "ndim": 0, "strides": None}, None, id="0-d-null-shape"),
        pytest.param({"shape": None, "ndim": 3}, None, id="null-shape-ndim-3"),
        pytest.param({"ndim": -(2**31)}, None, id="ndim-int32-min"),
        pytest.param({"version": (2**32 - 1, 0)}, None, id="major-uint32-max"),
        pytest.param({"version": (1, 2**32 - 1)}, None, id="minor-uint32-max"),
        pytest.param({"flags": 2**64 - 1, "dtype": (17, 4, 1)}, None, id="all-flags-float4"),
        pytest.param({"kind": "legacy", "capsule_name": "dltensor", "dtype": (17, 4, 1), "flags": 7}, None, id="legacy-float4"),
        pytest.param({"dtype": (2, 32, 0)}, None, id="lanes-0"),
        pytest.param({"dtype": (255, 255, 65535)}, None, id="dtype-all-ones"),
        pytest.param({"capsule_name": S.NULL_NAME}, None, id="null-name"),
        pytest.param({"capsule_name": ""}, None, id="empty-name"),
        pytest.param({"capsule_name": "used_dltensor"}, None, id="used-legacy-name-on-versioned"),
        pytest.param({"kind": "legacy", "capsule_name": "used_dltensor_versioned"}, None, id="used-versioned-name-on-legacy"),
        pytest.param({"null_deleter": True, "version": (2, 0)}, None, id="null-deleter-bad-version"),
        pytest.param({"device": (2, 2**31 - 1)}, 2**64 - 1, id="device-id-int32-max-stream-uint64-max"),
        pytest.param({"device": (13, 0)}, 0, id="managed-stream-0-passed-as-1"),
        pytest.param({"device": (2, 0), "reported_device": (2, 2**31)}, -1, id="reported-id-past-int32"),
        pytest.param({"reported_device": (True, False)}, None, id="reported-bools-are-ints"),
        pytest.param({"reported_device": (np.int64(1), np.int64(0))}, None, id="reported-numpy-ints"),
        pytest.param({"mode": "raise", "raises": (TypeError, "got an unexpected keyword argument 'max_version'")}, None, id="raise-max-version-twice"),
        pytest.param({"mode": "raise", "raises": (TypeError, "stream 3 refused")}, None, id="raise-other-typeerror-once"),
        pytest.param({"old_api": True, "kind": "legacy", "capsule_name": "dltensor"}, None, id="old-api-retried"),
        pytest.param({"mode": "not_capsule", "returns": ({"a": 1},)}, None, id="not-a-capsule"),
        pytest.param({}, S.CudaStream((0, True)), id="cuda-stream-bool-handle"),
        pytest.param({}, S.Index(2**64), id="index-2**64"),
        pytest.param({"device": (2, 0)}, S.CudaStream((7, 2**64 - 1)), id="cuda-stream-uint64-max"),
    ],
)
def test_dlpack_edges(no_fake, changes, stream_ptr):
    """Edges the DLPack fuzzer must keep covering: each gives the model's view or exception, deleter once."""
    check_dlpack(_spec(**changes), stream_ptr)


@pytest.mark.parametrize(
    "interface",
    [
        pytest.param({"version": 3, "shape": (3037000500, 3037000500), "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="count-past-2**63"),
        pytest.param({"version": 3, "shape": (0, 2**63 - 1, 2**63 - 1), "typestr": "<f4", "data": (0, False), "strides": (4, 4, 4)}, id="empty-huge-extents"),
        pytest.param({"version": 3, "shape": (2, 3), "typestr": "|u1", "data": (S.SAFE_PTR, False), "strides": (INT64_MAX, INT64_MIN)}, id="byte-strides-int64-limits"),
        pytest.param({"version": 3, "shape": (2, 3), "typestr": "<f8", "data": (S.SAFE_PTR, False), "strides": (INT64_MIN, 8)}, id="int64-min-stride-itemsize-8"),
        pytest.param({"version": 3, "shape": (1, 3), "typestr": "<f4", "data": (S.SAFE_PTR, False), "strides": (7, 4)}, id="odd-stride-on-extent-1"),
        pytest.param({"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (S.SAFE_PTR, False), "strides": (2**63, 4)}, id="stride-2**63"),
        pytest.param({"version": 3, "shape": (1,) * 64, "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="ndim-64"),
        pytest.param({"version": 3, "shape": (1,) * 65, "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="ndim-65"),
        pytest.param({"version": 3, "shape": [2, 3], "typestr": "<f4", "data": (S.SAFE_PTR, 2)}, id="shape-list-readonly-int"),
        pytest.param({"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (S.SAFE_PTR, np.bool_(True))}, id="readonly-numpy-bool"),
        pytest.param({"version": 3, "shape": (2, True), "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="extent-bool"),
        pytest.param({"version": 3, "shape": (2**64, -1), "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="past-int64-before-negative"),
        pytest.param({"version": 3, "shape": (-1, 2**64), "typestr": "<f4", "data": (S.SAFE_PTR, False)}, id="negative-before-past-int64"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4\x00", "data": (S.SAFE_PTR, False)}, id="typestr-nul"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "|S99999999999999999999", "data": (S.SAFE_PTR, False)}, id="typestr-huge-size"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<M8[foo]", "data": (S.SAFE_PTR, False)}, id="typestr-bad-unit"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "|V4", "descr": [("a", "<f4", (2**31, 2**31))], "data": (S.SAFE_PTR, False)}, id="descr-huge-subarray"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "|V4", "descr": [("a", [("b", "<f4")])], "data": (S.SAFE_PTR, False)}, id="descr-nested"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4", "descr": [("", ">f4")], "data": (S.SAFE_PTR, False)}, id="default-descr-ignored"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "|V4", "descr": [("x", ">f4")], "data": (S.SAFE_PTR, False)}, id="big-endian-field"),
        pytest.param({"version": 3, "shape": (0,), "typestr": "<U0", "data": (0, False)}, id="itemsize-0-before-data"),
        pytest.param({"version": 2, "shape": (2,), "typestr": "<f4", "data": (S.SAFE_PTR, False), "stream": "junk"}, id="v2-stream-ignored"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4", "data": (S.SAFE_PTR, False), "stream": 2**64 - 1}, id="stream-uint64-max"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4", "data": (2**64 - 1, False)}, id="ptr-uint64-max"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4", "data": (S.SAFE_PTR, False), "mask": False}, id="mask-false-refused"),
        pytest.param({"version": 3, "shape": (2,), "typestr": "<f4", "data": (S.SAFE_PTR, False), "stream": "producer"}, id="ordered-producer-stream"),
    ],
)
@pytest.mark.parametrize("stream_choice", [-1, "consumer"])
@pytest.mark.filterwarnings("ignore:Data type alias 'a' was deprecated:DeprecationWarning")
def test_cai_edges(no_fake, interface, stream_choice):
    """Edges the CAI fuzzer must keep covering: each gives the model's view or exception."""
    check_cai(dict(interface), stream_choice)


@pytest.mark.parametrize(
    "changes, stream_choice",
    [
        pytest.param({"device": (2, 0), "work_stream": "fake"}, "fake", id="same-stream"),
        pytest.param({"device": (2, 0), "work_stream": 0}, 2, id="null-work-stream-vs-per-thread"),
        pytest.param({"device": (2, 0), "work_stream": "unknown"}, 1, id="unknown-work-stream"),
        pytest.param({"device": (2, 0), "work_stream": None}, -1, id="no-work-stream-opt-out"),
        pytest.param({"device": (13, 0), "work_stream": None}, 1, id="no-work-stream-managed"),
        pytest.param({"device": (2, 0), "ndim": -1, "work_stream": "fake"}, 1, id="ordered-before-validation"),
        pytest.param({"dtype": (15, 6, 1)}, None, id="sub-byte-packed"),  # no flags: packed
        pytest.param({"shape": [2**31, 2**32], "strides": [1, 1]}, None, id="count-2**63"),
    ],
)
def test_exchange_edges(no_fake, changes, stream_choice):
    """Edges of the exchange API path: the model's view or exception."""
    spec = {"device": (1, 0), "dtype": (2, 32, 1), "shape": [2, 3], "ndim": 2, "strides": None,
            "byte_offset": 0, "data": S.SAFE_PTR, "work_stream": 0}
    spec.update(changes)
    if "shape" in changes:
        spec["ndim"] = len(changes["shape"])
    check_exchange(spec, stream_choice)


# --- package bugs the fuzzers found (all fixed since; these keep them fixed) --------------------

@pytest.mark.parametrize("kind", ["versioned", "legacy"])
@pytest.mark.parametrize(
    "data, byte_offset, shape",
    [(2**64 - 8, 16, (2,)), (2**64 - 1, 1, ()), (2**64 - 1, 2**64 - 1, (0,))],
    ids=["wrapped-to-0x8", "0-d-wrapped-to-NULL", "empty-both-max"],
)
def test_found_pointer_past_address_space_is_refused(kind, data, byte_offset, shape):
    """Found: data + byte_offset >= 2**64 gave a view of the wrapped address (0x8; NULL for a
    0-d tensor at 2**64 - 1 + 1, whose re-export then failed "data is NULL").  It is no address:
    refused."""
    producer = producers.make_producer(kind, shape=shape, data=data, byte_offset=byte_offset, hold_capsules=True)
    try:
        with pytest.raises(BufferError, match=re.escape("dlpack: data + byte_offset passes the end of the address space")):
            StridedMemoryView(producer)
        assert producers.capsule_name(producer.capsules[0]) == ("dltensor_versioned" if kind == "versioned" else "dltensor")
    finally:
        producer.release_capsules()
    assert producers.deleter_calls(producer) == 1


@pytest.mark.parametrize("device_type", [CUDA, CUDA_HOST, CUDA_MANAGED])
@pytest.mark.parametrize("device_id", [-1, -2, -(2**31)])
def test_found_negative_device_id_is_refused(device_type, device_id):
    """Found: a device capsule with device_id -2 hit the view's "not yet asked" sentinel, so
    reading device_id called the driver (and -1 read as host memory).  Negative ordinals are
    refused, before the driver could be reached."""
    from fake_driver import ForbiddenDriver

    producer = producers.make_producer("versioned", device=(device_type, device_id))
    _driver.use_api(ForbiddenDriver(on_use=pytest.fail))
    try:
        with pytest.raises(BufferError, match=re.escape(f"dlpack: device_id must be >= 0 (got {device_id})")):
            StridedMemoryView(producer, stream_ptr=-1)
    finally:
        _driver.use_api(None)
        producer.release_capsules()


def _empty_view_with_huge_extents(path):
    if path == "dlpack":
        producer = producers.make_producer("versioned", shape=(0, 2**62, 2**62), strides=None, data=0)
        view = StridedMemoryView(producer)
        producer.release_capsules()
    else:
        view = StridedMemoryView(CAIHolder({"version": 3, "shape": (0, 2**62, 2**62), "typestr": "<f4",
                                            "data": (0, False)}), stream_ptr=-1)
    return view


@pytest.mark.parametrize("path", ["dlpack", "cai"])
def test_found_empty_view_strides_fit_int64(path, no_fake):
    """Found: an empty view's computed row-major strides passed int64 ((2**124, 2**62, 1) for
    shape (0, 2**62, 2**62)) and re-export raised OverflowError, leaking the capsule's block.
    An empty view's strides are all 0 now (they address nothing), and the view re-exports."""
    new_fake()
    view = _empty_view_with_huge_extents(path)
    assert view.strides == (0, 0, 0)
    assert view.size == 0 and view.is_c_contiguous
    stream = -1 if path == "cai" else None
    again = StridedMemoryView.from_dlpack(_Exporter(view), stream)
    assert again.shape == view.shape and again.strides == (0, 0, 0) and again.ptr == 0


class _LyingList(list):
    """A list whose len() claims more items than it holds."""

    def __len__(self):
        return 2


class _LyingTuple(tuple):
    def __len__(self):
        return 2


@pytest.mark.parametrize("strides", [_LyingList(), _LyingTuple((4,))], ids=["list", "tuple"])
def test_found_cai_strides_with_lying_len(strides):
    """Found: a CAI 'strides' list or tuple subclass whose len() lies raised IndexError; the
    parser now copies it to a tuple and checks what is really there."""
    obj = CAIHolder({"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (S.SAFE_PTR, False),
                     "strides": strides})
    with pytest.raises(BufferError, match=re.escape("cuda array interface: 'strides' ")) as info:
        StridedMemoryView(obj, stream_ptr=-1)
    assert "differ in length" in str(info.value)
    assert_documented(info.value)
