/* simgpu tensor maps: cuTensorMapEncodeTiled checks every requirement the
 * driver's documentation states and answers CUDA_ERROR_INVALID_VALUE where one
 * fails, with two corrections measured on a real driver (580.159.04, CUDA 13.0, an
 * H200 of compute capability 9.0):
 * - the packed sub-byte types (16U4_ALIGN8B, 16U4_ALIGN16B, 16U6_ALIGN16B) and the
 *   128B_ATOM swizzles are Blackwell features: refused on a device below 10.0 for
 *   every layout, so modelled only where SIMGPU_COMPUTE_CAPABILITY (or
 *   simgpu_set_compute_capability) makes the device 10.0 or higher;
 * - 32-byte interleave is accepted with every swizzle, although the documentation
 *   says it needs the 32-byte one.
 * The 128-byte result is deterministic (the fields packed, see below). */
#include "sim.h"

enum {
    TM_UINT8, TM_UINT16, TM_UINT32, TM_INT32, TM_UINT64, TM_INT64, TM_FLOAT16, TM_FLOAT32,
    TM_FLOAT64, TM_BFLOAT16, TM_FLOAT32_FTZ, TM_TFLOAT32, TM_TFLOAT32_FTZ, TM_16U4_ALIGN8B,
    TM_16U4_ALIGN16B, TM_16U6_ALIGN16B,
};
enum { IL_NONE, IL_16B, IL_32B };
enum { SW_NONE, SW_32B, SW_64B, SW_128B, SW_128B_ATOM_32B, SW_128B_ATOM_32B_FLIP_8B, SW_128B_ATOM_64B };

/* Bytes per element times 2 (the 4-bit packed type is half a byte). */
static int elem_size_x2(int type) {
    switch (type) {
    case TM_UINT8: return 2;
    case TM_UINT16: case TM_FLOAT16: case TM_BFLOAT16: return 4;
    case TM_UINT32: case TM_INT32: case TM_FLOAT32: case TM_FLOAT32_FTZ: case TM_TFLOAT32:
    case TM_TFLOAT32_FTZ: return 8;
    case TM_UINT64: case TM_INT64: case TM_FLOAT64: return 16;
    case TM_16U4_ALIGN8B: return 1;        /* 16 values in 8 bytes */
    case TM_16U4_ALIGN16B: case TM_16U6_ALIGN16B: return 2; /* 16 values in 16 bytes */
    default: return 0;
    }
}

static int is_float(int type) {
    return type == TM_FLOAT16 || type == TM_FLOAT32 || type == TM_FLOAT64 || type == TM_BFLOAT16 ||
           type == TM_FLOAT32_FTZ || type == TM_TFLOAT32 || type == TM_TFLOAT32_FTZ;
}

static int swizzle_span(int swizzle) {
    switch (swizzle) {
    case SW_32B: return 32;
    case SW_64B: return 64;
    case SW_NONE: return 0;
    default: return 128;
    }
}

static CUresult check_tiled(const void *map, int type, unsigned rank, const void *address,
                            const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            const cuuint32_t *estrides, int interleave, int swizzle, int l2, int oob) {
    /* The documented 64-byte alignment of the tensorMap output is not checked: the
     * bindings hand over a CUtensorMap embedded in a Python object, 16-byte aligned
     * only (32 in cuda-bindings 13.5 here), and the driver evidently accepts it. */
    if (map == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (type < TM_UINT8 || type > TM_16U6_ALIGN16B) return CUDA_ERROR_INVALID_VALUE;
    if (interleave < IL_NONE || interleave > IL_32B) return CUDA_ERROR_INVALID_VALUE;
    if (swizzle < SW_NONE || swizzle > SW_128B_ATOM_64B) return CUDA_ERROR_INVALID_VALUE;
    if (l2 < 0 || l2 > 3 || oob < 0 || oob > 1) return CUDA_ERROR_INVALID_VALUE;
    if (rank == 0 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
    if (sg_compute_capability() < 100 && (type >= TM_16U4_ALIGN8B || swizzle >= SW_128B_ATOM_32B))
        return CUDA_ERROR_INVALID_VALUE; /* Blackwell's, refused on 9.x whatever the layout */
    if (interleave != IL_NONE && rank < 3) return CUDA_ERROR_INVALID_VALUE;
    if (dims == NULL || box == NULL || estrides == NULL || (rank > 1 && strides == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    int packed16 = type == TM_16U4_ALIGN16B || type == TM_16U6_ALIGN16B;
    uintptr_t align = (interleave == IL_32B || packed16) ? 32 : 16;
    if (address == NULL || (uintptr_t)address % align != 0) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++)
        if (dims[i] == 0 || dims[i] > (1ULL << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (packed16 && dims[0] % 128 != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type == TM_16U4_ALIGN8B && dims[0] % 2 != 0) return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t stride_multiple = (interleave == IL_32B || packed16) ? 32 : 16;
    for (unsigned i = 0; i + 1 < rank; i++)
        if (strides[i] % stride_multiple != 0 || strides[i] >= (1ULL << 40)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < rank; i++) {
        if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
        if (estrides[i] == 0 || estrides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
    }
    if (packed16 && box[0] != 128) return CUDA_ERROR_INVALID_VALUE;
    unsigned long long inner_x2 = (unsigned long long)box[0] * (unsigned)elem_size_x2(type);
    if (interleave == IL_NONE) {
        if (inner_x2 % 32 != 0) return CUDA_ERROR_INVALID_VALUE; /* a multiple of 16 bytes */
        if (swizzle != SW_NONE && inner_x2 > 2ULL * (unsigned)swizzle_span(swizzle))
            return CUDA_ERROR_INVALID_VALUE;
    }
    /* No check that 32-byte interleave comes with the 32-byte swizzle: documented, but the
     * real driver (580) encodes 32-byte interleave with swizzles none, 32B, 64B and 128B. */
    if (type == TM_16U6_ALIGN16B) {
        if (interleave != IL_NONE) return CUDA_ERROR_INVALID_VALUE;
        if (swizzle != SW_NONE && swizzle != SW_128B && swizzle != SW_128B_ATOM_32B &&
            swizzle != SW_128B_ATOM_64B)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (type == TM_16U4_ALIGN16B && swizzle != SW_NONE && swizzle != SW_128B &&
        swizzle != SW_128B_ATOM_32B)
        return CUDA_ERROR_INVALID_VALUE;
    if (oob == 1 && !is_float(type)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The encoding: q[0] address, q[1..5] dims, q[6..9] strides, q[10] box dims (9 bits
 * each), q[11] element strides (4 bits each), q[12] type | rank<<8 | interleave<<16 |
 * swizzle<<24 | l2<<32 | oob<<40, q[13] a tag. */
#define TM_TAG 0x4d54555047

SG_API CUresult cuTensorMapEncodeTiled(cuuint64_t *map, int type, cuuint32_t rank, void *address,
                                       const cuuint64_t *dims, const cuuint64_t *strides,
                                       const cuuint32_t *box, const cuuint32_t *estrides,
                                       int interleave, int swizzle, int l2, int oob) {
    API_BEGIN_ARGS("cuTensorMapEncodeTiled", 0, LA(map), LA(type), LA(rank), LA(address), LA(dims), LA(strides));
    API_NEED_INIT();
    CUresult r = check_tiled(map, type, rank, address, dims, strides, box, estrides, interleave,
                             swizzle, l2, oob);
    if (r != CUDA_SUCCESS) API_RETURN(r);
    cuuint64_t q[16] = {0};
    q[0] = (cuuint64_t)(uintptr_t)address;
    for (unsigned i = 0; i < rank; i++) {
        q[1 + i] = dims[i];
        if (i + 1 < rank) q[6 + i] = strides[i];
        q[10] |= (cuuint64_t)box[i] << (9 * i);
        q[11] |= (cuuint64_t)estrides[i] << (4 * i);
    }
    q[12] = (cuuint64_t)type | (cuuint64_t)rank << 8 | (cuuint64_t)interleave << 16 |
            (cuuint64_t)swizzle << 24 | (cuuint64_t)l2 << 32 | (cuuint64_t)oob << 40;
    q[13] = TM_TAG;
    memcpy(map, q, sizeof q);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuTensorMapReplaceAddress(cuuint64_t *map, void *address) {
    API_BEGIN_ARGS("cuTensorMapReplaceAddress", 0, LA(map), LA(address));
    API_NEED_INIT();
    if (map == NULL || map[13] != TM_TAG) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    int type = (int)(map[12] & 0xFF), interleave = (int)((map[12] >> 16) & 0xFF);
    uintptr_t align =
        (interleave == IL_32B || type == TM_16U4_ALIGN16B || type == TM_16U6_ALIGN16B) ? 32 : 16;
    if (address == NULL || (uintptr_t)address % align != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    map[0] = (cuuint64_t)(uintptr_t)address;
    API_RETURN(CUDA_SUCCESS);
}
