# What stridedview learns once per producer type: whether it speaks DLPack, the
# DLPack C exchange API it offers (if any), and whether it is a torch.Tensor
# (whose sign and conjugate bits need a check).  Looked up once per type; the
# last type seen is kept apart so that a run of views of one type skips even
# the dict lookup.

import sys as _sys

cdef extern from *:
    """
    /* DLPack 1.3's C exchange API, from the specification's layout (56 bytes):
       header {version @0, prev_api @8}, then five function pointers. */
    typedef struct {
        sv_DLPackVersion version;
        void *prev_api;
    } sv_DLPackExchangeAPIHeader;

    typedef int (*sv_DLTensorFromPyObject)(void *py_object, sv_DLTensor *out);
    typedef int (*sv_CurrentWorkStream)(int32_t device_type, int32_t device_id, void **out_stream);

    typedef struct {
        sv_DLPackExchangeAPIHeader header;
        void *managed_tensor_allocator;
        void *managed_tensor_from_py_object_no_sync;
        void *managed_tensor_to_py_object_no_sync;
        sv_DLTensorFromPyObject dltensor_from_py_object_no_sync;
        sv_CurrentWorkStream current_work_stream;
    } sv_DLPackExchangeAPI;

    typedef char sv_check_exchange_api_size[sizeof(sv_DLPackExchangeAPI) == 56 ? 1 : -1];
    """
    ctypedef int (*DLTensorFromPyObject "sv_DLTensorFromPyObject")(
        void *py_object, DLTensor *out
    ) noexcept
    ctypedef int (*CurrentWorkStream "sv_CurrentWorkStream")(
        int32_t device_type, int32_t device_id, void **out_stream
    ) noexcept

    ctypedef struct DLPackExchangeAPIHeader "sv_DLPackExchangeAPIHeader":
        DLPackVersion version
        void *prev_api

    ctypedef struct DLPackExchangeAPI "sv_DLPackExchangeAPI":
        DLPackExchangeAPIHeader header
        DLTensorFromPyObject dltensor_from_py_object_no_sync
        CurrentWorkStream current_work_stream

cdef str _EXCHANGE_API_CAPSULE_ATTR = "__dlpack_c_exchange_api__"  # DLPack 1.3
cdef str _EXCHANGE_API_INT_ATTR = "__c_dlpack_exchange_api__"  # the 1.2-era int address

# Tests turn the fast paths (the exchange API, host-only types skipping
# __dlpack_device__) off, to compare their views with the general path's.
cdef bint _fast_paths_enabled = True


def _set_fast_paths_enabled(bint enabled):
    """Use (True) or bypass (False) the per-type fast paths; for tests."""
    global _fast_paths_enabled
    _fast_paths_enabled = enabled


@cython.final
@cython.auto_pickle(False)
cdef class _ProducerType:
    """What one producer type offers; built once by _producer_type()."""

    cdef object described_type  # the type this describes
    cdef bint has_dlpack
    cdef bint host_only  # its arrays are always host memory: no need to ask the device
    cdef bint is_torch
    cdef DLTensorFromPyObject dltensor_from_py_object
    cdef CurrentWorkStream current_work_stream
    cdef object exchange_api_owner  # the capsule or object that keeps the table alive


cdef dict _producer_types = {}
# The last answer, in one global so that a reader never pairs one type with
# another type's description.
cdef _ProducerType _last_info = None


cdef _ProducerType _producer_type(object obj):
    global _last_info
    tp = type(obj)
    cdef _ProducerType info = _last_info
    if info is not None and info.described_type is tp:
        return info
    info = <_ProducerType>_producer_types.get(tp)
    if info is None:
        info = _describe_type(tp)
        if len(_producer_types) >= 1024:
            _producer_types.clear()  # bound the cache where classes are made on the fly
        _producer_types[tp] = info
    _last_info = info
    return info


cdef _ProducerType _describe_type(type tp):
    cdef _ProducerType info = _ProducerType.__new__(_ProducerType)
    cdef const DLPackExchangeAPI *api = NULL
    info.described_type = tp
    info.has_dlpack = hasattr(tp, _DLPACK) and hasattr(tp, _DLPACK_DEVICE)
    # numpy keeps every array in host memory: ndarray's __dlpack_device__ always
    # answers (kDLCPU, 0), so a subclass that keeps numpy's methods need not be
    # asked.  The capsule's device is still checked against that answer.
    numpy = _sys.modules.get("numpy")
    info.host_only = (
        info.has_dlpack
        and numpy is not None
        and issubclass(tp, numpy.ndarray)
        and tp.__dlpack_device__ is numpy.ndarray.__dlpack_device__
        and tp.__dlpack__ is numpy.ndarray.__dlpack__
    )
    torch = _sys.modules.get("torch")
    info.is_torch = torch is not None and issubclass(tp, torch.Tensor)
    if info.has_dlpack:
        owner = getattr(tp, _EXCHANGE_API_CAPSULE_ATTR, None)
        if owner is not None and PyCapsule_IsValid(owner, b"dlpack_exchange_api"):
            api = <const DLPackExchangeAPI *>PyCapsule_GetPointer(owner, b"dlpack_exchange_api")
        else:
            owner = getattr(tp, _EXCHANGE_API_INT_ATTR, None)
            if type(owner) is int and owner != 0:
                api = <const DLPackExchangeAPI *><uintptr_t>owner
        # Only a 1.x table has the layout declared above.
        if api != NULL and api.header.version.major == DLPACK_MAJOR_VERSION:
            info.dltensor_from_py_object = api.dltensor_from_py_object_no_sync
            info.current_work_stream = api.current_work_stream
            info.exchange_api_owner = owner
    return info


cdef bint _has_dlpack(object obj) except -1:
    """Whether ``obj`` offers both DLPack methods (its type's, or rarely its own)."""
    if _producer_type(obj).has_dlpack:
        return True
    return hasattr(obj, _DLPACK) and hasattr(obj, _DLPACK_DEVICE)


cdef str _IS_NEG = "is_neg"
cdef object _torch_tensor_type = None  # torch.Tensor (its metaclass is torch's), once needed
cdef object _torch_is_neg = None  # torch.Tensor.is_neg
cdef str _IS_CONJ = "is_conj"


cdef int _check_torch_bits(object tensor, bint is_complex) except -1:
    """Refuse torch tensors whose memory does not hold their values.

    A tensor with the negative or the conjugate bit set is a lazy view: its memory
    holds the values before negation or conjugation.  torch's ``__dlpack__``
    refuses the second and exports the first as if nothing were pending, and its
    exchange API exports both; a kernel would read wrong values either way.  Only
    complex tensors can carry the conjugate bit, so only they are asked.
    """
    global _torch_tensor_type, _torch_is_neg
    cdef PyObject *args[1]
    args[0] = <PyObject *>tensor
    if _torch_tensor_type is None:
        tensor_type = _sys.modules["torch"].Tensor
        _torch_is_neg = tensor_type.is_neg  # set before the type that guards it
        _torch_tensor_type = tensor_type
    # An exact torch.Tensor is asked through torch's own method, found once (a
    # lookup through the MRO and the instance dict is a sixth of the check).
    if type(tensor) is _torch_tensor_type:
        is_neg = PyObject_Vectorcall(_torch_is_neg, args, 1, NULL)
    else:
        is_neg = PyObject_VectorcallMethod(_IS_NEG, args, 1, NULL)
    if is_neg:
        raise BufferError(
            "dlpack: the torch tensor has its negative bit set, so its memory does not hold "
            "its values (call .resolve_neg() first)"
        )
    if is_complex and PyObject_VectorcallMethod(_IS_CONJ, args, 1, NULL):
        raise BufferError(
            "dlpack: the torch tensor has its conjugate bit set, so its memory does not hold "
            "its values (call .resolve_conj() first)"
        )
    return 0
