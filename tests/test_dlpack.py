"""The DLPack consumer, driven by the pure-ctypes producers of ``producers.py``.

Each test corrupts or sets one field and checks one rule of the DLPack consumer
(docs/concepts.md, docs/errors.md); every test that can runs against both capsule kinds
(``kind`` is "versioned" or "legacy").
"""

import ctypes
import dataclasses
import enum
import gc
import re
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

from producers import (
    IS_COPIED,
    IS_SUBBYTE_TYPE_PADDED,
    KINDS,
    READ_ONLY,
    assert_view,
    capsule_name,
    deleter_calls,
    forget,
    from_numpy,
    make_producer,
)
from producers import DLPackProducer
from stridedview import StridedMemoryView, _view

MAX_VERSION = (1, 3)
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
DEVICE_NAMES = {CUDA: "CUDA", CUDA_MANAGED: "CUDAManaged"}


@pytest.fixture(params=KINDS)
def kind(request):
    """The capsule kind the producer returns."""
    return request.param


@pytest.fixture(
    params=[StridedMemoryView, StridedMemoryView.from_dlpack], ids=["constructor", "from_dlpack"]
)
def entry(request):
    """Both ways into the DLPack path."""
    return request.param


def method_calls(producer):
    """The names of the protocol methods called, in order."""
    return [name for name, _ in producer.calls]


def dlpack_calls(producer):
    """The keyword arguments of each ``__dlpack__`` call, in order."""
    return [kwargs for name, kwargs in producer.calls if name == "__dlpack__"]


def unused_name(kind):
    """The name a fresh capsule of ``kind`` carries."""
    return "dltensor_versioned" if kind == "versioned" else "dltensor"


class CudaStream:
    """An object speaking ``__cuda_stream__``, returning whatever it was given."""

    def __init__(self, result):
        self.result = result

    def __cuda_stream__(self):
        return self.result

    def __repr__(self):
        return f"CudaStream({self.result!r})"


# --- 1. stream_ptr is normalised before the producer is touched ------------

@pytest.mark.parametrize("stream_ptr", ["5", 1.5, b"\x05", [5], object()], ids=repr)
@pytest.mark.parametrize("device", [(CPU, 0), (CUDA, 0)], ids=["cpu", "cuda"])
def test_stream_of_wrong_type_refused_before_any_call(kind, entry, device, stream_ptr):
    """A stream_ptr that is no int, None or __cuda_stream__ object is a TypeError raised before any producer method runs."""
    producer = make_producer(kind, device=device)
    prefix = "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got "
    with pytest.raises(TypeError, match=re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is TypeError
    assert producer.calls == []


@pytest.mark.parametrize("stream_ptr", [-2, -3, -(2**63), CudaStream((0, -2))], ids=repr)
@pytest.mark.parametrize("device", [(CPU, 0), (CUDA, 0)], ids=["cpu", "cuda"])
def test_stream_of_wrong_value_refused_before_any_call(kind, entry, device, stream_ptr):
    """A stream handle below -1 is a ValueError raised before any producer method runs."""
    producer = make_producer(kind, device=device)
    prefix = "stream: stream_ptr must be -1 or a stream handle >= 0 (got "
    with pytest.raises(ValueError, match=re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is ValueError
    assert producer.calls == []


@pytest.mark.parametrize("result", [5, None, (5,), (0, 5, 0), (0, "5"), (0, 1.5)], ids=repr)
def test_malformed_cuda_stream_refused_before_any_call(kind, entry, result):
    """A __cuda_stream__() that does not return (version, handle) is a TypeError raised before any producer method runs."""
    producer = make_producer(kind, device=(CUDA, 0))
    prefix = "stream: __cuda_stream__() must return (version, handle) (got "
    with pytest.raises(TypeError, match=re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=CudaStream(result))
    assert excinfo.type is TypeError
    assert producer.calls == []


# --- 2-4. __dlpack_device__ first, then the device check and the stream ----

def test_device_is_asked_before_dlpack(kind, entry):
    """__dlpack_device__ is called once, before the single __dlpack__ call."""
    producer = make_producer(kind)
    entry(producer)
    assert method_calls(producer) == ["__dlpack_device__", "__dlpack__"]
    assert producer.calls[0] == ("__dlpack_device__", {})


@pytest.mark.parametrize("device_type", [4, 7, 10, 99])
def test_refused_device_never_reaches_dlpack(kind, entry, device_type):
    """An unsupported device type stops the import before __dlpack__ is called."""
    producer = make_producer(kind, device=(device_type, 0))
    with pytest.raises(BufferError):
        entry(producer, stream_ptr=-1)
    assert method_calls(producer) == ["__dlpack_device__"]


STREAM_INPUTS = [None, -1, 0, 1, 2, 5, 2**63, CudaStream((0, 5)), CudaStream((3, 0))]


@pytest.mark.parametrize("stream_ptr", STREAM_INPUTS, ids=repr)
@pytest.mark.parametrize("device_type", [CPU, CUDA_HOST], ids=["CPU", "CUDAHost"])
def test_host_memory_is_handed_no_stream(kind, entry, device_type, stream_ptr):
    """CPU and pinned memory are always exported with stream=None, whatever stream_ptr says."""
    producer = make_producer(kind, device=(device_type, 0))
    entry(producer, stream_ptr=stream_ptr)
    assert dlpack_calls(producer) == [{"stream": None, "max_version": MAX_VERSION, "copy": False}]


@pytest.mark.parametrize(
    "stream_ptr, expected",
    [
        (-1, -1),
        (0, 1),
        (1, 1),
        (2, 2),
        (5, 5),
        (2**63, 2**63),
        (CudaStream((0, 5)), 5),
        (CudaStream((3, 0)), 1),
        (CudaStream((0, -1)), -1),
    ],
    ids=repr,
)
@pytest.mark.parametrize("device_type", [CUDA, CUDA_MANAGED], ids=["CUDA", "CUDAManaged"])
def test_cuda_memory_is_handed_the_consumer_stream(kind, entry, device_type, stream_ptr, expected):
    """CUDA and managed memory get -1 as -1, 0 as 1 and other handles as given."""
    producer = make_producer(kind, device=(device_type, 0))
    entry(producer, stream_ptr=stream_ptr)
    [kwargs] = dlpack_calls(producer)
    assert kwargs == {"stream": expected, "max_version": MAX_VERSION, "copy": False}
    assert type(kwargs["stream"]) is int


@pytest.mark.parametrize("device_type", [CUDA, CUDA_MANAGED], ids=["CUDA", "CUDAManaged"])
def test_cuda_memory_without_stream_is_ambiguous(kind, entry, device_type):
    """stream_ptr=None on CUDA or managed memory is a BufferError raised before __dlpack__."""
    producer = make_producer(kind, device=(device_type, 0))
    message = (
        f"dlpack: stream_ptr=None is ambiguous for {DEVICE_NAMES[device_type]} memory: "
        "pass a stream handle, or -1 to opt out"
    )
    with pytest.raises(BufferError, match=re.escape(message)) as excinfo:
        entry(producer, stream_ptr=None)
    assert excinfo.type is BufferError
    assert method_calls(producer) == ["__dlpack_device__"]


@pytest.mark.parametrize(
    "device, stream_ptr, device_id, accessible",
    [
        ((CPU, 0), None, -1, False),
        ((CUDA, 0), -1, 0, True),
        ((CUDA, 3), 5, 3, True),
        ((CUDA_HOST, 0), None, 0, True),
        ((CUDA_MANAGED, 0), -1, 0, True),
        ((CUDA_MANAGED, 1), 7, 1, True),
    ],
    ids=["CPU", "CUDA", "CUDA:3", "CUDAHost", "CUDAManaged", "CUDAManaged:1"],
)
def test_supported_devices(kind, device, stream_ptr, device_id, accessible):
    """CPU, CUDA, CUDAHost and CUDAManaged memory import, with device_id -1 for CPU only."""
    producer = make_producer(kind, device=device)
    view = StridedMemoryView(producer, stream_ptr=stream_ptr)
    assert_view(
        view,
        ptr=producer.expected_ptr,
        shape=(2, 3),
        strides=(3, 1),
        dtype="float32",
        device_id=device_id,
        is_device_accessible=accessible,
        readonly=kind == "legacy",  # legacy: cannot say, read-only
        exporting_obj=producer,
    )


UNSUPPORTED_DEVICES = {
    4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCM", 11: "ROCMHost", 12: "ExtDev",
    14: "OneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA", 18: "Trn",
    19: "TPU", 20: "TPUHost", 21: "Ascend",  # DLPack 1.3, added without a minor version
    0: "unknown", 5: "unknown", 6: "unknown", 22: "unknown", 99: "unknown", -1: "unknown",
}


@pytest.mark.parametrize("device_type", list(UNSUPPORTED_DEVICES))
def test_unsupported_device_named(kind, device_type):
    """Every device type but CPU, CUDA, CUDAHost and CUDAManaged is refused with its DLPack name."""
    producer = make_producer(kind, device=(device_type, 0))
    message = f"dlpack: unsupported device type {device_type} ({UNSUPPORTED_DEVICES[device_type]})"
    with pytest.raises(BufferError, match=re.escape(message)) as excinfo:
        StridedMemoryView(producer, stream_ptr=-1)
    assert excinfo.type is BufferError


def test_device_may_be_an_int_enum(kind):
    """A __dlpack_device__() answer made of int subclasses (as torch's IntEnum) is accepted."""

    class DeviceType(enum.IntEnum):
        kDLCPU = 1

    producer = make_producer(kind, reported_device=(DeviceType.kDLCPU, 0))
    view = StridedMemoryView(producer)
    assert view.device_id == -1
    assert view.is_device_accessible is False


# --- 5. max_version, and the one retry for producers that predate it -------

def test_old_style_producer_is_asked_again_without_max_version(kind):
    """A producer whose __dlpack__ lacks max_version is called twice: with it, then without."""
    producer = make_producer(kind, old_api=True)
    view = StridedMemoryView(producer)
    assert dlpack_calls(producer) == [
        {"stream": None, "max_version": MAX_VERSION, "copy": False},
        {"stream": None},
    ]
    assert view.shape == (2, 3)
    assert view.exporting_obj is producer


def test_old_style_retry_passes_the_same_stream(kind):
    """The retry without max_version passes the same stream value as the first call."""
    producer = make_producer(kind, old_api=True, device=(CUDA, 0))
    StridedMemoryView(producer, stream_ptr=0)
    assert dlpack_calls(producer) == [{"stream": 1, "max_version": MAX_VERSION, "copy": False}, {"stream": 1}]


def test_other_type_error_is_not_retried(kind, entry):
    """A TypeError that is not about max_version propagates unchanged after exactly one call."""
    error = TypeError("stream 5 is not supported here")
    producer = make_producer(kind, mode="raise", raises=error)
    with pytest.raises(TypeError) as excinfo:
        entry(producer)
    assert excinfo.value is error
    assert len(dlpack_calls(producer)) == 1


def test_max_version_type_error_is_retried_once(kind):
    """A TypeError mentioning max_version gets exactly one retry, whose error then propagates."""
    error = TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
    producer = make_producer(kind, mode="raise", raises=error)
    with pytest.raises(TypeError) as excinfo:
        StridedMemoryView(producer)
    assert excinfo.value is error
    assert dlpack_calls(producer) == [{"stream": None, "max_version": MAX_VERSION, "copy": False}, {"stream": None}]


@pytest.mark.parametrize(
    "error",
    [
        BufferError("cannot export"),
        RuntimeError("NumPy only supports stream=None"),
        ValueError("bad stream"),
        NotImplementedError("no"),
        AttributeError("inside __dlpack__"),
        KeyError("k"),
        AssertionError("torch on stream 0"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_exception_inside_dlpack_propagates_unchanged(kind, entry, error):
    """Any exception raised inside __dlpack__ reaches the caller as the same object, after one call."""
    producer = make_producer(kind, mode="raise", raises=error)
    with pytest.raises(type(error)) as excinfo:
        entry(producer)
    assert excinfo.value is error
    assert len(dlpack_calls(producer)) == 1
    assert producer.tensor_ids == []


@pytest.mark.slow
def test_exception_inside_dlpack_leaks_no_reference(kind):
    """After __dlpack__ raised, the producer's reference count is back where it was."""
    producer = make_producer(kind, mode="raise", raises=BufferError("cannot export"))
    baseline = sys.getrefcount(producer)
    with pytest.raises(BufferError) as excinfo:
        StridedMemoryView(producer)
    excinfo.value.__traceback__ = None
    del excinfo
    gc.collect()
    assert sys.getrefcount(producer) == baseline


# --- 6. the capsule: kinds, names, versions ---------------------------------

@pytest.mark.parametrize("old_api", [False, True], ids=["asked-max_version", "old-style"])
def test_either_capsule_kind_accepted_whatever_was_asked(kind, old_api):
    """A versioned or a legacy capsule is accepted whether or not max_version was passed."""
    producer = make_producer(kind, old_api=old_api)
    view = StridedMemoryView(producer)
    assert_view(
        view,
        ptr=producer.expected_ptr,
        shape=(2, 3),
        strides=(3, 1),
        dtype="float32",
        device_id=-1,
        is_device_accessible=False,
        readonly=kind == "legacy",  # legacy: cannot say, read-only
        exporting_obj=producer,
    )


def test_capsule_renamed_used_after_success(kind):
    """A consumed capsule is renamed "used_dltensor_versioned" or "used_dltensor"."""
    producer = make_producer(kind, hold_capsules=True)
    view = StridedMemoryView(producer)
    [capsule] = producer.capsules
    assert capsule_name(capsule) == "used_" + unused_name(kind)
    del view


@pytest.mark.parametrize("version", [(1, 0), (1, 1), (1, 3), (1, 99)], ids=str)
def test_any_minor_version_of_major_1_accepted(version):
    """Every versioned capsule of major version 1 is accepted, newer minor versions too."""
    producer = make_producer("versioned", version=version)
    view = StridedMemoryView(producer)
    assert view.shape == (2, 3)


@pytest.mark.parametrize("version", [(2, 0), (0, 5), (2, 3), (4294967295, 0)], ids=str)
@pytest.mark.parametrize("null_deleter", [False, True], ids=["deleter", "NULL-deleter"])
def test_other_major_version_refused_and_deleted_at_once(version, null_deleter):
    """A major version other than 1 renames the capsule, calls the deleter at once, then raises BufferError."""
    producer = make_producer("versioned", version=version, null_deleter=null_deleter, hold_capsules=True)
    major, minor = version
    message = f"dlpack: unsupported DLPack version {major}.{minor} (major version must be 1)"
    with pytest.raises(BufferError, match=re.escape(message)) as excinfo:
        StridedMemoryView(producer)
    assert excinfo.type is BufferError
    assert deleter_calls(producer) == (0 if null_deleter else 1)
    [capsule] = producer.capsules
    assert capsule_name(capsule) == "used_dltensor_versioned"
    producer.release_capsules()
    assert deleter_calls(producer) == (0 if null_deleter else 1)


# --- The error table ---------------------------------------------------------
# Each row corrupts one thing.  `capsule` says what happened to the capsule:
# "unused" (validation failed: the capsule keeps its name and its own
# destructor calls the deleter), "foreign" (a name the consumer must not
# touch), None (no capsule was ever made).

def error_row(id, fields, prefix, *, exc=BufferError, stream_ptr=None, capsule="unused"):
    """One row: producer fields, stream_ptr, exception type, message prefix, capsule fate."""
    return pytest.param(fields, stream_ptr, exc, prefix, capsule, id=id)


BAD_DEVICE = "dlpack: __dlpack_device__() must return (device_type, device_id) (got "
BAD_STREAM_TYPE = "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got "
BAD_STREAM_VALUE = "stream: stream_ptr must be -1 or a stream handle >= 0 (got "
BAD_CUDA_STREAM = "stream: __cuda_stream__() must return (version, handle) (got "

ERROR_TABLE = [
    error_row("stream-str", {}, BAD_STREAM_TYPE, exc=TypeError, stream_ptr="5", capsule=None),
    error_row("stream-float", {}, BAD_STREAM_TYPE, exc=TypeError, stream_ptr=5.0, capsule=None),
    error_row("stream-minus-2", {}, BAD_STREAM_VALUE, exc=ValueError, stream_ptr=-2, capsule=None),
    error_row(
        "cuda_stream-int",
        {"device": (CUDA, 0)},
        BAD_CUDA_STREAM,
        exc=TypeError,
        stream_ptr=CudaStream(5),
        capsule=None,
    ),
    error_row("dlpack_device-int", {"reported_device": 1}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-None", {"reported_device": None}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-1-tuple", {"reported_device": (1,)}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-3-tuple", {"reported_device": (1, 0, 0)}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-str", {"reported_device": ("1", 0)}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-float-id", {"reported_device": (1, 0.0)}, BAD_DEVICE, capsule=None),
    error_row("dlpack_device-float-type", {"reported_device": (1.5, 0)}, BAD_DEVICE, capsule=None),
    error_row(
        "device-OpenCL",
        {"device": (4, 0)},
        "dlpack: unsupported device type 4 (OpenCL)",
        capsule=None,
    ),
    error_row(
        "device-unknown",
        {"device": (99, 0)},
        "dlpack: unsupported device type 99 (unknown)",
        capsule=None,
    ),
    error_row(
        "cuda-stream-None",
        {"device": (CUDA, 0)},
        "dlpack: stream_ptr=None is ambiguous for CUDA memory: pass a stream handle, or -1 to opt out",
        capsule=None,
    ),
    error_row(
        "managed-stream-None",
        {"device": (CUDA_MANAGED, 0)},
        "dlpack: stream_ptr=None is ambiguous for CUDAManaged memory: pass a stream handle, "
        "or -1 to opt out",
        capsule=None,
    ),
    error_row(
        "not-a-capsule-int",
        {"mode": "not_capsule", "returns": 42},
        "dlpack: __dlpack__() must return a PyCapsule (got an object of type 'int')",
        capsule=None,
    ),
    error_row(
        "not-a-capsule-None",
        {"mode": "not_capsule", "returns": None},
        "dlpack: __dlpack__() must return a PyCapsule (got an object of type 'NoneType')",
        capsule=None,
    ),
    error_row(
        "used-legacy-name",
        {"capsule_name": "used_dltensor"},
        "dlpack: capsule was already consumed (name 'used_dltensor')",
        capsule="foreign",
    ),
    error_row(
        "used-versioned-name",
        {"capsule_name": "used_dltensor_versioned"},
        "dlpack: capsule was already consumed (name 'used_dltensor_versioned')",
        capsule="foreign",
    ),
    error_row(
        "foreign-name",
        {"capsule_name": "foo"},
        "dlpack: capsule name must be 'dltensor_versioned' or 'dltensor' (got 'foo')",
        capsule="foreign",
    ),
    error_row(
        "capsule-device-type",
        {"device": (CUDA, 0), "reported_device": (CPU, 0)},
        "dlpack: capsule device (2, 0) differs from __dlpack_device__() (1, 0)",
    ),
    error_row(
        "capsule-device-id",
        {"device": (CUDA, 1), "reported_device": (CUDA, 0)},
        "dlpack: capsule device (2, 1) differs from __dlpack_device__() (2, 0)",
        stream_ptr=-1,
    ),
    error_row("ndim-negative", {"ndim": -1}, "dlpack: ndim must be >= 0 (got -1)"),
    error_row(
        "shape-NULL",
        {"shape": None, "strides": None, "ndim": 2},
        "dlpack: shape is NULL with ndim 2",
    ),
    error_row(
        "shape-negative",
        {"shape": (2, -3), "strides": (3, 1)},
        "dlpack: shape[1] must be >= 0 (got -3)",
    ),
    error_row(
        "count-overflow-2**64",
        {"shape": (2**62, 4), "strides": (4, 1), "dtype": "uint8", "data": 0x1000},
        "dlpack: element count overflows int64 (shape ",
    ),
    error_row(
        "count-overflow-2**63",
        {"shape": (2**32, 2**31), "strides": (2**31, 1), "dtype": "uint8", "data": 0x1000},
        "dlpack: element count overflows int64 (shape ",
    ),
    error_row("data-NULL", {"data": 0}, "dlpack: data is NULL for a tensor of 6 elements"),
    error_row("lanes-0", {"dtype": (2, 32, 0)}, "dlpack: dtype lanes must be >= 1 (got 0)"),
    error_row(
        "code-OpaqueHandle",
        {"dtype": (3, 64, 1)},
        "dlpack: unsupported dtype code 3 (OpaqueHandle)",
    ),
    error_row("code-unknown", {"dtype": (99, 8, 1)}, "dlpack: unsupported dtype code 99 (unknown)"),
    error_row(
        "bfloat-32-bits",
        {"dtype": (4, 32, 1)},
        "dlpack: dtype Bfloat must have 16 bits (got 32)",
    ),
    error_row(
        "int-12-bits",
        {"dtype": (0, 12, 1)},
        "dlpack: dtype Int must have 1, 2, 4, 8, 16, 32 or 64 bits (got 12)",
    ),
    error_row(
        "float4-packed-column-major",
        {"dtype": (17, 4, 1), "strides": (1, 2)},
        "dlpack: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) must be row-major and "
        "gap-free, its elements one after another (got shape (2, 3), strides (1, 2) in elements)",
    ),
    error_row(
        "float6-packed-broadcast",
        {"dtype": (15, 6, 1), "strides": (0, 1)},
        "dlpack: packed sub-byte dtype Float6_e2m3fn (bits 6, lanes 1) must be row-major and "
        "gap-free",
    ),
    error_row(
        "bcomplex-16-bits",
        {"dtype": (18, 16, 1)},
        "dlpack: dtype Bcomplex must have 32 bits (got 16)",
    ),
]

ROW_ARGS = "fields, stream_ptr, exc, prefix, capsule"


@pytest.mark.parametrize(ROW_ARGS, ERROR_TABLE)
def test_error_table(kind, entry, fields, stream_ptr, exc, prefix, capsule):
    """Each corrupted field raises exactly the documented exception type with the documented message."""
    producer = make_producer(kind, **fields)
    with pytest.raises(exc, match=re.escape(prefix)) as excinfo:
        entry(producer, stream_ptr=stream_ptr)
    assert excinfo.type is exc
    assert str(excinfo.value).startswith(prefix)


@pytest.mark.parametrize(ROW_ARGS, [row for row in ERROR_TABLE if row.values[-1] == "unused"])
def test_failed_validation_leaves_the_capsule_to_its_destructor(
    kind, fields, stream_ptr, exc, prefix, capsule
):
    """On a validation failure the capsule keeps its name, is released, and its destructor calls the deleter once."""
    producer = make_producer(kind, hold_capsules=True, **fields)
    with pytest.raises(exc):
        StridedMemoryView(producer, stream_ptr=stream_ptr)
    [capsule_obj] = producer.capsules
    assert capsule_name(capsule_obj) == unused_name(kind)
    assert deleter_calls(producer) == 0
    # Held by producer.capsules and this local, and by nobody else: compared with an
    # object held the same way, measured the same way (3.14 passes a local to a call
    # as a borrowed stack reference, which getrefcount then does not count).
    control = object()
    control_holder = [control]
    assert sys.getrefcount(capsule_obj) == sys.getrefcount(control), control_holder
    del capsule_obj
    producer.release_capsules()
    assert deleter_calls(producer) == 1


_REFUSALS = {
    "negative-extent": {"shape": (2, -3), "strides": (1, 1), "data": 0x10000},
    "lanes": {"dtype": (2, 32, 0)},
    "device-differs": {"device": (2, 0), "reported_device": (1, 0)},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, fields",
    [pytest.param(k, f, id=f"{k}-{name}") for name, f in _REFUSALS.items() for k in KINDS]
    + [pytest.param("versioned", {"version": (2, 0)}, id="versioned-major-version-2")],
)
def test_refused_capsule_held_by_nobody_is_released_with_no_error_pending(kind, fields):
    """10,000 refused capsules that only the consumer holds, with Python deleters: BufferError each time, 10,000 deleter calls."""
    producer = make_producer(kind, **fields)
    for _ in range(10_000):
        try:
            StridedMemoryView(producer)
        except BufferError as error:
            assert type(error) is BufferError
        else:
            raise AssertionError("the capsule was not refused")
    assert deleter_calls(producer) == 10_000
    forget(producer)


@pytest.mark.parametrize(ROW_ARGS, [row for row in ERROR_TABLE if row.values[-1] == "foreign"])
def test_foreign_or_used_capsule_is_left_alone(kind, fields, stream_ptr, exc, prefix, capsule):
    """A capsule named "used_*" or something else is neither renamed nor deleted by the consumer."""
    producer = make_producer(kind, hold_capsules=True, **fields)
    with pytest.raises(exc):
        StridedMemoryView(producer, stream_ptr=stream_ptr)
    [capsule_obj] = producer.capsules
    assert capsule_name(capsule_obj) == fields["capsule_name"]
    control = object()  # held as capsule_obj is: by one list and this local
    control_holder = [control]
    assert sys.getrefcount(capsule_obj) == sys.getrefcount(control), control_holder
    del capsule_obj
    producer.release_capsules()
    assert deleter_calls(producer) == 0


@pytest.mark.parametrize(ROW_ARGS, ERROR_TABLE)
def test_failure_leaks_no_reference_to_the_producer(kind, fields, stream_ptr, exc, prefix, capsule):
    """After any refusal the producer's reference count is back where it was."""
    producer = make_producer(kind, **fields)
    baseline = sys.getrefcount(producer)
    with pytest.raises(exc) as excinfo:
        StridedMemoryView(producer, stream_ptr=stream_ptr)
    del excinfo
    assert sys.getrefcount(producer) == baseline


@pytest.mark.parametrize("null_deleter", [False, True], ids=["deleter", "NULL-deleter"])
def test_null_deleter_skipped_on_validation_failure(kind, null_deleter):
    """A capsule refused for its contents with a NULL deleter is released without a crash."""
    producer = make_producer(kind, dtype=(2, 32, 0), null_deleter=null_deleter)
    with pytest.raises(BufferError):
        StridedMemoryView(producer)
    producer.release_capsules()
    assert deleter_calls(producer) == (0 if null_deleter else 1)


def test_constructor_refuses_object_without_any_protocol():
    """The constructor on an object with none of the four protocols raises BufferError."""
    pattern = "^" + re.escape("stridedview: ") + ".*" + re.escape("supports none of DLPack")
    with pytest.raises(BufferError, match=pattern) as excinfo:
        StridedMemoryView([1, 2, 3])
    assert excinfo.type is BufferError


def test_from_dlpack_refuses_object_without_dlpack():
    """from_dlpack on an object with no __dlpack__ raises BufferError naming its type."""
    message = "dlpack: 'list' object has no __dlpack__"
    with pytest.raises(BufferError, match=re.escape(message)) as excinfo:
        StridedMemoryView.from_dlpack([1, 2, 3])
    assert excinfo.type is BufferError


# --- Dtypes ------------------------------------------------------------------

CODE_NAMES = {
    0: "Int", 1: "UInt", 2: "Float", 4: "Bfloat", 5: "Complex", 6: "Bool",
    7: "Float8_e3m4", 8: "Float8_e4m3", 9: "Float8_e4m3b11fnuz", 10: "Float8_e4m3fn",
    11: "Float8_e4m3fnuz", 12: "Float8_e5m2", 13: "Float8_e5m2fnuz", 14: "Float8_e8m0fnu",
    15: "Float6_e2m3fn", 16: "Float6_e3m2fn", 17: "Float4_e2m1fn", 18: "Bcomplex",
}

def _ml_dtype(name):
    """ml_dtypes' type of that name, or None where the installed ml_dtypes predates it
    (0.5.4, the newest with a free-threaded 3.13 wheel, has no complex32, bcomplex32,
    int1 or uint1): the view's dtype is then the void fallback (see expect_dtype)."""
    return getattr(ml_dtypes, name, None)


# (code, bits) -> the numpy dtype a view must carry (None: the void fallback).
BYTE_DTYPES = {
    (0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64,
    (1, 8): np.uint8, (1, 16): np.uint16, (1, 32): np.uint32, (1, 64): np.uint64,
    (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
    (4, 16): ml_dtypes.bfloat16,
    (5, 32): _ml_dtype("complex32"), (5, 64): np.complex64, (5, 128): np.complex128,
    (18, 32): _ml_dtype("bcomplex32"),
    (6, 8): np.bool_,
    (7, 8): ml_dtypes.float8_e3m4,
    (8, 8): ml_dtypes.float8_e4m3,
    (9, 8): ml_dtypes.float8_e4m3b11fnuz,
    (10, 8): ml_dtypes.float8_e4m3fn,
    (11, 8): ml_dtypes.float8_e4m3fnuz,
    (12, 8): ml_dtypes.float8_e5m2,
    (13, 8): ml_dtypes.float8_e5m2fnuz,
    (14, 8): ml_dtypes.float8_e8m0fnu,
}
SUBBYTE_DTYPES = {
    (0, 1): _ml_dtype("int1"), (0, 2): ml_dtypes.int2, (0, 4): ml_dtypes.int4,
    (1, 1): _ml_dtype("uint1"), (1, 2): ml_dtypes.uint2, (1, 4): ml_dtypes.uint4,
    (15, 6): ml_dtypes.float6_e2m3fn,
    (16, 6): ml_dtypes.float6_e3m2fn,
    (17, 4): ml_dtypes.float4_e2m1fn,
}


def expect_dtype(view, scalar_type, code_bits, itemsize):
    """The view's dtype is ``scalar_type``'s; or, where the installed ml_dtypes lacks the
    type (``scalar_type`` None), a void dtype of ``itemsize`` bytes naming the DLPack type."""
    if scalar_type is None:
        assert view.dtype.kind == "V" and view.dtype.itemsize == itemsize, view.dtype
        assert view.dlpack_dtype == (*code_bits, 1)
        assert view.view(dtype=view.dtype).dlpack_dtype == (*code_bits, 1)
        return
    expected = np.dtype(scalar_type)
    assert view.dtype == expected
    assert view.dtype.name == expected.name
    assert expected.itemsize == itemsize


def dtype_id(code_bits):
    """A test id such as "Float32" for (2, 32)."""
    code, bits = code_bits
    return f"{CODE_NAMES[code]}{bits}"


@pytest.mark.parametrize("code_bits", list(BYTE_DTYPES), ids=dtype_id)
def test_supported_dtype(kind, code_bits):
    """Every supported (code, bits) becomes the matching numpy or ml_dtypes dtype."""
    producer = make_producer(kind, dtype=(*code_bits, 1), shape=(3,))
    view = StridedMemoryView(producer)
    expect_dtype(view, BYTE_DTYPES[code_bits], code_bits, code_bits[1] // 8)
    assert view.itemsize == code_bits[1] // 8
    assert view.nbytes == 3 * view.itemsize


@pytest.mark.parametrize("code_bits", list(SUBBYTE_DTYPES), ids=dtype_id)
def test_padded_subbyte_dtype_accepted(code_bits):
    """Every sub-byte type imports as its ml_dtypes dtype (one byte per element) when IS_SUBBYTE_TYPE_PADDED is set."""
    producer = make_producer("versioned", dtype=(*code_bits, 1), flags=IS_SUBBYTE_TYPE_PADDED)
    view = StridedMemoryView(producer)
    expect_dtype(view, SUBBYTE_DTYPES[code_bits], code_bits, 1)
    assert view.itemsize == 1
    assert view.readonly is False


@pytest.mark.parametrize("code_bits", list(SUBBYTE_DTYPES), ids=dtype_id)
def test_unpadded_subbyte_dtype_is_viewed_packed(kind, code_bits):
    """Float6 and Float4 without IS_SUBBYTE_TYPE_PADDED (always so for legacy capsules) are
    packed, DLPack's default: dtype None, the type in dlpack_dtype, sizes in bits."""
    code, bits = code_bits
    producer = make_producer(kind, dtype=(code, bits, 1), shape=(2, 8))
    view = StridedMemoryView(producer)
    assert view.dtype is None
    assert view.dlpack_dtype == (code, bits, 1)
    assert view.dlpack_dtype.name == CODE_NAMES[code]
    assert (view.shape, view.strides, view.ptr) == ((2, 8), (8, 1), producer.expected_ptr)
    assert view.itemsize_bits == bits
    assert view.nbytes == 16 * bits // 8
    with pytest.raises(BufferError, match=re.escape(f"itemsize_bits is {bits}")):
        view.itemsize


def test_padded_flag_on_a_whole_byte_dtype_is_harmless():
    """IS_SUBBYTE_TYPE_PADDED on a float32 tensor changes nothing."""
    producer = make_producer("versioned", flags=IS_SUBBYTE_TYPE_PADDED)
    assert StridedMemoryView(producer).dtype == np.float32


WRONG_BITS = [
    (0, 3), (0, 12), (0, 128),
    (1, 4 + 8), (1, 128),
    (2, 8), (2, 24), (2, 128),
    (4, 8), (4, 32),
    (5, 8), (5, 16), (5, 96),
    (18, 16), (18, 64),
    (6, 1), (6, 16),
    *[(code, bits) for code in range(7, 15) for bits in (16, 32)],
]


@pytest.mark.parametrize("code_bits", WRONG_BITS, ids=dtype_id)
def test_bit_width_must_match_the_code(kind, code_bits):
    """A bit width the type code does not have is refused, naming the code and the bits."""
    code, bits = code_bits
    producer = make_producer(kind, dtype=(code, bits, 1))
    prefix = f"dlpack: dtype {CODE_NAMES[code]} must have "
    with pytest.raises(BufferError, match=re.escape(prefix)) as excinfo:
        StridedMemoryView(producer)
    assert excinfo.type is BufferError
    assert f"(got {bits})" in str(excinfo.value)


@pytest.mark.parametrize("code_bits", [(15, 8), (16, 4), (17, 8), (17, 6)], ids=dtype_id)
def test_padded_subbyte_bit_width_must_match_the_code(code_bits):
    """A padded sub-byte type with the wrong bit width is refused, naming the code and the bits."""
    code, bits = code_bits
    producer = make_producer("versioned", dtype=(code, bits, 1), flags=IS_SUBBYTE_TYPE_PADDED)
    prefix = f"dlpack: dtype {CODE_NAMES[code]} must have "
    with pytest.raises(BufferError, match=re.escape(prefix)) as excinfo:
        StridedMemoryView(producer)
    assert f"(got {bits})" in str(excinfo.value)


def test_zero_lanes_refused(kind):
    """A dtype of 0 lanes is refused with the lane count in the message."""
    producer = make_producer(kind, dtype=(2, 32, 0))
    message = "dlpack: dtype lanes must be >= 1 (got 0)"
    with pytest.raises(BufferError, match=re.escape(message)) as excinfo:
        StridedMemoryView(producer)
    assert excinfo.type is BufferError


@pytest.mark.parametrize("lanes", [2, 4, 65535])
def test_vector_dtype_viewed_as_void_of_its_size(kind, lanes):
    """A vector dtype (lanes > 1) is a void dtype of bits * lanes / 8 bytes naming its
    DLPack type; shape and strides count vectors."""
    producer = make_producer(kind, dtype=(2, 32, lanes))
    view = StridedMemoryView(producer)
    assert view.dtype == np.dtype(f"V{4 * lanes}")
    assert view.dtype.metadata == {"dlpack_dtype": (2, 32, lanes)}
    assert view.dlpack_dtype == (2, 32, lanes)
    assert (view.shape, view.strides, view.itemsize) == ((2, 3), (3, 1), 4 * lanes)
    assert view.nbytes == 6 * 4 * lanes


# --- readonly ----------------------------------------------------------------

@pytest.mark.parametrize(
    "flags, readonly",
    [(0, False), (READ_ONLY, True), (IS_SUBBYTE_TYPE_PADDED, False), (READ_ONLY | IS_SUBBYTE_TYPE_PADDED, True)],
    ids=["none", "READ_ONLY", "IS_SUBBYTE_TYPE_PADDED", "READ_ONLY|IS_SUBBYTE_TYPE_PADDED"],
)
def test_readonly_follows_the_versioned_flag(flags, readonly):
    """A versioned capsule's view is read-only exactly when READ_ONLY is set."""
    producer = make_producer("versioned", flags=flags)
    assert StridedMemoryView(producer).readonly is readonly


# --- copy=False and IS_COPIED: a view of the original or nothing --------------

@pytest.mark.parametrize("flags", [IS_COPIED, IS_COPIED | READ_ONLY, 2**64 - 1], ids=["IS_COPIED", "with-READ_ONLY", "all-flags"])
def test_copied_capsule_is_refused(flags):
    """A versioned capsule flagged IS_COPIED is refused with BufferError; its deleter runs once."""
    producer = make_producer("versioned", flags=flags)
    message = "dlpack: the producer copied the data (IS_COPIED flag set): a view of a copy would not see the original"
    with pytest.raises(BufferError, match="^" + re.escape(message) + "$") as excinfo:
        StridedMemoryView(producer)
    assert excinfo.type is BufferError
    assert deleter_calls(producer) == 1


class NoCopyKeyword(DLPackProducer):
    """A DLPack 1.0 producer that knows max_version but predates the copy keyword."""

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None):
        self.calls.append(("__dlpack__", {"stream": stream, "max_version": max_version}))
        return self._export()


def test_producer_is_asked_for_no_copy(kind):
    """__dlpack__ is asked with copy=False (and max_version): copying nothing is the producer's promise."""
    producer = make_producer(kind)
    StridedMemoryView(producer)
    assert dlpack_calls(producer) == [{"stream": None, "max_version": MAX_VERSION, "copy": False}]


def test_producer_without_copy_keyword_is_asked_again_without_it(kind):
    """A producer whose __dlpack__ lacks copy is asked once more, with stream and max_version only."""
    producer = NoCopyKeyword(kind)
    view = StridedMemoryView(producer)
    assert dlpack_calls(producer) == [{"stream": None, "max_version": MAX_VERSION}]
    assert len(producer.tensor_ids) == 1 and view.ptr == producer.expected_ptr


def test_copy_type_error_then_max_version_type_error_asks_a_third_time(kind):
    """A producer refusing 'copy' and then 'max_version' (TypeErrors naming them) is asked a third time with the stream alone."""
    errors = [
        TypeError("__dlpack__() got an unexpected keyword argument 'copy'"),
        TypeError("__dlpack__() got an unexpected keyword argument 'max_version'"),
    ]
    producer = make_producer(kind)
    export = producer._export

    def refusing(**kwargs):
        producer.calls.append(("__dlpack__", kwargs))
        if errors:
            raise errors.pop(0)
        return export()

    producer.__dlpack__ = refusing
    view = StridedMemoryView(producer)
    assert dlpack_calls(producer) == [
        {"stream": None, "max_version": MAX_VERSION, "copy": False},
        {"stream": None, "max_version": MAX_VERSION},
        {"stream": None},
    ]
    assert view.shape == (2, 3)


@pytest.mark.parametrize(
    "message",
    ["copy is not allowed on this device", "stream must be an int", "copy=False needs a contiguous array"],
)
def test_type_error_not_naming_the_copy_keyword_is_not_retried(kind, message):
    """A TypeError that does not name the 'copy' keyword propagates unchanged after exactly one call."""
    error = TypeError(message)
    producer = make_producer(kind, mode="raise", raises=error)
    with pytest.raises(TypeError) as excinfo:
        StridedMemoryView(producer)
    assert excinfo.value is error
    assert len(dlpack_calls(producer)) == 1


@pytest.mark.interop
@pytest.mark.parametrize(
    "library",
    [
        "numpy",
        pytest.param("torch", marks=pytest.mark.torch),
        pytest.param("jax.numpy", marks=pytest.mark.jax),
        "array_api_strict",
    ],
)
def test_real_producers_take_copy_false(library):
    """numpy, torch, jax and array-api-strict accept copy=False: each view shares the array's memory."""
    module = pytest.importorskip(library)
    array = module.reshape(module.arange(6, dtype=module.float32), (2, 3))
    _view._set_fast_paths_enabled(False)  # torch's exchange API would not call __dlpack__
    try:
        view = StridedMemoryView(array)
    finally:
        _view._set_fast_paths_enabled(True)
    assert view.shape == (2, 3) and view.ptr == np.from_dlpack(array).ctypes.data


def test_legacy_capsule_is_read_only():
    """A legacy capsule, which cannot say whether its memory may be written, gives a read-only
    view (as numpy takes it, numpy#28600): JAX's immutable arrays come only as legacy capsules."""
    producer = make_producer("legacy")
    assert StridedMemoryView(producer).readonly is True
    assert StridedMemoryView.from_dlpack(make_producer("legacy", old_api=True)).readonly is True


# --- pointer, shape and strides ----------------------------------------------

@pytest.mark.parametrize("byte_offset", [0, 1, 8, 4096])
def test_ptr_includes_byte_offset(kind, byte_offset):
    """The view's ptr is data + byte_offset."""
    producer = make_producer(kind, byte_offset=byte_offset)
    view = StridedMemoryView(producer)
    assert view.ptr == producer.data + byte_offset
    assert view.ptr == producer.expected_ptr


def test_view_points_into_the_producer_memory(kind):
    """The view copies nothing: writing at ptr changes the producer's array."""
    array = np.zeros((4, 3), dtype=np.float32)
    producer = from_numpy(kind, array)
    view = StridedMemoryView(producer)
    assert view.ptr == array.ctypes.data
    ctypes.c_float.from_address(view.ptr + view.strides[0] * view.itemsize).value = 7.5
    assert array[1, 0] == 7.5


@pytest.mark.parametrize(
    "shape, expected",
    [((5,), (1,)), ((2, 3), (3, 1)), ((2, 3, 4), (12, 4, 1)), ((3, 1, 2), (2, 2, 1)), ((1,), (1,))],
    ids=str,
)
def test_null_strides_mean_c_contiguous(kind, shape, expected):
    """NULL strides give explicit C-contiguous strides in elements."""
    producer = make_producer(kind, shape=shape, strides=None, dtype="float64")
    view = StridedMemoryView(producer)
    assert view.shape == shape
    assert view.strides == expected
    assert view.is_c_contiguous is True


@pytest.mark.parametrize("null_arrays", [True, False], ids=["NULL-shape-strides", "empty-arrays"])
def test_zero_dim(kind, null_arrays):
    """A 0-d tensor, with NULL or empty shape and strides, has shape (), strides () and one element."""
    if null_arrays:
        producer = make_producer(kind, shape=None, strides=None, ndim=0, dtype="int64")
    else:
        producer = make_producer(kind, shape=(), strides=(), dtype="int64")
    view = StridedMemoryView(producer)
    assert_view(
        view,
        ptr=producer.expected_ptr,
        shape=(),
        strides=(),
        dtype="int64",
        device_id=-1,
        is_device_accessible=False,
        readonly=kind == "legacy",  # legacy: cannot say, read-only
        exporting_obj=producer,
    )
    assert (view.ndim, view.size, view.nbytes) == (0, 1, 8)
    assert view.is_c_contiguous is True
    assert view.is_f_contiguous is True


@pytest.mark.parametrize(
    "shape, strides",
    [((0,), (1,)), ((0,), None), ((2, 0, 3), None), ((2, 0, 3), (7, 0, -3)), ((0, 0), (0, 0))],
    ids=str,
)
def test_zero_size_accepts_null_data(kind, shape, strides):
    """A zero-size tensor may have a NULL data pointer; its strides, given or not, are all 0
    (an empty view's, whatever the producer sent), in the C layout too."""
    producer = make_producer(kind, shape=shape, strides=strides, data=0)
    view = StridedMemoryView(producer)
    assert view.ptr == 0
    assert view.shape == shape
    assert (view.size, view.nbytes) == (0, 0)
    assert view.strides == (0,) * len(shape)
    assert view.byte_strides == (0,) * len(shape)
    assert view.is_c_contiguous is True
    assert view.is_f_contiguous is True


def test_zero_size_keeps_a_real_pointer(kind):
    """A zero-size tensor with a real data pointer keeps that pointer."""
    producer = make_producer(kind, shape=(0, 4), byte_offset=16)
    assert StridedMemoryView(producer).ptr == producer.expected_ptr


@pytest.mark.parametrize("strides", [(-4, -1), (0, 1), (1, 0), (0, 0), (-1, 3), (4, -1)], ids=str)
def test_negative_and_zero_strides_preserved(kind, strides):
    """Negative and zero strides are kept, and ptr still addresses element [0, 0]."""
    producer = make_producer(kind, shape=(3, 4), strides=strides)
    view = StridedMemoryView(producer)
    assert_view(
        view,
        ptr=producer.expected_ptr,
        shape=(3, 4),
        strides=strides,
        dtype="float32",
        device_id=-1,
        is_device_accessible=False,
        readonly=kind == "legacy",  # legacy: cannot say, read-only
        exporting_obj=producer,
    )
    assert view.is_c_contiguous is False
    assert view.is_f_contiguous is False


def test_largest_representable_element_count_accepted(kind):
    """A shape whose element count just fits in int64 is accepted."""
    shape = (3037000499, 3037000499)  # product 9223372030926249001 <= 2**63 - 1
    producer = make_producer(kind, shape=shape, strides=(3037000499, 1), dtype="uint8", data=0x1000)
    view = StridedMemoryView(producer)
    assert view.shape == shape
    assert view.size == 3037000499**2


@pytest.mark.slow
def test_large_extents_and_strides_survive(kind):
    """Extents and strides beyond the small-int cache stay correct after memory is reused."""
    shape, strides = (300, 1000), (-1000, 1001)
    producer = make_producer(kind, shape=shape, strides=strides, dtype="uint8")
    view = StridedMemoryView(producer)
    churn = [str(i * 7919) for i in range(50000)]
    del churn
    gc.collect()
    assert view.shape == shape
    assert view.strides == strides
    assert view.size == 300000


@pytest.mark.parametrize("ndim", [1, 8, 32, 64])
def test_many_dimensions(kind, ndim):
    """Tensors of many dimensions import with every extent and stride."""
    shape = (1,) * (ndim - 1) + (2,)
    producer = make_producer(kind, shape=shape, dtype="int8")
    view = StridedMemoryView(producer)
    assert view.shape == shape
    assert view.strides == (2,) * (ndim - 1) + (1,)
    assert view.ndim == ndim


# --- the deleter and lifetimes ----------------------------------------------

@pytest.mark.slow
def test_deleter_runs_once_when_the_view_dies(kind):
    """The deleter has not run while the view lives and runs exactly once when it dies."""
    producer = make_producer(kind)
    view = StridedMemoryView(producer)
    gc.collect()
    assert deleter_calls(producer) == 0
    del view
    assert deleter_calls(producer) == 1
    producer.release_capsules()
    gc.collect()
    assert deleter_calls(producer) == 1


@pytest.mark.slow
def test_deleter_once_when_only_the_consumer_holds_the_capsule(kind):
    """With no other reference to the capsule, the deleter still runs exactly once, when the view dies."""
    producer = make_producer(kind, hold_capsules=False)
    view = StridedMemoryView(producer)
    gc.collect()
    assert deleter_calls(producer) == 0
    del view
    gc.collect()
    assert deleter_calls(producer) == 1


def test_each_view_owns_its_own_tensor(kind):
    """Two views of one producer import two tensors, each deleted once when its view dies."""
    producer = make_producer(kind)
    first = StridedMemoryView(producer)
    second = StridedMemoryView(producer)
    assert len(producer.tensor_ids) == 2
    del first
    assert deleter_calls(producer) == 1
    del second
    assert deleter_calls(producer) == 2


def test_null_deleter_skipped_on_success(kind):
    """A view over a capsule with a NULL deleter dies without a crash."""
    producer = make_producer(kind, null_deleter=True)
    view = StridedMemoryView(producer)
    del view
    producer.release_capsules()
    assert deleter_calls(producer) == 0


@pytest.mark.slow
def test_view_keeps_the_exporting_object_alive(kind):
    """The view holds the producer alive, and lets it go when the view dies."""
    producer = make_producer(kind)
    ref = weakref.ref(producer)
    view = StridedMemoryView(producer)
    del producer
    gc.collect()
    assert ref() is not None
    assert view.exporting_obj is ref()
    del view
    gc.collect()
    assert ref() is None


def test_producer_refcount_back_to_baseline(kind):
    """The view adds references to the producer while it lives and none remain after."""
    producer = make_producer(kind)
    baseline = sys.getrefcount(producer)
    view = StridedMemoryView(producer)
    assert sys.getrefcount(producer) > baseline
    del view
    assert sys.getrefcount(producer) == baseline


def test_old_style_producer_deleted_once(kind):
    """After the max_version retry only one tensor exists, and it is deleted once."""
    producer = make_producer(kind, old_api=True)
    view = StridedMemoryView(producer)
    assert len(producer.tensor_ids) == 1
    del view
    assert deleter_calls(producer) == 1


# --- conveniences ------------------------------------------------------------

@pytest.mark.parametrize(
    "shape, strides, c_contig, f_contig",
    [
        ((4, 3), (3, 1), True, False),
        ((4, 3), (1, 4), False, True),
        ((5,), (1,), True, True),
        ((1, 5), (99, 1), True, True),
        ((5, 1), (1, 99), True, True),
        ((3, 1, 4), (4, 7, 1), True, False),
        ((0, 3), (5, 7), True, True),
        ((3,), (0,), False, False),
        ((3,), (-1,), False, False),
        ((4, 3), (6, 2), False, False),
        ((1,), (-5,), True, True),
    ],
    ids=str,
)
def test_contiguity_follows_numpy_rules(kind, shape, strides, c_contig, f_contig):
    """is_c_contiguous / is_f_contiguous follow numpy: extent-1 dims ignored, size 0 is both."""
    producer = make_producer(kind, shape=shape, strides=strides)
    view = StridedMemoryView(producer)
    assert view.is_c_contiguous is c_contig
    assert view.is_f_contiguous is f_contig


NUMPY_LAYOUTS = {
    "c": lambda: np.ones((4, 3)),
    "transposed": lambda: np.ones((4, 3)).T,
    "every-other-row": lambda: np.ones((6, 3))[::2],
    "one-column": lambda: np.ones((4, 3))[:, :1],
    "reversed": lambda: np.ones(5)[::-1],
    "broadcast": lambda: np.broadcast_to(np.ones(3), (2, 3)),
    "empty": lambda: np.ones((0, 3)),
    "0-d": lambda: np.ones(()),
    "3-d-slice": lambda: np.ones((3, 1, 4))[:, :, ::2],
    "fortran": lambda: np.ones((2, 3, 4), order="F"),
}


@pytest.mark.parametrize("layout", list(NUMPY_LAYOUTS))
def test_views_of_numpy_arrays_agree_with_numpy(kind, layout):
    """A view of a numpy array has its pointer, shape, element strides and contiguity flags."""
    array = NUMPY_LAYOUTS[layout]()
    producer = from_numpy(kind, array)
    view = StridedMemoryView(producer)
    assert_view(
        view,
        ptr=array.__array_interface__["data"][0],
        shape=array.shape,
        strides=tuple(s // array.itemsize for s in array.strides),
        dtype=array.dtype,
        device_id=-1,
        is_device_accessible=False,
        readonly=kind == "legacy",  # legacy: cannot say, read-only
        exporting_obj=producer,
    )
    assert view.is_c_contiguous is array.flags.c_contiguous
    assert view.is_f_contiguous is array.flags.f_contiguous
    assert (view.ndim, view.size, view.itemsize, view.nbytes) == (
        array.ndim,
        array.size,
        array.itemsize,
        array.nbytes,
    )


def test_sizes(kind):
    """ndim, size, itemsize and nbytes describe the tensor."""
    producer = make_producer(kind, shape=(4, 3), dtype="complex128")
    view = StridedMemoryView(producer)
    assert (view.ndim, view.size, view.itemsize, view.nbytes) == (2, 12, 16, 192)
    for name in ("ndim", "size", "itemsize", "nbytes"):
        assert type(getattr(view, name)) is int


def test_repr_is_one_line(kind):
    """repr() shows ptr in hex, shape, strides, dtype, device_id and readonly on one line."""
    producer = make_producer(kind, shape=(4, 3))
    view = StridedMemoryView(producer)
    pattern = (
        r"StridedMemoryView\(ptr=(0x[0-9a-fA-F]+), shape=\(4, 3\), strides=\(3, 1\), "
        rf"dtype=float32, device_id=-1, readonly={kind == 'legacy'}\)"
    )
    match = re.fullmatch(pattern, repr(view))
    assert match is not None, repr(view)
    assert int(match.group(1), 16) == view.ptr


def test_repr_of_readonly_cuda_view():
    """repr() reports the CUDA device_id and readonly=True."""
    producer = make_producer("versioned", shape=(5,), dtype="bfloat16", device=(CUDA, 2), flags=READ_ONLY)
    view = StridedMemoryView(producer, stream_ptr=-1)
    pattern = (
        r"StridedMemoryView\(ptr=0x[0-9a-fA-F]+, shape=\(5,\), strides=\(1,\), "
        r"dtype=bfloat16, device_id=2, readonly=True\)"
    )
    assert re.fullmatch(pattern, repr(view)), repr(view)


FIELD_NAMES = [
    "ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly", "exporting_obj",
]


def test_view_does_not_claim_to_be_a_dataclass(kind):
    """A view is not a dataclass, so no dataclasses function half-works on it: each refuses it with TypeError."""
    view = StridedMemoryView(make_producer(kind))
    assert not dataclasses.is_dataclass(view)
    assert not dataclasses.is_dataclass(StridedMemoryView)
    for function in (dataclasses.fields, dataclasses.asdict, dataclasses.astuple, dataclasses.replace):
        with pytest.raises(TypeError):
            function(view)


def test_asdict_gives_the_eight_fields_uncopied():
    """``_fields`` names the eight documented fields in order; ``_asdict()`` gives each value itself, the array not copied."""
    array = np.arange(6.0).reshape(2, 3)
    view = StridedMemoryView(array)
    assert StridedMemoryView._fields == tuple(FIELD_NAMES) == view._fields
    fields = view._asdict()
    assert list(fields) == FIELD_NAMES
    for name in FIELD_NAMES:
        assert fields[name] is getattr(view, name) or fields[name] == getattr(view, name)
    assert fields["exporting_obj"] is array
    assert fields["ptr"] == array.ctypes.data and fields["device_id"] == -1
    fields["shape"] = (6,)
    assert view.shape == (2, 3)  # a new dict each time: the view is untouched


@pytest.mark.parametrize("name", FIELD_NAMES)
def test_fields_are_read_only(kind, name):
    """Assigning to a view's field raises AttributeError."""
    view = StridedMemoryView(make_producer(kind))
    with pytest.raises(AttributeError):
        setattr(view, name, getattr(view, name))


# --- the producer itself (so a failure above can be blamed correctly) -------

def test_producer_unconsumed_capsule_calls_deleter_once(kind):
    """Without any consumer, dropping a fresh capsule runs its deleter exactly once."""
    producer = make_producer(kind, hold_capsules=True)
    capsule = producer.__dlpack__(max_version=MAX_VERSION)
    assert capsule_name(capsule) == unused_name(kind)
    del capsule
    assert deleter_calls(producer) == 0
    producer.release_capsules()
    assert deleter_calls(producer) == 1


def test_producer_old_style_signature_error():
    """The old-style producer rejects max_version with Python's own TypeError."""
    producer = make_producer("legacy", old_api=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_version'"):
        producer.__dlpack__(stream=None, max_version=MAX_VERSION)
    assert len(dlpack_calls(producer)) == 1


# --- every reachable byte offset fits int64 ----------------------------------

@pytest.mark.parametrize(
    "shape, strides",
    [
        ((2,), (2**62,)),  # one step of 2**65 bytes
        ((2,), (-(2**62),)),  # the same below element 0
        ((2**61,), None),  # row-major: the last element 2**64 - 8 bytes away
        ((2, 2), (2**59, 2**59)),  # two spans of 2**62 bytes: 2**63 together
        ((3,), (2**61 - 1,)),  # (3 - 1) * (2**64 - 8) bytes
    ],
    ids=["one-step", "negative", "row-major", "sum", "extent-3"],
)
def test_byte_offsets_past_int64_refused(kind, shape, strides):
    """A float64 layout reaching an element more than 2**63 - 1 bytes from element 0 is refused, naming the values."""
    producer = make_producer(kind, shape=shape, strides=strides, dtype="float64", data=0x10000)
    shown = strides if strides is not None else tuple(
        int(np.prod(shape[i + 1:], dtype=object)) for i in range(len(shape))
    )
    message = (
        f"dlpack: byte offsets from element 0 must fit in int64 (got shape {shape}, "
        f"strides {shown} in elements, itemsize 8)"
    )
    with pytest.raises(BufferError, match="^" + re.escape(message) + "$") as excinfo:
        StridedMemoryView(producer)
    assert excinfo.type is BufferError
    assert deleter_calls(producer) == 1


@pytest.mark.parametrize(
    "shape, strides",
    [
        ((2,), (2**60 - 1,)),  # 2**63 - 8 bytes: the farthest step that fits
        ((2, 2), (2**59 - 1, -(2**59 - 1))),  # above and below apart, each fits
        ((1, 3), (2**62, 1)),  # an extent-1 dimension never steps
        ((0, 2), (2**62, 2**62)),  # an empty view addresses nothing
    ],
    ids=["largest", "above-and-below", "extent-1", "empty"],
)
def test_byte_offsets_within_int64_accepted(kind, shape, strides):
    """Layouts whose reachable byte offsets all fit int64 are viewed with their strides as given
    (an empty view's all 0)."""
    producer = make_producer(kind, shape=shape, strides=strides, dtype="float64", data=2**40)
    view = StridedMemoryView(producer)
    expected = (0,) * len(shape) if 0 in shape else strides
    assert view.shape == shape and view.strides == expected
