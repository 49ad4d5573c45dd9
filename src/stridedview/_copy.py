"""Copies between views: ``StridedMemoryView.copy_from`` and ``copy_to``.

Everything is checked before anything is written: both views' byte counts must
fit int64 (as every view's do), the destination must be writable and free of
self-overlap, shapes and dtypes (DLPack types included) must be equal, and the two
views' byte bounds
must not intersect (addresses are unique across host and device memory under
CUDA's unified addressing, so one comparison serves every pair).  The byte
arithmetic below is in Python ints and so cannot wrap; each count it hands numpy
or the driver is at most nbytes or a byte offset, within int64.

Host to host (both views in host or pinned memory): numpy's ``copyto`` on two
arrays laid over the views' memory with an unsigned integer (or opaque ``V<n>``)
element of the same size, so the bits are copied exactly whatever the dtype
(bfloat16, float8, NaN payloads) and, the views not overlapping, with no
temporary.  No driver is called and no stream needed.

Any device memory on either side: the copy is enqueued on the caller's stream
through the driver (stridedview._driver), after both views' ready streams.  The
two layouts are walked together (_plan): extent-1 axes dropped, axes ordered by
the destination's strides, axes that are contiguous in both merged.  The result
is one ``cuMemcpyAsync`` when both are one contiguous run,
``cuMemcpy2DAsync`` when the runs are pitched along one more axis,
``cuMemcpy3DAsync`` when along two with the outer pitch a multiple of the inner
one, and otherwise one 2-D copy per index of the remaining outer axes (a
non-contiguous innermost axis is copied as 2-D rows one element wide).  No
staging buffer is ever allocated: every layout is expressed this way.

Packed sub-byte elements (``dtype`` None: several to a byte, always row-major and
gap-free) are copied as the bytes holding them, when they fill whole bytes.
"""

from __future__ import annotations

import itertools

from stridedview import _driver
from stridedview._view import _checked_nbytes

# DLPack device types.
_CPU, _CUDA, _CUDA_HOST, _CUDA_MANAGED = 1, 2, 3, 13
_HOST_KINDS = (_CPU, _CUDA_HOST)

_CU_MEMORYTYPE_HOST = 1
_CU_MEMORYTYPE_DEVICE = 2
_CU_MEMORYTYPE_UNIFIED = 4

_UINTS = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}
# The largest pitch cuMemcpy2D/3D take (CU_DEVICE_ATTRIBUTE_MAX_PITCH on every GPU so far).
_MAX_PITCH = 2**31 - 1


def copy(dst, src, stream, blocking) -> None:
    """Copy view ``src`` into view ``dst`` (see the module docstring)."""
    from stridedview import StridedMemoryView

    for role, view in (("destination", dst), ("source", src)):
        if not isinstance(view, StridedMemoryView):
            raise TypeError(
                f"copy: the {role} must be a StridedMemoryView (got {type(view).__name__!r})"
            )
    for view in (dst, src):
        # Every byte count below (bounds, byte strides, widths, pitches, the driver's
        # size_t arguments) is then within int64, as each view keeps it.
        _checked_nbytes(view, "copy")
    if dst.readonly:
        raise BufferError("copy: the destination view is read-only")
    if dst.shape != src.shape:
        raise ValueError(f"copy: shapes differ (destination {dst.shape}, source {src.shape})")
    if dst.dtype != src.dtype or dst.dlpack_dtype != src.dlpack_dtype:
        # The DLPack types too: numpy's void dtypes of two vector types of one size
        # compare equal (fp4 pairs and int2 quadruples are both V1).
        raise ValueError(
            f"copy: dtypes differ (destination {_type_text(dst)}, source {_type_text(src)})"
        )
    if dst.size == 0:
        return
    if dst.dtype is None:
        dst, src = _packed_as_bytes(dst), _packed_as_bytes(src)
    if dst.has_overlap:
        raise ValueError(
            f"copy: the destination's elements overlap (strides {dst.strides}): a copy "
            "into it would write some elements twice"
        )
    low, high = dst.byte_bounds
    src_low, src_high = src.byte_bounds
    if low < src_high and src_low < high:
        raise ValueError(
            f"copy: the source and destination overlap (bytes [{src_low:#x}, {src_high:#x}) "
            f"and [{low:#x}, {high:#x}))"
        )
    dst_kind = dst.__dlpack_device__()[0]
    src_kind = src.__dlpack_device__()[0]
    if dst_kind in _HOST_KINDS and src_kind in _HOST_KINDS:
        _copy_on_host(dst, src)  # done on return: there is nothing to wait for
        return
    if stream is None or stream == -1:
        raise ValueError(
            f"copy: a copy touching device memory needs a stream (got {stream!r}): pass "
            "a stream handle or an object with __cuda_stream__"
        )
    device = None
    for view, kind in ((dst, dst_kind), (src, src_kind)):
        if kind not in _HOST_KINDS:
            if device is not None and view.device_id != device:
                raise ValueError(
                    f"copy: the views are on devices {device} and {view.device_id}; "
                    "copies between devices are not supported"
                )
            device = view.device_id
    _copy_with_driver(dst, dst_kind, src, src_kind, stream, device, blocking)


def _type_text(view) -> str:
    """A view's element type as copy's errors quote it: its dtype, with its DLPack
    type where the dtype does not name it (a vector's void dtype, packed elements)."""
    dtype = view.dtype
    if dtype is None or (dtype.metadata and "dlpack_dtype" in dtype.metadata):
        return f"{dtype} {view.dlpack_dtype}"
    return str(dtype)


def _packed_as_bytes(view):
    """A view of packed sub-byte elements (row-major and gap-free, as every such view
    is) as the bytes that hold them, for a copy of whole bytes: refused where the
    last element ends inside a byte, whose other bits lie outside the view."""
    from stridedview import DLPackDType

    bits = view.size * view.itemsize_bits
    if bits % 8:
        raise ValueError(
            f"copy: {view.size} packed elements of {view.itemsize_bits} bits "
            f"({view.dlpack_dtype}) end inside a byte, whose other bits a copy of "
            "whole bytes would overwrite: copy a whole number of bytes' worth"
        )
    return view.reshape(view.size).view(dtype=DLPackDType(1, 8, 1))


# --- host -----------------------------------------------------------------------------------

class _Memory:
    """An ``__array_interface__`` over raw memory, for numpy (kept as the array's base)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, view, typestr, readonly):
        self.owner = view
        self.__array_interface__ = {
            "version": 3,
            "shape": view.shape,
            "typestr": typestr,
            "data": (view.ptr, readonly),
            "strides": view.byte_strides,
        }


def _copy_on_host(dst, src) -> None:
    import numpy

    itemsize = dst.itemsize
    typestr = "|" + _UINTS.get(itemsize, f"V{itemsize}")
    target = numpy.asarray(_Memory(dst, typestr, False))
    numpy.copyto(target, numpy.asarray(_Memory(src, typestr, True)), casting="no")


# --- device ---------------------------------------------------------------------------------

def _plan(shape, dst_strides, src_strides, itemsize):
    """The two layouts walked together: ``[(extent, dst byte stride, src byte stride)]``,
    outermost first, extent-1 axes dropped, axes contiguous in both merged."""
    axes = [
        [extent, d * itemsize, s * itemsize]
        for extent, d, s in zip(shape, dst_strides, src_strides)
        if extent != 1
    ]
    # Reverse an axis whose destination stride is negative (both sides together):
    # the starting addresses move to the last element of that axis.
    shift_dst = shift_src = 0
    for axis in axes:
        if axis[1] < 0:
            shift_dst += (axis[0] - 1) * axis[1]
            shift_src += (axis[0] - 1) * axis[2]
            axis[1], axis[2] = -axis[1], -axis[2]
    axes.sort(key=lambda axis: axis[1], reverse=True)
    merged: list[list[int]] = []
    for axis in axes:
        if merged:
            outer = merged[-1]
            if outer[1] == axis[0] * axis[1] and outer[2] == axis[0] * axis[2]:
                outer[0] *= axis[0]
                outer[1], outer[2] = axis[1], axis[2]
                continue
        merged.append(list(axis))
    return [tuple(axis) for axis in merged], shift_dst, shift_src


def _copy_with_driver(dst, dst_kind, src, src_kind, stream, device, blocking) -> None:
    itemsize = dst.itemsize
    axes, shift_dst, shift_src = _plan(dst.shape, dst.strides, src.strides, itemsize)
    dst_ptr = dst.ptr + shift_dst
    src_ptr = src.ptr + shift_src
    # The innermost run: contiguous in both (width = extent * itemsize), else one element.
    if axes and axes[-1][1] == itemsize and axes[-1][2] == itemsize:
        width = axes[-1][0] * itemsize
        axes = axes[:-1]
    else:
        width = itemsize
    api = _driver._driver()
    for view, kind in ((dst, dst_kind), (src, src_kind)):
        ready = view.ready_stream
        if kind not in _HOST_KINDS and ready is not None and ready != -1:
            _driver.order_after(ready, stream, device=device)
    memcpy = _Memcpy(api, dst_kind, src_kind, stream)
    _driver.with_context(api, device, lambda: _enqueue(memcpy, axes, width, dst_ptr, src_ptr))
    if blocking:
        _synchronize(stream)


def _enqueue(memcpy, axes, width, dst_ptr, src_ptr) -> None:
    """One call for a run, a pitched 2-D or 3-D block; a loop over the rest."""
    if not axes:
        memcpy.linear(dst_ptr, src_ptr, width)
        return
    inner = axes[-1]
    if not _pitched(inner, width):
        # A pitch below the width (a zero source stride): rows one at a time.
        for i in range(inner[0]):
            _enqueue(memcpy, axes[:-1], width, dst_ptr + i * inner[1], src_ptr + i * inner[2])
        return
    if len(axes) >= 2:
        outer = axes[-2]
        if (
            _pitched(outer, width)
            and outer[1] % inner[1] == 0
            and outer[2] % inner[2] == 0
            and outer[1] // inner[1] >= inner[0]
            and outer[2] // inner[2] >= inner[0]
        ):
            rest = axes[:-2]
            for index in itertools.product(*[range(axis[0]) for axis in rest]):
                d = dst_ptr + sum(i * axis[1] for i, axis in zip(index, rest))
                s = src_ptr + sum(i * axis[2] for i, axis in zip(index, rest))
                memcpy.block3d(d, s, width, inner, outer)
            return
    rest = axes[:-1]
    for index in itertools.product(*[range(axis[0]) for axis in rest]):
        d = dst_ptr + sum(i * axis[1] for i, axis in zip(index, rest))
        s = src_ptr + sum(i * axis[2] for i, axis in zip(index, rest))
        memcpy.block2d(d, s, width, inner)


def _pitched(axis, width) -> bool:
    """Whether ``axis`` can be a pitch for rows of ``width`` bytes on both sides."""
    return width <= axis[1] <= _MAX_PITCH and width <= axis[2] <= _MAX_PITCH


class _Memcpy:
    """The driver's copy calls, with each side's memory type set."""

    def __init__(self, api, dst_kind, src_kind, stream):
        self.api = api
        self.stream = stream
        self.dst_type = _memory_type(dst_kind)
        self.src_type = _memory_type(src_kind)

    def linear(self, dst, src, nbytes) -> None:
        _driver._call(self.api, "cuMemcpyAsync", dst, src, nbytes, self.stream)

    def _fill(self, params, dst, src, width, inner) -> None:
        for side, address, kind, pitch in (
            ("src", src, self.src_type, inner[2]), ("dst", dst, self.dst_type, inner[1])
        ):
            setattr(params, side + "MemoryType", _enum(self.api, "CUmemorytype", kind))
            if kind == _CU_MEMORYTYPE_HOST:
                setattr(params, side + "Host", address)
            else:
                setattr(params, side + "Device", address)
            setattr(params, side + "Pitch", pitch)
        params.WidthInBytes = width
        params.Height = inner[0]

    def block2d(self, dst, src, width, inner) -> None:
        params = self.api.CUDA_MEMCPY2D()
        self._fill(params, dst, src, width, inner)
        _driver._call(self.api, "cuMemcpy2DAsync", params, self.stream)

    def block3d(self, dst, src, width, inner, outer) -> None:
        params = self.api.CUDA_MEMCPY3D()
        self._fill(params, dst, src, width, inner)
        params.srcHeight = outer[2] // inner[2]
        params.dstHeight = outer[1] // inner[1]
        params.Depth = outer[0]
        _driver._call(self.api, "cuMemcpy3DAsync", params, self.stream)


def _memory_type(kind) -> int:
    if kind == _CPU or kind == _CUDA_HOST:
        return _CU_MEMORYTYPE_HOST
    if kind == _CUDA_MANAGED:
        return _CU_MEMORYTYPE_UNIFIED
    return _CU_MEMORYTYPE_DEVICE


def _enum(api, name, value):
    """``value`` as the bindings' enum ``name`` where they have it (cuda-bindings wants it)."""
    kind = getattr(api, name, None)
    return value if kind is None else kind(value)


def _synchronize(stream) -> None:
    """``blocking=True``: wait on the host for the copy (the one blocking call, on request)."""
    if stream is None or stream == -1:
        return
    api = _driver._driver()
    _driver._call(api, "cuStreamSynchronize", stream)
