"""Strided views as MPI messages, with no packing: ``as_mpi_message(view)``.

mpi4py's buffer arguments are contiguous.  A strided view (a slice, a transpose, a view
with negative strides) reaches MPI here as the contiguous byte span it lies in plus a
derived datatype that picks its elements out of that span, in the view's logical
(C) order::

    from stridedview.mpi import as_mpi_message
    comm.Send(as_mpi_message(grid[:, ::2]), dest=1)
    comm.Recv(as_mpi_message(target[1:, ::3], receive=True), source=0)

mpi4py is imported when a function of this module is first called, never by
``import stridedview`` or ``import stridedview.mpi``.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from stridedview._view import StridedMemoryView

if TYPE_CHECKING:
    import numpy
    from mpi4py.MPI import Datatype

__all__ = ["MPIMessage", "as_mpi_message"]

# The derived datatypes that messages own and have not freed yet (see _live_datatypes).
_live_lock = threading.Lock()
_live_count = 0


def _live_datatypes() -> int:
    """How many datatypes made by ``as_mpi_message`` are not freed yet (for leak tests)."""
    return _live_count


def _count(delta: int) -> None:
    global _live_count
    with _live_lock:
        _live_count += delta


def _free(datatype: Datatype) -> None:
    """Free a message's datatype unless MPI is already finalised (then nothing is left to free)."""
    from mpi4py import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        datatype.Free()
    _count(-1)


class _HostSpan:
    """The bytes ``[low, low + nbytes)`` of a host view, offered to numpy by the array
    interface; numpy keeps this object, and with it the view, as the array's base."""

    def __init__(self, view: StridedMemoryView, low: int, nbytes: int):
        self.view = view
        self.__array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (low, view.readonly),
        }


class _DeviceSpan:
    """The bytes ``[low, low + nbytes)`` of a device view, offered by the CUDA Array
    Interface (with no stream: the caller synchronises before the MPI call)."""

    def __init__(self, view: StridedMemoryView, low: int, nbytes: int):
        self.view = view
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "strides": None,
            "data": (low, view.readonly),
        }


class MPIMessage(list[Any]):
    """``[buffer, 1, datatype]``: a view as mpi4py's buffer argument, owning its datatype.

    ``buffer`` covers the view's ``byte_bounds`` with no copy (a numpy ``uint8`` array
    for host memory, an object with ``__cuda_array_interface__`` for device memory);
    ``datatype`` is a committed MPI datatype placing element ``[0, ..., 0]`` at
    ``view.ptr`` and the others at their strides, in C order of their indices.

    The message owns ``datatype``: it is freed when the message is garbage collected,
    on ``free()``, or on leaving a ``with`` block.  Keep the message (not just the
    datatype taken out of it) until the MPI call, or its request's ``Wait``, returns;
    freeing the datatype while a nonblocking call uses it is allowed by MPI.
    """

    view: StridedMemoryView

    def __init__(self, buffer: Any, datatype: Datatype, view: StridedMemoryView):
        super().__init__((buffer, 1, datatype))
        self.view = view
        _count(1)
        self._finalizer = weakref.finalize(self, _free, datatype)

    def free(self) -> None:
        """Free the datatype now (a second call does nothing); the message is then unusable."""
        self._finalizer()

    def __enter__(self) -> MPIMessage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.free()

    def __repr__(self) -> str:
        view = self.view
        low, high = view.byte_bounds
        return (f"MPIMessage(shape={view.shape}, strides={view.strides}, dtype={view.dtype}, "
                f"span_bytes={high - low})")

    def __reduce__(self) -> Any:
        # One owner per datatype: a copy (copy.copy goes through here) or a pickle would be a second.
        raise TypeError("stridedview.mpi: an MPIMessage owns its MPI datatype and cannot be copied or pickled")


def _element_type(dtype: numpy.dtype[Any]) -> Datatype:
    """The MPI datatype of one element, from mpi4py's numpy conversion, checked to hold
    exactly ``itemsize`` bytes (mpi4py maps ``S2`` to one char, for instance)."""
    from mpi4py.util.dtlib import from_numpy_dtype

    try:
        element = from_numpy_dtype(dtype)
    except (ValueError, KeyError, TypeError) as error:
        raise BufferError(f"stridedview.mpi: MPI has no datatype for element type {str(dtype)!r} ({error})") from None
    size, (lb, extent) = element.Get_size(), element.Get_extent()
    if size != dtype.itemsize or lb != 0 or extent != dtype.itemsize:
        element.Free()
        raise BufferError(
            f"stridedview.mpi: MPI's datatype for element type {str(dtype)!r} holds {size} bytes "
            f"(lb {lb}, extent {extent}), the element {dtype.itemsize}")
    return element


def _axes(shape: tuple[int, ...], byte_strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """``(length, byte stride)`` of each axis, outermost first, with axes of length 1
    dropped and an axis merged into the next inner one where it just continues it."""
    axes: list[tuple[int, int]] = []
    for length, stride in zip(shape, byte_strides):
        if length == 1:
            continue
        axes.append((length, stride))
    merged: list[tuple[int, int]] = []
    for length, stride in reversed(axes):  # innermost first
        if merged and stride == merged[-1][0] * merged[-1][1]:
            inner_length, inner_stride = merged.pop()
            merged.append((length * inner_length, inner_stride))
        else:
            merged.append((length, stride))
    return merged[::-1]


def _layout_type(view: StridedMemoryView, element: Datatype, low: int) -> Datatype:
    """The committed datatype of the view's elements, as displacements from ``low``."""
    axes = _axes(view.shape, view.byte_strides) or [(1, view.itemsize)]
    made: list[Datatype] = []
    try:
        current = element
        for index, (length, stride) in enumerate(reversed(axes)):  # innermost first
            if index == 0 and stride == view.itemsize:
                current = current.Create_contiguous(length)
            else:
                current = current.Create_hvector(length, 1, stride)
            made.append(current)
        if view.ptr != low:  # negative strides: the span starts below element [0, ..., 0]
            current = current.Create_hindexed([1], [view.ptr - low])
            made.append(current)
        current.Commit()
    except BaseException:
        for datatype in made:
            datatype.Free()
        raise
    for datatype in made[:-1]:  # the committed type keeps what it was built from
        datatype.Free()
    return current


def _check_receive(view: StridedMemoryView) -> None:
    if view.readonly:
        raise BufferError(
            f"stridedview.mpi: a read-only view cannot be an MPI receive buffer "
            f"(shape {view.shape}, dtype {view.dtype})")
    if view.has_overlap:
        raise BufferError(
            f"stridedview.mpi: a view whose elements overlap cannot be an MPI receive buffer "
            f"(shape {view.shape}, strides {view.strides}): MPI forbids receiving into "
            f"overlapping datatype entries")


def as_mpi_message(obj: Any, *, receive: bool = False) -> MPIMessage:
    """A view's elements as one MPI message, ``[buffer, 1, datatype]``, with no copy.

    ``obj`` is a ``StridedMemoryView`` or anything its constructor takes (viewed with
    ``stream_ptr=-1``: nothing is ordered, so synchronise a device producer first).
    Hand the result to an mpi4py call whose buffer is one whole view (``Send``,
    ``Recv``, ``Isend``, ``Sendrecv``, ``Bcast``, ...): MPI reads or writes the view's
    elements in place, in C order of their indices, whatever the strides (negative,
    transposed, sliced).  The other side may use any layout with the same elements:
    a packed array, or another message.  Not for reductions (mpi4py wants the same
    datatype on both sides) nor a gather's or scatter's root buffer (one piece per rank).

    ``receive=True`` asks for a buffer MPI writes into: a read-only view, or one whose
    elements overlap (a broadcast, zero-stride view), raises ``BufferError``; so does
    an element type MPI has no datatype of exactly its size.  ``receive`` not a bool
    raises ``TypeError``.

    Device views need a GPU-aware MPI: the buffer is their span's device address, by
    ``__cuda_array_interface__``.  The returned ``MPIMessage`` owns the datatype and
    frees it when garbage collected (or on ``free()``, or leaving a ``with`` block).
    """
    if not isinstance(receive, bool):
        raise TypeError(f"stridedview.mpi: 'receive' must be a bool (got {receive!r})")
    view = obj if isinstance(obj, StridedMemoryView) else StridedMemoryView(obj, -1)
    dtype = view.dtype
    if dtype is None:  # packed sub-byte elements: numpy's dtype(None) would be float64
        raise BufferError(
            f"stridedview.mpi: MPI has no datatype for packed sub-byte elements "
            f"({view.dlpack_dtype}): they have no byte each")
    if receive:
        _check_receive(view)
    low, high = view.byte_bounds
    element = _element_type(dtype)
    try:
        if view.is_c_contiguous or view.size == 0:
            datatype = element.Create_contiguous(view.size)
            datatype.Commit()
        else:
            datatype = _layout_type(view, element, low)
    finally:
        element.Free()
    try:
        if view.is_device_accessible:
            buffer: Any = _DeviceSpan(view, low, high - low)
        else:
            import numpy

            buffer = numpy.asarray(_HostSpan(view, low, high - low))
    except BaseException:
        datatype.Free()
        raise
    return MPIMessage(buffer, datatype, view)
