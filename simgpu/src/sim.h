/* simgpu: a simulated CUDA driver (libcuda.so.1) for tests on machines without a GPU.
 *
 * Internal declarations shared by the simulator's source files.  Every type the
 * driver ABI needs is declared here from the documented layout (field order and
 * widths); no NVIDIA header is included or copied.
 *
 * Threading model: one global mutex (sg_lock) guards all driver state.  Each
 * stream has a worker thread that takes operations from its queue in order and
 * runs them without the lock held; every completion is broadcast on sg_progress,
 * which host-side waits and cross-stream dependencies wait on.  The stream-order
 * checker (check.c, SIMGPU_CHECK) runs on the host side only, under sg_lock, in the
 * calls that enqueue, synchronise and free: it decides order from the program's calls,
 * never from when the workers run.
 */
#ifndef SIMGPU_SIM_H
#define SIMGPU_SIM_H

#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SG_API __attribute__((visibility("default")))

/* ---- result codes (the driver's numbering) ---------------------------------- */
typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_MAP_FAILED = 205,
    CUDA_ERROR_FILE_NOT_FOUND = 301,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_FAILED = 719, /* never produced; named for injected failures */
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_PERMITTED = 800,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_CAPTURED_EVENT = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
    CUDA_ERROR_INVALID_CLUSTER_SIZE = 912,
    CUDA_ERROR_UNKNOWN = 999,
};

/* ---- scalar and handle types ---------------------------------------------------- */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long cuuint64_t;
typedef unsigned int cuuint32_t;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUlibrary;
typedef void *CUkernel;
typedef void *CUmemoryPool;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef void *CUgraphNode;
typedef void *CUlinkState;
typedef void *CUarray;
typedef void *CUgreenCtx;
typedef void (*CUhostFn)(void *userData);
typedef void (*CUstreamCallback)(CUstream stream, CUresult status, void *userData);

#define SG_STREAM_LEGACY ((uint64_t)1)
#define SG_STREAM_PER_THREAD ((uint64_t)2)

enum { SG_MEMTYPE_HOST = 1, SG_MEMTYPE_DEVICE = 2, SG_MEMTYPE_ARRAY = 3, SG_MEMTYPE_UNIFIED = 4 };
enum { SG_STREAM_NON_BLOCKING = 1 };
enum { SG_EVENT_BLOCKING_SYNC = 1, SG_EVENT_DISABLE_TIMING = 2, SG_EVENT_INTERPROCESS = 4 };
enum { SG_CAPTURE_NONE = 0, SG_CAPTURE_ACTIVE = 1, SG_CAPTURE_INVALIDATED = 2 };
enum { SG_CAPTURE_MODE_GLOBAL = 0, SG_CAPTURE_MODE_THREAD_LOCAL = 1, SG_CAPTURE_MODE_RELAXED = 2 };

/* ---- ABI structs (layouts as documented for the 64-bit driver) ------------------ */
typedef struct {
    size_t src_x, src_y;
    int src_type;
    const void *src_host;
    CUdeviceptr src_dev;
    CUarray src_array;
    size_t src_pitch;
    size_t dst_x, dst_y;
    int dst_type;
    void *dst_host;
    CUdeviceptr dst_dev;
    CUarray dst_array;
    size_t dst_pitch;
    size_t width, height;
} sg_copy2d_desc;

typedef struct {
    size_t src_x, src_y, src_z, src_lod;
    int src_type;
    const void *src_host;
    CUdeviceptr src_dev;
    CUarray src_array;
    void *src_reserved_or_ctx; /* reserved (3-D) or the source context (3-D peer) */
    size_t src_pitch, src_height;
    size_t dst_x, dst_y, dst_z, dst_lod;
    int dst_type;
    void *dst_host;
    CUdeviceptr dst_dev;
    CUarray dst_array;
    void *dst_reserved_or_ctx;
    size_t dst_pitch, dst_height;
    size_t width, height, depth;
} sg_copy3d_desc;

typedef struct {
    int type; /* 1: device, 2: host, 3: host NUMA node, 4: current host NUMA node */
    int id;
} sg_mem_location;

typedef struct {
    int alloc_type;   /* 1: pinned */
    int handle_types; /* bit mask of shareable handle kinds */
    sg_mem_location location;
    void *win32_security;
    size_t max_size;
    unsigned short usage;
    unsigned char reserved[54];
} sg_pool_props;

typedef struct {
    sg_mem_location location;
    int flags; /* 0: none, 1: read, 3: read-write */
} sg_access_desc;

typedef struct {
    int id;
    char pad[4];
    unsigned char value[64];
} sg_launch_attr;

typedef struct {
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_bytes;
    CUstream stream;
    sg_launch_attr *attrs;
    unsigned int num_attrs;
} sg_launch_config;

typedef struct {
    unsigned char bytes[16];
} sg_uuid;

_Static_assert(sizeof(sg_copy2d_desc) == 128, "2-D copy descriptor layout");
_Static_assert(sizeof(sg_copy3d_desc) == 200, "3-D copy descriptor layout");
_Static_assert(sizeof(sg_pool_props) == 88, "memory pool properties layout");
_Static_assert(sizeof(sg_access_desc) == 12, "access descriptor layout");
_Static_assert(sizeof(sg_launch_attr) == 72, "launch attribute layout");
_Static_assert(sizeof(sg_launch_config) == 56, "launch configuration layout");

/* ---- configuration ------------------------------------------------------------- */
typedef struct {
    int devices;            /* SIMGPU_DEVICES, default 2 */
    unsigned delay_us;      /* SIMGPU_DELAY_US, default 0 */
    int trace;              /* SIMGPU_TRACE=1 */
    size_t device_bytes;    /* SIMGPU_MEMORY_MB, default 8192 */
    int driver_version;     /* SIMGPU_DRIVER_VERSION, default 13000 */
    int compute_capability; /* SIMGPU_COMPUTE_CAPABILITY, major * 10 + minor, default 90 */
} sg_config;

/* ---- the stream-order checker (check.c) ------------------------------------------------ */
/* 0: off (SIMGPU_CHECK unset or 0), 1: report and go on, 2: abort at the first report.
 * Every hook of the checker is one test of this global (written and read under sg_lock,
 * set from SIMGPU_CHECK before the first entry point runs). */
extern int sg_check_mode;
#define SG_CHECKING() __builtin_expect(sg_check_mode != 0, 0)
struct sg_vc;        /* a vector clock */
struct sg_ck_stream; /* a stream's clock and slot */
struct sg_ck_alloc;  /* an allocation's access records */
/* A device-address range an operation reads (1), writes (2) or both (3). */
typedef struct {
    unsigned long long lo, len;
    unsigned mode;
} sg_ck_range;
extern sg_config sg_cfg;

/* The largest pitch a 2-D copy accepts (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
#define SG_MAX_PITCH 2147483647

/* ---- global lock, progress condition, initialisation ---------------------------- */
extern pthread_mutex_t sg_lock;
extern pthread_cond_t sg_progress;
extern int sg_initialized;
/* Set in a child forked after cuInit: every call there answers NOT_INITIALIZED. */
extern volatile sig_atomic_t sg_forked_child;
void sg_load_config(void);
int sg_compute_capability(void); /* major * 10 + minor, every device's */
double sg_now_ms(void);

/* ---- tracing, per-entry-point call counters, injected failures ------------------- */
int sg_api_index(const char *name);
/* Counts a call; returns nonzero with *fault set when an injected failure (simgpu_fail)
 * answers this call instead of the entry point. */
int sg_api_enter(int index, CUresult *fault);
/* Runs the user-object destructors the calling thread made due (graph.c), then traces. */
CUresult sg_api_leave(int index, CUresult result);
void sg_user_objects_run_due(void); /* no lock held */
/* The call log (simgpu_call_log_start): while it records, each entry point's call is logged
 * with its arguments.  Not recording, an entry point pays one relaxed load of sg_call_log_on.
 * API_BEGIN_ARGS(name, outs, a0, ...) lists the entry point's arguments (up to 6, each
 * converted with LA); `outs` marks those that are out-parameters (LOG_OUT32(i), LOG_OUT64(i):
 * argument i is a pointer the call writes a 4- or 8-byte value through): the log holds the
 * value written, read when the call returns CUDA_SUCCESS (0 otherwise, or for a NULL pointer). */
extern atomic_int sg_call_log_on;
void sg_call_log_begin(int index, unsigned outs, const uint64_t *args, int nargs);
#define LA(x) ((uint64_t)(uintptr_t)(x))
/* A location passed by value (sg_mem_location): its type in the high 32 bits, its id low. */
#define LA_LOC(l) (((uint64_t)(uint32_t)(l).type << 32) | (uint32_t)(l).id)
#define LOG_OUT32(i) (1u << (2 * (i)))
#define LOG_OUT64(i) (2u << (2 * (i)))
#define SG_NARGS_(...) ((int)(sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t)))
/* Each entry point caches its counter index in an atomic of its own: several threads may
 * make their first call at once (each then asks sg_api_index, which answers them all the
 * same index under its lock); later calls take no lock. */
#define API_INDEX_(name)                                                           \
    static atomic_int api_slot_ = -1;                                              \
    int api_index_ = atomic_load_explicit(&api_slot_, memory_order_acquire);       \
    if (api_index_ < 0) {                                                          \
        api_index_ = sg_api_index(name);                                           \
        atomic_store_explicit(&api_slot_, api_index_, memory_order_release);       \
    }
#define API_ENTER_()                                                               \
    do {                                                                           \
        CUresult fault_;                                                           \
        if (sg_api_enter(api_index_, &fault_))                                     \
            return sg_api_leave(api_index_, fault_);                               \
    } while (0)
#define API_LOG_(outs, args, n)                                                    \
    if (__builtin_expect(atomic_load_explicit(&sg_call_log_on, memory_order_relaxed) != 0, 0)) \
        sg_call_log_begin(api_index_, (outs), (args), (n))
/* An entry point without arguments (or whose arguments are not logged). */
#define API_BEGIN(name)                                                            \
    API_INDEX_(name)                                                               \
    API_LOG_(0u, NULL, 0);                                                         \
    API_ENTER_()
#define API_BEGIN_ARGS(name, outs, ...)                                            \
    API_INDEX_(name)                                                               \
    API_LOG_(outs, ((const uint64_t[]){__VA_ARGS__}), SG_NARGS_(__VA_ARGS__));     \
    API_ENTER_()
#define API_RETURN(expr) return sg_api_leave(api_index_, (expr))
/* The thread is a stream worker running a host function (which may make no CUDA call). */
extern __thread int sg_in_host_fn;
/* In a child forked after cuInit, driver 580 on an H200 answered the calls that name a
 * stream or an event the parent made (cuEventQuery, cuStreamQuery, cuEventSynchronize,
 * cuStreamSynchronize, cuEventRecord, cuStreamWaitEvent, cuStreamGetCtx,
 * cuStreamIsCapturing, cuEventDestroy) CUDA_SUCCESS at once, doing nothing (no wait for
 * the parent's queued work), while the others (cuInit, cuCtxGetCurrent, cuCtxSynchronize,
 * cuDeviceGetCount, cuMemAlloc, ...) answered NOT_INITIALIZED (API_NEED_INIT).  Those
 * entry points start with this (out-parameters written by the caller first). */
#define API_FORKED_CHILD_SUCCEEDS()                                              \
    do {                                                                         \
        if (sg_forked_child) API_RETURN(CUDA_SUCCESS);                           \
    } while (0)
#define API_NEED_INIT()                                                          \
    do {                                                                         \
        if (!sg_initialized || sg_forked_child)                                  \
            API_RETURN(CUDA_ERROR_NOT_INITIALIZED);                              \
        if (sg_in_host_fn) API_RETURN(CUDA_ERROR_NOT_PERMITTED);                 \
    } while (0)
void sg_count(const char *counter, long long delta);

/* ---- handles --------------------------------------------------------------------- */
enum {
    K_CTX = 1, K_STREAM, K_EVENT, K_MODULE, K_FUNC, K_LIB, K_KERNEL, K_POOL,
    K_GRAPH, K_GEXEC, K_LINK, K_UOBJ,
    K_GONE, /* what a destroyed handle leaves in the table (core.c: sg_handle_drop) */
};
typedef struct {
    uint64_t h;
    int kind;
} sg_obj;
/* Handles are never reused, so a destroyed object's handle stays invalid. */
uint64_t sg_handle_new(void *obj, int kind);
void *sg_handle_get(uint64_t h, int kind);
void sg_handle_drop(uint64_t h);
/* A handle that is gone, used again (a stream or an event; lock held).  A real driver
 * dereferences the handle: driver 580 on an H200 crashed (SIGSEGV) for any call naming a
 * destroyed stream, and for a stream or event of a primary context that was reset (or
 * released to 0) and is in use again; a destroyed event of a live context answered
 * CONTEXT_IS_DESTROYED.  sg_handle_gone kills the process the same way (SIGSEGV, after
 * a line on stderr naming the call and the handle) or returns the driver's code;
 * `otherwise` for a handle that never was one (or one whose context was destroyed). */
CUresult sg_handle_gone(uint64_t h, const char *call, CUresult otherwise);
const char *sg_api_name(void); /* the entry point the calling thread is in */
/* Handles made stale by a test (lock held).  sg_handle_report: calls naming h answer `code`
 * from now on (sg_handle_gone answers it first); sg_handle_reported: whether h is such a
 * handle, and its code; sg_handle_was: the kind h had (K_STREAM, K_EVENT, ...), gone or not,
 * 0 for a handle never issued.  sg_stream_alias: the stream a user's stream handle names (h
 * itself, or the stream simgpu_stream_move gave it). */
int sg_handle_report(uint64_t h, CUresult code);
int sg_handle_reported(uint64_t h, CUresult *code);
int sg_handle_was(uint64_t h);
uint64_t sg_stream_alias(uint64_t h);
/* Set (lock held) while a context's streams and events are torn down: what is dropped
 * meanwhile is recorded as gone with its context. */
extern struct sg_ctx *sg_tearing_down;
#define H(p) ((uint64_t)(uintptr_t)(p))
#define P(h) ((void *)(uintptr_t)(h))

/* ---- contexts ------------------------------------------------------------------- */
struct sg_stream;
typedef struct sg_ctx {
    sg_obj o;
    int dev;
    int primary;
    int active;        /* a primary context is inactive until retained, and after release to 0 */
    int refcount;      /* primary contexts */
    unsigned flags;
    unsigned generation; /* bumped by every reset of a primary context */
    unsigned long long id;
    struct sg_stream *legacy;
    struct sg_stream **streams; /* every stream of the context, the legacy one included */
    struct sg_vc *ck_retired;   /* checker: the clocks of its destroyed streams, joined */
    int nstreams, cap_streams;
    size_t limits[16];
    int peer[64];      /* peer access enabled to device i */
} sg_ctx;

/* The thread's current context handle (0: none), whatever the context's state. */
uint64_t sg_current_handle(void);
/* The current context, or NULL with *err set (INVALID_CONTEXT / CONTEXT_IS_DESTROYED). */
sg_ctx *sg_current_ctx(CUresult *err);
/* A live, active context named by a handle. */
sg_ctx *sg_ctx_get(uint64_t h, CUresult *err);
int sg_device_valid(int dev);
sg_ctx *sg_primary(int dev);
void sg_ctx_teardown(sg_ctx *c); /* destroys streams, events, modules, allocations; lock held */

/* ---- streams and operations ----------------------------------------------------- */
enum {
    OP_NOP = 1,      /* a wait: dependencies only */
    OP_COPY,         /* 3-D strided copy between worker-visible addresses */
    OP_MEMSET,
    OP_RECORD,       /* an event record: timestamps the event */
    OP_HOSTFN,
    OP_CALLBACK,     /* cuStreamAddCallback */
    OP_KERNEL,       /* a launch: marks its log entry executed */
    OP_POOL_FREE,    /* a stream-ordered free reaches its point in the stream */
    OP_EXTERNAL_WAIT, /* a graph's wait on an event outside it: a wait on the event's
                         last record when the graph is launched */
    OP_ALLOC_FREE,   /* cuMemFreeAsync of memory not from a pool */
    OP_IPC_WAIT,     /* a wait on an interprocess event's record made elsewhere (ipc.c):
                        its worker polls the event's shared state */
};

typedef struct {
    uint64_t stream; /* handle of the stream waited on */
    uint64_t seq;    /* its operation number to wait for */
} sg_dep;

typedef struct sg_op {
    struct sg_op *next;
    int type;
    uint64_t seq;
    sg_dep *deps;
    int ndeps, cap_deps;
    /* The checker's view (check.c), set only while it is on: the device-address ranges the
     * operation accesses (copied by sg_op_clone, so graph replays carry them), the entry
     * point that built it, whether a graph launch replays it, and a clock its stream joins
     * when it is enqueued (a wait's event snapshot). */
    sg_ck_range *ck_ranges;
    int ck_nranges;
    int ck_replay;
    const char *ck_entry;
    struct sg_vc *ck_join;
    union {
        struct {
            unsigned char *dst;
            const unsigned char *src;
            size_t width, height, depth;
            size_t dst_pitch, dst_slice, src_pitch, src_slice;
            void *owned; /* staging buffer freed after the copy */
        } copy;
        struct {
            unsigned char *dst;
            size_t pitch, width, height; /* width in elements */
            unsigned elem;               /* 1, 2 or 4 bytes */
            unsigned value;
        } memset;
        struct {
            uint64_t event;
            uint64_t generation;
            struct sg_ipc_event_state *ipc; /* an interprocess event's shared state, or NULL */
            uint64_t ipc_gen;               /* this record's number there */
            uint64_t ipc_id;                /* the event the state must still belong to */
            struct sg_ipc_peer *peer;       /* the mapping ipc lies in (NULL: this process's) */
        } record; /* also OP_EXTERNAL_WAIT's event */
        struct {
            struct sg_ipc_event_state *state;
            uint64_t gen;                   /* the record to wait for */
            uint64_t id;                    /* the event it must still be */
            int pid, fd;                    /* the exporter and its IPC file: a wait on a
                                               process that exited ends */
            struct sg_ipc_peer *peer;
        } ipc_wait;
        struct {
            CUhostFn fn;
            void *data;
        } hostfn;
        struct {
            CUstreamCallback fn;
            void *data;
            uint64_t stream;
        } callback;
        struct {
            long index;
        } kernel;
        struct {
            uint64_t pool;
            uint64_t token;
        } pool_free;
        struct {
            int kind, dev;
            CUdeviceptr base;
            size_t size;
            void *map;
            size_t len;
        } alloc_free;
    } u;
} sg_op;

enum { SK_USER = 0, SK_LEGACY, SK_PER_THREAD };

struct sg_capture;
typedef struct sg_stream {
    sg_obj o;
    sg_ctx *ctx;
    int kind;
    unsigned flags;
    int priority;
    unsigned long long id;
    uint64_t submitted; /* operations enqueued so far (the last one's seq) */
    uint64_t completed; /* operations finished (in order) */
    sg_op *head, *tail;
    pthread_cond_t work;
    int destroyed;      /* the user's handle is gone; the worker drains and frees it */
    struct sg_stream *draining_prev, *draining_next; /* destroyed, not yet drained (stream.c) */
    int torn_down_dev;  /* destroyed with its primary context (reset, released): its device; else -1 */
    int torn_down;      /* destroyed with its context, not by cuStreamDestroy */
    struct sg_capture *capture;
    int capture_index;  /* this stream's slot in the capture's vector clocks */
    struct sg_ck_stream *ck; /* the checker's slot and clock for it (check.c) */
} sg_stream;

/* Resolves a stream handle (0, 1, 2 or a stream) against the current context. */
sg_stream *sg_stream_resolve(uint64_t h, CUresult *err);
sg_op *sg_op_new(int type);
void sg_op_add_dep(sg_op *op, uint64_t stream, uint64_t seq);
/* Enqueues op on s (lock held).  Under capture the op goes to the graph instead. */
CUresult sg_enqueue(sg_stream *s, sg_op *op);
/* Waits (lock held, released while waiting) until s has completed seq. */
void sg_wait_point(uint64_t stream, uint64_t seq);
int sg_point_done(uint64_t stream, uint64_t seq);
void sg_wait_stream_idle(sg_stream *s);
void sg_wait_ctx_idle(sg_ctx *c);
void sg_wait_device_idle(int dev);  /* every context of a device (dev < 0: all devices) */
sg_stream *sg_stream_create(sg_ctx *c, int kind, unsigned flags, int priority);
void sg_stream_destroy(sg_stream *s); /* lock held */
void sg_op_free(sg_op *op);
void sg_op_execute(sg_op *op, sg_stream *s); /* runs without the lock */
int sg_capture_active_in_ctx(sg_ctx *c);
CUresult sg_capture_check_unsafe(void); /* a "potentially unsafe" call during capture */
void sg_events_of_ctx_destroy(sg_ctx *c);

/* ---- memory ---------------------------------------------------------------------- */
/* A_IPC: memory of another process mapped here (ipc.c): a cuIpcOpenMemHandle mapping
 * (ipc_legacy) or a cuMemPoolImportPointer one (pool: the imported pool). */
enum { A_DEVICE = 1, A_POOL, A_MANAGED, A_HOST, A_REGISTERED, A_IPC };
typedef struct sg_alloc {
    CUdeviceptr base;
    size_t size;
    int kind;
    int dev;
    uint64_t ctx;   /* context of the allocation (0 for pool blocks) */
    uint64_t pool;
    unsigned long long buffer_id;
    unsigned flags;
    unsigned sync_memops;
    void *map_base; size_t map_len; /* host mappings to unmap at free */
    const char *entry;              /* the entry point that allocated it */
    struct sg_ck_alloc *ck;         /* the checker's access records (check.c) */
    int ipc_slot;                   /* exported: its slot in this process's IPC file + 1 (0: none) */
    /* A_IPC: map_base/map_len hold both views (device addresses, then the workers'
     * read-write view rw_delta bytes further on); the exporter's allocation it names. */
    size_t rw_delta;
    int ipc_legacy, ipc_refs, ipc_pid;
    uint64_t ipc_nonce, ipc_id;
} sg_alloc;

void sg_memory_init(void);
sg_alloc *sg_alloc_find(CUdeviceptr p); /* the allocation holding p, or NULL */
/* Where a worker reads or writes [p, p+n): device memory through the private view,
 * other memory as is.  *err: INVALID_VALUE for an address outside any allocation
 * that must be known (or lies in a device's range), ILLEGAL_ADDRESS for a range
 * running past its allocation. */
unsigned char *sg_worker_addr(CUdeviceptr p, size_t n, int must_be_known, CUresult *err);
int sg_is_device_range(CUdeviceptr p);
void sg_allocs_of_ctx_free(sg_ctx *c);
void sg_pools_on_sync(void);
void sg_pool_free_reached(uint64_t pool, uint64_t token);
void sg_alloc_free_reached(int kind, int dev, CUdeviceptr base, size_t size, void *map, size_t len);
CUresult sg_dev_alloc_raw(int dev, size_t size, CUdeviceptr *out);
void sg_dev_free_raw(int dev, CUdeviceptr p, size_t size);

/* ---- events ---------------------------------------------------------------------- */
typedef struct sg_event {
    sg_obj o;
    uint64_t ctx;
    unsigned generation; /* the context generation at creation */
    unsigned flags;
    int recorded;
    uint64_t stream;     /* the stream and operation captured by the last record */
    uint64_t seq;
    uint64_t record_gen; /* which record the timestamp belongs to */
    double time_ms;
    int time_valid;
    struct sg_capture *capture; /* set when the last record was captured into a graph */
    uint64_t vclock[16];
    struct sg_vc *ck;    /* checker: the recording stream's clock at the last record */
    /* Interprocess events (ipc.c): the shared state, the mapping it lies in (NULL: this
     * process's own file), the exporter's identity and slot, the number of the last record
     * this process made (0: none). */
    struct sg_ipc_event_state *ipc;
    struct sg_ipc_peer *ipc_peer;
    int ipc_pid, ipc_fd, ipc_slot, ipc_imported;
    uint64_t ipc_nonce, ipc_id, ipc_local_gen;
} sg_event;
void sg_record_reached(uint64_t event, uint64_t generation);

/* ---- interprocess memory and events (ipc.c) ---------------------------------------- */
/* Each process that exports anything has one "IPC file" (a memfd) other processes open
 * through /proc/<pid>/fd/<fd>: a header naming the process (pid and a random nonce, so a
 * reused pid is told apart), a slot per exported allocation (its id, offset and size, cleared
 * when it is freed) and a slot per interprocess event (its record counter and which records
 * completed).  Lock held for all of these unless noted. */
struct sg_ipc_event_state;
struct sg_ipc_peer;
int sg_ipc_self(uint64_t *nonce, int *fd);  /* this process's file (made on first use); 0 or -1 */
int sg_ipc_is_self(int pid, uint64_t nonce);
int sg_ipc_mem_slot_add(uint64_t id, size_t off, size_t size, int dev); /* slot + 1, or 0: full */
void sg_ipc_mem_slot_clear(int slot_plus_one);
/* Another process's file, mapped (a reference; NULL with *err: INVALID_HANDLE when the process
 * or its file is gone or is another process now). */
struct sg_ipc_peer *sg_ipc_peer_open(int pid, uint64_t nonce, int fd, CUresult *err);
void sg_ipc_peer_release(struct sg_ipc_peer *peer); /* NULL: nothing */
/* Whether the peer's allocation slot still names allocation id at off, size. */
int sg_ipc_peer_mem_live(struct sg_ipc_peer *peer, int slot, uint64_t id, size_t off, size_t size);
/* Maps [off, off+size) of fd twice (device-address view PROT_NONE, then the workers' view);
 * the device address, with the mapping and the distance between the views; 0 on failure. */
CUdeviceptr sg_ipc_map(int fd, size_t off, size_t size, void **map, size_t *len, size_t *rw_delta);
/* Events: an interprocess event of this process gets a slot at creation; an imported one
 * points into the exporter's file. */
int sg_ipc_event_new(sg_event *e);      /* 0, or -1: no slot */
void sg_ipc_event_drop(sg_event *e);    /* the event goes: its slot (exported) or mapping */
/* A record about to be enqueued: its number in the shared counter, set in the op. */
void sg_ipc_record_begin(sg_event *e, sg_op *op);
void sg_ipc_record_reached(sg_op *op);  /* an OP_RECORD with ipc set completed */
/* The event's last record, if it was made by another process: its number (0: the last
 * record is this process's own, or there is none to wait for). */
uint64_t sg_ipc_foreign_record(sg_event *e);
int sg_ipc_record_done(sg_event *e, uint64_t gen);
sg_op *sg_ipc_wait_op(sg_event *e, uint64_t gen);
int sg_ipc_wait_done(const sg_op *op);  /* any lock state */
void sg_ipc_wait_released(sg_op *op);   /* an OP_IPC_WAIT is done with */
void sg_ipc_poll_pause(void);           /* lock held: releases it for a moment (a poll's sleep) */

/* ---- kernels ---------------------------------------------------------------------- */
void sg_kernel_reached(long index);
void sg_kernel_execute(long index); /* a registered host implementation, on the worker */
void sg_modules_of_ctx_destroy(sg_ctx *c);

/* ---- graphs (capture) ------------------------------------------------------------ */
sg_op *sg_op_clone(const sg_op *op);

/* ---- user objects (graph.c) ------------------------------------------------------- */
typedef struct {
    uint64_t obj;   /* a user object's handle */
    unsigned count; /* references held */
} sg_uref;
typedef struct {
    sg_uref *v;
    int n, cap;
} sg_urefs;
/* The user-object references of a live graph (stream.c), or NULL; lock held. */
sg_urefs *sg_graph_urefs(uint64_t graph);
/* dst takes references of its own to every object src holds (instantiation). */
int sg_urefs_copy(sg_urefs *dst, const sg_urefs *src);
/* Drops every reference of l (emptied), once each point of after[] has run: at once if
 * they all have (an object whose last reference goes has its destructor run by the calling
 * entry point as it returns), else on the driver's release thread (which runs it there). */
void sg_urefs_release(sg_urefs *l, const sg_dep *after, int nafter);
/* The same, with the checker's clock of each point of after[] (NULL entries: none), which
 * the host observes when the references go (a destructor run then tells it the work is
 * done); the clocks are taken (freed here or by the release thread). */
struct sg_vc;
void sg_urefs_release_after(sg_urefs *l, const sg_dep *after, struct sg_vc **clocks, int nafter);

/* ---- checker hooks (check.c); lock held, called only under SG_CHECKING() unless noted ---- */
/* The stream's clock joins the host's and its implicit dependencies, ticks, and the op's
 * accesses are checked (sg_enqueue, before the op gets its number). */
void sg_ck_enqueue(sg_stream *s, sg_op *op);
void sg_ck_event_recorded(sg_event *e, sg_stream *s); /* a record just enqueued on s */
void sg_ck_event_forget(sg_event *e);                 /* a record captured into a graph */
struct sg_vc *sg_ck_event_clock(const sg_event *e);   /* a copy of its snapshot, or NULL */
struct sg_vc *sg_ck_stream_clock(sg_stream *s);       /* a copy of the stream's clock, or NULL */
void sg_ck_ctx_clock(sg_ctx *c, struct sg_vc **acc);  /* joins every stream of c into *acc */
/* The host saw the work of a clock complete: joined into the host clock, and freed (NULL:
 * nothing; any mode). */
void sg_ck_observe(struct sg_vc *v);
void sg_ck_stream_destroyed(sg_stream *s);
void sg_ck_alloc_added(sg_alloc *a);
/* An allocation leaves the table (any mode, when a->ck is set): its records go to a
 * tombstone, or nowhere when `silent` (context teardown) or the checker is off. */
void sg_ck_alloc_removed(sg_alloc *a, int silent);
/* The allocation at base was freed by an operation just enqueued on s (NULL: on the host):
 * every access recorded must be ordered before it. */
void sg_ck_freed(CUdeviceptr base, sg_stream *s);
void sg_ck_copy_ranges(sg_op *op, CUdeviceptr dst, int dst_known, size_t dst_pitch, size_t dst_slice,
                       CUdeviceptr src, int src_known, size_t src_pitch, size_t src_slice,
                       size_t width, size_t height, size_t depth);
void sg_ck_memset_ranges(sg_op *op, CUdeviceptr dst, size_t pitch, size_t width_bytes, size_t height);
void sg_ck_kernel_ranges(sg_op *op, const char *kernel, const unsigned char *params, size_t size,
                         int nparams, const size_t *offsets, const size_t *sizes);
const char *sg_kernel_name(long index); /* module.c: a launch log entry's kernel */
/* Any mode: frees what the checker hung on an object that goes. */
void sg_ck_vc_free(struct sg_vc *v);
void sg_ck_stream_free(sg_stream *s); /* the stream's worker, once drained */
int sg_check_mode_from_env(const char *text);

#endif
