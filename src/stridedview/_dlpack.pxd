# DLPack 1.3 structures, declared from the layout the DLPack specification gives
# (64-bit: DLTensor is 48 bytes, DLManagedTensor 64, DLManagedTensorVersioned 80).
# The structs are declared here, not taken from a header: the extension needs no
# DLPack, numpy or CUDA header to build.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from *:
    """
    typedef struct {
        uint32_t major;
        uint32_t minor;
    } sv_DLPackVersion;

    typedef struct {
        int32_t device_type;
        int32_t device_id;
    } sv_DLDevice;

    typedef struct {
        uint8_t code;
        uint8_t bits;
        uint16_t lanes;
    } sv_DLDataType;

    typedef struct {
        void *data;
        sv_DLDevice device;
        int32_t ndim;
        sv_DLDataType dtype;
        int64_t *shape;
        int64_t *strides;
        uint64_t byte_offset;
    } sv_DLTensor;

    typedef struct sv_DLManagedTensor {
        sv_DLTensor dl_tensor;
        void *manager_ctx;
        void (*deleter)(struct sv_DLManagedTensor *self);
    } sv_DLManagedTensor;

    typedef struct sv_DLManagedTensorVersioned {
        sv_DLPackVersion version;
        void *manager_ctx;
        void (*deleter)(struct sv_DLManagedTensorVersioned *self);
        uint64_t flags;
        sv_DLTensor dl_tensor;
    } sv_DLManagedTensorVersioned;

    /* DLPack 1.3's C exchange API (56 bytes): header {version @0, prev_api @8},
       then five function pointers.  Consumers and producers alike use this one
       declaration. */
    typedef struct sv_DLPackExchangeAPIHeader {
        sv_DLPackVersion version;
        struct sv_DLPackExchangeAPIHeader *prev_api;
    } sv_DLPackExchangeAPIHeader;

    typedef void (*sv_DLPackSetError)(void *error_ctx, const char *kind, const char *message);
    typedef int (*sv_DLPackManagedTensorAllocator)(
        sv_DLTensor *prototype, sv_DLManagedTensorVersioned **out, void *error_ctx,
        sv_DLPackSetError set_error);
    typedef int (*sv_DLPackManagedTensorFromPyObject)(
        void *py_object, sv_DLManagedTensorVersioned **out);
    typedef int (*sv_DLPackManagedTensorToPyObject)(
        sv_DLManagedTensorVersioned *tensor, void **out_py_object);
    typedef int (*sv_DLTensorFromPyObject)(void *py_object, sv_DLTensor *out);
    typedef int (*sv_CurrentWorkStream)(int32_t device_type, int32_t device_id, void **out_stream);

    typedef struct {
        sv_DLPackExchangeAPIHeader header;
        sv_DLPackManagedTensorAllocator managed_tensor_allocator;
        sv_DLPackManagedTensorFromPyObject managed_tensor_from_py_object_no_sync;
        sv_DLPackManagedTensorToPyObject managed_tensor_to_py_object_no_sync;
        sv_DLTensorFromPyObject dltensor_from_py_object_no_sync;
        sv_CurrentWorkStream current_work_stream;
    } sv_DLPackExchangeAPI;

    /* The layout is part of the ABI: refuse to build where it does not hold. */
    typedef char sv_check_dltensor_size[sizeof(sv_DLTensor) == 48 ? 1 : -1];
    typedef char sv_check_managed_size[sizeof(sv_DLManagedTensor) == 64 ? 1 : -1];
    typedef char sv_check_versioned_size[sizeof(sv_DLManagedTensorVersioned) == 80 ? 1 : -1];
    typedef char sv_check_exchange_api_size[sizeof(sv_DLPackExchangeAPI) == 56 ? 1 : -1];
    """
    ctypedef struct DLPackVersion "sv_DLPackVersion":
        uint32_t major
        uint32_t minor

    ctypedef struct DLDevice "sv_DLDevice":
        int32_t device_type
        int32_t device_id

    ctypedef struct DLDataType "sv_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor "sv_DLTensor":
        void *data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor "sv_DLManagedTensor":
        DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(DLManagedTensor *) noexcept

    ctypedef struct DLManagedTensorVersioned "sv_DLManagedTensorVersioned":
        DLPackVersion version
        void *manager_ctx
        void (*deleter)(DLManagedTensorVersioned *) noexcept
        uint64_t flags
        DLTensor dl_tensor

    ctypedef struct DLPackExchangeAPIHeader "sv_DLPackExchangeAPIHeader":
        DLPackVersion version
        DLPackExchangeAPIHeader *prev_api

    ctypedef void (*DLPackSetError "sv_DLPackSetError")(
        void *error_ctx, const char *kind, const char *message
    ) noexcept
    ctypedef int (*DLPackManagedTensorAllocator "sv_DLPackManagedTensorAllocator")(
        DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
        DLPackSetError set_error
    ) noexcept
    ctypedef int (*DLPackManagedTensorFromPyObject "sv_DLPackManagedTensorFromPyObject")(
        void *py_object, DLManagedTensorVersioned **out
    ) noexcept
    ctypedef int (*DLPackManagedTensorToPyObject "sv_DLPackManagedTensorToPyObject")(
        DLManagedTensorVersioned *tensor, void **out_py_object
    ) noexcept
    ctypedef int (*DLTensorFromPyObject "sv_DLTensorFromPyObject")(
        void *py_object, DLTensor *out
    ) noexcept
    ctypedef int (*CurrentWorkStream "sv_CurrentWorkStream")(
        int32_t device_type, int32_t device_id, void **out_stream
    ) noexcept

    ctypedef struct DLPackExchangeAPI "sv_DLPackExchangeAPI":
        DLPackExchangeAPIHeader header
        DLPackManagedTensorAllocator managed_tensor_allocator
        DLPackManagedTensorFromPyObject managed_tensor_from_py_object_no_sync
        DLPackManagedTensorToPyObject managed_tensor_to_py_object_no_sync
        DLTensorFromPyObject dltensor_from_py_object_no_sync
        CurrentWorkStream current_work_stream


# The newest DLPack version this consumer understands (asked for with max_version).
cdef enum:
    DLPACK_MAJOR_VERSION = 1
    DLPACK_MINOR_VERSION = 3

# DLManagedTensorVersioned.flags
cdef enum:
    DLPACK_FLAG_BITMASK_READ_ONLY = 1 << 0
    DLPACK_FLAG_BITMASK_IS_COPIED = 1 << 1
    DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED = 1 << 2

# DLDeviceType
cdef enum DLDeviceType:
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17
    kDLTrn = 18
    kDLTPU = 19
    kDLTPUHost = 20
    kDLAscend = 21

# DLDataTypeCode
cdef enum DLDataTypeCode:
    kDLInt = 0
    kDLUInt = 1
    kDLFloat = 2
    kDLOpaqueHandle = 3
    kDLBfloat = 4
    kDLComplex = 5
    kDLBool = 6
    kDLFloat8_e3m4 = 7
    kDLFloat8_e4m3 = 8
    kDLFloat8_e4m3b11fnuz = 9
    kDLFloat8_e4m3fn = 10
    kDLFloat8_e4m3fnuz = 11
    kDLFloat8_e5m2 = 12
    kDLFloat8_e5m2fnuz = 13
    kDLFloat8_e8m0fnu = 14
    kDLFloat6_e2m3fn = 15
    kDLFloat6_e3m2fn = 16
    kDLFloat4_e2m1fn = 17
    kDLBcomplex = 18  # DLPack 1.3 (a pair of bfloat16), added without a minor version
