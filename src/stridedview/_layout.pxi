# Layouts: pure functions on (shape, strides in elements, itemsize) that every
# derived view uses.  Nothing here reads memory or calls the driver; offsets are
# in elements relative to element [0, ..., 0] unless a name says bytes.  Python
# ints throughout, so that no intermediate product can wrap; the results are
# checked against int64 and the address space once, in _relaid (_check_layout and
# nbytes, the rules every view keeps: _view.pyx, "Byte counts").

from cpython.number cimport PyNumber_Index

cdef object _INT64_LIMIT = 1 << 63  # one past the largest int64
# The CUDA Array Interface (and numpy) stop at 64 dimensions; so do derived views.
cdef Py_ssize_t _MAX_NDIM = 64


cdef object _as_int(object value, str what):
    """``value`` as a Python int (anything with ``__index__`` but bool), or TypeError."""
    if type(value) is int:
        return value
    if not isinstance(value, bool):
        try:
            return PyNumber_Index(value)
        except TypeError:
            pass
    raise TypeError(f"{what} must be an int (got {value!r})")


cdef Py_ssize_t _normalize_axis(object axis, Py_ssize_t ndim, str what) except -1:
    """``axis`` in ``range(-ndim, ndim)`` as a non-negative axis, or ValueError."""
    index = _as_int(axis, what)
    if not -ndim <= index < ndim:
        raise ValueError(f"{what} {index} is out of bounds for {ndim} dimensions")
    return index + ndim if index < 0 else index


cdef object _element_count(tuple shape):
    """The product of the extents, a Python int (no overflow); shared by every layout builder."""
    count = 1
    for extent in shape:
        count *= extent
    return count


cdef tuple _offset_bounds(tuple shape, tuple strides):
    """``(lowest, highest)`` element offset touched, or None when nothing is (size 0)."""
    low = high = 0
    for extent, stride in zip(shape, strides):
        if extent == 0:
            return None
        reach = (extent - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return (low, high)


cdef int _check_layout(
    tuple shape, tuple strides, Py_ssize_t itemsize, object ptr, str what
) except -1:
    """Refuse a derived layout a consumer could not take.

    Every stride in bytes, and for a non-empty layout the byte offset of every
    element, must fit int64 (DLPack's and the CUDA Array Interface's limit), every
    address touched must lie in the address space, and there may be at most 64
    dimensions.  ``ptr`` is the address of the new element [0, ..., 0].
    """
    if len(shape) > _MAX_NDIM:
        raise BufferError(
            f"layout: {what} would have {len(shape)} dimensions, more than {_MAX_NDIM}"
        )
    bounds = _offset_bounds(shape, strides)
    problem = None
    for stride in strides:
        if not -_INT64_LIMIT <= stride * itemsize < _INT64_LIMIT:
            problem = "a stride of"
    if problem is None and bounds is not None:
        low = bounds[0] * itemsize
        high = (bounds[1] + 1) * itemsize
        if low < -_INT64_LIMIT or high > _INT64_LIMIT:
            problem = "a byte offset in"
        elif ptr + low < 0 or ptr + high > _UINTPTR_LIMIT:
            problem = "an address in"
    if problem is not None:
        raise BufferError(
            f"layout: {problem} {what} passes int64 or the address space "
            f"(ptr {ptr:#x}, shape {shape}, strides {strides}, itemsize {itemsize})"
        )
    return 0


# --- basic indexing ----------------------------------------------------------


cdef tuple _layout_index(tuple shape, tuple strides, object key):
    """``(offset, shape, strides)`` of ``view[key]`` for a basic index, as numpy gives it.

    ``key`` is an int, a slice, Ellipsis, None or a tuple of them; anything else
    (lists, arrays, bools) is advanced indexing, a TypeError.  An empty slice
    keeps the axis' stride and does not move the pointer (numpy's rule).
    """
    cdef tuple items = key if type(key) is tuple else (key,)
    cdef Py_ssize_t ndim = len(shape), consumed = 0, ellipses = 0
    for item in items:
        if item is None:
            continue
        if item is Ellipsis:
            ellipses += 1
            continue
        if isinstance(item, slice):
            consumed += 1
            continue
        # numpy's bool scalar is numpy.bool (numpy 2) or numpy.bool_ (numpy 1); before numpy
        # 2.4 it still converts to an index (with a DeprecationWarning): refused by type.
        if isinstance(item, bool) or (
            type(item).__module__ == "numpy" and type(item).__name__ in ("bool", "bool_")
        ):
            raise TypeError(f"index: basic indexing only: ints, slices, ..., None (got {item!r})")
        try:
            PyNumber_Index(item)
        except TypeError:
            raise TypeError(
                f"index: basic indexing only: ints, slices, ..., None (got {item!r})"
            ) from None
        consumed += 1
    if ellipses > 1:
        raise IndexError(f"index: an index can hold one Ellipsis only (got {key!r})")
    if consumed > ndim:
        raise IndexError(f"index: too many indices: the view is {ndim}-d, {consumed} were indexed")
    offset = 0
    new_shape = []
    new_strides = []
    cdef Py_ssize_t axis = 0
    for item in items:
        if item is None:
            new_shape.append(1)
            new_strides.append(0)
        elif item is Ellipsis:
            for _ in range(ndim - consumed):
                new_shape.append(shape[axis])
                new_strides.append(strides[axis])
                axis += 1
        elif isinstance(item, slice):
            start, stop, step = item.indices(shape[axis])
            length = len(range(start, stop, step))
            if length:
                offset += start * strides[axis]
                new_strides.append(strides[axis] * step)
            else:
                new_strides.append(strides[axis])
            new_shape.append(length)
            axis += 1
        else:
            index = PyNumber_Index(item)
            extent = shape[axis]
            if not -extent <= index < extent:
                raise IndexError(
                    f"index: index {index} is out of bounds for axis {axis} with size {extent}"
                )
            offset += (index + extent if index < 0 else index) * strides[axis]
            axis += 1
    new_shape.extend(shape[axis:])
    new_strides.extend(strides[axis:])
    return offset, tuple(new_shape), tuple(new_strides)


# --- axes ----------------------------------------------------------------------


cdef tuple _transpose_axes(tuple axes, Py_ssize_t ndim):
    """The permutation ``transpose(*axes)`` asks for, numpy's argument forms."""
    if len(axes) == 0 or (len(axes) == 1 and axes[0] is None):
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) == 1 and not isinstance(axes[0], int) and hasattr(axes[0], "__len__"):
        axes = tuple(axes[0])
    if len(axes) != ndim:
        raise ValueError(f"transpose: axes {axes!r} do not match the view's {ndim} dimensions")
    order = tuple([_normalize_axis(axis, ndim, "transpose: axis") for axis in axes])
    if len(set(order)) != ndim:
        raise ValueError(f"transpose: axes {axes!r} repeat an axis")
    return order


cdef tuple _squeeze_axes(object axis, tuple shape):
    """The axes ``squeeze(axis)`` removes: all extent-1 axes for None, else the chosen ones."""
    cdef Py_ssize_t ndim = len(shape)
    if axis is None:
        return tuple([i for i in range(ndim) if shape[i] == 1])
    chosen = tuple(axis) if isinstance(axis, tuple) else (axis,)
    axes = tuple([_normalize_axis(a, ndim, "squeeze: axis") for a in chosen])
    if len(set(axes)) != len(axes):
        raise ValueError(f"squeeze: axis {axis!r} repeats an axis")
    for i in axes:
        if shape[i] != 1:
            raise ValueError(
                f"squeeze: axis {i} has extent {shape[i]}, not 1 (shape {shape})"
            )
    return axes


cdef tuple _shape_argument(tuple args, str what):
    """A shape given as separate ints or as one sequence (numpy's two forms), as ints."""
    if len(args) == 1 and not isinstance(args[0], int) and hasattr(args[0], "__len__"):
        args = tuple(args[0])
    return tuple([_as_int(extent, what) for extent in args])


cdef tuple _broadcast_layout(tuple shape, tuple strides, tuple new_shape):
    """Strides of ``shape`` broadcast to ``new_shape`` (numpy's rules), 0 on every broadcast axis."""
    cdef Py_ssize_t ndim = len(shape), new_ndim = len(new_shape), lead = new_ndim - ndim
    for extent in new_shape:
        if extent < 0:
            raise ValueError(f"broadcast_to: extents must be >= 0 (got {new_shape})")
    if lead < 0:
        raise ValueError(
            f"broadcast_to: shape {shape} has more dimensions than {new_shape}"
        )
    new_strides = [0] * new_ndim
    for i in range(ndim):
        extent = shape[i]
        if extent == new_shape[lead + i] and extent != 1:
            new_strides[lead + i] = strides[i]
        elif extent != 1:
            raise ValueError(f"broadcast_to: shape {shape} cannot be broadcast to {new_shape}")
    return tuple(new_strides)


# --- reshape -------------------------------------------------------------------


cdef tuple _infer_shape(tuple new_shape, object size):
    """``new_shape`` with its one -1 extent inferred from ``size`` (numpy's rules)."""
    unknown = -1
    known = 1
    for i, extent in enumerate(new_shape):
        if extent == -1 and unknown == -1:
            unknown = i
        elif extent < 0:
            raise ValueError(
                f"reshape: extents must be >= 0, with one -1 at most (got {new_shape})"
            )
        else:
            known *= extent
    if unknown >= 0:
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape {size} elements into shape {new_shape}")
        new_shape = new_shape[:unknown] + (size // known,) + new_shape[unknown + 1:]
    elif known != size:
        raise ValueError(f"reshape: cannot reshape {size} elements into shape {new_shape}")
    return new_shape


cdef tuple _dense_strides(tuple shape, bint c_order):
    """Gap-free strides, the last (``c_order``) or first axis fastest; extent 0 counts as 1."""
    strides = [0] * len(shape)
    step = 1
    axes = range(len(shape) - 1, -1, -1) if c_order else range(len(shape))
    for i in axes:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


cdef object _reshape_strides(tuple shape, tuple strides, tuple new_shape, bint c_order):
    """Strides giving ``new_shape`` over the same elements in the same (C or F) order, or None.

    numpy's no-copy rule: axes of extent 1 are dropped; the old and new extents
    are walked from the first axis in groups of equal products, and the old axes
    of a group must be contiguous with one another in the order asked for; each
    new group then takes the stride of its fastest old axis.  A view already
    contiguous in the order asked for gets fresh dense strides, as numpy gives
    it.
    """
    size = _element_count(shape)
    if _is_contiguous(shape, strides, 1 if size else 0, reversed_axes=c_order):
        return _dense_strides(new_shape, c_order)
    old = [(e, s) for e, s in zip(shape, strides) if e != 1]
    cdef Py_ssize_t old_ndim = len(old), new_ndim = len(new_shape)
    cdef Py_ssize_t oi = 0, oj = 1, ni = 0, nj = 1, k
    new_strides = [0] * new_ndim
    while ni < new_ndim and oi < old_ndim:
        # Grow the group [oi, oj) of old axes and [ni, nj) of new ones to equal products.
        old_product = old[oi][0]
        new_product = new_shape[ni]
        while new_product != old_product:
            if new_product < old_product:
                new_product *= new_shape[nj]
                nj += 1
            else:
                old_product *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if c_order:
                joined = old[k][1] == old[k + 1][0] * old[k + 1][1]
            else:
                joined = old[k + 1][1] == old[k][0] * old[k][1]
            if not joined:
                return None
        if c_order:
            new_strides[nj - 1] = old[oj - 1][1]
            for k in range(nj - 1, ni, -1):
                new_strides[k - 1] = new_strides[k] * new_shape[k]
        else:
            new_strides[ni] = old[oi][1]
            for k in range(ni + 1, nj):
                new_strides[k] = new_strides[k - 1] * new_shape[k - 1]
        ni = nj
        nj += 1
        oi = oj
        oj += 1
    # Trailing new extent-1 axes: the stride of the last axis set (times its extent in F order).
    last = new_strides[ni - 1] if ni >= 1 else 1
    if not c_order and ni >= 1:
        last *= new_shape[ni - 1]
    for k in range(ni, new_ndim):
        new_strides[k] = last
    return tuple(new_strides)


# --- reinterpreting the bytes -----------------------------------------------------


cdef tuple _retyped_layout(tuple shape, tuple strides, Py_ssize_t itemsize, Py_ssize_t new_itemsize):
    """``(shape, strides)`` of the same bytes seen with ``new_itemsize`` (numpy's ``view(dtype)``).

    With a different item size the last axis must be contiguous (unless its
    extent is 1 or the view is empty) and its extent scales; the other byte
    strides are kept, and must be multiples of the new item size to be counted
    in elements (an extent-1 axis, or any axis of an empty view, whose stride is
    not gets stride 0, where no stride is ever followed).
    """
    cdef Py_ssize_t ndim = len(shape), last = ndim - 1
    if new_itemsize == itemsize:
        return shape, strides
    if ndim == 0:
        raise BufferError(
            f"view: a 0-d view keeps its item size ({itemsize} bytes, not {new_itemsize})"
        )
    size = _element_count(shape)
    if shape[last] != 1 and size != 0 and strides[last] != 1:
        raise BufferError(
            f"view: the last axis must be contiguous to change the item size from {itemsize} "
            f"to {new_itemsize} (shape {shape}, strides {strides})"
        )
    last_bytes = shape[last] * itemsize
    if last_bytes % new_itemsize:
        raise BufferError(
            f"view: the last axis holds {last_bytes} bytes, not a multiple of the new item "
            f"size {new_itemsize} (shape {shape})"
        )
    new_shape = shape[:last] + (last_bytes // new_itemsize,)
    new_strides = []
    for i in range(last):
        byte_stride = strides[i] * itemsize
        if byte_stride % new_itemsize == 0:
            new_strides.append(byte_stride // new_itemsize)
        elif shape[i] == 1 or size == 0:
            new_strides.append(0)
        else:
            raise BufferError(
                f"view: stride {byte_stride} bytes of axis {i} is not a multiple of the new "
                f"item size {new_itemsize} (strides in elements are impossible)"
            )
    new_strides.append(1)
    return new_shape, tuple(new_strides)


cdef tuple _layout_of(object layout):
    """``(shape, strides, itemsize, slice_offset)`` of a layout object.

    Any object with ``shape``, ``strides`` (in elements, or None for C order) and
    ``itemsize``, and optionally ``slice_offset`` (elements), as cuda.core's
    ``_StridedLayout`` has them.
    """
    try:
        raw_shape = layout.shape
        raw_strides = layout.strides
        raw_itemsize = layout.itemsize
    except AttributeError:
        hint = ""
        if (isinstance(layout, int) and not isinstance(layout, bool)) or hasattr(
            layout, "__cuda_stream__"
        ):
            # smv.view(stream.ptr): the launcher's ViewableArgument.view(stream_ptr) in mind.
            hint = (
                ": a stream? StridedMemoryView.view(layout=None, dtype=None) takes none "
                "(a view is ordered when it is made); ViewableArgument.view(stream_ptr), "
                "a launcher's argument, is the one that takes a stream"
            )
        raise TypeError(
            "view: layout must have shape, strides and itemsize, like cuda.core's "
            f"_StridedLayout (got {_quote(layout)}){hint}"
        ) from None
    shape = tuple([_as_int(e, "view: layout extent") for e in raw_shape])
    itemsize = _as_int(raw_itemsize, "view: layout itemsize")
    if any(e < 0 for e in shape) or itemsize <= 0:
        raise ValueError(
            f"view: layout extents must be >= 0 and itemsize > 0 (got shape {shape}, "
            f"itemsize {itemsize})"
        )
    if raw_strides is None:
        strides = _dense_strides(shape, True)
    else:
        strides = tuple([_as_int(s, "view: layout stride") for s in raw_strides])
        if len(strides) != len(shape):
            raise ValueError(
                f"view: layout strides {strides} and shape {shape} differ in length"
            )
    offset = _as_int(getattr(layout, "slice_offset", 0), "view: layout slice_offset")
    return shape, strides, itemsize, offset


# --- facts ---------------------------------------------------------------------------


cdef bint _is_dense(tuple shape, tuple strides):
    """Whether the elements fill exactly offsets ``0 .. size - 1``, one each, in some axis order.

    Axes of extent 1 are ignored and an empty layout is dense (cuda.core's
    ``is_dense`` for a view whose element [0, ..., 0] is its lowest).
    """
    if any(e == 0 for e in shape):
        return True
    expected = 1
    for stride, extent in sorted([(s, e) for e, s in zip(shape, strides) if e != 1]):
        if stride != expected:
            return False
        expected *= extent
    return True


# Past this many elements an undecided layout is reported as overlapping.
cdef object _OVERLAP_EXACT_LIMIT = 1 << 16


cdef bint _has_overlap(tuple shape, tuple strides):
    """Whether two distinct indices address the same element (conservative past a limit).

    Exact answers: an empty or single-element layout never overlaps; a stride 0
    on an axis of extent > 1, or two such axes with strides of equal magnitude,
    always do; if, with the axes sorted by stride magnitude, each stride passes
    the farthest offset of the faster axes, none do.  Otherwise the distinct
    offsets are counted when there are at most 2**16 elements; past that the
    answer is True ("may overlap").
    """
    if any(e == 0 for e in shape):
        return False
    axes = sorted([(abs(s), e) for e, s in zip(shape, strides) if e != 1])
    reach = 0
    separated = True
    previous = -1
    for stride, extent in axes:
        if stride == previous or stride == 0:
            return True
        if stride <= reach:
            separated = False
        reach += stride * (extent - 1)
        previous = stride
    if separated:
        return False
    count = _element_count(shape)
    if count > _OVERLAP_EXACT_LIMIT:
        return True
    offsets = {0}
    for stride, extent in axes:
        offsets = {o + i * stride for o in offsets for i in range(extent)}
    return len(offsets) != count


# --- derived views ---------------------------------------------------------------------


cdef object _view_dtype(object dtype):
    """``dtype`` as a numpy dtype a view may take: native-endian, no objects, no subarray, size > 0."""
    import numpy

    result = numpy.dtype(dtype)
    if (
        result.hasobject
        or result.subdtype is not None
        or result.itemsize == 0
        or not result.isnative
    ):
        raise TypeError(
            "view: dtype must be native-endian with a size > 0, no subarray and no Python "
            f"objects (got {result!r})"
        )
    return result


cdef StridedMemoryView _relaid(
    StridedMemoryView base, object byte_offset, tuple shape, tuple strides, object dtype, str what
):
    """A view of ``base``'s memory with a new layout (and dtype, unless None), checked.

    ``byte_offset`` moves element [0, ..., 0]; an empty result addresses nothing, so
    its pointer stays ``base``'s where the offset would leave the address space.
    Made by _derive: same memory owner, device, readiness and read-only flag.
    """
    size = _element_count(shape)
    if dtype is None and base.dtype is None:
        # Packed sub-byte elements stay row-major and gap-free; their bytes are
        # checked as if each took one (more than they do).
        _check_packed_layout("layout", base._dl_dtype, shape, strides, size)
        itemsize = 1
    else:
        itemsize = (base.dtype if dtype is None else dtype).itemsize
    ptr = base._ptr + byte_offset
    if size == 0 and not 0 <= ptr < _UINTPTR_LIMIT:
        ptr = base._ptr
    if size >= _INT64_LIMIT:
        raise BufferError(
            f"layout: {what} would have {size} elements, more than int64 holds (shape {shape})"
        )
    _check_layout(shape, strides, itemsize, ptr, what)
    # numpy's rule, as every view keeps it: size * itemsize fits too (a broadcast
    # layout of few bytes may hold more elements than int64 bytes' worth).
    if size * itemsize >= _INT64_LIMIT:
        raise BufferError(
            f"layout: {what} would have nbytes {size * itemsize}, more than int64 holds "
            f"(shape {shape}, strides {strides}, itemsize {itemsize})"
        )
    cdef StridedMemoryView view = _derive(base)
    view._ptr = ptr
    view.ptr = ptr
    view.shape = shape
    view.strides = _empty_view_strides(len(shape)) if size == 0 else strides
    view._size = size
    if dtype is not None:
        view.dtype = dtype
    _store_c_layout(view)  # the C-level API reads the new layout
    return view


cdef object _whole_byte_itemsize(StridedMemoryView view, str what):
    """``view.dtype.itemsize``, or BufferError naming ``what`` for packed sub-byte elements."""
    if view.dtype is None:
        raise BufferError(
            f"{what}: {_dtype_shown(view)} has no whole-byte item size (several "
            "elements share a byte)"
        )
    return view.dtype.itemsize


cdef object _byte_offset_of(
    StridedMemoryView view, object offset, str what, tuple shape, tuple strides
):
    """The byte offset of element ``offset`` (counted in elements from element 0), for
    a derived view of ``shape`` and ``strides``.  Packed sub-byte elements: the layout
    must stay row-major and gap-free, and the element must start a byte."""
    if view.dtype is not None:
        return offset * view.dtype.itemsize
    size = _element_count(shape)
    _check_packed_layout("layout", view._dl_dtype, shape, strides, size)
    bits = offset * view.itemsize_bits
    if size != 0 and bits % 8:
        raise BufferError(
            f"layout: {what} would start at element {offset} of {_dtype_shown(view)}, "
            f"bit {bits % 8} of a byte: a view starts on a byte"
        )
    return bits // 8 if size != 0 else 0


cdef object _dtype_of_dlpack_type(object dl_type):
    """The dtype a view of the DLPackDType ``dl_type`` has (None: packed sub-byte), or
    BufferError for a type no view takes (checked as a DLPack producer's)."""
    cdef DLDataType c_type
    cdef int64_t itemsize
    code, bits, lanes = dl_type
    if not (0 <= code < 256 and 0 <= bits < 256 and 0 <= lanes < 65536):
        raise ValueError(f"view: {dl_type!r} is out of DLPack's ranges (code and bits < 256, lanes < 65536)")
    c_type.code = code
    c_type.bits = bits
    c_type.lanes = lanes
    return _dtype_and_itemsize(c_type, 0, &itemsize)


cdef object _view_by_bits(StridedMemoryView base, object layout, object new_dtype, object dl_type):
    """``base.view(dtype=...)`` where either side is packed sub-byte elements (the
    dtype None, ``dl_type`` the DLPackDType), counted in bits.

    Both must be row-major and gap-free (a packed view always is): the last axis
    holds ``extent * bits`` bits, a whole number of new elements; the strides are
    the new shape's row-major ones.  ``view(layout=...)`` counts bytes: refused.
    """
    if layout is not None:
        raise BufferError(
            f"view: a layout counts whole bytes, and {_dtype_shown(base)} or the new "
            "dtype has none per element: change the dtype alone"
        )
    old_bits = base.itemsize_bits
    new_bits = dl_type.bits * dl_type.lanes if new_dtype is None else new_dtype.itemsize * 8
    shape = base.shape
    size = base._size
    if size != 0 and not _is_contiguous(shape, base.strides, size, reversed_axes=True):
        raise BufferError(
            f"view: seeing {_dtype_shown(base)} as another type of a different bit size "
            f"needs a row-major, gap-free view (got shape {shape}, strides {base.strides})"
        )
    if new_bits != old_bits:
        if not shape:
            raise BufferError(
                f"view: a 0-d view keeps its element size ({old_bits} bits, not {new_bits})"
            )
        last_bits = shape[-1] * old_bits
        if last_bits % new_bits:
            raise BufferError(
                f"view: the last axis holds {last_bits} bits, not a multiple of the new "
                f"element's {new_bits} bits (shape {shape})"
            )
        shape = shape[:-1] + (last_bits // new_bits,)
    cdef StridedMemoryView view = _derive(base)
    view.shape = shape
    view.strides = _dense_strides(shape, True) if size else _empty_view_strides(len(shape))
    view._size = _element_count(shape)
    view.dtype = new_dtype
    if new_dtype is None:
        view._dl_dtype.code = dl_type.code
        view._dl_dtype.bits = dl_type.bits
        view._dl_dtype.lanes = dl_type.lanes
    _store_c_layout(view)
    return view


cdef object _view_with_layout(StridedMemoryView base, object layout, object dtype):
    """``base.view(layout, dtype)``: the layout applied at ``base``'s element [0, ..., 0].

    The layout's elements must lie within the bytes ``base`` spans (its byte_bounds),
    so that a view never reaches past the memory it was made from.
    """
    shape, strides, itemsize, slice_offset = _layout_of(layout)
    if dtype is None:
        dtype = base.dtype
    if itemsize != dtype.itemsize:
        raise ValueError(
            f"view: layout itemsize {itemsize} differs from the item size of {dtype} "
            f"({dtype.itemsize})"
        )
    wanted = _offset_bounds(shape, strides)
    if wanted is not None:
        own = _offset_bounds(base.shape, base.strides)
        base_itemsize = base.dtype.itemsize
        low = (slice_offset + wanted[0]) * itemsize
        high = (slice_offset + wanted[1] + 1) * itemsize
        if own is None or low < own[0] * base_itemsize or high > (own[1] + 1) * base_itemsize:
            raise BufferError(
                f"view: layout (shape {shape}, strides {strides}, itemsize {itemsize}, "
                f"slice_offset {slice_offset}) reaches outside the view's bytes "
                f"(shape {base.shape}, strides {base.strides}, itemsize {base_itemsize})"
            )
    return _relaid(base, slice_offset * itemsize, shape, strides, dtype, "view")
