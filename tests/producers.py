"""Pure-ctypes DLPack producers whose every field a test can set or corrupt.

The structures follow the DLPack layout (64-bit): ``DLTensor`` is 48 bytes,
the legacy ``DLManagedTensor`` 64 and ``DLManagedTensorVersioned`` 80.  A
producer hands out real PyCapsules made with ``PyCapsule_New``; a counting
deleter records how often each managed tensor was released, and a capsule
destructor calls that deleter when an unconsumed capsule dies, as numpy and
PyTorch do.

By default a producer keeps no reference to the capsules it hands out, as a
real producer does: the consumer alone decides when each dies, and on a
refusal the capsule's destructor (Python, through ctypes) runs when the
consumer drops it.  A ctypes callback cannot run while an exception is pending
(ctypes reports "returned a result with an exception set", the consumer's
error becomes a SystemError and the deleter is skipped), so this is the test
that a consumer releases refused capsules with no exception pending.  A test
that wants to look at a capsule afterwards (its name, its reference count)
asks for ``hold_capsules=True``: every capsule then stays in
``producer.capsules`` until ``producer.release_capsules()``.

Nothing here needs numpy except ``from_numpy`` and ``assert_view``.
"""

import collections
import contextlib
import ctypes
import functools
import itertools

__all__ = [
    "KINDS",
    "READ_ONLY",
    "IS_COPIED",
    "IS_SUBBYTE_TYPE_PADDED",
    "DTYPES",
    "DLPackVersion",
    "DLDevice",
    "DLDataType",
    "DLTensor",
    "DLManagedTensor",
    "DLManagedTensorVersioned",
    "DLPackExchangeAPI",
    "DLTensorFromPyObject",
    "CurrentWorkStream",
    "exchange_api",
    "DLPackProducer",
    "OldStyleProducer",
    "make_producer",
    "from_numpy",
    "deleter_calls",
    "forget",
    "capsule_name",
    "assert_view",
]

#: The two capsule kinds, for ``pytest.mark.parametrize``.
KINDS = ("versioned", "legacy")

# DLManagedTensorVersioned.flags
READ_ONLY = 1 << 0
IS_COPIED = 1 << 1
IS_SUBBYTE_TYPE_PADDED = 1 << 2

#: dtype name -> (DLPack type code, bits per lane).
DTYPES = {
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64),
    "bfloat16": (4, 16),
    "complex64": (5, 64), "complex128": (5, 128),
    "bool": (6, 8),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6),
    "float6_e3m2fn": (16, 6),
    "float4_e2m1fn": (17, 4),
    # Sub-byte ints (ml_dtypes has each), complex32 (torch's and ml_dtypes') and DLPack
    # 1.3's Bcomplex, a pair of bfloat16 (ml_dtypes' bcomplex32).
    "int1": (0, 1), "int2": (0, 2), "int4": (0, 4),
    "uint1": (1, 1), "uint2": (1, 2), "uint4": (1, 4),
    "complex32": (5, 32),
    "bcomplex32": (18, 32),
}


# --- The C structures -------------------------------------------------------

class DLPackVersion(ctypes.Structure):
    """``{u32 major, u32 minor}``."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    """``{i32 device_type, i32 device_id}``."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``{u8 code, u8 bits, u16 lanes}``."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """The tensor description shared by both managed kinds (48 bytes)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


#: ``void (*deleter)(DLManagedTensor[Versioned] *self)``
DLPackDeleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """The legacy (pre-1.0) managed tensor, capsule name "dltensor" (64 bytes)."""

    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DLPackDeleter),
    ]


class DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack >= 1.0 managed tensor, capsule name "dltensor_versioned" (80 bytes)."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DLPackDeleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


def _check_layout():
    """Refuse to load where ctypes lays the structures out differently from DLPack."""
    expected = {
        "sizeof(DLTensor)": (ctypes.sizeof(DLTensor), 48),
        "sizeof(DLManagedTensor)": (ctypes.sizeof(DLManagedTensor), 64),
        "sizeof(DLManagedTensorVersioned)": (ctypes.sizeof(DLManagedTensorVersioned), 80),
        "DLTensor.dtype": (DLTensor.dtype.offset, 20),
        "DLTensor.shape": (DLTensor.shape.offset, 24),
        "DLTensor.byte_offset": (DLTensor.byte_offset.offset, 40),
        "DLManagedTensor.manager_ctx": (DLManagedTensor.manager_ctx.offset, 48),
        "DLManagedTensor.deleter": (DLManagedTensor.deleter.offset, 56),
        "DLManagedTensorVersioned.manager_ctx": (DLManagedTensorVersioned.manager_ctx.offset, 8),
        "DLManagedTensorVersioned.deleter": (DLManagedTensorVersioned.deleter.offset, 16),
        "DLManagedTensorVersioned.flags": (DLManagedTensorVersioned.flags.offset, 24),
        "DLManagedTensorVersioned.dl_tensor": (DLManagedTensorVersioned.dl_tensor.offset, 32),
    }
    wrong = {k: v for k, v in expected.items() if v[0] != v[1]}
    if wrong:
        raise ImportError(f"DLPack structures laid out wrongly (got, expected): {wrong}")


_check_layout()


# --- The Python C API, through private function pointers -------------------
# Each pointer has its own restype/argtypes, so the shared
# ctypes.pythonapi.PyCapsule_* objects other code may use stay untouched.

PyCapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, PyCapsuleDestructor
)(("PyCapsule_New", ctypes.pythonapi))
# The destructor is handed a capsule whose refcount is already 0: pass it as
# a bare address, never as a py_object (that would revive it).
_PyCapsule_GetName_raw = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_PyCapsule_GetPointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_PyCapsule_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)

# A capsule keeps a bare char* to its name: the bytes behind it must outlive
# every capsule, so each name is interned here for the life of the process.
_CAPSULE_NAMES = {}


def _name_bytes(name):
    """The interned, never-freed bytes for capsule name ``name`` (a str)."""
    if name not in _CAPSULE_NAMES:
        _CAPSULE_NAMES[name] = name.encode()
    return _CAPSULE_NAMES[name]


_UNUSED_NAMES = {
    _name_bytes("dltensor_versioned"): DLManagedTensorVersioned,
    _name_bytes("dltensor"): DLManagedTensor,
}


def capsule_name(capsule):
    """The current name of ``capsule`` as a str (None for a NULL name)."""
    name = _PyCapsule_GetName(capsule)
    return None if name is None else name.decode()


# --- Deleters: count each call, keep the memory alive until then -----------

#: tensor id -> how many times its deleter ran (a correct consumer: 0 or 1).
DELETER_CALLS = collections.Counter()

#: tensor id -> the objects a live managed tensor points into.
_LIVE = {}

#: tensor id -> records of released tensors.  Their structs stay allocated so a
#: second (buggy) deleter call is counted instead of reading freed memory.
_RETIRED = {}

_tensor_ids = itertools.count(1)

_Record = collections.namedtuple("_Record", "managed shape strides buffer")


def _release(tensor_id):
    """Count one deleter call for ``tensor_id`` and let go of its data buffer."""
    DELETER_CALLS[tensor_id] += 1
    record = _LIVE.pop(tensor_id, None)
    if record is not None:
        _RETIRED[tensor_id] = record._replace(buffer=None)


def _deleter_for(struct_type):
    """A C deleter that finds the tensor id in ``struct_type.manager_ctx``."""

    def deleter(address):
        _release(struct_type.from_address(address).manager_ctx)

    return DLPackDeleter(deleter)


# Module-level so the C thunks live as long as any capsule could.
_VERSIONED_DELETER = _deleter_for(DLManagedTensorVersioned)
_LEGACY_DELETER = _deleter_for(DLManagedTensor)


@PyCapsuleDestructor
def _capsule_destructor(capsule_address):
    """Call the deleter of a capsule that dies unconsumed, as numpy and torch do.

    A consumer that took ownership renamed the capsule to "used_*": leave it
    alone.  A foreign name is not ours to interpret either.
    """
    name = _PyCapsule_GetName_raw(capsule_address)
    struct_type = _UNUSED_NAMES.get(name)
    if struct_type is None:
        return
    address = _PyCapsule_GetPointer_raw(capsule_address, name)
    managed = struct_type.from_address(address)
    if managed.deleter:
        managed.deleter(address)


def forget(producer):
    """Drop this module's records of ``producer``'s tensors (kept for the process otherwise).

    For a test that makes thousands of capsules, once it has checked their deleter
    calls: the records would stay behind and weigh on later memory measurements.
    """
    for tensor_id in producer.tensor_ids:
        DELETER_CALLS.pop(tensor_id, None)
        _LIVE.pop(tensor_id, None)
        _RETIRED.pop(tensor_id, None)
    producer.tensor_ids.clear()


@contextlib.contextmanager
def fresh_records():
    """``with fresh_records():`` the deleter records start empty, and are merged back after.

    The records of every capsule earlier tests made stay in this module's dicts; a dict
    that size reallocates its whole table when churn fills it, so a memory measurement's
    peak would depend on what ran before (free-threaded 3.13: 828151 bytes after
    tests/test_threads.py, 192455 alone).  A test that measures memory and forgets its
    own records (as test_leaks.py's ledger does) measures with empty ones instead.
    """
    global DELETER_CALLS, _LIVE, _RETIRED
    saved = DELETER_CALLS, _LIVE, _RETIRED
    DELETER_CALLS, _LIVE, _RETIRED = collections.Counter(), {}, {}
    try:
        yield
    finally:
        fresh = DELETER_CALLS, _LIVE, _RETIRED
        DELETER_CALLS, _LIVE, _RETIRED = saved
        DELETER_CALLS.update(fresh[0])
        _LIVE.update(fresh[1])
        _RETIRED.update(fresh[2])


def deleter_calls(producer):
    """Total deleter calls over every tensor ``producer`` has exported."""
    return sum(DELETER_CALLS[i] for i in producer.tensor_ids)


# --- The producer -----------------------------------------------------------

_UNSET = object()
_C = "C"
_F = "F"


def _contiguous_strides(shape, order):
    """Element strides of a C- or F-contiguous array of ``shape``."""
    strides = []
    step = 1
    dims = reversed(shape) if order == _C else shape
    for extent in dims:
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides)) if order == _C else tuple(strides)


def _element_span(shape, strides):
    """(lowest, highest) element offset reachable from element 0 (0, 0 if empty)."""
    if any(int(n) <= 0 for n in shape):
        return 0, 0
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    return low, high


def _recorded(method):
    """Append ``(method name, keyword arguments)`` to ``self.calls`` before each call.

    The call is recorded even when Python refuses the arguments, so a test
    sees an old-style producer's first, rejected ``max_version`` attempt.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        record = dict(kwargs)
        if args:
            record["args"] = args
        self.calls.append((method.__name__, record))
        return method(self, *args, **kwargs)

    return wrapper


class DLPackProducer:
    """An object exporting one configurable tensor through ``__dlpack__``.

    Every field of the managed tensor is an attribute a test may set before
    the export (``shape``, ``strides`` and ``dtype`` are read at construction
    only, to size the buffer).  Each ``__dlpack__`` call builds a fresh managed
    tensor from the attributes, so a producer can be exported many times.

    kind            "versioned" or "legacy": the capsule returned whatever
                    ``max_version`` asks.
    version         (major, minor) of a versioned tensor.
    flags           DLManagedTensorVersioned.flags.
    device          (device_type, device_id) written in the tensor.
    reported_device what ``__dlpack_device__`` returns (default: ``device``);
                    any object, to test malformed answers.
    data            the data pointer (default: the start of element 0 in an
                    owned, zeroed buffer); 0 for NULL.
    ndim            DLTensor.ndim (default: ``len(shape)``).
    shape           a tuple of extents, or None for a NULL pointer.
    strides         a tuple of element strides, "C" or "F" for contiguous
                    ones, or None for a NULL pointer.
    byte_offset     DLTensor.byte_offset (the buffer grows by as much).
    dtype           a name from ``DTYPES`` or a (code, bits, lanes) tuple.
    capsule_name    overrides the capsule name ("used_dltensor", "foo", ...).
    null_deleter    True: the managed tensor's deleter is NULL.
    hold_capsules   True: keep every capsule handed out in ``capsules`` until
                    ``release_capsules()``, so a test can inspect it; False
                    (default): keep none, as a real producer does.
    mode            "capsule" (default), "not_capsule" (return ``returns``)
                    or "raise" (raise the exception ``raises``).
    """

    def __init__(
        self,
        kind="versioned",
        *,
        shape=(2, 3),
        strides=_C,
        dtype="float32",
        version=(1, 2),
        flags=0,
        device=(1, 0),
        reported_device=_UNSET,
        data=_UNSET,
        ndim=_UNSET,
        byte_offset=0,
        capsule_name=None,
        null_deleter=False,
        hold_capsules=False,
        mode="capsule",
        returns=42,
        raises=None,
        buffer=None,
    ):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} (got {kind!r})")
        self.kind = kind
        self.version = tuple(version)
        self.flags = flags
        self.device = tuple(device)
        self.reported_device = reported_device
        self.shape = None if shape is None else tuple(int(n) for n in shape)
        self.ndim = len(self.shape or ()) if ndim is _UNSET else ndim
        self.dtype = (*DTYPES[dtype], 1) if isinstance(dtype, str) else tuple(dtype)
        self.strides = self._resolve_strides(strides)
        self.byte_offset = byte_offset
        self.capsule_name = capsule_name
        self.null_deleter = null_deleter
        self.hold_capsules = hold_capsules
        self.mode = mode
        self.returns = returns
        self.raises = raises
        self.calls = []
        self.capsules = []
        self.tensor_ids = []
        self.buffer = buffer
        self.data = self._allocate() if data is _UNSET else data

    # -- construction helpers

    def _resolve_strides(self, strides):
        """Turn "C"/"F" into explicit element strides; keep tuples and None."""
        if strides in (_C, _F):
            return None if self.shape is None else _contiguous_strides(self.shape, strides)
        return None if strides is None else tuple(int(s) for s in strides)

    @property
    def itemsize(self):
        """Bytes per element as allocated (sub-byte types take a whole byte: room enough
        for them packed too)."""
        code, bits, lanes = self.dtype
        return max(1, (bits * lanes + 7) // 8)

    @property
    def packed(self):
        """Whether the elements are packed sub-byte ones, several to a byte (DLPack's
        default for a bit count not a whole number of bytes: no IS_SUBBYTE_TYPE_PADDED)."""
        code, bits, lanes = self.dtype
        padded = self.kind == "versioned" and self.flags & IS_SUBBYTE_TYPE_PADDED
        return (bits * lanes) % 8 != 0 and not padded

    def _allocate(self):
        """Own a zeroed buffer holding every element; return the data pointer.

        The pointer is chosen so that ``data + byte_offset`` is element 0 and
        negative strides stay inside the buffer.
        """
        shape = self.shape or ()
        strides = self.strides
        if strides is None:
            strides = _contiguous_strides(shape, _C)
        low, high = _element_span(shape, strides)
        nbytes = self.byte_offset + (high - low + 1) * self.itemsize
        if self.buffer is None:
            self.buffer = (ctypes.c_ubyte * nbytes)()
        return ctypes.addressof(self.buffer) - low * self.itemsize

    @property
    def expected_ptr(self):
        """Where a consumer's view must point: ``data + byte_offset``."""
        return (self.data or 0) + self.byte_offset

    # -- the protocol

    @_recorded
    def __dlpack_device__(self):
        if self.reported_device is _UNSET:
            return self.device
        return self.reported_device

    @_recorded
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._export()

    def _export(self):
        """Answer one ``__dlpack__`` call according to ``mode``."""
        if self.mode == "raise":
            raise self.raises
        if self.mode == "not_capsule":
            return self.returns
        if self.mode != "capsule":
            raise ValueError(f"unknown mode {self.mode!r}")
        capsule = self._new_capsule()
        if self.hold_capsules:
            self.capsules.append(capsule)
        return capsule

    def _new_tensor(self):
        """A DLTensor from the attributes, plus the arrays it points into."""
        tensor = DLTensor()
        tensor.data = self.data
        tensor.device = DLDevice(*self.device)
        tensor.ndim = self.ndim
        tensor.dtype = DLDataType(*self.dtype)
        shape = strides = None
        if self.shape is not None:
            shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
            tensor.shape = shape
        if self.strides is not None:
            strides = (ctypes.c_int64 * len(self.strides))(*self.strides)
            tensor.strides = strides
        tensor.byte_offset = self.byte_offset
        return tensor, shape, strides

    def _new_capsule(self):
        """A managed tensor of ``kind`` in a PyCapsule; the tensor id goes in manager_ctx."""
        tensor_id = next(_tensor_ids)
        tensor, shape, strides = self._new_tensor()
        if self.kind == "versioned":
            managed = DLManagedTensorVersioned()
            managed.version = DLPackVersion(*self.version)
            managed.flags = self.flags
            deleter = _VERSIONED_DELETER
            default_name = "dltensor_versioned"
        else:
            managed = DLManagedTensor()
            deleter = _LEGACY_DELETER
            default_name = "dltensor"
        managed.dl_tensor = tensor
        managed.manager_ctx = tensor_id
        if not self.null_deleter:
            managed.deleter = deleter
        _LIVE[tensor_id] = _Record(managed, shape, strides, self.buffer)
        self.tensor_ids.append(tensor_id)
        name = _name_bytes(self.capsule_name or default_name)
        return _PyCapsule_New(ctypes.addressof(managed), name, _capsule_destructor)

    def release_capsules(self):
        """Drop the producer's references to its capsules (unconsumed ones call the deleter)."""
        self.capsules.clear()

    def __repr__(self):
        return (
            f"{type(self).__name__}({self.kind!r}, shape={self.shape}, strides={self.strides}, "
            f"dtype={self.dtype}, device={self.device}, mode={self.mode!r})"
        )


class OldStyleProducer(DLPackProducer):
    """A producer from before DLPack 1.0: ``__dlpack__`` knows no ``max_version``.

    Asked with ``max_version``, Python itself raises "__dlpack__() got an
    unexpected keyword argument 'max_version'"; the attempt is still recorded.
    """

    @_recorded
    def __dlpack__(self, stream=None):
        return self._export()


def make_producer(kind="versioned", *, old_api=False, **fields):
    """A ``DLPackProducer`` (``OldStyleProducer`` with ``old_api=True``) with ``fields`` set."""
    cls = OldStyleProducer if old_api else DLPackProducer
    return cls(kind, **fields)


def from_numpy(kind, array, **fields):
    """A producer exporting numpy ``array`` itself (element strides, its data pointer)."""
    import numpy as np

    array = np.asarray(array)
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides):
        raise ValueError("strides not a multiple of the item size cannot be expressed in DLPack")
    name = "bool" if array.dtype == np.bool_ else array.dtype.name
    fields.setdefault("dtype", name)
    fields.setdefault("shape", array.shape)
    fields.setdefault("strides", tuple(s // itemsize for s in array.strides))
    fields.setdefault("data", array.__array_interface__["data"][0])
    return make_producer(kind, buffer=array, **fields)


# --- The DLPack C exchange API (1.3) ---------------------------------------

#: ``int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out)``
DLTensorFromPyObject = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DLTensor))
#: ``int (*current_work_stream)(int32 device_type, int32 device_id, void **out)``
CurrentWorkStream = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class DLPackExchangeAPI(ctypes.Structure):
    """DLPack 1.3's exchange API table (56 bytes): header, then five function pointers."""

    _fields_ = [
        ("version", DLPackVersion),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", DLTensorFromPyObject),
        ("current_work_stream", CurrentWorkStream),
    ]


if ctypes.sizeof(DLPackExchangeAPI) != 56:
    raise ImportError("DLPackExchangeAPI is not 56 bytes")


def exchange_api(dltensor_from_py_object, current_work_stream=None, version=(1, 3)):
    """``(table, capsule)``: a table with these callbacks and its "dlpack_exchange_api" capsule.

    The capsule points into ``table``: keep both (as class attributes, say) for as
    long as the type that offers the capsule lives.
    """
    table = DLPackExchangeAPI()
    table.version = DLPackVersion(*version)
    table.dltensor_from_py_object_no_sync = dltensor_from_py_object
    if current_work_stream is not None:
        table.current_work_stream = current_work_stream
    capsule = _PyCapsule_New(
        ctypes.addressof(table), _name_bytes("dlpack_exchange_api"), PyCapsuleDestructor()
    )
    return table, capsule


# --- Checking a view --------------------------------------------------------

def assert_view(
    view,
    *,
    ptr,
    shape,
    strides,
    dtype,
    device_id,
    is_device_accessible,
    readonly,
    exporting_obj,
):
    """Fail unless every attribute of ``view`` holds the expected value and type.

    Written with explicit checks rather than ``assert`` so that it still
    checks under ``python -O``.
    """
    import numpy as np

    expected = {
        "ptr": ptr,
        "shape": tuple(shape),
        "strides": tuple(strides),
        "dtype": np.dtype(dtype),
        "device_id": device_id,
        "is_device_accessible": is_device_accessible,
        "readonly": readonly,
    }
    problems = []
    for name, want in expected.items():
        got = getattr(view, name)
        if got != want or (name == "dtype" and got.name != want.name):
            problems.append(f"{name}: expected {want!r}, got {got!r}")
    for name in ("ptr", "device_id"):
        if type(getattr(view, name)) is not int:
            problems.append(f"{name}: expected an int, got {type(getattr(view, name)).__name__}")
    for name in ("is_device_accessible", "readonly"):
        if type(getattr(view, name)) is not bool:
            problems.append(f"{name}: expected a bool, got {type(getattr(view, name)).__name__}")
    for name in ("shape", "strides"):
        value = getattr(view, name)
        if type(value) is not tuple or any(type(v) is not int for v in value):
            problems.append(f"{name}: expected a tuple of int, got {value!r}")
    if view.exporting_obj is not exporting_obj:
        problems.append(f"exporting_obj: expected {exporting_obj!r}, got {view.exporting_obj!r}")
    if problems:
        raise AssertionError("view mismatch:\n  " + "\n  ".join(problems))
