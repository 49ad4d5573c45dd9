# A torch tensor read through torch's stable C ABI straight into the view.
#
# Once _torch_bits.pxi has proven the stable ABI's getters against torch's exchange
# API (_stable_layout_ready), a tensor's layout is read through them into the
# view's own fields: the extents and strides into its C arrays, the tuples made
# from those, no DLTensor in between.  It gives exactly the view the exchange API's
# DLTensor gives through _fill_from_dltensor, and checks what that fill checks;
# anything it would refuse, and anything this reader does not map (a layout other
# than strided, a dtype or device it does not know, more than _INLINE_DIMS
# dimensions), is declined (1), so that the general path reads the tensor again
# and raises its own error.
#
# Invariants: the caller has checked the tensor's negative and conjugate bits
# (_check_torch_bits), found no instance-level __dlpack__, and holds a reference
# to the tensor; nothing between the first getter and the last field copied runs
# Python code, so the pointers the getters lend (extents, strides) stay valid
# while they are read.  Proven equal to the general path by
# tests/test_torch_layout.py (every layout, dtype and origin, and random strided
# tensors, read both ways) and switched off with _set_torch_layout_stable_enabled.
#
# The memo.  A launch loop views the same tensors launch after launch, and a
# launcher's proxy keeps its view, emptied, for the next launch's same argument
# (_launcher.pxi).  When this reader filled that view completely
# (_reader_filled), the emptying (SV_VIEW_EMPTY) keeps the layout's address,
# size and DLPack type in the inline arrays' last three slots (free up to 6
# dimensions) beside its extents and strides, and its ndim in _memo_ndim1; the
# ptr, shape, strides and dtype objects made from that layout stay in the view,
# as every emptied view's do.  The next fill from a tensor of exactly that
# layout (address, type, ndim, every extent and stride) keeps those objects and
# sets the C fields again (_view_from_memo): everything this reader checks and
# makes is a function of those inputs alone, and they passed last time.
# Invariants: _reader_filled is zeroed by every emptying and set only by this
# reader, which writes the view's whole layout, its objects included, and
# nothing writes a layout after it in the same fill; so a memo exists only for
# a view whose objects and C layout are this reader's output.  The memo is read
# (and cleared) by this reader before it writes anything of the view, so a
# second attempt in the same fill cannot read a layout half overwritten by the
# first.  Nothing else fills a parked view but its proxy, and
# _fill_parked_view (a test hook) clears the memo first.  Proven equal to a
# new view's fill by tests/test_torch_layout.py (launch loops passing each
# argument between near layouts: the same address with another shape, strides
# or dtype, the same layout elsewhere, ranks past the memo's, empty tensors,
# other producers), and off wherever this reader is off.


cdef int _view_from_torch(StridedMemoryView view, object tensor) except -1:
    """Fill ``view``'s layout, dtype and device from the torch tensor ``tensor`` through
    the stable ABI; 1 (the view's fields partly written, as a fresh view's may be)
    when the general path must read it.  Streams and ``exporting_obj`` are the
    caller's."""
    cdef DLTensor lent  # its arrays are torch's, read before any Python code runs
    if _fill_torch_layout(_tensor_cdata(tensor), &lent) != 0:
        return 1
    return _view_from_lent_torch_layout(view, &lent)


cdef inline int _view_from_plain_torch(StridedMemoryView view, object tensor) except -1:
    """The whole view of a plain CPU torch tensor, for _view_from_dlpack: its bits and
    layout from its TensorImpl's fields (_torch_bits.pxi), the producer kept; 1 (the
    view's fields partly written) where the general path must read it.

    Invariants (besides _view_from_torch's): the caller has seen the calibration
    state "direct" and then _torch_lean_ready (the bits' C reads, the stable ABI and
    the fields reader all proven and allowed), and that the tensor's producer type
    allows the direct reads of the bits and the layout.  No
    TorchFunctionMode is active in the thread (else the general path asks the
    methods, which a mode may answer), and the instance has no __dlpack__ of its own.
    The key sets the fields reader accepts hold neither the negative nor the
    conjugate key, which is all ``is_neg()``/``is_conj()`` read (TensorImpl.h; the
    calibration checks both C readers say False on them): so the bits check is made
    by the fields read itself.  The fields reader reads CPU tensors only: no stream
    to order."""
    cdef DLTensor lent
    # In the general path's order: the instance's own __dlpack__ looked for (which may
    # run Python: a key's __eq__), then the mode, then the bits with the layout, with
    # no Python code from the mode check to the last field copied.
    if _instance_overrides_dlpack(tensor) or _torch_mode_active():
        return 1
    if (
        _fill_by_torch_fields(_tensor_cdata(tensor), &lent) != 0
        or _view_from_lent_torch_layout(view, &lent) != 0
    ):
        return 1
    view.exporting_obj = tensor
    if view.ready_stream is not None:  # host memory (a view starts with None)
        view.ready_stream = None
    return 0


cdef inline uint32_t _dl_dtype_bits(DLDataType dtype) noexcept:
    """A DLPack type's three fields as one number, for a compare."""
    return dtype.code | <uint32_t>dtype.bits << 8 | <uint32_t>dtype.lanes << 16


cdef inline void _store_lent_device(StridedMemoryView view, DLTensor *lent) noexcept:
    view._device_type = lent.device.device_type
    if lent.device.device_type == kDLCPU:
        view._device_id = -1
        view.is_device_accessible = False
    else:
        view._device_id = lent.device.device_id
        view.is_device_accessible = True


cdef inline bint _view_from_memo(StridedMemoryView view, DLTensor *lent) noexcept:
    """Whether ``lent`` is the layout this reader last wrote into ``view`` (a launcher's
    kept view, emptied since: SV_VIEW_EMPTY kept that layout's extents and strides,
    address, size and type in its inline arrays, and the ptr, shape, strides and
    dtype objects made from them): its C fields then set again, the objects kept.
    The memo is used once, whatever the answer."""
    cdef int32_t i, count = lent.ndim
    cdef int64_t *dims = view._inline_dims
    cdef DLDataType memo_dtype
    memcpy(&memo_dtype, &dims[SV_MEMO_DTYPE_SLOT], sizeof(DLDataType))
    cdef bint same = (
        view._memo_ndim1 == count + 1
        and <uintptr_t>dims[SV_MEMO_PTR_SLOT] == <uintptr_t>lent.data
        and _dl_dtype_bits(memo_dtype) == _dl_dtype_bits(lent.dtype)
    )
    view._memo_ndim1 = 0
    if not same:
        return False
    for i in range(count):
        if dims[i] != lent.shape[i] or dims[count + i] != lent.strides[i]:
            return False
    view._ptr = <uintptr_t>lent.data
    view._dims = dims
    view._ndim = count
    view._itemsize = lent.dtype.bits >> 3
    view._size = dims[SV_MEMO_SIZE_SLOT]
    view._dl_dtype = lent.dtype
    view.readonly = False
    _store_lent_device(view, lent)
    view._reader_filled = True
    return True


cdef inline int _view_from_lent_torch_layout(StridedMemoryView view, DLTensor *lent) except -1:
    """_view_from_torch once torch has lent ``lent``: its checks and the view's fields."""
    if (
        lent.dtype.bits < 8  # every torch dtype mapped is whole bytes
        or lent.dtype.lanes != 1  # vectors (float4_e2m1fn_x2 pairs): the general path's
        or (lent.device.device_type == kDLCUDA and lent.device.device_id < 0)
        or lent.ndim > _INLINE_DIMS
        or (lent.ndim > 0 and (lent.shape == NULL or lent.strides == NULL))
    ):
        return 1
    if view._memo_ndim1 != 0 and _view_from_memo(view, lent):
        return 0

    # _fill_from_dltensor's checks, on the lent arrays as they are copied.
    cdef int32_t i, count = lent.ndim
    cdef int64_t *dims = _c_dims_storage(view, count)
    cdef int64_t extent
    cdef int64_t size = 1
    cdef bint empty = False
    cdef bint overflow = False
    for i in range(count):
        extent = lent.shape[i]
        dims[i] = extent
        dims[count + i] = lent.strides[i]
        if extent <= 0:
            if extent < 0:
                return 1
            empty = True
        elif not overflow:
            overflow = sv_mul_i64(size, extent, &size)
    if empty:
        size = 0
        for i in range(count):  # an empty view's strides are 0 (_empty_view_strides)
            dims[count + i] = 0
    elif overflow:
        return 1  # the element count passes int64
    cdef int64_t itemsize = lent.dtype.bits >> 3  # whole bytes (checked above)
    cdef int64_t nbytes
    if (size > 0 and lent.data == NULL) or sv_mul_i64(size, itemsize, &nbytes):
        return 1
    # Row-major strides (those of extent-1 axes never step) address elements 0 to
    # size - 1 only, all within the nbytes just checked: _byte_offsets_fit's answer
    # is then True, so it is asked of other layouts only (an expanded tensor can
    # hold more than int64 bytes' worth of elements).  The running product is at
    # most size, which fits.
    cdef int64_t step = 1
    i = count - 1
    while i >= 0 and (dims[i] == 1 or dims[count + i] == step):
        step *= dims[i]
        i -= 1
    if i >= 0 and not _byte_offsets_fit(count, dims, dims + count, size, itemsize):
        return 1

    view._ptr = <uintptr_t>lent.data
    view.ptr = _address_int(view._ptr)
    view.shape = _int64_tuple(dims, count)
    view.strides = _int64_tuple(dims + count, count)
    view.dtype = _dtype_from_dlpack(lent.dtype, 0)
    view._dl_dtype = lent.dtype
    view._itemsize = itemsize
    view._size = size
    view.readonly = False  # the exchange API's DLTensor carries no READ_ONLY flag
    _store_lent_device(view, lent)
    view._reader_filled = True
    return 0


def _view_from_torch_alone(tensor):
    """``_view_from_torch`` on a new view, with nothing around it (no bits check, no
    streams): the view, or None where it leaves the tensor to the general path (or
    the stable-ABI reader is not proven); for tests."""
    if _bits_state() == _BITS_UNCALIBRATED:
        _calibrate_torch_bits()
    cdef StridedMemoryView view = _new_view()
    if not _stable_layout_ready or _view_from_torch(view, tensor) != 0:
        return None
    view.exporting_obj = tensor
    return view


def _reader_memo(StridedMemoryView view):
    """The ndim of the layout ``view``'s memo holds (set when a launcher emptied the
    view after the torch reader filled it), or None; for tests."""
    return view._memo_ndim1 - 1 if view._memo_ndim1 != 0 else None
