# numpy.ndarray -> the view's fields, read from the array's own layout: no
# __dlpack__ call, no capsule, no allocation beyond the view.
#
# The adapter fills a DLTensor exactly as numpy's ``__dlpack__(max_version=(1, x))``
# would and hands it to the one DLTensor filler the capsule path uses, so the view
# is the general path's view by construction.  It takes only what numpy exports
# without a question; anything else (a dtype numpy refuses or maps through its
# registry, swapped byte order, strides numpy refuses, memory numpy imported from
# another device, a subclass instance carrying its own DLPack methods) is declined,
# and the general path then asks numpy and answers (or refuses) as numpy does.
# Arrays of ml_dtypes' types (bfloat16, the float8/6/4 kinds, int1/2/4, uint1/2/4,
# complex32, bcomplex32) are the exception: numpy's ``__dlpack__`` refuses every
# user-defined type, so the adapter is their one DLPack route, with the fast
# paths on or off (ml_dtypes' numpy type numbers -> DLPack types, _ml_dtype).
#
# Only the array struct's fields are read (the layout numpy's headers give, stable
# across numpy 1.x and 2.x): numpy's C API table is never imported, so importing
# stridedview still imports no numpy.

cdef extern from *:
    """
    #include "numpy/ndarraytypes.h"
    """
    ctypedef Py_ssize_t npy_intp

    ctypedef struct PyArray_Descr:
        char byteorder
        int type_num

    ctypedef struct PyArrayObject:
        pass

    int PyArray_NDIM(PyArrayObject *)
    void *PyArray_DATA(PyArrayObject *)
    npy_intp *PyArray_DIMS(PyArrayObject *)
    npy_intp *PyArray_STRIDES(PyArrayObject *)
    PyObject *PyArray_BASE(PyArrayObject *)
    PyArray_Descr *PyArray_DESCR(PyArrayObject *)
    int PyArray_FLAGS(PyArrayObject *)
    bint PyArray_ISNBO(char byteorder)

    enum:
        NPY_USERDEF
        NPY_ARRAY_C_CONTIGUOUS
        NPY_ARRAY_WRITEABLE
        NPY_BOOL, NPY_BYTE, NPY_UBYTE, NPY_SHORT, NPY_USHORT, NPY_INT, NPY_UINT
        NPY_LONG, NPY_ULONG, NPY_LONGLONG, NPY_ULONGLONG
        NPY_HALF, NPY_FLOAT, NPY_DOUBLE, NPY_CFLOAT, NPY_CDOUBLE
        NPY_SIZEOF_SHORT, NPY_SIZEOF_INT, NPY_SIZEOF_LONG, NPY_SIZEOF_LONGLONG

cdef extern from "Python.h":
    bint PyObject_TypeCheck(object, type)
    bint PyCapsule_CheckExact_ptr "PyCapsule_CheckExact"(PyObject *)

# numpy.ndarray, looked up on the first numpy view and published once
# (_thread_state.pxi's _publish_once; a borrowed pointer after that).
cdef PyObject *_ndarray_type = NULL
# numpy 1.x exports legacy capsules only (no READ_ONLY flag, read-only arrays
# refused): the adapter mirrors numpy 2's versioned export, and stands aside there.
# The adapter gives the array's own strides, as numpy 2.4 and later export them; numpy
# 2.0 to 2.3 export contiguous strides instead for axes of extent 1 and for empty arrays
# (numpy 2.2 and 2.3 measured): strides that address no other element, so the view
# is the same memory either way, and the same on every numpy 2.
# 0: not looked up yet, 1: numpy 1.x (the adapter stands aside), 2: numpy 2.x.  Set
# after _ndarray_type is published, with a release store, and read with an acquire
# load without the GIL: a thread that sees it set sees the type too.  Threads racing
# on the first numpy view each look both up and store the same answers.
cdef int _numpy_export_kind = 0

cdef int _look_up_numpy() except -1:
    """Publish numpy.ndarray and numpy's export kind (the first numpy view's work)."""
    numpy = _sys.modules["numpy"]
    _publish_once(&_ndarray_type, numpy.ndarray)
    kind = 2 if int(numpy.__version__.split(".")[0]) >= 2 else 1
    _store_int_release(&_numpy_export_kind, kind)
    return kind



cdef inline bint _numpy_dtype(int type_num, DLDataType *dl_dtype) noexcept:
    """The DLPack type numpy exports for a built-in ``type_num``; False for any other.

    longdouble, clongdouble, and every non-numeric or user type are left to
    numpy's own ``__dlpack__`` (it refuses them, or maps them through its registry).
    """
    cdef uint8_t code, size
    if type_num == NPY_BOOL:
        code, size = kDLBool, 1
    elif type_num == NPY_BYTE:
        code, size = kDLInt, 1
    elif type_num == NPY_UBYTE:
        code, size = kDLUInt, 1
    elif type_num == NPY_SHORT:
        code, size = kDLInt, NPY_SIZEOF_SHORT
    elif type_num == NPY_USHORT:
        code, size = kDLUInt, NPY_SIZEOF_SHORT
    elif type_num == NPY_INT:
        code, size = kDLInt, NPY_SIZEOF_INT
    elif type_num == NPY_UINT:
        code, size = kDLUInt, NPY_SIZEOF_INT
    elif type_num == NPY_LONG:
        code, size = kDLInt, NPY_SIZEOF_LONG
    elif type_num == NPY_ULONG:
        code, size = kDLUInt, NPY_SIZEOF_LONG
    elif type_num == NPY_LONGLONG:
        code, size = kDLInt, NPY_SIZEOF_LONGLONG
    elif type_num == NPY_ULONGLONG:
        code, size = kDLUInt, NPY_SIZEOF_LONGLONG
    elif type_num == NPY_HALF:
        code, size = kDLFloat, 2
    elif type_num == NPY_FLOAT:
        code, size = kDLFloat, 4
    elif type_num == NPY_DOUBLE:
        code, size = kDLFloat, 8
    elif type_num == NPY_CFLOAT:
        code, size = kDLComplex, 8
    elif type_num == NPY_CDOUBLE:
        code, size = kDLComplex, 16
    else:
        return False
    dl_dtype.code = code
    dl_dtype.bits = size * 8
    dl_dtype.lanes = 1
    return True


# numpy type number of each ml_dtypes type -> its DLPack type packed as
# code | bits << 8; built on the first numpy array of a user-defined type seen once
# ml_dtypes is imported, and published once.
cdef PyObject *_ml_dtypes_by_type_num = NULL


cdef uint32_t _ml_dtype(int type_num) except? 0:
    """ml_dtypes' numpy type ``type_num`` as its DLPack type packed as code | bits << 8
    (one lane); 0 for any other type.

    numpy's ``__dlpack__`` refuses every user-defined type, so these arrays are
    read only here.  ml_dtypes registers its types with numpy when imported: a user
    type seen while it is not imported is not one of them.  Out of line
    (setup.py's NEVER_INLINE), taking and giving values only: the adapter's locals
    stay in registers.
    """
    cdef PyObject *table = _load_published(&_ml_dtypes_by_type_num)
    if table == NULL:
        ml_dtypes = _sys.modules.get("ml_dtypes")
        if ml_dtypes is None:
            return 0
        import numpy
        built = {}
        for code, (_, by_bits) in _DLPACK_DTYPES.items():
            for bits, name in by_bits.items():
                scalar_type = getattr(ml_dtypes, name, None)
                if name in _NUMPY_DTYPE_NAMES or scalar_type is None:
                    continue
                built[numpy.dtype(scalar_type).num] = code | bits << 8
        table = _publish_once(&_ml_dtypes_by_type_num, built)
    return (<dict>table).get(type_num, 0)


cdef inline bint _is_user_type_array(object obj) noexcept:
    """Whether ``obj``, a numpy array, holds elements of a user-defined numpy type
    (ml_dtypes'), which only the adapter reads (numpy's __dlpack__ refuses them)."""
    return PyArray_DESCR(<PyArrayObject *>obj).type_num >= NPY_USERDEF


# log2 of each item size the adapter takes (1, 2, 4, 8, 16 bytes).
cdef int[17] _LOG2_ITEMSIZE = [0, 0, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4]

cdef enum:
    _NUMPY_MAX_NDIM = 64  # numpy 2's limit (numpy 1's is 32)


@cython.cdivision(True)  # numpy divides strides in C, truncating
cdef bint _view_from_numpy(StridedMemoryView view, object obj) except -1:
    """Fill ``view`` from the numpy array ``obj`` directly; False if it must be asked.

    ``obj`` is an ndarray (or a subclass keeping ndarray's DLPack methods).  The
    view is exactly the one numpy's versioned capsule gives: device -1 (host),
    strides in elements (numpy's byte strides divided by the item size), readonly
    from the array's WRITEABLE flag, ``exporting_obj`` the array, no capsule.
    """
    cdef int kind = _load_int_acquire(&_numpy_export_kind)
    if kind == 0:
        kind = _look_up_numpy()
    if kind != 2:
        return False
    cdef PyArrayObject *array = <PyArrayObject *>obj
    cdef PyArray_Descr *descr = PyArray_DESCR(array)
    cdef DLDataType dl_dtype
    cdef uint32_t ml_dtype
    cdef npy_intp itemsize
    if not PyArray_ISNBO(descr.byteorder):
        return False
    if _numpy_dtype(descr.type_num, &dl_dtype):
        itemsize = dl_dtype.bits >> 3
    else:
        if descr.type_num < NPY_USERDEF:
            return False
        ml_dtype = _ml_dtype(descr.type_num)
        if ml_dtype == 0:
            return False
        dl_dtype.code = <uint8_t>(ml_dtype & 0xFF)
        dl_dtype.bits = <uint8_t>(ml_dtype >> 8)
        dl_dtype.lanes = 1
        # ml_dtypes' sub-byte types take a byte each (padded).
        itemsize = (dl_dtype.bits + 7) >> 3
    # numpy reports the device of memory it imported through DLPack (the capsule
    # at the end of the base chain): only the general path asks it.
    cdef PyObject *base = PyArray_BASE(array)
    cdef PyObject *ndarray_type = _load_published(&_ndarray_type)
    while base != NULL and PyObject_TypeCheck(<object>base, <type>ndarray_type):
        base = PyArray_BASE(<PyArrayObject *>base)
    if base != NULL and PyCapsule_CheckExact_ptr(base):
        return False
    # The general path calls the methods as Python looks them up, instance
    # attributes first: a subclass instance carrying its own must be asked.
    if _instance_overrides_dlpack(obj):
        return False

    cdef int ndim = PyArray_NDIM(array)
    if ndim > _NUMPY_MAX_NDIM:
        return False
    cdef npy_intp *extents = PyArray_DIMS(array)
    cdef npy_intp *byte_strides = PyArray_STRIDES(array)
    # Every item size taken is a power of two: an exact stride divides by a
    # shift, far cheaper than a division; only an unchecked inexact one divides.
    cdef npy_intp inexact_bits = itemsize - 1
    cdef int shift = _LOG2_ITEMSIZE[itemsize]
    # The layout goes straight into the view's C arrays (the C-level API's), and
    # the tuples are made from them: one pass, no DLTensor in between.  What the
    # capsule path would check is checked here too; anything it would refuse is
    # declined, so that the general path raises its own error.
    cdef int64_t *shape = _c_dims_storage(view, ndim)
    cdef int64_t *element_strides = shape + ndim
    cdef int64_t size
    cdef bint empty = False
    cdef bint overflow = False
    cdef int i
    # numpy's own rule: strides of extent-1 axes are not checked, nor are any of
    # a C-contiguous or one-element array; a stride it would refuse is declined.
    cdef bint c_contiguous = (PyArray_FLAGS(array) & NPY_ARRAY_C_CONTIGUOUS) != 0
    # nbytes, the extents' product times the item size, in one checked chain: numpy
    # keeps it within npy_intp ("array is too big"), and so the element count too;
    # checked all the same, for a product's cost (an overflow flag or'ed in).
    cdef int64_t nbytes = itemsize
    for i in range(ndim):
        shape[i] = extents[i]
        if extents[i] == 0:
            empty = True
        elif not empty:
            overflow |= sv_mul_i64(nbytes, extents[i], &nbytes)
    if empty:
        size = 0
    elif overflow:
        return False
    else:
        size = nbytes >> shift
    cdef bint check = not c_contiguous and size != 1
    for i in range(ndim):
        if byte_strides[i] & inexact_bits == 0:
            element_strides[i] = byte_strides[i] >> shift
        elif check and extents[i] != 1:
            return False
        else:
            element_strides[i] = byte_strides[i] // itemsize
    if size == 0:  # an empty view's strides are 0 (_empty_view_strides)
        for i in range(ndim):
            element_strides[i] = 0
    cdef void *data = PyArray_DATA(array)
    if size > 0 and data == NULL:
        return False
    # A C-contiguous array's elements lie within its nbytes of element 0 (numpy
    # ignores only the strides of extent-1 axes, which never step), and nbytes fits
    # (checked above): only other layouts are checked element by element.
    if not c_contiguous and not _byte_offsets_fit(ndim, shape, element_strides, size, itemsize):
        return False
    # ml_dtypes' sub-byte types take a byte each: padded, in DLPack's terms (the flag
    # says nothing of whole-byte types).
    dtype = _dtype_from_dlpack(dl_dtype, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)

    view._ptr = <uintptr_t>data
    view.ptr = _address_int(view._ptr)
    view.shape = _int64_tuple(shape, ndim)
    view.strides = _int64_tuple(element_strides, ndim)
    view.dtype = dtype
    view._dl_dtype = dl_dtype
    view._itemsize = itemsize
    view._size = size
    view._device_type = kDLCPU
    view._device_id = -1
    view.is_device_accessible = False
    view.readonly = not (PyArray_FLAGS(array) & NPY_ARRAY_WRITEABLE)
    view.exporting_obj = obj
    view.ready_stream = None
    return True


cdef int _hint_numpy_dtype(object obj, BaseException exc) except -1:
    """Raise a BufferError naming ``from_array_interface`` when ``obj`` is a numpy
    array whose dtype numpy's ``__dlpack__`` refuses but the array interface carries
    (structured, datetime, timedelta, bytes, str), and one naming a conversion for an
    object array or a non-native byte order, which nothing carries; else return 0
    (``exc`` stands)."""
    numpy = _sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, numpy.ndarray):
        return 0
    dtype = obj.dtype
    if dtype.kind == "O":
        raise BufferError(
            f"dlpack: numpy cannot export an object array through DLPack ({exc}): its "
            "elements are references to Python objects, which no protocol carries; "
            "convert it first, e.g. array.astype(numpy.float64)"
        ) from exc
    if not dtype.isnative:
        raise BufferError(
            f"dlpack: numpy cannot export the non-native byte order of {dtype.str!r} "
            f"through DLPack ({exc}), and no protocol a kernel reads carries it; "
            "convert it first, e.g. array.astype(array.dtype.newbyteorder('='))"
        ) from exc
    if dtype.type is numpy.longdouble or dtype.type is numpy.clongdouble:
        # (Where long double is double, numpy exports it: no refusal reaches here.)
        raise BufferError(
            f"dlpack: numpy cannot export dtype {str(dtype)!r} through DLPack ({exc}): no "
            "DLPack type is C's long double (x87 extended precision padded to "
            f"{dtype.itemsize} bytes); convert it first, e.g. array.astype(numpy."
            f"{'complex128' if dtype.kind == 'c' else 'float64'}), or view it through "
            "numpy's array interface, StridedMemoryView.from_array_interface(array)"
        ) from exc
    # Structured (not a bare void kind: ml_dtypes' bfloat16 and float8 are void too,
    # and their array interface says only "V2"), datetime, timedelta, bytes, str.
    if not (dtype.kind in "MmSU" or (dtype.kind == "V" and dtype.fields is not None)):
        return 0
    raise BufferError(
        f"dlpack: numpy cannot export dtype {str(dtype)!r} through DLPack ({exc}): "
        "StridedMemoryView.from_array_interface(array) views it through numpy's "
        "array interface"
    ) from exc
