# The C API for C and C++ extensions: the StridedViewCAPI table of
# include/stridedview.h (one declaration, shared by this module and its users),
# filled with this build's field offsets and published as the PyCapsule
# ``stridedview._view._C_API``.  Cython extensions use _view.pxd instead.

cdef extern from *:
    """
    #define STRIDEDVIEW_BUILDING_MODULE 1
    #include "stridedview.h"
    """
    ctypedef struct StridedViewCAPI:
        uint32_t version
        uint32_t size
        PyTypeObject_dict *view_type
        Py_ssize_t ptr_offset
        Py_ssize_t ndim_offset
        Py_ssize_t dims_offset
        Py_ssize_t itemsize_offset
        Py_ssize_t size_offset
        Py_ssize_t device_type_offset
        Py_ssize_t readonly_offset
        Py_ssize_t dtype_offset
        int (*device_id)(object, int32_t *) except -1
    const char *STRIDEDVIEW_C_API_CAPSULE
    const uint32_t STRIDEDVIEW_C_API_VERSION
    # The offsets of this build's fields (SV_VIEW_OFFSET is defined in _view.pyx).
    const Py_ssize_t _OFFSET_C_PTR "SV_VIEW_OFFSET(_ptr)"
    const Py_ssize_t _OFFSET_C_NDIM "SV_VIEW_OFFSET(_ndim)"
    const Py_ssize_t _OFFSET_C_DIMS "SV_VIEW_OFFSET(_dims)"
    const Py_ssize_t _OFFSET_C_ITEMSIZE "SV_VIEW_OFFSET(_itemsize)"
    const Py_ssize_t _OFFSET_C_SIZE "SV_VIEW_OFFSET(_size)"
    const Py_ssize_t _OFFSET_C_DEVICE_TYPE "SV_VIEW_OFFSET(_device_type)"
    const Py_ssize_t _OFFSET_C_READONLY "SV_VIEW_OFFSET(readonly)"
    const Py_ssize_t _OFFSET_C_DTYPE "SV_VIEW_OFFSET(_dl_dtype)"

cdef StridedViewCAPI _c_api


cdef int _c_api_device_id(object view, int32_t *out) except -1:
    # StridedView_DeviceId.  Checked here too (one pointer compare), since a caller
    # through ctypes has no StridedView_Check in front of it.
    if type(view) is not StridedMemoryView:
        raise TypeError(
            f"StridedView_DeviceId: the object must be a StridedMemoryView (got {_quote(view)})"
        )
    out[0] = (<StridedMemoryView>view).c_device_id()
    return 0


cdef object _publish_c_api():
    _c_api.version = STRIDEDVIEW_C_API_VERSION
    _c_api.size = sizeof(StridedViewCAPI)
    _c_api.view_type = <PyTypeObject_dict *>StridedMemoryView
    _c_api.ptr_offset = _OFFSET_C_PTR
    _c_api.ndim_offset = _OFFSET_C_NDIM
    _c_api.dims_offset = _OFFSET_C_DIMS
    _c_api.itemsize_offset = _OFFSET_C_ITEMSIZE
    _c_api.size_offset = _OFFSET_C_SIZE
    _c_api.device_type_offset = _OFFSET_C_DEVICE_TYPE
    _c_api.readonly_offset = _OFFSET_C_READONLY
    _c_api.dtype_offset = _OFFSET_C_DTYPE
    _c_api.device_id = _c_api_device_id
    return PyCapsule_New(<void *>&_c_api, STRIDEDVIEW_C_API_CAPSULE, NULL)


_C_API = _publish_c_api()
