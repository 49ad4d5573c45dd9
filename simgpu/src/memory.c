/* simgpu memory: device memory the process cannot touch, stream-ordered pools,
 * managed and pinned host memory, and what the driver tells about a pointer.
 *
 * Each device's memory is one memfd mapped twice: a PROT_NONE view whose
 * addresses are the device pointers (a host load or store through one faults,
 * as on a real GPU) and a private read-write view that only the stream workers
 * use.  Managed and pinned host memory are ordinary host mappings.
 */
#include "sim.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


#define DEVICE_ALIGN 256u

/* ---- device arenas ------------------------------------------------------------------- */

typedef struct {
    size_t off, len;
} extent;

typedef struct {
    int fd;
    unsigned char *none_base; /* device addresses */
    unsigned char *rw_base;   /* the workers' view */
    size_t size;
    extent *free_list;        /* sorted by offset, coalesced */
    int nfree, cap_free;
    size_t used;
} arena;

static arena *arenas;
static sg_alloc **allocs; /* sorted by base */
static int nallocs, cap_allocs;
static unsigned long long next_buffer_id = 1;

static void arena_init(arena *a, int dev) {
    char name[32];
    snprintf(name, sizeof name, "simgpu-device-%d", dev);
    a->size = sg_cfg.device_bytes;
    a->fd = memfd_create(name, MFD_CLOEXEC);
    if (a->fd < 0 || ftruncate(a->fd, (off_t)a->size) != 0) {
        perror("simgpu: memfd for device memory");
        abort();
    }
    a->none_base = mmap(NULL, a->size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, a->fd, 0);
    a->rw_base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, a->fd, 0);
    if (a->none_base == MAP_FAILED || a->rw_base == MAP_FAILED) {
        perror("simgpu: mapping device memory");
        abort();
    }
    a->cap_free = 16;
    a->free_list = calloc((size_t)a->cap_free, sizeof(extent));
    /* Offset 0 is never handed out: no device pointer equals the view's base. */
    a->free_list[0].off = 1u << 20;
    a->free_list[0].len = a->size - (1u << 20);
    a->nfree = 1;
}

void sg_memory_init(void) {
    arenas = calloc((size_t)sg_cfg.devices, sizeof *arenas);
    for (int d = 0; d < sg_cfg.devices; d++) arena_init(&arenas[d], d);
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static int arena_take(arena *a, size_t len, size_t *off) {
    for (int i = 0; i < a->nfree; i++) {
        if (a->free_list[i].len >= len) {
            *off = a->free_list[i].off;
            a->free_list[i].off += len;
            a->free_list[i].len -= len;
            if (a->free_list[i].len == 0) {
                memmove(&a->free_list[i], &a->free_list[i + 1],
                        (size_t)(a->nfree - i - 1) * sizeof(extent));
                a->nfree--;
            }
            a->used += len;
            return 1;
        }
    }
    return 0;
}

static void arena_give(arena *a, size_t off, size_t len) {
    /* Drop the pages so freed device memory costs no host memory. */
    fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
    a->used -= len;
    int i = 0;
    while (i < a->nfree && a->free_list[i].off < off) i++;
    int merged_prev = i > 0 && a->free_list[i - 1].off + a->free_list[i - 1].len == off;
    int merged_next = i < a->nfree && off + len == a->free_list[i].off;
    if (merged_prev && merged_next) {
        a->free_list[i - 1].len += len + a->free_list[i].len;
        memmove(&a->free_list[i], &a->free_list[i + 1], (size_t)(a->nfree - i - 1) * sizeof(extent));
        a->nfree--;
    } else if (merged_prev) {
        a->free_list[i - 1].len += len;
    } else if (merged_next) {
        a->free_list[i].off = off;
        a->free_list[i].len += len;
    } else {
        if (a->nfree == a->cap_free) {
            extent *grown = realloc(a->free_list, (size_t)a->cap_free * 2 * sizeof(extent));
            if (grown == NULL) return; /* the range is lost, nothing worse */
            a->free_list = grown;
            a->cap_free *= 2;
        }
        memmove(&a->free_list[i + 1], &a->free_list[i], (size_t)(a->nfree - i) * sizeof(extent));
        a->free_list[i].off = off;
        a->free_list[i].len = len;
        a->nfree++;
    }
}

CUresult sg_dev_alloc_raw(int dev, size_t size, CUdeviceptr *out) {
    size_t off;
    if (!arena_take(&arenas[dev], round_up(size, DEVICE_ALIGN), &off)) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUdeviceptr)(uintptr_t)(arenas[dev].none_base + off);
    return CUDA_SUCCESS;
}

void sg_dev_free_raw(int dev, CUdeviceptr p, size_t size) {
    arena *a = &arenas[dev];
    arena_give(a, (size_t)((unsigned char *)(uintptr_t)p - a->none_base), round_up(size, DEVICE_ALIGN));
}

static int device_of_address(CUdeviceptr p) {
    for (int d = 0; d < sg_cfg.devices; d++) {
        unsigned char *q = (unsigned char *)(uintptr_t)p;
        if (q >= arenas[d].none_base && q < arenas[d].none_base + arenas[d].size) return d;
    }
    return -1;
}

int sg_is_device_range(CUdeviceptr p) { return arenas != NULL && device_of_address(p) >= 0; }

/* ---- the allocation table ---------------------------------------------------------------- */

static int alloc_index(CUdeviceptr p) { /* the last allocation whose base <= p, or -1 */
    int lo = 0, hi = nallocs - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (allocs[mid]->base <= p) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

sg_alloc *sg_alloc_find(CUdeviceptr p) {
    int i = alloc_index(p);
    if (i < 0) return NULL;
    sg_alloc *a = allocs[i];
    return p < a->base + a->size ? a : NULL;
}

static sg_alloc *alloc_add(CUdeviceptr base, size_t size, int kind, int dev, uint64_t ctx) {
    if (nallocs == cap_allocs) {
        int cap = cap_allocs ? cap_allocs * 2 : 64;
        sg_alloc **grown = realloc(allocs, (size_t)cap * sizeof *grown);
        if (grown == NULL) return NULL;
        allocs = grown;
        cap_allocs = cap;
    }
    sg_alloc *a = calloc(1, sizeof *a);
    if (a == NULL) return NULL;
    a->base = base;
    a->size = size;
    a->kind = kind;
    a->dev = dev;
    a->ctx = ctx;
    a->buffer_id = next_buffer_id++;
    a->entry = sg_api_name();
    int i = alloc_index(base) + 1;
    memmove(&allocs[i + 1], &allocs[i], (size_t)(nallocs - i) * sizeof *allocs);
    allocs[i] = a;
    nallocs++;
    if (SG_CHECKING()) sg_ck_alloc_added(a);
    sg_count("allocations_live", 1);
    return a;
}

static int freeing_ctx; /* a context's teardown frees its memory: the checker stays silent */

static void alloc_remove(sg_alloc *a) {
    if (a->ck != NULL || SG_CHECKING()) sg_ck_alloc_removed(a, freeing_ctx);
    sg_ipc_mem_slot_clear(a->ipc_slot); /* exported: importers can no longer open it */
    int i = alloc_index(a->base);
    if (i >= 0 && allocs[i] == a) {
        memmove(&allocs[i], &allocs[i + 1], (size_t)(nallocs - i - 1) * sizeof *allocs);
        nallocs--;
    }
    sg_count("allocations_live", -1);
    free(a);
}

static sg_alloc *alloc_overlapping(uintptr_t base, size_t size) {
    for (int i = 0; i < nallocs; i++) {
        sg_alloc *a = allocs[i];
        if (a->base < base + size && base < a->base + a->size) return a;
    }
    return NULL;
}

unsigned char *sg_worker_addr(CUdeviceptr p, size_t n, int must_be_known, CUresult *err) {
    sg_alloc *a = sg_alloc_find(p);
    if (a == NULL) {
        /* Unknown memory: host memory the driver does not know (pageable), unless
         * the address lies in a device's range, where nothing is allocated. */
        if (must_be_known || sg_is_device_range(p)) {
            *err = CUDA_ERROR_INVALID_VALUE;
            return NULL;
        }
        return (unsigned char *)(uintptr_t)p;
    }
    if (n > a->size - (size_t)(p - a->base)) {
        *err = CUDA_ERROR_ILLEGAL_ADDRESS;
        return NULL;
    }
    if (a->kind == A_DEVICE || a->kind == A_POOL) {
        arena *ar = &arenas[a->dev];
        return ar->rw_base + ((unsigned char *)(uintptr_t)p - ar->none_base);
    }
    if (a->kind == A_IPC) return (unsigned char *)(uintptr_t)p + a->rw_delta;
    return (unsigned char *)(uintptr_t)p;
}

/* ---- device allocation ------------------------------------------------------------------- */

SG_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    API_BEGIN_ARGS("cuMemGetInfo_v2", LOG_OUT64(0) | LOG_OUT64(1), LA(free_bytes), LA(total));
    API_NEED_INIT();
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c != NULL) {
        arena *a = &arenas[c->dev];
        if (free_bytes) *free_bytes = a->size - a->used - (1u << 20);
        if (total) *total = a->size;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

static CUresult device_alloc(CUdeviceptr *dptr, size_t size) {
    if (dptr == NULL || size == 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c != NULL) err = sg_capture_check_unsafe();
    if (c != NULL && err == CUDA_SUCCESS) {
        CUdeviceptr p;
        err = sg_dev_alloc_raw(c->dev, size, &p);
        if (err == CUDA_SUCCESS) {
            sg_alloc *a = alloc_add(p, size, A_DEVICE, c->dev, c->o.h);
            if (a == NULL) {
                sg_dev_free_raw(c->dev, p, size);
                err = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                *dptr = p;
            }
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return err;
}

SG_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    API_BEGIN_ARGS("cuMemAlloc_v2", LOG_OUT64(0), LA(dptr), LA(size));
    API_NEED_INIT();
    API_RETURN(device_alloc(dptr, size));
}

SG_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int elem) {
    API_BEGIN_ARGS("cuMemAllocPitch_v2", LOG_OUT64(0) | LOG_OUT64(1), LA(dptr), LA(pitch), LA(width), LA(height), LA(elem));
    API_NEED_INIT();
    if (dptr == NULL || pitch == NULL || width == 0 || height == 0 ||
        (elem != 4 && elem != 8 && elem != 16))
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t p = round_up(width, 512);
    CUresult r = device_alloc(dptr, p * height);
    if (r == CUDA_SUCCESS) *pitch = p;
    API_RETURN(r);
}

static void free_allocation(sg_alloc *a) {
    if (a->kind == A_DEVICE) {
        sg_dev_free_raw(a->dev, a->base, a->size);
    } else if (a->kind == A_HOST || a->kind == A_MANAGED || a->kind == A_IPC) {
        munmap(a->map_base, a->map_len);
    }
    alloc_remove(a);
}

void sg_pool_release_block(sg_alloc *a);

SG_API CUresult cuMemFree_v2(CUdeviceptr p) {
    API_BEGIN_ARGS("cuMemFree_v2", 0, LA(p));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || a->base != p ||
        (a->kind != A_DEVICE && a->kind != A_MANAGED && a->kind != A_POOL && a->kind != A_IPC) ||
        (a->kind == A_IPC && a->ipc_legacy)) { /* cuIpcCloseMemHandle's */
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (a->kind == A_IPC && a->ipc_refs > 1) {
        a->ipc_refs--; /* imported more than once: the mapping stays */
    } else if (a->kind == A_POOL) {
        /* A stream-ordered allocation freed at once, with no implicit synchronisation:
         * the caller has made sure its work is done. */
        sg_pool_release_block(a);
        if (SG_CHECKING()) sg_ck_freed(p, NULL);
    } else if ((r = sg_capture_check_unsafe()) == CUDA_SUCCESS) {
        /* cuMemFree waits for the device's work before the memory goes. */
        sg_wait_device_idle(a->kind == A_MANAGED ? -1 : a->dev);
        a = sg_alloc_find(p);
        if (a != NULL && a->base == p) {
            free_allocation(a);
            if (SG_CHECKING()) sg_ck_freed(p, NULL);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* A cuMemFreeAsync of memory that is not from a pool: the allocation is gone at the
 * call, its memory when the stream reaches the free. */
void sg_alloc_free_reached(int kind, int dev, CUdeviceptr base, size_t size, void *map, size_t len) {
    if (kind == A_DEVICE)
        sg_dev_free_raw(dev, base, size);
    else if (map != NULL)
        munmap(map, len);
}

SG_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    API_BEGIN_ARGS("cuMemGetAddressRange_v2", LOG_OUT64(0) | LOG_OUT64(1), LA(base), LA(size), LA(p));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    if (a != NULL) {
        if (base) *base = a->base;
        if (size) *size = a->size;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}

void sg_allocs_of_ctx_free(sg_ctx *c) {
    freeing_ctx = 1;
    for (int i = nallocs - 1; i >= 0; i--) {
        sg_alloc *a = allocs[i];
        if (a->ctx != c->o.h) continue;
        if (a->kind == A_REGISTERED) {
            alloc_remove(a);
        } else if (a->kind != A_POOL) {
            free_allocation(a);
        }
    }
    freeing_ctx = 0;
}

/* ---- managed and pinned host memory ------------------------------------------------------ */

static void *host_map(size_t size, size_t *len) {
    *len = round_up(size, 4096);
    void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Host-readable memory of `kind` (A_MANAGED or A_HOST) in the current context, mapped
   read-write in this process; its allocation record, or NULL with *err set. */
static sg_alloc *host_backed_alloc(size_t size, int kind, unsigned int flags, CUresult *err) {
    sg_alloc *a = NULL;
    *err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(err);
    if (c != NULL) *err = sg_capture_check_unsafe();
    if (c != NULL && *err == CUDA_SUCCESS) {
        size_t len;
        void *p = host_map(size, &len);
        a = p ? alloc_add((CUdeviceptr)(uintptr_t)p, size, kind, c->dev, c->o.h) : NULL;
        if (a == NULL) {
            if (p) munmap(p, len);
            *err = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            a->map_base = p;
            a->map_len = len;
            a->flags = flags;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return a;
}

SG_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    API_BEGIN_ARGS("cuMemAllocManaged", LOG_OUT64(0), LA(dptr), LA(size), LA(flags));
    API_NEED_INIT();
    if (dptr == NULL || size == 0 || (flags != 1 && flags != 2)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err;
    sg_alloc *a = host_backed_alloc(size, A_MANAGED, flags, &err);
    if (a != NULL) *dptr = a->base;
    API_RETURN(err);
}

static CUresult host_alloc(void **pp, size_t size, unsigned int flags) {
    if (pp == NULL || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) {
        *pp = NULL;
        return CUDA_SUCCESS;
    }
    CUresult err;
    sg_alloc *a = host_backed_alloc(size, A_HOST, flags, &err);
    if (a != NULL) *pp = a->map_base;
    return err;
}

SG_API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) {
    API_BEGIN_ARGS("cuMemHostAlloc", LOG_OUT64(0), LA(pp), LA(size), LA(flags));
    API_NEED_INIT();
    API_RETURN(host_alloc(pp, size, flags));
}

SG_API CUresult cuMemAllocHost_v2(void **pp, size_t size) {
    API_BEGIN_ARGS("cuMemAllocHost_v2", LOG_OUT64(0), LA(pp), LA(size));
    API_NEED_INIT();
    API_RETURN(host_alloc(pp, size, 0));
}

SG_API CUresult cuMemFreeHost(void *p) {
    API_BEGIN_ARGS("cuMemFreeHost", 0, LA(p));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || a->kind != A_HOST || a->base != (CUdeviceptr)(uintptr_t)p) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        sg_wait_device_idle(-1);
        a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
        if (a != NULL) {
            free_allocation(a);
            if (SG_CHECKING()) sg_ck_freed((CUdeviceptr)(uintptr_t)p, NULL);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *dptr, void *p, unsigned int flags) {
    API_BEGIN_ARGS("cuMemHostGetDevicePointer_v2", LOG_OUT64(0), LA(dptr), LA(p), LA(flags));
    API_NEED_INIT();
    if (dptr == NULL || flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || (a->kind != A_HOST && a->kind != A_REGISTERED))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *dptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemHostGetFlags(unsigned int *flags, void *p) {
    API_BEGIN_ARGS("cuMemHostGetFlags", LOG_OUT32(0), LA(flags), LA(p));
    API_NEED_INIT();
    if (flags == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || a->kind != A_HOST)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = a->flags;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) {
    API_BEGIN_ARGS("cuMemHostRegister_v2", 0, LA(p), LA(size), LA(flags));
    API_NEED_INIT();
    if (p == NULL || size == 0 || (flags & ~0xFu)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c != NULL) {
        if (alloc_overlapping((uintptr_t)p, size) != NULL || sg_is_device_range((uintptr_t)p)) {
            err = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        } else {
            sg_alloc *a = alloc_add((CUdeviceptr)(uintptr_t)p, size, A_REGISTERED, c->dev, c->o.h);
            if (a == NULL)
                err = CUDA_ERROR_OUT_OF_MEMORY;
            else
                a->flags = flags;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(err);
}

SG_API CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags) {
    return cuMemHostRegister_v2(p, size, flags);
}

SG_API CUresult cuMemHostUnregister(void *p) {
    API_BEGIN_ARGS("cuMemHostUnregister", 0, LA(p));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || a->kind != A_REGISTERED || a->base != (CUdeviceptr)(uintptr_t)p) {
        r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        sg_wait_device_idle(-1);
        a = sg_alloc_find((CUdeviceptr)(uintptr_t)p);
        if (a != NULL) {
            alloc_remove(a);
            if (SG_CHECKING()) sg_ck_freed((CUdeviceptr)(uintptr_t)p, NULL);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- stream-ordered allocation: memory pools ----------------------------------------------- */

typedef struct {
    CUdeviceptr base;
    size_t size;
    uint64_t stream;   /* the stream whose cuMemFreeAsync returned it */
    int reached;       /* the free has executed in that stream */
    uint64_t token;    /* names this free (a block freed, reused and freed again is two) */
} pool_block;

static uint64_t next_free_token = 1;

typedef struct sg_pool {
    sg_obj o;
    int dev;
    int is_default;
    sg_pool_props props;
    int reuse_follow_events, reuse_opportunistic, reuse_internal;
    cuuint64_t release_threshold;
    cuuint64_t reserved, reserved_high, used, used_high;
    pool_block *blocks; /* freed blocks kept by the pool */
    int nblocks, cap_blocks;
    int access[64];     /* access flags of other devices */
    int imported;       /* cuMemPoolImportFromShareableHandle's: no allocation of its own */
    int fd;             /* imported: the exporter's device file (this process's descriptor) */
    struct sg_pool *prev, *next; /* the live pools (live_pools), for the trim at a sync */
} sg_pool;

static sg_pool **default_pools, **current_pools;
/* Every live pool, linked (sg_lock held): a synchronisation trims each, and walks only
 * these, not the handle table, which keeps what every destroyed stream and event left
 * and so grows with the life of the process. */
static sg_pool *live_pools;

static sg_pool *pool_new(int dev) {
    sg_pool *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->dev = dev;
    p->reuse_follow_events = 1;
    p->reuse_opportunistic = 1;
    p->reuse_internal = 1;
    p->props.alloc_type = 1;
    p->props.location.type = 1;
    p->props.location.id = dev;
    sg_handle_new(p, K_POOL);
    p->next = live_pools;
    if (live_pools != NULL) live_pools->prev = p;
    live_pools = p;
    return p;
}

static void pool_unlink(sg_pool *p) {
    if (p->prev != NULL) p->prev->next = p->next;
    else live_pools = p->next;
    if (p->next != NULL) p->next->prev = p->prev;
    p->prev = p->next = NULL;
}

static sg_pool *default_pool(int dev) {
    if (default_pools == NULL) {
        default_pools = calloc((size_t)sg_cfg.devices, sizeof *default_pools);
        current_pools = calloc((size_t)sg_cfg.devices, sizeof *current_pools);
    }
    if (default_pools[dev] == NULL) {
        default_pools[dev] = pool_new(dev);
        default_pools[dev]->is_default = 1;
    }
    if (current_pools[dev] == NULL) current_pools[dev] = default_pools[dev];
    return default_pools[dev];
}

static sg_pool *current_pool(int dev) {
    default_pool(dev);
    return current_pools[dev];
}

static void pool_drop_block(sg_pool *p, int i) {
    sg_dev_free_raw(p->dev, p->blocks[i].base, p->blocks[i].size);
    p->reserved -= p->blocks[i].size;
    p->blocks[i] = p->blocks[--p->nblocks];
}

/* Releases freed memory whose free has executed until at most keep bytes stay reserved. */
static void pool_trim(sg_pool *p, size_t keep) {
    for (int i = p->nblocks - 1; i >= 0 && p->reserved > keep; i--)
        if (p->blocks[i].reached) pool_drop_block(p, i);
}

/* A host synchronisation: each live pool releases what it keeps past its threshold. */
void sg_pools_on_sync(void) {
    for (sg_pool *p = live_pools; p != NULL; p = p->next) pool_trim(p, p->release_threshold);
}

static CUresult pool_alloc(sg_pool *p, size_t size, sg_stream *s, CUdeviceptr *out) {
    size_t need = round_up(size, DEVICE_ALIGN);
    int pick = -1;
    /* A block freed on this same stream is reusable at once: stream order keeps the
     * free before the new use.  Then blocks whose free already ran. */
    for (int i = 0; i < p->nblocks; i++)
        if (p->blocks[i].stream == s->o.h && p->blocks[i].size >= need &&
            (pick < 0 || p->blocks[i].size < p->blocks[pick].size))
            pick = i;
    if (pick < 0 && p->reuse_opportunistic) {
        for (int i = 0; i < p->nblocks; i++)
            if (p->blocks[i].reached && p->blocks[i].size >= need &&
                (pick < 0 || p->blocks[i].size < p->blocks[pick].size))
                pick = i;
    }
    CUdeviceptr base;
    size_t size_taken;
    if (pick >= 0) {
        base = p->blocks[pick].base;
        size_taken = p->blocks[pick].size;
        p->blocks[pick] = p->blocks[--p->nblocks];
    } else {
        CUresult r = sg_dev_alloc_raw(p->dev, need, &base);
        if (r != CUDA_SUCCESS) {
            pool_trim(p, 0);
            r = sg_dev_alloc_raw(p->dev, need, &base);
            if (r != CUDA_SUCCESS) return r;
        }
        size_taken = need;
        p->reserved += need;
        if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    }
    sg_alloc *a = alloc_add(base, size, A_POOL, p->dev, 0);
    if (a == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    a->pool = p->o.h;
    a->map_len = size_taken; /* the block's full size */
    a->ctx = s->ctx->o.h;
    p->used += size_taken;
    if (p->used > p->used_high) p->used_high = p->used;
    *out = base;
    return CUDA_SUCCESS;
}

void sg_pool_release_block(sg_alloc *a) {
    sg_pool *p = sg_handle_get(a->pool, K_POOL);
    if (p == NULL) {
        sg_dev_free_raw(a->dev, a->base, a->map_len);
    } else {
        p->used -= a->map_len;
        if (p->nblocks == p->cap_blocks) {
            int cap = p->cap_blocks ? p->cap_blocks * 2 : 16;
            pool_block *grown = realloc(p->blocks, (size_t)cap * sizeof *grown);
            if (grown != NULL) {
                p->blocks = grown;
                p->cap_blocks = cap;
            }
        }
        if (p->nblocks < p->cap_blocks) {
            pool_block *b = &p->blocks[p->nblocks++];
            b->base = a->base;
            b->size = a->map_len;
            b->stream = 0;
            b->reached = 1;
            b->token = next_free_token++;
        } else {
            sg_dev_free_raw(p->dev, a->base, a->map_len);
            p->reserved -= a->map_len;
        }
    }
    alloc_remove(a);
}

void sg_pool_free_reached(uint64_t pool, uint64_t token) {
    sg_pool *p = sg_handle_get(pool, K_POOL);
    if (p == NULL) return;
    for (int i = 0; i < p->nblocks; i++)
        if (p->blocks[i].token == token) p->blocks[i].reached = 1;
}

/* A zero-byte stream-ordered allocation succeeds, as the driver's does, and gives the null
 * pointer, which cuMemFreeAsync accepts (and does nothing with). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t size, sg_pool *given, uint64_t stream) {
    if (dptr == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = sg_stream_resolve(stream, &err);
    CUresult r = err;
    if (s != NULL) {
        if (size == 0) {
            *dptr = 0;
            r = CUDA_SUCCESS;
        } else if (s->capture != NULL) {
            r = CUDA_ERROR_NOT_SUPPORTED; /* graph memory nodes are not simulated */
        } else {
            /* The pool current to the stream's device, unless one is given. */
            sg_pool *p = given ? given : current_pool(s->ctx->dev);
            r = p ? pool_alloc(p, size, s, dptr) : CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream) {
    API_BEGIN_ARGS("cuMemAllocAsync", LOG_OUT64(0), LA(dptr), LA(size), LA(stream));
    API_NEED_INIT();
    API_RETURN(alloc_async(dptr, size, NULL, H(stream)));
}

SG_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                        CUstream stream) {
    API_BEGIN_ARGS("cuMemAllocFromPoolAsync", LOG_OUT64(0), LA(dptr), LA(size), LA(pool), LA(stream));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = sg_handle_get(H(pool), K_POOL);
    int imported = p != NULL && p->imported;
    pthread_mutex_unlock(&sg_lock);
    /* An imported pool makes no allocations (the driver's words). */
    if (p == NULL || imported) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    API_RETURN(alloc_async(dptr, size, p, H(stream)));
}

SG_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
    API_BEGIN_ARGS("cuMemFreeAsync", 0, LA(dptr), LA(stream));
    API_NEED_INIT();
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = sg_stream_resolve(H(stream), &err);
    sg_alloc *a = sg_alloc_find(dptr);
    CUresult r = CUDA_SUCCESS;
    if (s == NULL) {
        r = err;
    } else if (dptr == 0) {
        r = CUDA_SUCCESS; /* what a zero-byte cuMemAllocAsync gave */
    } else if (a == NULL || a->base != dptr) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (s->capture != NULL) {
        r = CUDA_ERROR_NOT_SUPPORTED;
    } else if (a->kind == A_HOST || a->kind == A_REGISTERED || (a->kind == A_IPC && a->ipc_legacy)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (a->kind == A_IPC && a->ipc_refs > 1) {
        a->ipc_refs--;
    } else if (a->kind != A_POOL) {
        /* (A pool pointer imported from another process is unmapped here alone, when the
         * stream reaches the free.) */
        /* Memory from cuMemAlloc or cuMemAllocManaged, freed in stream order too. */
        sg_op *op = sg_op_new(OP_ALLOC_FREE);
        if (op == NULL) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->u.alloc_free.kind = a->kind;
            op->u.alloc_free.dev = a->dev;
            op->u.alloc_free.base = a->base;
            op->u.alloc_free.size = a->size;
            op->u.alloc_free.map = a->map_base;
            op->u.alloc_free.len = a->map_len;
            r = sg_enqueue(s, op);
            if (r == CUDA_SUCCESS) {
                alloc_remove(a);
                if (SG_CHECKING()) sg_ck_freed(dptr, s);
            }
        }
    } else {
        sg_pool *p = sg_handle_get(a->pool, K_POOL);
        uint64_t pool_h = a->pool, token = 0;
        CUdeviceptr base = a->base;
        sg_pool_release_block(a);
        for (int i = 0; p != NULL && i < p->nblocks; i++) {
            if (p->blocks[i].base == base) {
                p->blocks[i].stream = s->o.h;
                p->blocks[i].reached = 0;
                token = p->blocks[i].token;
            }
        }
        sg_op *op = sg_op_new(OP_POOL_FREE);
        if (op) {
            op->u.pool_free.pool = pool_h;
            op->u.pool_free.token = token;
        }
        r = sg_enqueue(s, op);
        if (r == CUDA_SUCCESS && SG_CHECKING()) sg_ck_freed(base, s);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static sg_pool *pool_get(CUmemoryPool h) { return sg_handle_get(H(h), K_POOL); }

SG_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetDefaultMemPool", LOG_OUT64(0), LA(out), LA(dev));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&sg_lock);
    *out = P(default_pool(dev)->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetMemPool", LOG_OUT64(0), LA(out), LA(dev));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&sg_lock);
    *out = P(current_pool(dev)->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    API_BEGIN_ARGS("cuDeviceSetMemPool", 0, LA(dev), LA(pool));
    API_NEED_INIT();
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = CUDA_SUCCESS;
    if (p == NULL || p->dev != dev || p->imported)
        r = CUDA_ERROR_INVALID_VALUE;
    else {
        default_pool(dev);
        current_pools[dev] = p;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* The (location, allocation type) pairs CUDA 13 documents for cuMemGetMemPool and its
 * siblings: a device, the host or a host NUMA node, with pinned or managed allocations, and
 * pinned in a device locality domain, managed with no location (type 0,
 * CU_MEM_LOCATION_TYPE_NONE); anything else is
 * INVALID_VALUE.  The simulator has pools for device memory only: a valid pair naming the
 * host or managed memory is NOT_SUPPORTED (and the device attributes say so:
 * HOST_MEMORY_POOLS_SUPPORTED and HOST_NUMA_MEMORY_POOLS_SUPPORTED are 0, and so is
 * CONCURRENT_MANAGED_ACCESS, which managed pools need). */
static CUresult location_device(const sg_mem_location *loc, int type, int *dev) {
    if (loc == NULL || (type != 1 && type != 2)) return CUDA_ERROR_INVALID_VALUE;
    int known = loc->type == 1 || loc->type == 2 || loc->type == 3 || (loc->type == 0 && type == 2) ||
                (loc->type == 6 && type == 1); /* 6: a device locality domain */
    if (!known) return CUDA_ERROR_INVALID_VALUE;
    if (loc->type == 1 && !sg_device_valid(loc->id)) return CUDA_ERROR_INVALID_DEVICE;
    if (loc->type != 1 || type != 1) return CUDA_ERROR_NOT_SUPPORTED;
    *dev = loc->id;
    return CUDA_SUCCESS;
}

SG_API CUresult cuMemGetDefaultMemPool(CUmemoryPool *out, sg_mem_location *loc, int type) {
    API_BEGIN_ARGS("cuMemGetDefaultMemPool", LOG_OUT64(0), LA(out), LA(loc), LA(type));
    API_NEED_INIT();
    int dev;
    CUresult r = out ? location_device(loc, type, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&sg_lock);
        *out = P(default_pool(dev)->o.h);
        pthread_mutex_unlock(&sg_lock);
    }
    API_RETURN(r);
}

SG_API CUresult cuMemGetMemPool(CUmemoryPool *out, sg_mem_location *loc, int type) {
    API_BEGIN_ARGS("cuMemGetMemPool", LOG_OUT64(0), LA(out), LA(loc), LA(type));
    API_NEED_INIT();
    int dev;
    CUresult r = out ? location_device(loc, type, &dev) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&sg_lock);
        *out = P(current_pool(dev)->o.h);
        pthread_mutex_unlock(&sg_lock);
    }
    API_RETURN(r);
}

SG_API CUresult cuMemSetMemPool(sg_mem_location *loc, int type, CUmemoryPool pool) {
    API_BEGIN_ARGS("cuMemSetMemPool", 0, LA(loc), LA(type), LA(pool));
    API_NEED_INIT();
    int dev;
    CUresult r = location_device(loc, type, &dev);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&sg_lock);
        sg_pool *p = pool_get(pool);
        if (p == NULL || p->dev != dev || p->imported) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            default_pool(dev);
            current_pools[dev] = p;
        }
        pthread_mutex_unlock(&sg_lock);
    }
    API_RETURN(r);
}

SG_API CUresult cuMemPoolCreate(CUmemoryPool *out, const sg_pool_props *props) {
    API_BEGIN_ARGS("cuMemPoolCreate", LOG_OUT64(0), LA(out), LA(props));
    API_NEED_INIT();
    if (out == NULL || props == NULL || (props->alloc_type != 1 && props->alloc_type != 2))
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    /* managed pools and host pools are not simulated */
    if (props->alloc_type != 1 || props->location.type != 1) API_RETURN(CUDA_ERROR_NOT_SUPPORTED);
    if (!sg_device_valid(props->location.id)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (props->handle_types & ~1) API_RETURN(CUDA_ERROR_NOT_SUPPORTED);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_new(props->location.id);
    if (p != NULL) {
        p->props = *props;
        *out = P(p->o.h);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

SG_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    API_BEGIN_ARGS("cuMemPoolDestroy", 0, LA(pool));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = CUDA_SUCCESS;
    if (p == NULL || p->is_default) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (current_pools && current_pools[p->dev] == p) current_pools[p->dev] = default_pools[p->dev];
        /* Blocks still allocated stay valid until freed; then go back to the device. */
        while (p->nblocks > 0) pool_drop_block(p, p->nblocks - 1);
        /* An imported pool: its descriptor goes; pointers imported from it stay mapped
         * until freed. */
        if (p->imported) close(p->fd);
        sg_handle_drop(p->o.h);
        pool_unlink(p);
        free(p->blocks);
        free(p);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    API_BEGIN_ARGS("cuMemPoolTrimTo", 0, LA(pool), LA(keep));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    if (p != NULL) pool_trim(p, keep);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

enum {
    POOL_REUSE_FOLLOW_EVENTS = 1, POOL_REUSE_OPPORTUNISTIC, POOL_REUSE_INTERNAL,
    POOL_RELEASE_THRESHOLD, POOL_RESERVED_CURRENT, POOL_RESERVED_HIGH, POOL_USED_CURRENT,
    POOL_USED_HIGH,
};

SG_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
    API_BEGIN_ARGS("cuMemPoolSetAttribute", 0, LA(pool), LA(attr), LA(value));
    API_NEED_INIT();
    if (value == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p != NULL) {
        switch (attr) {
        case POOL_REUSE_FOLLOW_EVENTS: p->reuse_follow_events = *(int *)value != 0; break;
        case POOL_REUSE_OPPORTUNISTIC: p->reuse_opportunistic = *(int *)value != 0; break;
        case POOL_REUSE_INTERNAL: p->reuse_internal = *(int *)value != 0; break;
        case POOL_RELEASE_THRESHOLD: p->release_threshold = *(cuuint64_t *)value; break;
        case POOL_RESERVED_HIGH:
            if (*(cuuint64_t *)value != 0) r = CUDA_ERROR_INVALID_VALUE;
            else p->reserved_high = p->reserved;
            break;
        case POOL_USED_HIGH:
            if (*(cuuint64_t *)value != 0) r = CUDA_ERROR_INVALID_VALUE;
            else p->used_high = p->used;
            break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
    API_BEGIN_ARGS("cuMemPoolGetAttribute", 0, LA(pool), LA(attr), LA(value));
    API_NEED_INIT();
    if (value == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p != NULL) {
        switch (attr) {
        case POOL_REUSE_FOLLOW_EVENTS: *(int *)value = p->reuse_follow_events; break;
        case POOL_REUSE_OPPORTUNISTIC: *(int *)value = p->reuse_opportunistic; break;
        case POOL_REUSE_INTERNAL: *(int *)value = p->reuse_internal; break;
        case POOL_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
        case POOL_RESERVED_CURRENT: *(cuuint64_t *)value = p->reserved; break;
        case POOL_RESERVED_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
        case POOL_USED_CURRENT: *(cuuint64_t *)value = p->used; break;
        case POOL_USED_HIGH: *(cuuint64_t *)value = p->used_high; break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const sg_access_desc *map, size_t count) {
    API_BEGIN_ARGS("cuMemPoolSetAccess", 0, LA(pool), LA(map), LA(count));
    API_NEED_INIT();
    if (map == NULL && count > 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; p && i < count && r == CUDA_SUCCESS; i++) {
        if (map[i].location.type != 1 || !sg_device_valid(map[i].location.id))
            r = CUDA_ERROR_INVALID_DEVICE;
        else if (map[i].flags != 0 && map[i].flags != 1 && map[i].flags != 3)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (map[i].location.id == p->dev && map[i].flags != 3)
            r = CUDA_ERROR_INVALID_DEVICE; /* the owning device keeps read-write access */
        else if (map[i].location.id != p->dev)
            p->access[map[i].location.id] = map[i].flags;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemPoolGetAccess(int *flags, CUmemoryPool pool, sg_mem_location *loc) {
    API_BEGIN_ARGS("cuMemPoolGetAccess", LOG_OUT32(0), LA(flags), LA(pool), LA(loc));
    API_NEED_INIT();
    if (flags == NULL || loc == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p != NULL) {
        if (loc->type != 1 || !sg_device_valid(loc->id))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *flags = loc->id == p->dev ? 3 : p->access[loc->id];
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- pointer attributes --------------------------------------------------------------------- */

enum {
    PA_CONTEXT = 1, PA_MEMORY_TYPE, PA_DEVICE_POINTER, PA_HOST_POINTER, PA_P2P_TOKENS,
    PA_SYNC_MEMOPS, PA_BUFFER_ID, PA_IS_MANAGED, PA_DEVICE_ORDINAL, PA_IS_LEGACY_IPC,
    PA_RANGE_START, PA_RANGE_SIZE, PA_MAPPED, PA_ALLOWED_HANDLE_TYPES, PA_GDR_CAPABLE,
    PA_ACCESS_FLAGS, PA_MEMPOOL, PA_MAPPING_SIZE, PA_MAPPING_BASE, PA_BLOCK_ID, PA_DECOMPRESS,
};

static void put_u32(void *data, unsigned v) { memcpy(data, &v, 4); }
static void put_i32(void *data, int v) { memcpy(data, &v, 4); }
static void put_u64(void *data, unsigned long long v) { memcpy(data, &v, 8); }

/* Writes one attribute of a (which may be NULL: an unknown pointer).  Returns
 * INVALID_VALUE where the single-attribute query fails for that pointer; the
 * caller of the plural query writes the default instead. */
static CUresult pointer_attribute(void *data, int attr, CUdeviceptr p, sg_alloc *a) {
    int is_dev = a && (a->kind == A_DEVICE || a->kind == A_POOL || a->kind == A_IPC);
    /* Pool memory, here or imported from another process's pool. */
    int from_pool = a && (a->kind == A_POOL || (a->kind == A_IPC && !a->ipc_legacy));
    switch (attr) {
    case PA_CONTEXT:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, from_pool ? 0 : a->ctx);
        return CUDA_SUCCESS;
    case PA_MEMORY_TYPE:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, (a->kind == A_HOST || a->kind == A_REGISTERED) ? SG_MEMTYPE_HOST
                                                                       : SG_MEMTYPE_DEVICE);
        return CUDA_SUCCESS;
    case PA_DEVICE_POINTER:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, p);
        return CUDA_SUCCESS;
    case PA_HOST_POINTER:
        if (a == NULL || is_dev) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, p);
        return CUDA_SUCCESS;
    case PA_P2P_TOKENS:
        return CUDA_ERROR_NOT_SUPPORTED;
    case PA_SYNC_MEMOPS:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, a->sync_memops);
        return CUDA_SUCCESS;
    case PA_BUFFER_ID:
    case PA_BLOCK_ID:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, a->buffer_id);
        return CUDA_SUCCESS;
    case PA_IS_MANAGED:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, a->kind == A_MANAGED);
        return CUDA_SUCCESS;
    case PA_DEVICE_ORDINAL:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_i32(data, a->dev);
        return CUDA_SUCCESS;
    case PA_IS_LEGACY_IPC:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, a->kind == A_DEVICE);
        return CUDA_SUCCESS;
    case PA_RANGE_START:
    case PA_MAPPING_BASE:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, a->base);
        return CUDA_SUCCESS;
    case PA_RANGE_SIZE:
    case PA_MAPPING_SIZE:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, a->size);
        return CUDA_SUCCESS;
    case PA_MAPPED:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, 1);
        return CUDA_SUCCESS;
    case PA_ALLOWED_HANDLE_TYPES: {
        /* The handle types of the pool it came from; none for other memory. */
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        sg_pool *pool = from_pool ? sg_handle_get(a->pool, K_POOL) : NULL;
        put_u32(data, pool ? (unsigned)pool->props.handle_types : 0);
        return CUDA_SUCCESS;
    }
    case PA_GDR_CAPABLE:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, is_dev);
        return CUDA_SUCCESS;
    case PA_ACCESS_FLAGS:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, 3);
        return CUDA_SUCCESS;
    case PA_MEMPOOL:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u64(data, from_pool ? a->pool : 0);
        return CUDA_SUCCESS;
    case PA_DECOMPRESS:
        if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
        put_u32(data, 0);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SG_API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p) {
    API_BEGIN_ARGS("cuPointerGetAttribute", 0, LA(data), LA(attr), LA(p));
    API_NEED_INIT();
    if (data == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    CUresult r = pointer_attribute(data, attr, p, sg_alloc_find(p));
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr p) {
    API_BEGIN_ARGS("cuPointerGetAttributes", 0, LA(n), LA(attrs), LA(data), LA(p));
    API_NEED_INIT();
    if (n == 0 || attrs == NULL || data == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = CUDA_SUCCESS;
    for (unsigned i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (data[i] == NULL) continue;
        if (attrs[i] < PA_CONTEXT || attrs[i] > PA_DECOMPRESS || attrs[i] == PA_P2P_TOKENS) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (pointer_attribute(data[i], attrs[i], p, a) == CUDA_SUCCESS) continue;
        /* Not a pointer the driver knows (or not that kind): defaults, no error. */
        switch (attrs[i]) {
        case PA_DEVICE_ORDINAL: put_i32(data[i], -2); break;
        case PA_CONTEXT: case PA_DEVICE_POINTER: case PA_HOST_POINTER: case PA_BUFFER_ID:
        case PA_RANGE_START: case PA_RANGE_SIZE: case PA_MEMPOOL: case PA_MAPPING_SIZE:
        case PA_MAPPING_BASE: case PA_BLOCK_ID:
            put_u64(data[i], 0);
            break;
        default: put_u32(data[i], 0); break;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuPointerSetAttribute(const void *value, int attr, CUdeviceptr p) {
    API_BEGIN_ARGS("cuPointerSetAttribute", 0, LA(value), LA(attr), LA(p));
    API_NEED_INIT();
    if (value == NULL || attr != PA_SYNC_MEMOPS) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    if (a != NULL) memcpy(&a->sync_memops, value, 4);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SG_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, sg_mem_location loc,
                                      unsigned int flags, CUstream stream) {
    API_BEGIN_ARGS("cuMemPrefetchAsync_v2", 0, LA(p), LA(count), LA_LOC(loc), LA(flags), LA(stream));
    API_NEED_INIT();
    (void)loc;
    (void)stream;
    if (flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = (a == NULL || a->kind != A_MANAGED || count > a->size - (size_t)(p - a->base))
                     ? CUDA_ERROR_INVALID_VALUE
                     : CUDA_SUCCESS;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t count, int advice, sg_mem_location loc) {
    API_BEGIN_ARGS("cuMemAdvise_v2", 0, LA(p), LA(count), LA(advice), LA_LOC(loc));
    API_NEED_INIT();
    (void)loc;
    if (advice < 1 || advice > 6) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = (a == NULL || a->kind != A_MANAGED || count > a->size - (size_t)(p - a->base))
                     ? CUDA_ERROR_INVALID_VALUE
                     : CUDA_SUCCESS;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- memory across processes (ipc.c has the shared files) ------------------------------------ */

/* The 64 bytes of a CUipcMemHandle, as the simulator fills them. */
typedef struct {
    uint32_t magic;  /* MEM_HANDLE_MAGIC */
    int32_t pid;     /* the exporting process */
    uint64_t nonce;  /* its IPC file's nonce (a reused pid is another process) */
    int32_t fd;      /* its IPC file's descriptor number there */
    int32_t dev_fd;  /* its device memory file's descriptor number there */
    int32_t slot;    /* the allocation's slot in the IPC file */
    int32_t dev;
    uint64_t offset; /* the allocation's place in the device memory file */
    uint64_t size;
    uint64_t id;     /* its buffer id: a later allocation at the same place is another */
    uint64_t reserved;
} ipc_mem_handle;
_Static_assert(sizeof(ipc_mem_handle) == 64, "CUipcMemHandle layout");
#define MEM_HANDLE_MAGIC 0x4d504953u /* "SIPM" */

/* The 64 bytes of a CUmemPoolPtrExportData. */
typedef struct {
    uint32_t magic;  /* POOL_PTR_MAGIC */
    int32_t pid;
    uint64_t nonce;
    int32_t fd;      /* the exporter's IPC file */
    int32_t slot;
    int32_t dev;
    int32_t reserved;
    uint64_t offset, size, id;
    uint64_t inode;  /* the device memory file's: the imported pool must be that file */
} ipc_pool_ptr;
_Static_assert(sizeof(ipc_pool_ptr) == 64, "CUmemPoolPtrExportData layout");
#define POOL_PTR_MAGIC 0x50504953u /* "SIPP" */

typedef struct {
    unsigned char bytes[64];
} ipc_bytes;

/* The allocation's slot in this process's IPC file (made on its first export): 0 or an
 * error. */
static CUresult export_slot(sg_alloc *a, uint64_t *nonce, int *fd) {
    if (sg_ipc_self(nonce, fd) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (a->ipc_slot == 0) {
        size_t off = (size_t)((unsigned char *)(uintptr_t)a->base - arenas[a->dev].none_base);
        a->ipc_slot = sg_ipc_mem_slot_add(a->buffer_id, off, a->size, a->dev);
        if (a->ipc_slot == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* An import already mapped here (legacy or from a pool) of the exporter's allocation. */
static sg_alloc *import_find(int pid, uint64_t nonce, uint64_t id, int legacy) {
    for (int i = 0; i < nallocs; i++) {
        sg_alloc *a = allocs[i];
        if (a->kind == A_IPC && a->ipc_pid == pid && a->ipc_nonce == nonce && a->ipc_id == id &&
            a->ipc_legacy == legacy)
            return a;
    }
    return NULL;
}

/* Maps an exporter's allocation from fd and registers it (lock held). */
static sg_alloc *import_map(int fd, int dev, uint64_t ctx, size_t off, size_t size, CUresult *err) {
    void *map;
    size_t len, delta;
    CUdeviceptr base = sg_ipc_map(fd, off, size, &map, &len, &delta);
    if (base == 0) {
        *err = CUDA_ERROR_MAP_FAILED;
        return NULL;
    }
    sg_alloc *a = alloc_add(base, size, A_IPC, dev, ctx);
    if (a == NULL) {
        munmap(map, len);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    a->map_base = map;
    a->map_len = len;
    a->rw_delta = delta;
    a->ipc_refs = 1;
    return a;
}

SG_API CUresult cuIpcGetMemHandle(void *handle, CUdeviceptr p) {
    API_BEGIN_ARGS("cuIpcGetMemHandle", 0, LA(handle), LA(p));
    API_NEED_INIT();
    if (handle == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = CUDA_SUCCESS;
    ipc_mem_handle h = {0};
    /* Only cuMemAlloc's memory; any address inside it names the whole allocation. */
    if (a == NULL || a->kind != A_DEVICE) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if ((r = export_slot(a, &h.nonce, &h.fd)) == CUDA_SUCCESS) {
        h.magic = MEM_HANDLE_MAGIC;
        h.pid = (int32_t)getpid();
        h.dev_fd = arenas[a->dev].fd;
        h.slot = a->ipc_slot - 1;
        h.dev = a->dev;
        h.offset = (uint64_t)((unsigned char *)(uintptr_t)a->base - arenas[a->dev].none_base);
        h.size = a->size;
        h.id = a->buffer_id;
        memcpy(handle, &h, sizeof h);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static CUresult ipc_open_mem(CUdeviceptr *out, const ipc_bytes *handle, unsigned int flags) {
    if (out == NULL || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE; /* 1: lazy peer access */
    ipc_mem_handle h;
    memcpy(&h, handle->bytes, sizeof h);
    if (h.magic != MEM_HANDLE_MAGIC || !sg_device_valid(h.dev)) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_alloc *a = NULL;
    if (c != NULL && sg_ipc_is_self(h.pid, h.nonce)) {
        err = CUDA_ERROR_INVALID_CONTEXT; /* the driver's answer in the exporting process */
    } else if (c != NULL && (a = import_find(h.pid, h.nonce, h.id, 1)) != NULL) {
        a->ipc_refs++; /* opened before: the same address, one more reference */
    } else if (c != NULL) {
        struct sg_ipc_peer *peer = sg_ipc_peer_open(h.pid, h.nonce, h.fd, &err);
        if (peer != NULL && !sg_ipc_peer_mem_live(peer, h.slot, h.id, h.offset, h.size))
            err = CUDA_ERROR_INVALID_HANDLE; /* freed by the exporter */
        int fd = -1;
        if (peer != NULL && err == CUDA_SUCCESS) {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.dev_fd);
            fd = open(path, O_RDWR | O_CLOEXEC);
            if (fd < 0) err = CUDA_ERROR_INVALID_HANDLE;
        }
        sg_ipc_peer_release(peer);
        if (fd >= 0) {
            a = import_map(fd, h.dev, c->o.h, h.offset, h.size, &err);
            close(fd);
        }
        if (a != NULL) {
            a->ipc_legacy = 1;
            a->ipc_pid = h.pid;
            a->ipc_nonce = h.nonce;
            a->ipc_id = h.id;
        }
    }
    if (a != NULL) *out = a->base;
    pthread_mutex_unlock(&sg_lock);
    return a ? CUDA_SUCCESS : err;
}

SG_API CUresult cuIpcOpenMemHandle(CUdeviceptr *out, ipc_bytes handle, unsigned int flags) {
    API_BEGIN_ARGS("cuIpcOpenMemHandle", LOG_OUT64(0), LA(out), LA(0), LA(flags));
    API_NEED_INIT();
    API_RETURN(ipc_open_mem(out, &handle, flags));
}

SG_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *out, ipc_bytes handle, unsigned int flags) {
    API_BEGIN_ARGS("cuIpcOpenMemHandle_v2", LOG_OUT64(0), LA(out), LA(0), LA(flags));
    API_NEED_INIT();
    API_RETURN(ipc_open_mem(out, &handle, flags));
}

SG_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    API_BEGIN_ARGS("cuIpcCloseMemHandle", 0, LA(p));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(p);
    CUresult r = CUDA_SUCCESS;
    if (a == NULL || a->kind != A_IPC || !a->ipc_legacy || a->base != p) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (--a->ipc_refs == 0) {
        /* Unmapped once the device's work is done with it (as cuMemFree waits). */
        sg_wait_device_idle(a->dev);
        a = sg_alloc_find(p);
        if (a != NULL && a->base == p && a->kind == A_IPC) {
            free_allocation(a);
            if (SG_CHECKING()) sg_ck_freed(p, NULL);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* Pools: the shareable handle is a descriptor of the device's memory file itself (the
 * simulator has one file per device); the export data of each pointer names the exporter,
 * the allocation and its range in that file. */
SG_API CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool, int type,
                                                 unsigned long long flags) {
    API_BEGIN_ARGS("cuMemPoolExportToShareableHandle", LOG_OUT32(0), LA(handle_out), LA(pool), LA(type), LA(flags));
    API_NEED_INIT();
    if (handle_out == NULL || flags != 0 || type != 1) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    CUresult r = CUDA_SUCCESS;
    if (p == NULL || p->imported || !(p->props.handle_types & 1)) {
        r = CUDA_ERROR_INVALID_VALUE; /* a pool made without the POSIX fd handle type */
    } else {
        int fd = fcntl(arenas[p->dev].fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else
            memcpy(handle_out, &fd, sizeof fd);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* The device whose memory file fd is (-1: not a simulated device's). */
static int device_of_file(int fd) {
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) return -1;
    target[n] = '\0';
    const char *name = strstr(target, "simgpu-device-");
    int dev;
    if (name == NULL || sscanf(name, "simgpu-device-%d", &dev) != 1 || !sg_device_valid(dev)) return -1;
    return dev;
}

SG_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *out, void *handle, int type,
                                                   unsigned long long flags) {
    API_BEGIN_ARGS("cuMemPoolImportFromShareableHandle", LOG_OUT64(0), LA(out), LA(handle), LA(type), LA(flags));
    API_NEED_INIT();
    if (out == NULL || flags != 0 || type != 1) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    int given = (int)(intptr_t)handle;
    int dev = device_of_file(given);
    if (dev < 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    int fd = fcntl(given, F_DUPFD_CLOEXEC, 0); /* the caller keeps its descriptor */
    if (fd < 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_new(dev);
    if (p != NULL) {
        p->imported = 1;
        p->fd = fd;
        p->props.handle_types = 1;
        *out = P(p->o.h);
    } else {
        close(fd);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

SG_API CUresult cuMemPoolExportPointer(void *out, CUdeviceptr ptr) {
    API_BEGIN_ARGS("cuMemPoolExportPointer", 0, LA(out), LA(ptr));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_alloc *a = sg_alloc_find(ptr);
    sg_pool *p = a && a->kind == A_POOL ? sg_handle_get(a->pool, K_POOL) : NULL;
    CUresult r = CUDA_SUCCESS;
    ipc_pool_ptr d = {0};
    struct stat st;
    if (p == NULL || a->base != ptr || !(p->props.handle_types & 1)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (fstat(arenas[a->dev].fd, &st) != 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if ((r = export_slot(a, &d.nonce, &d.fd)) == CUDA_SUCCESS) {
        d.magic = POOL_PTR_MAGIC;
        d.pid = (int32_t)getpid();
        d.slot = a->ipc_slot - 1;
        d.dev = a->dev;
        d.offset = (uint64_t)((unsigned char *)(uintptr_t)a->base - arenas[a->dev].none_base);
        d.size = a->size;
        d.id = a->buffer_id;
        d.inode = (uint64_t)st.st_ino;
        memcpy(out, &d, sizeof d);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuMemPoolImportPointer(CUdeviceptr *out, CUmemoryPool pool, const void *data) {
    API_BEGIN_ARGS("cuMemPoolImportPointer", LOG_OUT64(0), LA(out), LA(pool), LA(data));
    API_NEED_INIT();
    if (out == NULL || data == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    ipc_pool_ptr d;
    memcpy(&d, data, sizeof d);
    if (d.magic != POOL_PTR_MAGIC) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_pool *p = pool_get(pool);
    struct stat st;
    CUresult r = CUDA_SUCCESS;
    sg_alloc *a = NULL;
    if (p == NULL || !p->imported || p->dev != d.dev || fstat(p->fd, &st) != 0 ||
        (uint64_t)st.st_ino != d.inode) {
        r = CUDA_ERROR_INVALID_VALUE; /* not the pool this pointer came from */
    } else if ((a = import_find(d.pid, d.nonce, d.id, 0)) != NULL) {
        a->ipc_refs++;
    } else {
        struct sg_ipc_peer *peer = sg_ipc_peer_open(d.pid, d.nonce, d.fd, &r);
        if (peer != NULL && !sg_ipc_peer_mem_live(peer, d.slot, d.id, d.offset, d.size))
            r = CUDA_ERROR_INVALID_HANDLE; /* freed by the exporter */
        sg_ipc_peer_release(peer);
        if (peer != NULL && r == CUDA_SUCCESS) a = import_map(p->fd, p->dev, 0, d.offset, d.size, &r);
        if (a != NULL) {
            a->pool = p->o.h;
            a->ipc_pid = d.pid;
            a->ipc_nonce = d.nonce;
            a->ipc_id = d.id;
        }
    }
    if (a != NULL) *out = a->base;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(a ? CUDA_SUCCESS : r);
}
