/* simgpu IPC: memory and events shared between processes (cuIpc*, pool export).
 *
 * The simulated device's memory is a memfd per device (memory.c), so another process can map
 * the very bytes an allocation holds: it opens the exporter's file as /proc/<pid>/fd/<fd>
 * (or, for a pool, the file descriptor the exporter handed it) and maps the range twice,
 * as the arena is, at addresses of its own.  Writes in one process are seen by the other
 * (MAP_SHARED of one file).
 *
 * What the importer must learn from the exporter at run time (is that allocation still
 * there, what has this event's last record done) lives in the exporter's "IPC file", a memfd
 * made on the first export, which importers map from /proc/<pid>/fd/<fd> as well:
 *
 *   offset 0        header: magic, nonce (random, per process), pid
 *   offset 4096     MEM_SLOTS allocation slots: id (the allocation's buffer id; 0: free),
 *                   offset in the device file, size, device
 *   EVENT_BASE      EVENT_SLOTS event slots: id (the event's handle; 0: free), the number of
 *                   records made so far (by any process), and for each residue modulo RING
 *                   the highest record number that completed
 *
 * A record of an interprocess event takes the next number from the shared counter; its
 * completion (on the recording process's stream worker) stores that number in the ring.  A
 * wait made when the counter reads g waits until record g has completed, whatever is recorded
 * later: the wait's worker polls the ring (ipc_wait_done) with a short sleep.  A record's
 * entry is overwritten only RING records later, so a wait lagging that far behind ends early.
 * A wait also ends when the event's slot no longer names the event (it was destroyed: the
 * driver calls that undefined) or when the exporter's process is gone.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define IPC_MAGIC 0x4350497570476d53ull /* "SmGpuIPC" */
#define MEM_SLOTS 16384
#define EVENT_SLOTS 2048
#define RING 62
#define MEM_BASE 4096
#define EVENT_BASE (MEM_BASE + MEM_SLOTS * sizeof(mem_slot))
#define FILE_SIZE (EVENT_BASE + EVENT_SLOTS * sizeof(struct sg_ipc_event_state))

typedef struct {
    uint64_t magic, nonce;
    int64_t pid;
} file_header;

typedef struct {
    _Atomic uint64_t id;
    uint64_t off, size;
    int64_t dev;
} mem_slot;

struct sg_ipc_event_state {
    _Atomic uint64_t id;
    _Atomic uint64_t recorded;
    _Atomic uint64_t done[RING];
};

_Static_assert(sizeof(mem_slot) == 32, "IPC allocation slot");
_Static_assert(sizeof(struct sg_ipc_event_state) == 512, "IPC event slot");

/* ---- this process's file -------------------------------------------------------------- */

static int self_fd = -1;
static unsigned char *self_base;
static uint64_t self_nonce;
static int mem_hint, event_hint;

int sg_ipc_self(uint64_t *nonce, int *fd_out) {
    if (self_fd < 0) {
        uint64_t n = 0;
        if (getrandom(&n, sizeof n, 0) != (ssize_t)sizeof n)
            n = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&n;
        int f = memfd_create("simgpu-ipc", MFD_CLOEXEC);
        if (f < 0) return -1;
        void *base = MAP_FAILED;
        if (ftruncate(f, (off_t)FILE_SIZE) == 0)
            base = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (base == MAP_FAILED) {
            close(f);
            return -1;
        }
        file_header *h = base;
        h->magic = IPC_MAGIC;
        h->nonce = n | 1; /* never 0 */
        h->pid = getpid();
        self_fd = f;
        self_base = base;
        self_nonce = h->nonce;
    }
    if (nonce) *nonce = self_nonce;
    if (fd_out) *fd_out = self_fd;
    return 0;
}

int sg_ipc_is_self(int pid, uint64_t nonce) {
    return pid == (int)getpid() && self_fd >= 0 && nonce == self_nonce;
}

static mem_slot *mem_slots(unsigned char *base) { return (mem_slot *)(base + MEM_BASE); }
static struct sg_ipc_event_state *event_slots(unsigned char *base) {
    return (struct sg_ipc_event_state *)(base + EVENT_BASE);
}

int sg_ipc_mem_slot_add(uint64_t id, size_t off, size_t size, int dev) {
    if (sg_ipc_self(NULL, NULL) != 0) return 0;
    mem_slot *slots = mem_slots(self_base);
    for (int k = 0; k < MEM_SLOTS; k++) {
        int i = (mem_hint + k) % MEM_SLOTS;
        if (atomic_load(&slots[i].id) != 0) continue;
        slots[i].off = off;
        slots[i].size = size;
        slots[i].dev = dev;
        atomic_store(&slots[i].id, id);
        mem_hint = i + 1;
        return i + 1;
    }
    return 0;
}

void sg_ipc_mem_slot_clear(int slot_plus_one) {
    if (slot_plus_one <= 0 || self_base == NULL) return;
    atomic_store(&mem_slots(self_base)[slot_plus_one - 1].id, 0);
}

/* ---- other processes' files ----------------------------------------------------------- */

struct sg_ipc_peer {
    struct sg_ipc_peer *next;
    int pid;
    uint64_t nonce;
    unsigned char *base;
    int refs;
};
static struct sg_ipc_peer *peers;

/* Whether an exporting process has exited: no such pid, or one whose
 * descriptor of the IPC file is gone (an exited process not yet reaped keeps its pid, not
 * its descriptors). */
static int exporter_gone(int pid, int fd) {
    if (pid == (int)getpid()) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    return access(path, F_OK) != 0 && errno == ENOENT;
}

struct sg_ipc_peer *sg_ipc_peer_open(int pid, uint64_t nonce, int fd, CUresult *err) {
    for (struct sg_ipc_peer *p = peers; p != NULL; p = p->next) {
        if (p->pid == pid && p->nonce == nonce) {
            /* Still mapped here (an opened event holds it): the process may be gone. */
            if (exporter_gone(pid, fd)) {
                *err = CUDA_ERROR_INVALID_HANDLE;
                return NULL;
            }
            p->refs++;
            return p;
        }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    void *base = MAP_FAILED;
    if (f >= 0) {
        base = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        close(f);
    }
    /* The process exited (or its pid now names another process, whose fd is not an IPC
     * file of this nonce): the handle names nothing any more. */
    if (base == MAP_FAILED) {
        *err = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    const file_header *h = base;
    struct sg_ipc_peer *p = NULL;
    if (h->magic == IPC_MAGIC && h->nonce == nonce && h->pid == pid) p = calloc(1, sizeof *p);
    if (p == NULL) {
        munmap(base, FILE_SIZE);
        *err = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    p->pid = pid;
    p->nonce = nonce;
    p->base = base;
    p->refs = 1;
    p->next = peers;
    peers = p;
    return p;
}

void sg_ipc_peer_release(struct sg_ipc_peer *peer) {
    if (peer == NULL || --peer->refs > 0) return;
    for (struct sg_ipc_peer **pp = &peers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == peer) {
            *pp = peer->next;
            break;
        }
    }
    munmap(peer->base, FILE_SIZE);
    free(peer);
}

int sg_ipc_peer_mem_live(struct sg_ipc_peer *peer, int slot, uint64_t id, size_t off, size_t size) {
    if (slot < 0 || slot >= MEM_SLOTS) return 0;
    const mem_slot *m = &mem_slots(peer->base)[slot];
    return atomic_load(&m->id) == id && m->off == off && m->size == size;
}

CUdeviceptr sg_ipc_map(int fd, size_t off, size_t size, void **map, size_t *len, size_t *rw_delta) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t start = off / page * page, lead = off - start;
    size_t view = (lead + size + page - 1) / page * page;
    /* One reservation holds both views, so one munmap releases them. */
    unsigned char *r = mmap(NULL, 2 * view, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return 0;
    if (mmap(r, view, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, (off_t)start) == MAP_FAILED ||
        mmap(r + view, view, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd,
             (off_t)start) == MAP_FAILED) {
        munmap(r, 2 * view);
        return 0;
    }
    *map = r;
    *len = 2 * view;
    *rw_delta = view;
    return (CUdeviceptr)(uintptr_t)(r + lead);
}

/* ---- events ------------------------------------------------------------------------------ */

int sg_ipc_event_new(sg_event *e) {
    if (sg_ipc_self(NULL, NULL) != 0) return -1;
    struct sg_ipc_event_state *slots = event_slots(self_base);
    for (int k = 0; k < EVENT_SLOTS; k++) {
        int i = (event_hint + k) % EVENT_SLOTS;
        if (atomic_load(&slots[i].id) != 0) continue;
        atomic_store(&slots[i].recorded, 0);
        for (int j = 0; j < RING; j++) atomic_store(&slots[i].done[j], 0);
        atomic_store(&slots[i].id, e->o.h);
        event_hint = i + 1;
        e->ipc = &slots[i];
        e->ipc_peer = NULL;
        e->ipc_pid = (int)getpid();
        e->ipc_nonce = self_nonce;
        e->ipc_fd = self_fd;
        e->ipc_slot = i;
        e->ipc_id = e->o.h;
        return 0;
    }
    return -1;
}

void sg_ipc_event_drop(sg_event *e) {
    if (e->ipc == NULL) return;
    if (e->ipc_imported)
        sg_ipc_peer_release(e->ipc_peer);
    else
        atomic_store(&e->ipc->id, 0);
    e->ipc = NULL;
    e->ipc_peer = NULL;
}

void sg_ipc_record_begin(sg_event *e, sg_op *op) {
    uint64_t g = atomic_fetch_add(&e->ipc->recorded, 1) + 1;
    op->u.record.ipc = e->ipc;
    op->u.record.ipc_gen = g;
    op->u.record.ipc_id = e->ipc_id;
    op->u.record.peer = e->ipc_peer;
    if (e->ipc_peer != NULL) e->ipc_peer->refs++;
    e->ipc_local_gen = g;
}

static void mark_done(struct sg_ipc_event_state *st, uint64_t id, uint64_t g) {
    if (atomic_load(&st->id) != id) return;
    _Atomic uint64_t *slot = &st->done[g % RING];
    uint64_t seen = atomic_load(slot);
    while (seen < g && !atomic_compare_exchange_weak(slot, &seen, g)) {
    }
}

void sg_ipc_record_reached(sg_op *op) {
    if (op->u.record.ipc == NULL) return;
    mark_done(op->u.record.ipc, op->u.record.ipc_id, op->u.record.ipc_gen);
    sg_ipc_peer_release(op->u.record.peer);
    op->u.record.ipc = NULL;
    op->u.record.peer = NULL;
}

uint64_t sg_ipc_foreign_record(sg_event *e) {
    if (e->ipc == NULL || atomic_load(&e->ipc->id) != e->ipc_id) return 0;
    uint64_t g = atomic_load(&e->ipc->recorded);
    return g == e->ipc_local_gen ? 0 : g;
}

static int state_done(struct sg_ipc_event_state *st, uint64_t id, uint64_t g, int pid, int fd) {
    if (atomic_load(&st->id) != id) return 1; /* the event was destroyed */
    if (atomic_load(&st->done[g % RING]) >= g) return 1;
    return exporter_gone(pid, fd);
}

int sg_ipc_record_done(sg_event *e, uint64_t gen) {
    return state_done(e->ipc, e->ipc_id, gen, e->ipc_pid, e->ipc_fd);
}

sg_op *sg_ipc_wait_op(sg_event *e, uint64_t gen) {
    sg_op *op = sg_op_new(OP_IPC_WAIT);
    if (op == NULL) return NULL;
    op->u.ipc_wait.state = e->ipc;
    op->u.ipc_wait.gen = gen;
    op->u.ipc_wait.id = e->ipc_id;
    op->u.ipc_wait.pid = e->ipc_pid;
    op->u.ipc_wait.fd = e->ipc_fd;
    op->u.ipc_wait.peer = e->ipc_peer;
    if (e->ipc_peer != NULL) e->ipc_peer->refs++;
    return op;
}

int sg_ipc_wait_done(const sg_op *op) {
    return state_done(op->u.ipc_wait.state, op->u.ipc_wait.id, op->u.ipc_wait.gen, op->u.ipc_wait.pid,
                      op->u.ipc_wait.fd);
}

void sg_ipc_wait_released(sg_op *op) {
    sg_ipc_peer_release(op->u.ipc_wait.peer);
    op->u.ipc_wait.peer = NULL;
}

/* ---- event entry points ---------------------------------------------------------------- */

/* The 64 bytes of a CUipcEventHandle, as the simulator fills them. */
typedef struct {
    uint32_t magic; /* EVENT_HANDLE_MAGIC */
    int32_t pid;    /* the exporting process */
    uint64_t nonce; /* its IPC file's nonce */
    int32_t fd;     /* its IPC file's descriptor number there */
    int32_t slot;   /* the event's slot in that file */
    int32_t dev;    /* the event's device */
    int32_t reserved0;
    uint64_t id;    /* the event's handle in the exporter */
    unsigned char reserved[24];
} event_handle;
_Static_assert(sizeof(event_handle) == 64, "CUipcEventHandle layout");
#define EVENT_HANDLE_MAGIC 0x45504953u /* "SIPE" */

SG_API CUresult cuIpcGetEventHandle(void *handle, CUevent event) {
    API_BEGIN_ARGS("cuIpcGetEventHandle", 0, LA(handle), LA(event));
    API_NEED_INIT();
    if (handle == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(H(event), K_EVENT);
    CUresult r = CUDA_SUCCESS;
    if (e == NULL) {
        r = sg_handle_gone(H(event), sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
    } else if (!(e->flags & SG_EVENT_INTERPROCESS) || e->ipc == NULL) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        sg_ctx *c = sg_handle_get(e->ctx, K_CTX);
        event_handle h = {0};
        h.magic = EVENT_HANDLE_MAGIC;
        h.pid = e->ipc_pid;
        h.nonce = e->ipc_nonce;
        h.fd = e->ipc_fd;
        h.slot = e->ipc_slot;
        h.dev = c ? c->dev : 0;
        h.id = e->ipc_id;
        memcpy(handle, &h, sizeof h);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* The handle is passed by value: 64 bytes, which the x86-64 ABI passes in memory, so the
 * callee sees it as a struct argument. */
typedef struct {
    unsigned char bytes[64];
} ipc_bytes;

SG_API CUresult cuIpcOpenEventHandle(CUevent *out, ipc_bytes handle) {
    API_BEGIN_ARGS("cuIpcOpenEventHandle", LOG_OUT64(0), LA(out), LA(0));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    event_handle h;
    memcpy(&h, handle.bytes, sizeof h);
    if (h.magic != EVENT_HANDLE_MAGIC || h.slot < 0 || h.slot >= EVENT_SLOTS)
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_event *e = NULL;
    if (c != NULL && sg_ipc_is_self(h.pid, h.nonce)) {
        err = CUDA_ERROR_INVALID_CONTEXT; /* as the driver: not in the exporting process */
    } else if (c != NULL) {
        struct sg_ipc_peer *peer = sg_ipc_peer_open(h.pid, h.nonce, h.fd, &err);
        struct sg_ipc_event_state *st = peer ? &event_slots(peer->base)[h.slot] : NULL;
        if (st != NULL && atomic_load(&st->id) != h.id) {
            err = CUDA_ERROR_INVALID_HANDLE; /* the exporter destroyed the event */
        } else if (st != NULL && (e = calloc(1, sizeof *e)) == NULL) {
            err = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (e == NULL) {
            sg_ipc_peer_release(peer);
        } else {
            e->ctx = c->o.h;
            e->generation = c->generation;
            e->flags = SG_EVENT_INTERPROCESS | SG_EVENT_DISABLE_TIMING;
            e->ipc = st;
            e->ipc_peer = peer;
            e->ipc_imported = 1;
            e->ipc_pid = h.pid;
            e->ipc_nonce = h.nonce;
            e->ipc_fd = h.fd;
            e->ipc_slot = h.slot;
            e->ipc_id = h.id;
            sg_handle_new(e, K_EVENT);
            *out = P(e->o.h);
            sg_count("events_created", 1);
            sg_count("events_live", 1);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(e ? CUDA_SUCCESS : err);
}

void sg_ipc_poll_pause(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 200000;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&sg_progress, &sg_lock, &until);
}
