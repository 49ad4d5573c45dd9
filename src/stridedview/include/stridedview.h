/*
 * stridedview.h: read a stridedview.StridedMemoryView's layout from C or C++.
 *
 * Compile with -I"$(python -c 'import stridedview; print(stridedview.get_include())')".
 *
 *     #include "stridedview.h"
 *
 *     // once, in the module's init function (with the GIL held):
 *     if (StridedView_Import() < 0) return NULL;
 *
 *     // then, for any object:
 *     if (StridedView_Check(obj)) {
 *         char *data = (char *)StridedView_Ptr(obj);          // element [0, ..., 0]
 *         int ndim = StridedView_Ndim(obj);
 *         const int64_t *shape = StridedView_Shape(obj);      // ndim extents
 *         const int64_t *strides = StridedView_Strides(obj);  // ndim strides, in ELEMENTS
 *         int64_t itemsize = StridedView_Itemsize(obj);       // bytes per element (0: packed)
 *         StridedViewDType dtype = StridedView_DType(obj);    // e.g. code 2, bits 32: float32
 *     }
 *
 * Each accessor is one load at an offset the installed stridedview reports, so
 * an extension built against this header keeps working when the view's object
 * layout changes.  The arrays belong to the view: valid while it lives.
 * Size * itemsize and each element's byte offset from element 0 (the sum of
 * (extent - 1) * stride * itemsize) fit int64: a layout whose would not is
 * refused when the view is made, so int64 arithmetic on them never wraps.  The
 * accessors read fields; they take no reference and need the GIL only as any
 * read of a live object does.
 *
 * Versioning: StridedView_Import() fails (ImportError) when the installed
 * stridedview's STRIDEDVIEW_C_API_VERSION differs from this header's, or when
 * its table is shorter than this header's (an older stridedview: upgrade it).
 * New fields are only ever appended to StridedViewCAPI, its `size` telling how
 * many the installed one has.
 *
 * Device and element type: StridedView_DeviceType() is the DLPack device type
 * (1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed).  StridedView_DType() is
 * the element type as DLPack describes it (the layout of DLPack's DLDataType),
 * exactly as the producer gave it: code (0 int, 1 uint, 2 float, 4 bfloat,
 * 5 complex, 6 bool, 7 to 17 the float8, float6 and float4 kinds, 18 bcomplex),
 * bits per lane and lanes (torch's float4_e2m1fn_x2 pairs: code 17, bits 4,
 * lanes 2, one byte each); bits 0 when no DLPack type describes the elements (a
 * structured, datetime or bytes dtype from an array interface or a buffer: the
 * view's Python `dtype` says).  An element takes bits * lanes bits.  Sub-byte
 * elements are either padded, one to a byte (ml_dtypes' int4, float4_e2m1fn...:
 * StridedView_Itemsize() is 1), or packed, DLPack's default: element i at bit
 * i * bits from the data pointer, several to a byte, the view row-major and
 * gap-free; StridedView_Itemsize() is then 0 (no whole-byte size) and
 * StridedView_ItemsizeBits() says the bits.  StridedView_DeviceId() gives the
 * device ordinal: -1 for host-only memory, else the CUDA device (0 for pinned and
 * managed memory, as DLPack gives it), the Python `device_id`.  It is a call, not
 * a load: a CUDA Array Interface view asks the driver on first use
 * (cuPointerGetAttribute), which can fail (0 on success, -1 with a Python
 * exception set).  For a DLTensor, use the view's DLPack C exchange API (PyCapsule
 * `type(view).__dlpack_c_exchange_api__`, "dlpack_exchange_api").
 */
#ifndef STRIDEDVIEW_H
#define STRIDEDVIEW_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRIDEDVIEW_C_API_VERSION 1
/* PyCapsule_Import name: the attribute _C_API of module stridedview._view. */
#define STRIDEDVIEW_C_API_CAPSULE "stridedview._view._C_API"

typedef struct StridedViewCAPI {
    uint32_t version;             /* STRIDEDVIEW_C_API_VERSION of the installed package */
    uint32_t size;                /* sizeof(StridedViewCAPI) there */
    PyTypeObject *view_type;      /* stridedview.StridedMemoryView */
    /* Byte offsets of the view's fields in its object (from the PyObject *): */
    Py_ssize_t ptr_offset;        /* uintptr_t: address of element [0, ..., 0] */
    Py_ssize_t ndim_offset;       /* int32_t */
    Py_ssize_t dims_offset;       /* int64_t *: ndim extents, then ndim element strides */
    Py_ssize_t itemsize_offset;   /* int64_t: bytes per element */
    Py_ssize_t size_offset;       /* int64_t: number of elements */
    Py_ssize_t device_type_offset; /* int32_t: DLPack device type */
    Py_ssize_t readonly_offset;   /* int: nonzero when the memory is read-only */
    Py_ssize_t dtype_offset;      /* StridedViewDType: the element type */
    /* Appended after dtype_offset (the table only grows; `size` says how far): */
    int (*device_id)(PyObject *view, int32_t *out); /* StridedView_DeviceId's worker */
} StridedViewCAPI;

/* The element type, laid out as DLPack's DLDataType. */
typedef struct StridedViewDType {
    uint8_t code;    /* STRIDEDVIEW_DTYPE_INT, ..._UINT, ..._FLOAT, ..._BFLOAT, ..._COMPLEX, ..._BOOL, 7 to 17, ..._BCOMPLEX */
    uint8_t bits;    /* bits per element; 0: no DLPack type describes the elements */
    uint16_t lanes;  /* lanes per element (1 but for vector types); 0 with bits 0 (no DLPack type describes the elements) */
} StridedViewDType;

#define STRIDEDVIEW_DTYPE_INT 0
#define STRIDEDVIEW_DTYPE_UINT 1
#define STRIDEDVIEW_DTYPE_FLOAT 2
#define STRIDEDVIEW_DTYPE_BFLOAT 4
#define STRIDEDVIEW_DTYPE_COMPLEX 5
#define STRIDEDVIEW_DTYPE_BOOL 6
#define STRIDEDVIEW_DTYPE_FLOAT4_E2M1FN 17
#define STRIDEDVIEW_DTYPE_BCOMPLEX 18  /* DLPack 1.3: a pair of bfloat16 */

#ifndef STRIDEDVIEW_BUILDING_MODULE

/* One per translation unit that includes this header. */
static const StridedViewCAPI *StridedView_CAPI = NULL;

/* Import stridedview and its C API: 0 on success, -1 with a Python exception set. */
static int StridedView_Import(void)
{
    const StridedViewCAPI *api =
        (const StridedViewCAPI *)PyCapsule_Import(STRIDEDVIEW_C_API_CAPSULE, 0);
    if (api == NULL) {
        return -1;
    }
    if (api->version != STRIDEDVIEW_C_API_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "stridedview: the installed C API is version %u, this extension was "
                     "built for version %d: rebuild it",
                     (unsigned)api->version, STRIDEDVIEW_C_API_VERSION);
        return -1;
    }
    if (api->size < sizeof(StridedViewCAPI)) {
        PyErr_Format(PyExc_ImportError,
                     "stridedview: the installed C API table has %u bytes, this extension "
                     "reads %u: upgrade stridedview",
                     (unsigned)api->size, (unsigned)sizeof(StridedViewCAPI));
        return -1;
    }
    StridedView_CAPI = api;
    return 0;
}

#define STRIDEDVIEW__FIELD(obj, offset, type) \
    (*(type *)((char *)(obj) + StridedView_CAPI->offset))

/* Whether obj is a StridedMemoryView (the type is final: no subclasses). */
static inline int StridedView_Check(PyObject *obj)
{
    return Py_TYPE(obj) == StridedView_CAPI->view_type;
}

static inline void *StridedView_Ptr(PyObject *view)
{
    return (void *)STRIDEDVIEW__FIELD(view, ptr_offset, uintptr_t);
}

static inline int StridedView_Ndim(PyObject *view)
{
    return (int)STRIDEDVIEW__FIELD(view, ndim_offset, int32_t);
}

static inline const int64_t *StridedView_Shape(PyObject *view)
{
    return STRIDEDVIEW__FIELD(view, dims_offset, int64_t *);
}

static inline const int64_t *StridedView_Strides(PyObject *view)
{
    return StridedView_Shape(view) + StridedView_Ndim(view);
}

static inline int64_t StridedView_Itemsize(PyObject *view)
{
    return STRIDEDVIEW__FIELD(view, itemsize_offset, int64_t);
}

static inline int64_t StridedView_Size(PyObject *view)
{
    return STRIDEDVIEW__FIELD(view, size_offset, int64_t);
}

static inline int StridedView_DeviceType(PyObject *view)
{
    return (int)STRIDEDVIEW__FIELD(view, device_type_offset, int32_t);
}

static inline int StridedView_Readonly(PyObject *view)
{
    return STRIDEDVIEW__FIELD(view, readonly_offset, int) != 0;
}

static inline StridedViewDType StridedView_DType(PyObject *view)
{
    return STRIDEDVIEW__FIELD(view, dtype_offset, StridedViewDType);
}

/* The device ordinal into *device_id (-1: host-only memory): 0 on success, -1 with a
   Python exception set (a CUDA Array Interface view whose driver call failed).  GIL held. */
static inline int StridedView_DeviceId(PyObject *view, int32_t *device_id)
{
    return StridedView_CAPI->device_id(view, device_id);
}

/* Bits per element as stored: 8 * itemsize, or a packed sub-byte type's bits * lanes. */
static inline int64_t StridedView_ItemsizeBits(PyObject *view)
{
    int64_t itemsize = StridedView_Itemsize(view);
    StridedViewDType dtype;
    if (itemsize != 0)
        return 8 * itemsize;
    dtype = StridedView_DType(view);
    return (int64_t)dtype.bits * dtype.lanes;
}

#endif /* STRIDEDVIEW_BUILDING_MODULE */

#ifdef __cplusplus
}
#endif

#endif /* STRIDEDVIEW_H */
