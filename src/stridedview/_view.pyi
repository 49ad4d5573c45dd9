# Types of the compiled core (stridedview/_view.pyx), checked against the built
# module by `python -m mypy.stubtest stridedview._view`.

import sys
from collections.abc import Callable, Iterator, Sequence
from inspect import Signature
from types import EllipsisType
from typing import Any, ClassVar, Literal, NoReturn, Protocol, SupportsIndex, final, type_check_only

import numpy
import numpy.typing
from numpy.typing import DTypeLike
from typing_extensions import Buffer, CapsuleType, TypeAlias

from stridedview._allocation import Allocation
from stridedview._tensor_map import TensorMap
from stridedview.typing import (
    SupportsArrayInterface,
    SupportsCudaArrayInterface,
    SupportsCudaStream,
    SupportsDLPack,
)

# What every ``stream_ptr`` accepts: None, an int handle (or anything with
# ``__index__``; -1 opts out of ordering), or a stream object.
_StreamPtr: TypeAlias = SupportsIndex | SupportsCudaStream | None

# Whether this build has the fast paths that keep objects between calls (False
# in one made with -DSV_NO_GIL_FAST_PATHS), and where their state lives: one for
# the process (GIL builds) or one per thread (free-threaded builds).
fast_paths: bool
fast_paths_state: Literal["process", "thread"] | None
gil_fast_paths: bool  # the older name of fast_paths
field_getattro: bool  # views read their member fields through a tp_getattro of their own

# One item of a basic index, and what ``view[...]`` accepts.
_IndexItem: TypeAlias = SupportsIndex | slice | EllipsisType | None
_Index: TypeAlias = _IndexItem | tuple[_IndexItem, ...]
_Shape: TypeAlias = SupportsIndex | Sequence[SupportsIndex]

# How this build was made, and which torch reader is in use (for the report and tests).
_built_with_cxx_guard: bool

def _torch_layout_reader() -> Literal[
    "stable abi", "direct", "exchange api", "capsule", "uncalibrated"
]: ...

def _torch_fields_reader() -> Literal["fields", "off", "uncalibrated"]: ...

def _torch_storage_reader() -> Literal["storage", "getter", "uncalibrated"]: ...

# view.nbytes with its byte counts checked, refused as ``where`` (_copy.py, _tensor_map.py).
def _checked_nbytes(view: StridedMemoryView, where: str) -> int: ...

@type_check_only
class _LayoutLike(Protocol):
    """What ``view(layout=...)`` reads: cuda.core's ``_StridedLayout`` has these (and
    ``slice_offset``, in elements, read when present)."""

    @property
    def shape(self) -> Sequence[SupportsIndex]: ...
    @property
    def strides(self) -> Sequence[SupportsIndex] | None: ...
    @property
    def itemsize(self) -> SupportsIndex: ...

class DLPackDType(tuple[int, int, int]):
    """A DLPack element type: ``code`` (DLDataTypeCode), ``bits`` per lane, ``lanes``.

    An element takes ``bits * lanes`` bits: torch's ``float4_e2m1fn_x2`` is
    ``DLPackDType(17, 4, 2)``, one byte holding a pair of float4_e2m1fn.
    """

    def __new__(_cls, code: int, bits: int, lanes: int) -> DLPackDType: ...
    @property
    def code(self) -> int: ...
    @property
    def bits(self) -> int: ...
    @property
    def lanes(self) -> int: ...
    @property
    def name(self) -> str:
        """The DLPack spec's name of ``code`` (``"Float4_e2m1fn"``), or ``"unknown"``."""

@final
class StridedMemoryView:
    """A zero-copy view of a strided array from any DLPack, CUDA Array Interface or host producer.

    The whole contract (``help()`` on the compiled class gives its summary). For example::

        >>> import numpy as np
        >>> view = StridedMemoryView(np.zeros((4, 3), np.float32)[:, ::2])
        >>> view.shape, view.strides, view.dtype, view.device_id  # strides in elements
        ((4, 2), (3, 2), dtype('float32'), -1)
        >>> # Device memory: name the stream the kernel will run on.
        >>> # view = StridedMemoryView(cupy_array, stream_ptr=stream.ptr)

    ``StridedMemoryView(obj, stream_ptr=None)`` (also ``from_any_interface``)
    views ``obj`` through the first protocol it offers: DLPack (``__dlpack__``
    and ``__dlpack_device__``), the CUDA Array Interface (CAI,
    ``__cuda_array_interface__``), numpy's array interface
    (``__array_interface__``, host memory), the buffer protocol (bytes,
    bytearray, memoryview, array.array, mmap, ctypes arrays: host memory);
    anything else is a ``BufferError``.  ``from_dlpack``,
    ``from_cuda_array_interface`` and ``from_array_interface`` force one
    protocol; ``from_buffer`` lays a layout over a buffer's bytes.  Nothing is
    copied: ``__dlpack__`` is asked with ``copy=False`` (``max_version=(1, 3)``
    too; asked again without a keyword the producer does not know), and a
    capsule flagged IS_COPIED is refused.  The view keeps ``obj`` alive (and
    holds a buffer-protocol buffer until it is deallocated).  Every element it
    reaches lies within 2**63 - 1 bytes of element 0, and ``nbytes`` (``size *
    itemsize``) is at most 2**63 - 1, as numpy requires (a layout reaching
    farther, or a broadcast of more elements than that, is a ``BufferError``).
    A type's DLPack 1.3 C exchange API (``__dlpack_c_exchange_api__``) is used
    in place of ``__dlpack__`` only while the type's DLPack methods are those of
    the class offering it.  A view of a StridedMemoryView takes that view's
    fields, its ``exporting_obj`` and its memory owner (no capsule, no driver,
    no chain however deep views nest).

    Streams.  ``stream_ptr`` names the stream on which the caller will use the
    data: an int handle (0 the null stream, 1 the legacy default stream, 2 the
    per-thread default stream, or a ``CUstream`` address), an object with
    ``__cuda_stream__``, -1 to order nothing (the caller takes care of it), or
    None.  The host is never blocked.

    - DLPack, host (CPU) and pinned (CUDAHost) memory: nothing to order; the
      producer is handed ``stream=None`` whatever ``stream_ptr`` says.
    - DLPack, CUDA and managed memory: the producer is handed the caller's stream
      (0 as 1, -1 as -1) and makes it wait for its pending work, as DLPack
      requires; ``stream_ptr=None`` is ambiguous there, a ``BufferError``.
    - CAI: if the producer names a stream (v3 ``stream``) other than the caller's,
      an event is recorded on it and the caller's stream made to wait on it
      (``cuEventRecord`` + ``cuStreamWaitEvent``); -1, no producer stream, or the
      same stream order nothing and need no driver.  ``stream_ptr=None`` is a
      ``BufferError``.
    - A StridedMemoryView: as its memory kind says above, with its
      ``ready_stream`` as the producer's stream.

    Fields (read-only):

    - ``ptr``: address of element ``[0, ..., 0]`` (DLPack's ``byte_offset``
      included), an int;
    - ``shape``: tuple of extents;
    - ``strides``: tuple of strides in *elements*, not bytes, always explicit
      (``()`` for 0-d; row-major when the producer sent none; all 0 for a view
      with no elements, whatever the producer sent);
    - ``dtype``: a ``numpy.dtype`` where numpy or ml_dtypes has the exact type
      (bfloat16, the float8/6/4 kinds, int1/2/4, uint1/2/4, complex32 and
      bcomplex32 are ml_dtypes'); a void ``numpy.dtype("V<n>")`` of the element's
      size for a DLPack vector type (lanes > 1: torch's float4_e2m1fn_x2 pairs),
      its ``metadata["dlpack_dtype"]`` naming the type; None for packed sub-byte
      elements (several to a byte), which no numpy dtype can size (docs/api.md
      has the table);
    - ``dlpack_dtype``: the element type exactly as DLPack says it, a
      ``DLPackDType(code, bits, lanes)`` (None where no DLPack type describes
      the elements: structured, datetime, bytes);
    - ``device_id``: -1 for host-only (CPU) memory, else the device ordinal (0
      for pinned and managed memory, as DLPack gives it; for a CAI view the driver
      is asked on first read);
    - ``is_device_accessible``: whether a CUDA kernel may read the memory;
    - ``readonly``: DLPack 1.x's READ_ONLY flag or the CAI's ``data[1]``; a legacy
      (pre-1.0) DLPack capsule cannot say, and is taken as read-only (as numpy
      takes it: JAX's immutable arrays come only as legacy capsules);
    - ``exporting_obj``: the object viewed, kept alive as long as the view (for
      a view of a view, the object that view views);
    - ``ready_stream``: the stream on which the data may be used without further
      ordering (the caller's stream once ordered; with -1, the CAI producer's
      stream), or None when there is none to speak of (host memory) or it is
      unknown.

    The view is not a dataclass: ``_fields`` names the eight fields above (from
    ``ptr`` to ``exporting_obj``) and ``_asdict()`` returns them, uncopied, as
    a namedtuple would.

    A consumed DLPack capsule's deleter runs exactly once, when the view is
    deallocated (or, after ``record_stream(s)``, once ``s`` has done the work
    enqueued until then).  The view hands itself on through ``__dlpack__``,
    ``__dlpack_device__`` and, for device-accessible memory,
    ``__cuda_array_interface__``.
    """

    __match_args__: ClassVar[tuple[str, str, str, str]]
    _fields: ClassVar[tuple[str, ...]]
    __signature__: ClassVar[Signature]
    # DLPack 1.3's C exchange API: a PyCapsule named "dlpack_exchange_api".
    __dlpack_c_exchange_api__: ClassVar[CapsuleType]
    __c_dlpack_exchange_api__: ClassVar[CapsuleType]  # the DLPack 1.2-era name, same capsule

    def __init__(
        self,
        obj: SupportsDLPack | SupportsCudaArrayInterface | SupportsArrayInterface | Buffer,
        stream_ptr: _StreamPtr = None,
    ) -> None: ...
    @classmethod
    def from_dlpack(cls, obj: SupportsDLPack, stream_ptr: _StreamPtr = None) -> StridedMemoryView:
        """View ``obj`` through DLPack only; see the class docstring for ``stream_ptr``."""
    @classmethod
    def from_cuda_array_interface(
        cls, obj: SupportsCudaArrayInterface, stream_ptr: _StreamPtr = None
    ) -> StridedMemoryView:
        """View ``obj`` through the CUDA Array Interface only.

        ``stream_ptr`` (a handle, an object with ``__cuda_stream__``, or -1) is the
        stream on which the data will be used; None is ambiguous, a BufferError.
        """
    @classmethod
    def from_any_interface(cls, obj: object, stream_ptr: _StreamPtr = None) -> StridedMemoryView:
        """``StridedMemoryView(obj, stream_ptr)`` under cuda.core's name: every protocol, in order."""
    @classmethod
    def from_array_interface(cls, obj: object) -> StridedMemoryView:
        """View host memory through numpy's ``__array_interface__`` (version 3) only.

        ``data`` may be a ``(ptr, readonly)`` tuple or an object with the buffer
        protocol (None: ``obj`` itself), ``offset`` bytes in; ``strides`` are in
        bytes and must be multiples of the item size.  The memory is taken as host
        memory (``device_id`` -1): no driver is called and no stream ordered.
        """
    @classmethod
    def from_buffer(
        cls,
        buffer: object,
        shape: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        *,
        itemsize: int | None = None,
        dtype: DTypeLike | None = None,
        is_readonly: bool = False,
    ) -> StridedMemoryView:
        """View ``buffer``'s bytes with a layout: cuda.core's ``from_buffer``, for any buffer.

        ``buffer`` is a cuda.core ``Buffer`` (or an object with its ``handle``,
        ``size``, ``is_device_accessible`` and ``device_id``; host, pinned,
        managed or device memory as it says) or any object with the buffer
        protocol (host memory, held by the view until it is deallocated).

        ``shape`` and ``strides`` are in elements (``strides=None``: row-major),
        element ``[0, ..., 0]`` being the buffer's first byte; every element must
        lie inside the buffer, else ValueError with the byte counts.
        ``shape=None`` takes the buffer's own layout: a buffer-protocol object's
        shape and strides when the item size is its own, else the buffer's bytes
        as a 1-d run of whole elements.  ``dtype`` (anything ``numpy.dtype``
        takes) is the element type; ``itemsize`` alone gives opaque
        ``itemsize``-byte elements (``numpy.dtype('V<n>')``); with neither, a
        buffer-protocol object's own element type.  ``is_readonly`` marks the view
        read-only (a read-only buffer's view is read-only anyway).

        Nothing is ordered on any stream (``ready_stream`` None): the caller
        makes sure the data are ready, as with cuda.core.
        """
    @property
    def ptr(self) -> int:
        """Address of element [0, ..., 0] (an int), byte offset included."""
    @property
    def shape(self) -> tuple[int, ...]:
        """Tuple of extents."""
    @property
    def strides(self) -> tuple[int, ...]:
        """Tuple of strides in elements, not bytes; always explicit, () at 0-d."""
    @property
    def dtype(self) -> numpy.dtype[Any] | None:
        """The element type, a numpy.dtype (ml_dtypes' for bfloat16, float8/6/4, int1/2/4,
        uint1/2/4, complex32, bcomplex32); a void dtype of the element's size for a
        DLPack vector type; None for packed sub-byte elements (see ``dlpack_dtype``)."""
    @property
    def dlpack_dtype(self) -> DLPackDType | None:
        """The element type as DLPack says it, exactly as the producer gave it; None
        where no DLPack type describes the elements (structured, datetime, bytes)."""
    @property
    def itemsize_bits(self) -> int:
        """Bits per element as stored: ``8 * itemsize``, or a packed sub-byte type's
        ``bits * lanes``."""
    @property
    def device_id(self) -> int:
        """-1 for host-only memory, else the device ordinal.

        For a CUDA Array Interface view the driver is asked on first access
        (``cuPointerGetAttribute``; the current device for a NULL pointer), so
        that a view made with no driver present only needs one if this is read.
        """
    @property
    def is_device_accessible(self) -> bool:
        """Whether a CUDA kernel may access the memory: False only for host-only (CPU) memory."""
    @property
    def readonly(self) -> bool:
        """Whether the producer marked the memory read-only (DLPack 1.x's READ_ONLY flag, the
        CAI's ``data[1]``, the buffer protocol's readonly); True for a legacy DLPack capsule,
        which cannot say.
        """
    @property
    def exporting_obj(self) -> Any:
        """The object viewed, kept alive as long as the view lives."""
    @property
    def ready_stream(self) -> int | None:
        """The stream on which the data may be used with no further ordering, or None (host
        memory, or unknown).
        """
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
    @property
    def size(self) -> int:
        """Number of elements."""
    @property
    def itemsize(self) -> int:
        """Bytes per element (BufferError for packed sub-byte elements, which have no
        whole-byte size: read ``itemsize_bits``)."""
    @property
    def nbytes(self) -> int:
        """``size * itemsize``: the bytes the elements occupy, gaps between them not counted
        (shared ones counted once per element).  It fits int64: a layout whose nbytes
        would not is refused when the view is made, as numpy refuses it.  Packed
        sub-byte elements: ``size * itemsize_bits / 8`` rounded up to whole bytes.
        """
    @property
    def is_c_contiguous(self) -> bool:
        """Row-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
    @property
    def is_f_contiguous(self) -> bool:
        """Column-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
    def __dlpack__(
        self,
        *,
        stream: _StreamPtr = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType:
        """Export the view as a DLPack capsule (versioned when ``max_version >= (1, 0)``).

        The capsule keeps the view (and so the original object) alive.  For device
        memory the consumer's ``stream`` is made to wait for the view's
        ``ready_stream`` (an event, never a host synchronisation); -1 orders
        nothing.  ``copy=True`` and a ``dl_device`` other than the view's own are
        a BufferError: a view never copies.  A read-only view cannot be exported as
        a legacy capsule (it has no flag to say so).
        """
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device_type, device_id)`` in DLPack's terms (device_id 0 for host memory)."""
    def _asdict(self) -> dict[str, Any]:
        """The eight fields of ``_fields`` in a new dict, each value the view's own (no copy).

        Reading ``device_id`` asks the driver for a CUDA Array Interface view whose
        device is not yet known (see ``device_id``).
        """
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (v3) of a device-accessible view.

        Strides are in bytes, ``stream`` is the view's ``ready_stream``.  Host-only
        views have none: reading it raises AttributeError, so ``hasattr`` is False.
        """
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    @property
    def __array_interface__(self) -> dict[str, Any]:
        """numpy's array interface (version 3) of a host view (host or pinned memory).

        ``data`` is ``(ptr, readonly)``, strides are in bytes; numpy keeps the view
        as the array's base, and the view keeps its memory alive.  A view of device
        or managed memory, or of a dtype numpy cannot name by its typestr (bfloat16,
        the float8 kinds), raises BufferError saying why.
        """
    def record_stream(self, stream: SupportsIndex | SupportsCudaStream) -> None:
        """Say that work enqueued on ``stream`` uses this view's memory (torch's
        ``Tensor.record_stream``, for any producer).

        When the view lets go of its memory (it is deallocated or collected), what it
        held the memory by (its reference to the exporting object, a DLPack capsule's
        deleter, a CUDA Array Interface dict, the root view of a derived one) is
        handed to ``stream`` instead of released: an event is recorded on ``stream``
        then, and the hold is released once that event has completed, so the
        producer cannot free or reuse the memory while ``stream`` still reads or
        writes it.  Recorded on several streams, it waits for all of them.  The host
        is not blocked (see ``stridedview.release_pending``).  ``stream`` must still
        exist then: a destroyed stream's handle is undefined in CUDA, and a real
        driver crashes when it is named.

        ``stream`` is a stream handle (an int >= 0: 0, 1 and 2 name the default
        streams of the context current where ``record_stream`` is called, else the
        data device's primary context's; 2 the calling thread's own) or an object
        with ``__cuda_stream__``: TypeError for anything
        else, ValueError for a negative handle (-1 names no stream); CUDAError when
        the driver cannot be used or the handle names no stream.  A view of
        host-only memory (``is_device_accessible`` False) records nothing: no stream
        reads pageable memory behind the host's back (see docs/concepts.md).
        """
    def synchronize(self) -> None:
        """Block the calling thread until the view's data are ready on the host's
        timeline: for a reader that takes no stream (MPI, the host reading pinned or
        managed memory).

        An event is recorded on ``ready_stream`` (in its context) and the host waits for
        it: every write ordered before ``ready_stream`` when this is called has completed
        on return; work enqueued there later is not waited for.  A view with
        ``ready_stream`` None (host memory, or viewed with ``stream_ptr=-1``: the caller
        orders streams) returns at once, asking no driver.  CUDAError if the driver
        cannot be used.
        """
    @property
    def allocation(self) -> Allocation:
        """The allocation element ``[0, ..., 0]`` lies in, as the driver knows it: its
        ``base`` and ``size``, its ``kind`` (``"device"``: cuMemAlloc; ``"pool"``: a
        stream-ordered pool's block; ``"managed"``; ``"pinned"``: page-locked host
        memory; ``"host"``: memory the driver does not know, whose base and size are
        then the view's span), whether another process can map it (``shareable``:
        CUDA IPC, which pickling a device view uses), its ``device_id`` (-1 for host
        memory) and, for a pool's block, the handle types its pool exports and the pool.

        A host view asks the driver only once stridedview has initialised one;
        a device view asks it each time (CUDAError when it cannot be used).
        """
    def __copy__(self) -> NoReturn:
        """Refused (TypeError): a view is never duplicated; make another view of its
        exporting object, or copy its elements with ``copy_to``."""
    def __deepcopy__(self, memo: object) -> NoReturn:
        """Refused (TypeError), as ``copy.copy``."""
    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the view: a host view by value (a copy of its elements, their exact
        type kept); a device view for another process on this node through CUDA IPC
        (``stridedview.ipc``: unpickled there, a ``ReceivedView`` of the same memory,
        ordered after the work pending at pickling).  Memory that cannot be shared is a
        BufferError naming why and what to allocate instead."""
    def copy_from(
        self,
        other: StridedMemoryView,
        stream: _StreamPtr = None,
        allocator: object | None = None,
        blocking: bool | None = None,
    ) -> None:
        """Copy the elements of view ``other`` into this view (cuda.core's ``copy_from``).

        Any layout to any layout of the same shape and dtype.  Host to host is
        done at once on the host (``stream`` may be None; no driver).  Host to
        device, device to host and device to device (one device) are enqueued on
        ``stream`` (a handle or an object with ``__cuda_stream__``), after both
        views' ready streams.  A read-only destination, a shape or dtype mismatch,
        and overlapping views are refused before anything is written.
        ``blocking=True`` waits for the copy (``cuStreamSynchronize``); the default
        never blocks.  ``allocator`` is accepted for cuda.core's signature and
        unused: no staging buffer is ever needed.  See docs/beyond.md.
        """
    def copy_to(
        self,
        other: StridedMemoryView,
        stream: _StreamPtr = None,
        allocator: object | None = None,
        blocking: bool | None = None,
    ) -> None:
        """Copy this view's elements into view ``other``: ``other.copy_from(self, ...)``."""
    def as_tensor_map(
        self,
        box_dim: Sequence[SupportsIndex] | None = None,
        *,
        options: object | None = None,
        element_strides: Sequence[SupportsIndex] | None = None,
        data_type: object | None = None,
        interleave: SupportsIndex | None = None,
        swizzle: SupportsIndex | None = None,
        l2_promotion: SupportsIndex | None = None,
        oob_fill: SupportsIndex | None = None,
    ) -> TensorMap:
        """Encode this device view into a tiled TMA descriptor (``cuTensorMapEncodeTiled``).

        cuda.core's signature.  ``box_dim`` and ``element_strides`` are given in
        the view's axis order (row-major, as its shape); the rules of the driver
        are checked first and each violation named (ValueError; TypeError for an
        integer argument that ``operator.index`` refuses, or a bool); the packed
        data types (13, 14, 15) and the 128B_ATOM swizzles (4, 5, 6) need a device
        of compute capability 10.0 or higher (asked of the driver once per device).
        Returns a ``stridedview.TensorMap``.  See docs/beyond.md.
        """
    def __getitem__(self, key: _Index, /) -> StridedMemoryView:
        """Basic indexing, exactly as numpy gives it: ints (negative from the end),
        slices with any step, ``...`` and ``None`` (a new axis of extent 1, stride 0).

        An int on every axis gives a 0-d view.  An out-of-range int is an
        IndexError; lists, arrays and bools (advanced indexing) a TypeError.
        """
    def __iter__(self) -> Iterator[StridedMemoryView]:
        """The views ``self[0]``, ``self[1]``, ... along the first axis, as numpy iterates.

        A 0-d view has no axis to iterate over: TypeError, as numpy gives.
        """
    @property
    def T(self) -> StridedMemoryView:
        """The view with its axes reversed (``transpose()``)."""
    def transpose(self, *axes: SupportsIndex | Sequence[SupportsIndex] | None) -> StridedMemoryView:
        """The view with its axes permuted, as numpy's ``transpose``.

        ``transpose()`` (or ``transpose(None)``) reverses the axes;
        ``transpose((1, 0, 2))`` and ``transpose(1, 0, 2)`` name, for each new
        axis, the old one (negative axes count from the end).  ValueError for a
        repeated or out-of-range axis, or too few or too many.
        """
    def reshape(
        self, *shape: SupportsIndex | Sequence[SupportsIndex], order: Literal["C", "F"] = "C"
    ) -> StridedMemoryView:
        """The same elements with a new shape, without copying (numpy's ``reshape``).

        ``shape`` is given as separate ints or one tuple; one extent may be -1, to
        be inferred.  Elements are taken in C (row-major) order, or F with
        ``order="F"``.  A layout whose elements cannot be walked in that order with
        new strides (numpy would copy) is a BufferError; a shape with a different
        element count a ValueError.
        """
    def squeeze(
        self, axis: SupportsIndex | tuple[SupportsIndex, ...] | None = None
    ) -> StridedMemoryView:
        """The view without its extent-1 axes (all of them, or those in ``axis``: an int or
        a tuple); ValueError for an axis whose extent is not 1.
        """
    def broadcast_to(self, shape: _Shape) -> StridedMemoryView:
        """The view broadcast to ``shape`` by numpy's rules (stride 0 on every broadcast axis).

        The result is read-only, as numpy's ``broadcast_to`` is: its elements
        share memory, so a kernel writing through it would race with itself.
        ValueError when the shapes are incompatible.
        """
    def view(
        self,
        layout: _LayoutLike | None = None,
        dtype: numpy.typing.DTypeLike | DLPackDType | None = None,
    ) -> StridedMemoryView:
        """A view of the same bytes with another layout and/or dtype (cuda.core's ``view``).

        ``view()`` is the view itself.  ``view(dtype=d)`` reinterprets the bytes by
        numpy's ``ndarray.view(d)`` rules: with a different item size the last axis
        must be contiguous and its extent scales (a 0-d view must keep its item
        size); ml_dtypes' dtypes are accepted, and a ``DLPackDType`` names any
        DLPack type (``DLPackDType(17, 4, 1)``: packed float4_e2m1fn).  Where either
        side is packed sub-byte elements, both must be row-major and gap-free, the
        last axis counted in bits, and no ``layout`` is taken.  ``layout`` is any object with
        ``shape``, ``strides`` (in elements; None for C order), ``itemsize`` and
        optionally ``slice_offset``, such as cuda.core's ``_StridedLayout``, placed at
        this view's element [0, ..., 0]; its itemsize must be the dtype's, and its
        elements must lie within this view's ``byte_bounds``.  Alignment of the
        new elements is the caller's concern, as in numpy.
        """
    @property
    def byte_strides(self) -> tuple[int, ...]:
        """The strides in bytes (``strides`` times ``itemsize``), a tuple, as the array
        interfaces give them: 0 for a stride whose bytes would pass int64, which only an
        axis that never steps (extent <= 1, or an empty view) can have.
        """
    @property
    def byte_bounds(self) -> tuple[int, int]:
        """``(low, high)``: the lowest address an element occupies and one past the highest
        (numpy's ``byte_bounds``); ``(ptr, ptr)`` for an empty view, which touches nothing.
        """
    @property
    def has_overlap(self) -> bool:
        """Whether two distinct indices address the same element (so a kernel writing
        through the view would race with itself).

        Exact for zero strides, for layouts made by slicing, transposing or
        reshaping a gap-free array, and for any layout of at most 2**16 elements;
        past that an undecided layout answers True ("may overlap"), so False is
        always safe to rely on.
        """
    @property
    def is_dense(self) -> bool:
        """Whether the elements fill exactly the ``nbytes`` bytes from ``ptr``, one each,
        in some axis order (cuda.core's ``is_dense``): no gaps, no overlap, no negative
        stride on an axis of extent > 1.  Empty and 0-d views are dense.
        """
    @property
    def has_negative_stride(self) -> bool:
        """Whether any stride is negative (False for a 0-d view, which has none).

        torch's ``from_dlpack`` cannot take a view with a negative stride (torch
        2.13 aborts the process, 2.14 raises RuntimeError): check ``not
        view.has_negative_stride`` before handing a view to torch, and copy
        (``numpy.ascontiguousarray``) where it is True.
        """

@final
class ViewableArgument:
    def __init__(
        self, obj: SupportsDLPack | SupportsCudaArrayInterface | SupportsArrayInterface | Buffer
    ) -> None: ...
    @property
    def obj(self) -> Any: ...
    def view(self, stream_ptr: _StreamPtr = None) -> StridedMemoryView: ...
    # The view's fields read from the argument: each raises AttributeError naming view().
    @property
    def ptr(self) -> NoReturn: ...
    @property
    def shape(self) -> NoReturn: ...
    @property
    def strides(self) -> NoReturn: ...
    @property
    def dtype(self) -> NoReturn: ...
    @property
    def device_id(self) -> NoReturn: ...

# Private: what args_viewable_as_strided_memory returns (see _decorator.py).
@final
class _ViewableLauncher:
    def __init__(
        self,
        func: Callable[..., Any],
        by_position: tuple[tuple[int, str], ...],
        by_keyword: tuple[str, ...],
        record_stream: bool = False,
    ) -> None: ...
    @property
    def record_stream(self) -> bool: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...

# Hand-overs (record_stream): release the holds whose streams are done; how many.
def release_pending(wait: bool = False) -> int: ...

# For tests: (entries, holds, holds handed to capturing streams) pending, deferred ones
# included; the holds deferred (not yet recorded: a capture elsewhere); the released
# hand-overs kept for reuse (with the GIL); the bound on
# pending hand-overs (returns the previous one); everything released, waiting (use_api's);
# how a launch's view reads a normalized stream's int in C.
def _pending_holds() -> tuple[int, int, int]: ...
def _deferred_holds() -> int: ...
def _spare_handovers() -> int: ...
def _stream_handle_kind(stream: object) -> str: ...
def _set_pending_limit(limit: int) -> int: ...
def _drain_pending() -> int: ...

# The driver door (_driver_door.pxi): whether the calling thread state was cleared (code run
# as its thread ends); ordering for Python callers (_driver.order_after).
def _thread_state_cleared() -> bool: ...
def _order_after_for(producer: int, consumer: int, device: int | None = None, ptr: int = 0) -> None: ...

# CUDA graphs (_graphs.pxi): the user-object destructor's address, a node carrying an object
# for it (an int; dropped by _graph_node_drop if no user object took it), and how many
# nodes exist (resources graphs own, given back or not yet drained).
def _graph_release_address() -> int: ...
def _graph_node(obj: object) -> int: ...
def _graph_node_drop(address: int) -> None: ...
def _graph_owned() -> int: ...
