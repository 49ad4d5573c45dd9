# Types of the compiled core (stridedview/_view.pyx), checked against the built
# module by `python -m mypy.stubtest stridedview._view`.

import sys
from collections.abc import Callable, Iterator, Sequence
from inspect import Signature
from types import EllipsisType
from typing import Any, ClassVar, Literal, Protocol, SupportsIndex, final, type_check_only

import numpy
import numpy.typing
from numpy.typing import DTypeLike
from typing_extensions import Buffer, CapsuleType, TypeAlias

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

# Whether this build has the fast paths that rely on the GIL (False in a
# free-threaded build, or one made with -DSV_NO_GIL_FAST_PATHS).
gil_fast_paths: bool

# One item of a basic index, and what ``view[...]`` accepts.
_IndexItem: TypeAlias = SupportsIndex | slice | EllipsisType | None
_Index: TypeAlias = _IndexItem | tuple[_IndexItem, ...]
_Shape: TypeAlias = SupportsIndex | Sequence[SupportsIndex]

# How this build was made, and which torch reader is in use (for the report and tests).
_built_with_cxx_guard: bool

def _torch_layout_reader() -> Literal[
    "stable abi", "direct", "exchange api", "capsule", "uncalibrated"
]: ...

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

@final
class StridedMemoryView:
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
    def from_dlpack(cls, obj: SupportsDLPack, stream_ptr: _StreamPtr = None) -> StridedMemoryView: ...
    @classmethod
    def from_cuda_array_interface(
        cls, obj: SupportsCudaArrayInterface, stream_ptr: _StreamPtr = None
    ) -> StridedMemoryView: ...
    @classmethod
    def from_any_interface(cls, obj: object, stream_ptr: _StreamPtr = None) -> StridedMemoryView: ...
    @classmethod
    def from_array_interface(cls, obj: object) -> StridedMemoryView: ...
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
    ) -> StridedMemoryView: ...
    @property
    def ptr(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> numpy.dtype[Any]: ...
    @property
    def device_id(self) -> int: ...
    @property
    def is_device_accessible(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def exporting_obj(self) -> Any: ...
    @property
    def ready_stream(self) -> int | None: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def is_c_contiguous(self) -> bool: ...
    @property
    def is_f_contiguous(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: _StreamPtr = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def _asdict(self) -> dict[str, Any]: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def record_stream(self, stream: SupportsIndex | SupportsCudaStream) -> None: ...
    def copy_from(
        self,
        other: StridedMemoryView,
        stream: _StreamPtr,
        allocator: object | None = None,
        blocking: bool | None = None,
    ) -> None: ...
    def copy_to(
        self,
        other: StridedMemoryView,
        stream: _StreamPtr = None,
        allocator: object | None = None,
        blocking: bool | None = None,
    ) -> None: ...
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
    ) -> TensorMap: ...
    def __getitem__(self, key: _Index, /) -> StridedMemoryView: ...
    def __iter__(self) -> Iterator[StridedMemoryView]: ...
    @property
    def T(self) -> StridedMemoryView: ...
    def transpose(self, *axes: SupportsIndex | Sequence[SupportsIndex] | None) -> StridedMemoryView: ...
    def reshape(
        self, *shape: SupportsIndex | Sequence[SupportsIndex], order: Literal["C", "F"] = "C"
    ) -> StridedMemoryView: ...
    def squeeze(
        self, axis: SupportsIndex | tuple[SupportsIndex, ...] | None = None
    ) -> StridedMemoryView: ...
    def broadcast_to(self, shape: _Shape) -> StridedMemoryView: ...
    def view(
        self, layout: _LayoutLike | None = None, dtype: numpy.typing.DTypeLike | None = None
    ) -> StridedMemoryView: ...
    @property
    def byte_strides(self) -> tuple[int, ...]: ...
    @property
    def byte_bounds(self) -> tuple[int, int]: ...
    @property
    def has_overlap(self) -> bool: ...
    @property
    def is_dense(self) -> bool: ...
    @property
    def has_negative_stride(self) -> bool: ...

@final
class ViewableArgument:
    def __init__(
        self, obj: SupportsDLPack | SupportsCudaArrayInterface | SupportsArrayInterface | Buffer
    ) -> None: ...
    @property
    def obj(self) -> Any: ...
    def view(self, stream_ptr: _StreamPtr = None) -> StridedMemoryView: ...

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

# For tests: (entries, holds, holds handed to capturing streams) pending; the bound on
# pending hand-overs (returns the previous one); everything released, waiting (use_api's).
def _pending_holds() -> tuple[int, int, int]: ...
def _set_pending_limit(limit: int) -> int: ...
def _drain_pending() -> int: ...
