/* simgpu streams: a worker thread per stream runs its operations in order; the
 * legacy default stream's implicit synchronisation; per-thread default streams;
 * events; host functions; synchronisation; stream capture and its graphs. */
#include "sim.h"

#include <unistd.h>

void sg_handle_each(int kind, void (*fn)(void *obj, void *arg), void *arg);

static unsigned long long next_stream_id = 100;
__thread int sg_in_host_fn;

/* ---- operations ---------------------------------------------------------------------- */

sg_op *sg_op_new(int type) {
    sg_op *op = calloc(1, sizeof *op);
    if (op != NULL) op->type = type;
    return op;
}

void sg_op_add_dep(sg_op *op, uint64_t stream, uint64_t seq) {
    if (op->ndeps == op->cap_deps) {
        int cap = op->cap_deps ? op->cap_deps * 2 : 4;
        sg_dep *grown = realloc(op->deps, (size_t)cap * sizeof *grown);
        if (grown == NULL) return; /* dropping a dependency only weakens ordering */
        op->deps = grown;
        op->cap_deps = cap;
    }
    op->deps[op->ndeps].stream = stream;
    op->deps[op->ndeps].seq = seq;
    op->ndeps++;
}

void sg_op_free(sg_op *op) {
    if (op == NULL) return;
    if (op->type == OP_COPY) free(op->u.copy.owned);
    /* An interprocess record or wait that never ran gives its mapping back (lock held). */
    if (op->type == OP_IPC_WAIT) sg_ipc_wait_released(op);
    if (op->type == OP_RECORD && op->u.record.peer != NULL) sg_ipc_peer_release(op->u.record.peer);
    free(op->deps);
    if (op->ck_ranges != NULL || op->ck_join != NULL) {
        free(op->ck_ranges);
        sg_ck_vc_free(op->ck_join);
    }
    free(op);
}

long sg_kernel_relog(long index, int from_graph);

sg_op *sg_op_clone(const sg_op *op) {
    sg_op *c = sg_op_new(op->type);
    if (c == NULL) return NULL;
    c->u = op->u;
    c->ck_entry = op->ck_entry;
    c->ck_replay = op->ck_replay;
    if (op->ck_nranges > 0) {
        /* The checker's ranges travel with the copy (a graph's nodes, their replays). */
        c->ck_ranges = malloc((size_t)op->ck_nranges * sizeof *c->ck_ranges);
        if (c->ck_ranges == NULL) {
            free(c);
            return NULL;
        }
        memcpy(c->ck_ranges, op->ck_ranges, (size_t)op->ck_nranges * sizeof *c->ck_ranges);
        c->ck_nranges = op->ck_nranges;
    }
    if (op->type == OP_COPY && op->u.copy.owned != NULL) {
        /* The staged source bytes: copy the buffer and point into the copy. */
        size_t span = (size_t)(op->u.copy.src - (const unsigned char *)op->u.copy.owned) +
                      op->u.copy.src_slice * op->u.copy.depth;
        c->u.copy.owned = malloc(span ? span : 1);
        if (c->u.copy.owned == NULL) {
            sg_op_free(c);
            return NULL;
        }
        memcpy(c->u.copy.owned, op->u.copy.owned, span);
        c->u.copy.src = (const unsigned char *)c->u.copy.owned +
                        (op->u.copy.src - (const unsigned char *)op->u.copy.owned);
    }
    return c;
}

/* The device's own memory traffic, as a GPU's copy and set engines do it: ordered only by
   the streams and events of the program, so a test that leaves two streams (or a stream and
   the host) unordered on purpose races here, as it would on a GPU.  Functions of their own
   (never inlined), so that tools/tsan.sh --simgpu can tell this traffic from the host
   functions and deleters the same stream threads run (tools/tsan-suppressions.txt). */
__attribute__((noinline)) static void sg_device_copy(const sg_op *op) {
    for (size_t z = 0; z < op->u.copy.depth; z++) {
        for (size_t y = 0; y < op->u.copy.height; y++) {
            memmove(op->u.copy.dst + z * op->u.copy.dst_slice + y * op->u.copy.dst_pitch,
                    op->u.copy.src + z * op->u.copy.src_slice + y * op->u.copy.src_pitch,
                    op->u.copy.width);
        }
    }
}

__attribute__((noinline)) static void sg_device_memset(const sg_op *op) {
    for (size_t y = 0; y < op->u.memset.height; y++) {
        unsigned char *row = op->u.memset.dst + y * op->u.memset.pitch;
        size_t n = op->u.memset.width;
        if (op->u.memset.elem == 1) {
            memset(row, (int)(op->u.memset.value & 0xFF), n);
        } else if (op->u.memset.elem == 2) {
            uint16_t v = (uint16_t)op->u.memset.value;
            for (size_t i = 0; i < n; i++) memcpy(row + 2 * i, &v, 2);
        } else {
            uint32_t v = (uint32_t)op->u.memset.value;
            for (size_t i = 0; i < n; i++) memcpy(row + 4 * i, &v, 4);
        }
    }
}

void sg_op_execute(sg_op *op, sg_stream *s) {
    switch (op->type) {
    case OP_COPY:
        sg_device_copy(op);
        break;
    case OP_MEMSET:
        sg_device_memset(op);
        break;
    case OP_KERNEL:
        sg_kernel_execute(op->u.kernel.index);
        break;
    case OP_HOSTFN:
        sg_in_host_fn = 1;
        op->u.hostfn.fn(op->u.hostfn.data);
        sg_in_host_fn = 0;
        break;
    case OP_CALLBACK:
        sg_in_host_fn = 1;
        op->u.callback.fn(P(op->u.callback.stream), CUDA_SUCCESS, op->u.callback.data);
        sg_in_host_fn = 0;
        break;
    default:
        break;
    }
    (void)s;
}

/* The parts of an operation that touch driver state, run with the lock held. */
static void op_complete_locked(sg_op *op) {
    switch (op->type) {
    case OP_RECORD:
        sg_record_reached(op->u.record.event, op->u.record.generation);
        sg_ipc_record_reached(op);
        break;
    case OP_IPC_WAIT: sg_ipc_wait_released(op); break;
    case OP_KERNEL: sg_kernel_reached(op->u.kernel.index); break;
    case OP_POOL_FREE: sg_pool_free_reached(op->u.pool_free.pool, op->u.pool_free.token); break;
    case OP_ALLOC_FREE:
        sg_alloc_free_reached(op->u.alloc_free.kind, op->u.alloc_free.dev, op->u.alloc_free.base,
                              op->u.alloc_free.size, op->u.alloc_free.map, op->u.alloc_free.len);
        break;
    default: break;
    }
}

int sg_point_done(uint64_t stream, uint64_t seq) {
    sg_stream *s = sg_handle_get(stream, K_STREAM);
    return s == NULL || s->completed >= seq;
}

static int deps_done(const sg_op *op) {
    if (op->type == OP_IPC_WAIT && !sg_ipc_wait_done(op)) return 0;
    for (int i = 0; i < op->ndeps; i++)
        if (!sg_point_done(op->deps[i].stream, op->deps[i].seq)) return 0;
    return 1;
}

/* The destroyed streams whose worker is still draining their queued work (sg_lock held):
 * a context synchronisation waits for them too, and walks only these, not the handle
 * table, which grows with every destroyed stream and event. */
static sg_stream *draining_streams;

static void draining_link(sg_stream *s) {
    s->draining_prev = NULL;
    s->draining_next = draining_streams;
    if (draining_streams != NULL) draining_streams->draining_prev = s;
    draining_streams = s;
}

static void draining_unlink(sg_stream *s) {
    if (!s->destroyed) return;
    if (s->draining_prev != NULL) s->draining_prev->draining_next = s->draining_next;
    else if (draining_streams == s) draining_streams = s->draining_next;
    if (s->draining_next != NULL) s->draining_next->draining_prev = s->draining_prev;
    s->draining_prev = s->draining_next = NULL;
}

static void *worker(void *arg) {
    sg_stream *s = arg;
    pthread_mutex_lock(&sg_lock);
    for (;;) {
        while (s->head == NULL && !s->destroyed) pthread_cond_wait(&s->work, &sg_lock);
        if (s->head == NULL) break; /* destroyed and drained */
        sg_op *op = s->head;
        while (!deps_done(op)) {
            if (op->type != OP_IPC_WAIT) {
                pthread_cond_wait(&sg_progress, &sg_lock);
                continue;
            }
            /* Another process completes the record waited for: nothing here signals it,
             * so poll (the exporter's exit ends the wait too: ipc.c). */
            sg_ipc_poll_pause();
        }
        pthread_mutex_unlock(&sg_lock);
        unsigned delay = __atomic_load_n(&sg_cfg.delay_us, __ATOMIC_RELAXED);
        if (delay) usleep(delay);
        sg_op_execute(op, s);
        pthread_mutex_lock(&sg_lock);
        op_complete_locked(op);
        s->head = op->next;
        if (s->head == NULL) s->tail = NULL;
        s->completed = op->seq;
        sg_op_free(op);
        pthread_cond_broadcast(&sg_progress);
    }
    if (s->ck != NULL) sg_ck_stream_free(s);
    draining_unlink(s);
    sg_handle_drop(s->o.h);
    pthread_cond_broadcast(&sg_progress);
    pthread_mutex_unlock(&sg_lock);
    pthread_cond_destroy(&s->work);
    free(s);
    return NULL;
}

/* ---- streams --------------------------------------------------------------------------- */

sg_stream *sg_stream_create(sg_ctx *c, int kind, unsigned flags, int priority) {
    sg_stream *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    if (c->nstreams == c->cap_streams) {
        int cap = c->cap_streams ? c->cap_streams * 2 : 8;
        sg_stream **grown = realloc(c->streams, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            free(s);
            return NULL;
        }
        c->streams = grown;
        c->cap_streams = cap;
    }
    s->ctx = c;
    s->kind = kind;
    s->flags = flags;
    s->priority = priority;
    s->id = next_stream_id++;
    pthread_cond_init(&s->work, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t thread;
    if (pthread_create(&thread, &attr, worker, s) != 0) {
        pthread_attr_destroy(&attr);
        pthread_cond_destroy(&s->work);
        free(s);
        return NULL;
    }
    pthread_attr_destroy(&attr);
    sg_handle_new(s, K_STREAM);
    c->streams[c->nstreams++] = s;
    return s;
}

static void capture_leave(sg_stream *s);

/* The user's handle goes now; the worker finishes the queued work, then frees it. */
void sg_stream_destroy(sg_stream *s) {
    sg_ctx *c = s->ctx;
    for (int i = 0; i < c->nstreams; i++) {
        if (c->streams[i] == s) {
            c->streams[i] = c->streams[--c->nstreams];
            break;
        }
    }
    if (s->capture) capture_leave(s);
    if (SG_CHECKING()) sg_ck_stream_destroyed(s);
    if (s->kind == SK_USER) {
        sg_count("streams_destroyed", 1);
        sg_count("streams_live", -1);
    }
    s->torn_down = sg_tearing_down != NULL;
    s->torn_down_dev = sg_tearing_down != NULL && sg_tearing_down->primary ? sg_tearing_down->dev : -1;
    s->destroyed = 1;
    draining_link(s);
    pthread_cond_signal(&s->work);
}

/* Per-thread default streams: one per (thread, context generation). */
typedef struct {
    uint64_t ctx;
    unsigned generation;
    uint64_t stream;
} pts_entry;
typedef struct {
    int n, cap;
    pts_entry *e;
} pts_list;

static pthread_key_t pts_key;
static pthread_once_t pts_once = PTHREAD_ONCE_INIT;
static __thread pts_list *tls_pts;
static __thread int tls_ptds; /* the entry point called was a per-thread-default-stream variant */

static void pts_thread_exit(void *arg) {
    pts_list *list = arg;
    pthread_mutex_lock(&sg_lock);
    for (int i = 0; i < list->n; i++) {
        sg_stream *s = sg_handle_get(list->e[i].stream, K_STREAM);
        if (s != NULL && !s->destroyed) sg_stream_destroy(s);
    }
    pthread_mutex_unlock(&sg_lock);
    free(list->e);
    free(list);
}

static void pts_key_create(void) { pthread_key_create(&pts_key, pts_thread_exit); }

static sg_stream *per_thread_stream(sg_ctx *c) {
    pthread_once(&pts_once, pts_key_create);
    if (tls_pts == NULL) {
        tls_pts = calloc(1, sizeof *tls_pts);
        if (tls_pts == NULL) return NULL;
        pthread_setspecific(pts_key, tls_pts);
    }
    for (int i = 0; i < tls_pts->n; i++) {
        pts_entry *e = &tls_pts->e[i];
        if (e->ctx == c->o.h && e->generation == c->generation) {
            sg_stream *s = sg_handle_get(e->stream, K_STREAM);
            if (s != NULL && !s->destroyed) return s;
            e->ctx = 0; /* stale */
        }
    }
    sg_stream *s = sg_stream_create(c, SK_PER_THREAD, 0, 0);
    if (s == NULL) return NULL;
    if (tls_pts->n == tls_pts->cap) {
        int cap = tls_pts->cap ? tls_pts->cap * 2 : 4;
        pts_entry *grown = realloc(tls_pts->e, (size_t)cap * sizeof *grown);
        if (grown == NULL) return s;
        tls_pts->e = grown;
        tls_pts->cap = cap;
    }
    tls_pts->e[tls_pts->n].ctx = c->o.h;
    tls_pts->e[tls_pts->n].generation = c->generation;
    tls_pts->e[tls_pts->n].stream = s->o.h;
    tls_pts->n++;
    return s;
}

void sg_set_ptds(int on) { tls_ptds = on; }
int sg_ptds_active(void) { return tls_ptds; }

sg_stream *sg_stream_resolve(uint64_t h, CUresult *err) {
    if (h == 0) h = tls_ptds ? SG_STREAM_PER_THREAD : SG_STREAM_LEGACY;
    if (h == SG_STREAM_LEGACY || h == SG_STREAM_PER_THREAD) {
        sg_ctx *c = sg_current_ctx(err);
        if (c == NULL) return NULL;
        sg_stream *s = h == SG_STREAM_LEGACY ? c->legacy : per_thread_stream(c);
        if (s == NULL) *err = CUDA_ERROR_OUT_OF_MEMORY;
        return s;
    }
    h = sg_stream_alias(h);
    sg_stream *s = sg_handle_get(h, K_STREAM);
    if (s == NULL || s->destroyed) {
        *err = sg_handle_gone(h, sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
        return NULL;
    }
    return s;
}

/* ---- handles a test makes stale ---------------------------------------------------------------
 * simgpu_stream_move(h, ctx): h names a new, empty stream of ctx from now on (what a driver that
 * reused a destroyed stream's handle for another context's stream would show: a stream->context
 * mapping remembered by the caller goes stale).  The stream h named is destroyed as by
 * cuStreamDestroy (its queued work drains) and can no longer be named.  The new stream keeps a
 * handle of its own inside the simulator (what the launch log's `stream used` and the checker's
 * reports show); h is an alias of it, resolved wherever a call names a stream. */
typedef struct {
    uint64_t user, stream;
} stream_alias;
static stream_alias *aliases;
static int naliases, cap_aliases;

uint64_t sg_stream_alias(uint64_t h) {
    for (int i = 0; i < naliases; i++)
        if (aliases[i].user == h) return aliases[i].stream;
    return h;
}

/* Exported for tests: 0, or -1 when h is not a live stream made by cuStreamCreate* (the
 * default streams cannot move) or ctx is not a live, active context. */
SG_API int simgpu_stream_move(CUstream h, CUcontext ctx) {
    int rc = -1;
    pthread_mutex_lock(&sg_lock);
    uint64_t inner = sg_stream_alias(H(h));
    sg_stream *s = H(h) > SG_STREAM_PER_THREAD ? sg_handle_get(inner, K_STREAM) : NULL;
    CUresult err;
    sg_ctx *c = sg_ctx_get(H(ctx), &err);
    if (s != NULL && !s->destroyed && s->kind == SK_USER && c != NULL) {
        int i = 0;
        while (i < naliases && aliases[i].user != H(h)) i++;
        if (i == naliases && naliases == cap_aliases) {
            int cap = cap_aliases ? cap_aliases * 2 : 8;
            stream_alias *grown = realloc(aliases, (size_t)cap * sizeof *grown);
            if (grown != NULL) {
                aliases = grown;
                cap_aliases = cap;
            }
        }
        sg_stream *n = i < cap_aliases ? sg_stream_create(c, SK_USER, s->flags, s->priority) : NULL;
        if (n != NULL) {
            sg_count("streams_created", 1);
            sg_count("streams_live", 1);
            sg_stream_destroy(s);
            aliases[i].user = H(h);
            aliases[i].stream = n->o.h;
            if (i == naliases) naliases++;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return rc;
}

/* ---- capture ---------------------------------------------------------------------------- */

#define MAX_MEMBERS 16
typedef struct sg_graph {
    sg_obj o;
    sg_op **nodes;
    int n, cap;
    sg_urefs refs; /* user objects it holds (graph.c) */
} sg_graph;

typedef struct sg_capture {
    unsigned long long id;
    int status;
    int mode;
    pthread_t thread;
    sg_stream *members[MAX_MEMBERS];
    uint64_t vclock[MAX_MEMBERS][MAX_MEMBERS];
    int nmembers;
    sg_graph *graph;
} sg_capture;

static unsigned long long next_capture_id = 1;
static __thread int tls_capture_mode = SG_CAPTURE_MODE_GLOBAL;

static sg_capture **captures; /* the active (or invalidated, not yet ended) captures */
static int ncaptures, cap_captures;

static void graph_add(sg_graph *g, sg_op *op) {
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 8;
        sg_op **grown = realloc(g->nodes, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            sg_op_free(op);
            return;
        }
        g->nodes = grown;
        g->cap = cap;
    }
    g->nodes[g->n++] = op;
}

static void graph_free(sg_graph *g) {
    sg_urefs_release(&g->refs, NULL, 0);
    for (int i = 0; i < g->n; i++) sg_op_free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static int capture_join(sg_capture *cap, sg_stream *s) {
    if (cap->nmembers == MAX_MEMBERS) return 0;
    int i = cap->nmembers++;
    cap->members[i] = s;
    memset(cap->vclock[i], 0, sizeof cap->vclock[i]);
    s->capture = cap;
    s->capture_index = i;
    return 1;
}

static void capture_leave(sg_stream *s) {
    sg_capture *cap = s->capture;
    if (cap->members[s->capture_index] == s) cap->members[s->capture_index] = NULL;
    s->capture = NULL;
}

static void capture_invalidate(sg_capture *cap) { cap->status = SG_CAPTURE_INVALIDATED; }

/* An event last recorded inside a capture that ends holds no work outside it. */
static void clear_event_capture(void *obj, void *arg) {
    sg_event *e = obj;
    if (e->capture == arg) {
        e->capture = NULL;
        e->recorded = 0;
    }
}

/* Ends a capture: its streams stop capturing; returns its graph (NULL if none kept). */
static sg_graph *capture_end(sg_capture *cap, int keep_graph) {
    for (int i = 0; i < cap->nmembers; i++)
        if (cap->members[i] != NULL) cap->members[i]->capture = NULL;
    sg_handle_each(K_EVENT, clear_event_capture, cap);
    for (int i = 0; i < ncaptures; i++) {
        if (captures[i] == cap) {
            captures[i] = captures[--ncaptures];
            break;
        }
    }
    sg_graph *g = cap->graph;
    if (!keep_graph) {
        sg_handle_drop(g->o.h);
        graph_free(g);
        g = NULL;
    }
    free(cap);
    return g;
}

int sg_capture_active_in_ctx(sg_ctx *c) {
    for (int i = 0; i < ncaptures; i++) {
        sg_capture *cap = captures[i];
        for (int j = 0; j < cap->nmembers; j++)
            if (cap->members[j] && cap->members[j]->ctx == c) return 1;
    }
    return 0;
}

static void invalidate_captures_in_ctx(sg_ctx *c) {
    for (int i = 0; i < ncaptures; i++) {
        sg_capture *cap = captures[i];
        for (int j = 0; j < cap->nmembers; j++)
            if (cap->members[j] && cap->members[j]->ctx == c) capture_invalidate(cap);
    }
}

/* A "potentially unsafe" call (allocation, free, synchronous copy) made while a
 * capture that forbids it is under way: the capture is invalidated. */
CUresult sg_capture_check_unsafe(void) {
    if (tls_capture_mode == SG_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_t self = pthread_self();
    for (int i = 0; i < ncaptures; i++) {
        sg_capture *cap = captures[i];
        if (cap->status != SG_CAPTURE_ACTIVE) continue;
        if (cap->mode == SG_CAPTURE_MODE_GLOBAL ||
            (cap->mode == SG_CAPTURE_MODE_THREAD_LOCAL && pthread_equal(cap->thread, self))) {
            capture_invalidate(cap);
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return r;
}

/* ---- enqueue ----------------------------------------------------------------------------- */

CUresult sg_enqueue(sg_stream *s, sg_op *op) {
    if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    sg_ctx *c = s->ctx;
    if (s->capture != NULL) {
        sg_capture *cap = s->capture;
        if (cap->status != SG_CAPTURE_ACTIVE) {
            sg_op_free(op);
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        free(op->deps);
        op->deps = NULL;
        op->ndeps = op->cap_deps = 0;
        if (SG_CHECKING() && op->ck_entry == NULL) op->ck_entry = sg_api_name(); /* for replays */
        cap->vclock[s->capture_index][s->capture_index]++;
        graph_add(cap->graph, op);
        return CUDA_SUCCESS;
    }
    if (s->kind == SK_LEGACY) {
        /* The legacy stream waits for every blocking stream of its context; a blocking
         * stream that is capturing cannot be waited for. */
        for (int i = 0; i < c->nstreams; i++) {
            sg_stream *t = c->streams[i];
            if (t != s && !(t->flags & SG_STREAM_NON_BLOCKING) && t->capture != NULL) {
                capture_invalidate(t->capture);
                sg_op_free(op);
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
            }
        }
        for (int i = 0; i < c->nstreams; i++) {
            sg_stream *t = c->streams[i];
            if (t != s && !(t->flags & SG_STREAM_NON_BLOCKING) && t->submitted > t->completed)
                sg_op_add_dep(op, t->o.h, t->submitted);
        }
    } else if (!(s->flags & SG_STREAM_NON_BLOCKING) && c->legacy != NULL &&
               c->legacy->submitted > c->legacy->completed) {
        /* ... and every blocking stream waits for the legacy stream. */
        sg_op_add_dep(op, c->legacy->o.h, c->legacy->submitted);
    }
    if (SG_CHECKING()) sg_ck_enqueue(s, op);
    op->seq = ++s->submitted;
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_signal(&s->work);
    return CUDA_SUCCESS;
}

/* ---- host-side waits ---------------------------------------------------------------------- */

void sg_wait_point(uint64_t stream, uint64_t seq) {
    while (!sg_point_done(stream, seq)) pthread_cond_wait(&sg_progress, &sg_lock);
}

void sg_wait_stream_idle(sg_stream *s) { sg_wait_point(s->o.h, s->submitted); }

typedef struct {
    int dev; /* -1: all */
    sg_dep *points;
    int n, cap;
    struct sg_vc *ck; /* the checker: the clocks of the streams waited for */
} idle_snapshot;

static void snapshot_stream(sg_stream *s, idle_snapshot *snap) {
    if (snap->n == snap->cap) {
        int cap = snap->cap ? snap->cap * 2 : 16;
        sg_dep *grown = realloc(snap->points, (size_t)cap * sizeof *grown);
        if (grown == NULL) return;
        snap->points = grown;
        snap->cap = cap;
    }
    snap->points[snap->n].stream = s->o.h;
    snap->points[snap->n].seq = s->submitted;
    snap->n++;
}

static void snapshot_ctx(sg_ctx *c, idle_snapshot *snap) {
    if (SG_CHECKING()) sg_ck_ctx_clock(c, &snap->ck);
    for (int i = 0; i < c->nstreams; i++) snapshot_stream(c->streams[i], snap);
    /* A destroyed stream still running its queued work (its worker drops the handle once
     * drained): that work is the context's too, and a context synchronisation waits for it. */
    for (sg_stream *s = draining_streams; s != NULL; s = s->draining_next)
        if (s->ctx == c && s->submitted > s->completed) snapshot_stream(s, snap);
}

static void snapshot_each(void *obj, void *arg) {
    sg_ctx *c = obj;
    idle_snapshot *snap = arg;
    if (snap->dev < 0 || c->dev == snap->dev) snapshot_ctx(c, snap);
}

static void wait_snapshot(idle_snapshot *snap) {
    for (int i = 0; i < snap->n; i++) sg_wait_point(snap->points[i].stream, snap->points[i].seq);
    free(snap->points);
    if (snap->ck != NULL) sg_ck_observe(snap->ck); /* the host saw all of it complete */
}

void sg_wait_ctx_idle(sg_ctx *c) {
    idle_snapshot snap = {0};
    snapshot_ctx(c, &snap);
    wait_snapshot(&snap);
}

void sg_wait_device_idle(int dev) {
    idle_snapshot snap = {0};
    snap.dev = dev;
    sg_handle_each(K_CTX, snapshot_each, &snap);
    wait_snapshot(&snap);
}

/* ---- stream entry points ------------------------------------------------------------------ */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority) {
    if (ph == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0) priority = 0;
    if (priority < -5) priority = -5;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_stream *s = c ? sg_stream_create(c, SK_USER, flags, priority) : NULL;
    if (c != NULL && s == NULL) err = CUDA_ERROR_OUT_OF_MEMORY;
    if (s != NULL) {
        *ph = P(s->o.h);
        sg_count("streams_created", 1);
        sg_count("streams_live", 1);
    }
    pthread_mutex_unlock(&sg_lock);
    return s ? CUDA_SUCCESS : err;
}

SG_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags) {
    API_BEGIN_ARGS("cuStreamCreate", LOG_OUT64(0), LA(ph), LA(flags));
    API_NEED_INIT();
    API_RETURN(stream_create(ph, flags, 0));
}

SG_API CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority) {
    API_BEGIN_ARGS("cuStreamCreateWithPriority", LOG_OUT64(0), LA(ph), LA(flags), LA(priority));
    API_NEED_INIT();
    API_RETURN(stream_create(ph, flags, priority));
}

SG_API CUresult cuStreamDestroy_v2(CUstream h) {
    API_BEGIN_ARGS("cuStreamDestroy_v2", 0, LA(h));
    API_NEED_INIT();
    if (H(h) <= SG_STREAM_PER_THREAD) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    pthread_mutex_lock(&sg_lock);
    uint64_t inner = sg_stream_alias(H(h));
    sg_stream *s = sg_handle_get(inner, K_STREAM);
    if (s == NULL || s->destroyed || s->kind != SK_USER) {
        CUresult r = s != NULL && !s->destroyed ? CUDA_ERROR_INVALID_HANDLE
                                                : sg_handle_gone(inner, sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(r);
    }
    sg_stream_destroy(s);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamDestroy(CUstream h) { return cuStreamDestroy_v2(h); }

#define RESOLVE_OR_RETURN(var, handle)                    \
    CUresult err_ = CUDA_SUCCESS;                         \
    pthread_mutex_lock(&sg_lock);                         \
    sg_stream *var = sg_stream_resolve(H(handle), &err_); \
    if (var == NULL) {                                    \
        pthread_mutex_unlock(&sg_lock);                   \
        API_RETURN(err_);                                 \
    }

/* In a child forked after cuInit (API_FORKED_CHILD_SUCCEEDS): the context of ordinary
 * stream h as the parent left it, 0 for any other handle.  The child's only thread
 * holds the lock the fork handler made anew. */
static uint64_t forked_child_stream_ctx(uint64_t h) {
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = h > SG_STREAM_PER_THREAD ? sg_handle_get(sg_stream_alias(h), K_STREAM) : NULL;
    uint64_t ctx = s != NULL && !s->destroyed ? s->ctx->o.h : 0;
    pthread_mutex_unlock(&sg_lock);
    return ctx;
}

SG_API CUresult cuStreamQuery(CUstream h) {
    API_BEGIN_ARGS("cuStreamQuery", 0, LA(h));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    RESOLVE_OR_RETURN(s, h);
    CUresult r;
    if (s->capture != NULL) {
        capture_invalidate(s->capture);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else {
        r = s->completed >= s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        if (r == CUDA_SUCCESS && SG_CHECKING()) sg_ck_observe(sg_ck_stream_clock(s));
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuStreamSynchronize(CUstream h) {
    API_BEGIN_ARGS("cuStreamSynchronize", 0, LA(h));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    RESOLVE_OR_RETURN(s, h);
    CUresult r = CUDA_SUCCESS;
    if (s->capture != NULL) {
        capture_invalidate(s->capture);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else {
        sg_count("host_waits", 1);
        struct sg_vc *seen = SG_CHECKING() ? sg_ck_stream_clock(s) : NULL;
        sg_wait_stream_idle(s);
        if (seen != NULL) sg_ck_observe(seen);
        sg_pools_on_sync();
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static CUresult ctx_synchronize(uint64_t h) {
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = h ? sg_ctx_get(h, &err) : sg_current_ctx(&err);
    if (c == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return err;
    }
    if (sg_capture_active_in_ctx(c)) {
        invalidate_captures_in_ctx(c);
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    sg_count("host_waits", 1);
    sg_wait_ctx_idle(c);
    sg_pools_on_sync();
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuCtxSynchronize(void) {
    API_BEGIN("cuCtxSynchronize");
    API_NEED_INIT();
    API_RETURN(ctx_synchronize(0));
}

SG_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    API_BEGIN_ARGS("cuCtxSynchronize_v2", 0, LA(ctx));
    API_NEED_INIT();
    API_RETURN(ctx_synchronize(H(ctx)));
}

SG_API CUresult cuStreamGetCtx(CUstream h, CUcontext *pctx) {
    API_BEGIN_ARGS("cuStreamGetCtx", LOG_OUT64(1), LA(h), LA(pctx));
    if (sg_forked_child && pctx != NULL) *pctx = P(forked_child_stream_ctx(H(h)));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    if (pctx == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    *pctx = P(s->ctx->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen) {
    API_BEGIN_ARGS("cuStreamGetCtx_v2", LOG_OUT64(1) | LOG_OUT64(2), LA(h), LA(pctx), LA(pgreen));
    if (sg_forked_child && pctx != NULL) *pctx = P(forked_child_stream_ctx(H(h)));
    if (sg_forked_child && pgreen != NULL) *pgreen = NULL;
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    if (pctx == NULL && pgreen == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    if (pctx) *pctx = P(s->ctx->o.h);
    if (pgreen) *pgreen = NULL;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamGetDevice(CUstream h, CUdevice *dev) {
    API_BEGIN_ARGS("cuStreamGetDevice", LOG_OUT32(1), LA(h), LA(dev));
    API_NEED_INIT();
    if (dev == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    *dev = s->ctx->dev;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamGetFlags(CUstream h, unsigned int *flags) {
    API_BEGIN_ARGS("cuStreamGetFlags", LOG_OUT32(1), LA(h), LA(flags));
    API_NEED_INIT();
    if (flags == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    *flags = s->flags;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamGetPriority(CUstream h, int *priority) {
    API_BEGIN_ARGS("cuStreamGetPriority", LOG_OUT32(1), LA(h), LA(priority));
    API_NEED_INIT();
    if (priority == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    *priority = s->priority;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuStreamGetId(CUstream h, unsigned long long *id) {
    API_BEGIN_ARGS("cuStreamGetId", LOG_OUT64(1), LA(h), LA(id));
    API_NEED_INIT();
    if (id == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    *id = s->id;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

static CUresult host_fn(CUstream h, CUhostFn fn, void *data) {
    if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = sg_stream_resolve(H(h), &err);
    if (s != NULL) {
        sg_op *op = sg_op_new(OP_HOSTFN);
        if (op) {
            op->u.hostfn.fn = fn;
            op->u.hostfn.data = data;
        }
        err = sg_enqueue(s, op);
    }
    pthread_mutex_unlock(&sg_lock);
    return err;
}

SG_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data) {
    API_BEGIN_ARGS("cuLaunchHostFunc", 0, LA(h), LA(fn), LA(data));
    API_NEED_INIT();
    API_RETURN(host_fn(h, fn, data));
}

SG_API CUresult cuLaunchHostFunc_v2(CUstream h, CUhostFn fn, void *data, unsigned int sync_mode) {
    API_BEGIN_ARGS("cuLaunchHostFunc_v2", 0, LA(h), LA(fn), LA(data), LA(sync_mode));
    API_NEED_INIT();
    (void)sync_mode;
    API_RETURN(host_fn(h, fn, data));
}

SG_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback fn, void *data,
                                    unsigned int flags) {
    API_BEGIN_ARGS("cuStreamAddCallback", 0, LA(h), LA(fn), LA(data), LA(flags));
    API_NEED_INIT();
    if (fn == NULL || flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    sg_op *op = sg_op_new(OP_CALLBACK);
    if (op) {
        op->u.callback.fn = fn;
        op->u.callback.data = data;
        op->u.callback.stream = H(h);
    }
    CUresult r = sg_enqueue(s, op);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- events -------------------------------------------------------------------------------- */

SG_API CUresult cuEventCreate(CUevent *ph, unsigned int flags) {
    API_BEGIN_ARGS("cuEventCreate", LOG_OUT64(0), LA(ph), LA(flags));
    API_NEED_INIT();
    if (ph == NULL || (flags & ~7u)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((flags & SG_EVENT_INTERPROCESS) && !(flags & SG_EVENT_DISABLE_TIMING))
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_event *e = c ? calloc(1, sizeof *e) : NULL;
    if (c != NULL && e == NULL) err = CUDA_ERROR_OUT_OF_MEMORY;
    if (e != NULL) {
        e->ctx = c->o.h;
        e->generation = c->generation;
        e->flags = flags;
        sg_handle_new(e, K_EVENT);
        /* An interprocess event keeps its record state in this process's IPC file. */
        if ((flags & SG_EVENT_INTERPROCESS) && sg_ipc_event_new(e) != 0) {
            sg_handle_drop(e->o.h);
            free(e);
            pthread_mutex_unlock(&sg_lock);
            API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        }
        *ph = P(e->o.h);
        sg_count("events_created", 1);
        sg_count("events_live", 1);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(e ? CUDA_SUCCESS : err);
}

static void event_free(sg_event *e) {
    sg_ipc_event_drop(e); /* an opened event: its mapping only */
    sg_handle_drop(e->o.h);
    if (e->ck != NULL) sg_ck_vc_free(e->ck);
    free(e);
    sg_count("events_destroyed", 1);
    sg_count("events_live", -1);
}

SG_API CUresult cuEventDestroy_v2(CUevent h) {
    API_BEGIN_ARGS("cuEventDestroy_v2", 0, LA(h));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(H(h), K_EVENT);
    CUresult r = CUDA_SUCCESS;
    if (e != NULL)
        event_free(e);
    else
        r = sg_handle_gone(H(h), sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuEventDestroy(CUevent h) { return cuEventDestroy_v2(h); }

/* Exported for tests: the driver reports stream or event handle h gone.  A live event is
 * destroyed as by cuEventDestroy, a live stream made by cuStreamCreate* as by cuStreamDestroy
 * (its queued work drains); from then on every call naming h answers `code` (a nonzero
 * CUresult: CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_CONTEXT_IS_DESTROYED, ...) instead of what a
 * destroyed handle gets (SIGSEGV for a stream, CONTEXT_IS_DESTROYED for an event).  h may
 * already be destroyed; a stream handle moved by simgpu_stream_move applies to the stream it
 * names now.  Returns 0, or -1 for code 0, a default stream (0, 1, 2, per-thread) or a handle
 * that never named a stream or an event. */
SG_API int simgpu_handle_report_gone(uint64_t h, int code) {
    if (code == CUDA_SUCCESS || h <= SG_STREAM_PER_THREAD) return -1;
    int rc = -1;
    pthread_mutex_lock(&sg_lock);
    uint64_t inner = sg_stream_alias(h);
    int was = sg_handle_was(inner);
    if (was == K_STREAM) {
        sg_stream *s = sg_handle_get(inner, K_STREAM);
        if (s == NULL || s->destroyed || s->kind == SK_USER) {
            if (s != NULL && !s->destroyed) sg_stream_destroy(s);
            rc = sg_handle_report(inner, code);
        }
    } else if (was == K_EVENT) {
        sg_event *e = sg_handle_get(inner, K_EVENT);
        if (e != NULL) event_free(e);
        rc = sg_handle_report(inner, code);
    }
    pthread_mutex_unlock(&sg_lock);
    return rc;
}

static void destroy_event_of_ctx(void *obj, void *arg) {
    sg_event *e = obj;
    if (e->ctx == ((sg_ctx *)arg)->o.h) event_free(e);
}

void sg_events_of_ctx_destroy(sg_ctx *c) { sg_handle_each(K_EVENT, destroy_event_of_ctx, c); }

void sg_record_reached(uint64_t event, uint64_t generation) {
    sg_event *e = sg_handle_get(event, K_EVENT);
    if (e != NULL && e->record_gen == generation) {
        e->time_ms = sg_now_ms();
        e->time_valid = 1;
    }
}

static CUresult event_record(uint64_t event, uint64_t stream, unsigned flags) {
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(event, K_EVENT);
    if (e == NULL) {
        CUresult gone = sg_handle_gone(event, sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
        pthread_mutex_unlock(&sg_lock);
        return gone;
    }
    sg_stream *s = sg_stream_resolve(stream, &err);
    if (s == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return err;
    }
    /* An event records only work of its own context. */
    if (s->ctx->o.h != e->ctx || s->ctx->generation != e->generation) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s->capture != NULL && e->ipc_imported) {
        /* Not modelled: an event of another process recorded into a graph. */
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->capture != NULL) {
        sg_capture *cap = s->capture;
        if (cap->status != SG_CAPTURE_ACTIVE) {
            pthread_mutex_unlock(&sg_lock);
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        }
        if (flags & 1u) {
            /* An external record: a node of the graph that records the event when
             * the graph runs, for work outside the graph to wait on. */
            sg_op *op = sg_op_new(OP_RECORD);
            if (op == NULL) {
                pthread_mutex_unlock(&sg_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            op->u.record.event = e->o.h;
            err = sg_enqueue(s, op);
            pthread_mutex_unlock(&sg_lock);
            return err;
        }
        /* A record under capture marks a point of the graph being built, for waits
         * of other streams to join the capture; nothing is recorded at run time. */
        e->recorded = 1;
        e->capture = cap;
        e->time_valid = 0;
        memcpy(e->vclock, cap->vclock[s->capture_index], sizeof e->vclock);
        if (SG_CHECKING()) sg_ck_event_forget(e);
        pthread_mutex_unlock(&sg_lock);
        return CUDA_SUCCESS;
    }
    sg_op *op = sg_op_new(OP_RECORD);
    if (op == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.record.event = e->o.h;
    op->u.record.generation = e->record_gen + 1;
    err = sg_enqueue(s, op);
    if (err == CUDA_SUCCESS) {
        e->record_gen++;
        e->recorded = 1;
        e->capture = NULL;
        e->stream = s->o.h;
        e->seq = s->submitted;
        e->time_valid = 0;
        if (SG_CHECKING()) sg_ck_event_recorded(e, s);
        /* The op cannot complete before the lock is released: numbering it now is safe. */
        if (e->ipc != NULL) sg_ipc_record_begin(e, op);
    }
    pthread_mutex_unlock(&sg_lock);
    return err;
}

SG_API CUresult cuEventRecord(CUevent h, CUstream stream) {
    API_BEGIN_ARGS("cuEventRecord", 0, LA(h), LA(stream));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    API_RETURN(event_record(H(h), H(stream), 0));
}

SG_API CUresult cuEventRecordWithFlags(CUevent h, CUstream stream, unsigned int flags) {
    API_BEGIN_ARGS("cuEventRecordWithFlags", 0, LA(h), LA(stream), LA(flags));
    API_NEED_INIT();
    API_RETURN(event_record(H(h), H(stream), flags));
}

SG_API CUresult cuEventQuery(CUevent h) {
    API_BEGIN_ARGS("cuEventQuery", 0, LA(h));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(H(h), K_EVENT);
    CUresult r;
    uint64_t foreign;
    if (e == NULL) {
        r = sg_handle_gone(H(h), sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
    } else if (e->capture != NULL) {
        capture_invalidate(e->capture); /* an invalid operation invalidates the capture */
        r = CUDA_ERROR_CAPTURED_EVENT;
    } else if ((foreign = sg_ipc_foreign_record(e)) != 0) {
        /* Last recorded by another process: what its shared state says. */
        r = sg_ipc_record_done(e, foreign) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    }
    else if (!e->recorded || sg_point_done(e->stream, e->seq)) {
        r = CUDA_SUCCESS;
        if (e->recorded && SG_CHECKING()) sg_ck_observe(sg_ck_event_clock(e));
    } else
        r = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuEventSynchronize(CUevent h) {
    API_BEGIN_ARGS("cuEventSynchronize", 0, LA(h));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(H(h), K_EVENT);
    CUresult r = CUDA_SUCCESS;
    uint64_t foreign;
    if (e == NULL) {
        r = sg_handle_gone(H(h), sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
    } else if (e->capture != NULL) {
        capture_invalidate(e->capture);
        r = CUDA_ERROR_CAPTURED_EVENT;
    } else if ((foreign = sg_ipc_foreign_record(e)) != 0) {
        sg_count("host_waits", 1);
        /* Another process's record: poll its completion (the wait op holds the mapping). */
        sg_op *w = sg_ipc_wait_op(e, foreign);
        while (w != NULL && !sg_ipc_wait_done(w)) sg_ipc_poll_pause();
        sg_op_free(w);
        sg_pools_on_sync();
    } else {
        sg_count("host_waits", 1);
        struct sg_vc *seen = e->recorded && SG_CHECKING() ? sg_ck_event_clock(e) : NULL;
        if (e->recorded) sg_wait_point(e->stream, e->seq);
        if (seen != NULL) sg_ck_observe(seen);
        sg_pools_on_sync();
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static CUresult elapsed(float *ms, uint64_t start, uint64_t end) {
    if (ms == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    sg_event *a = sg_handle_get(start, K_EVENT), *b = sg_handle_get(end, K_EVENT);
    CUresult r = CUDA_SUCCESS;
    if ((a == NULL && sg_handle_reported(start, &r)) || (b == NULL && sg_handle_reported(end, &r)))
        ; /* a handle reported gone (simgpu_handle_report_gone) answers its code */
    else if (a == NULL || b == NULL || !a->recorded || !b->recorded ||
        ((a->flags | b->flags) & SG_EVENT_DISABLE_TIMING) || a->capture || b->capture)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!sg_point_done(a->stream, a->seq) || !sg_point_done(b->stream, b->seq) ||
             !a->time_valid || !b->time_valid)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(b->time_ms - a->time_ms);
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    API_BEGIN_ARGS("cuEventElapsedTime", LOG_OUT32(0), LA(ms), LA(start), LA(end));
    API_NEED_INIT();
    API_RETURN(elapsed(ms, H(start), H(end)));
}

SG_API CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
    API_BEGIN_ARGS("cuEventElapsedTime_v2", LOG_OUT32(0), LA(ms), LA(start), LA(end));
    API_NEED_INIT();
    API_RETURN(elapsed(ms, H(start), H(end)));
}

SG_API CUresult cuStreamWaitEvent(CUstream h, CUevent event, unsigned int flags) {
    API_BEGIN_ARGS("cuStreamWaitEvent", 0, LA(h), LA(event), LA(flags));
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    if (flags & ~1u) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_event *e = sg_handle_get(H(event), K_EVENT);
    if (e == NULL) {
        CUresult gone = sg_handle_gone(H(event), sg_api_name(), CUDA_ERROR_INVALID_HANDLE);
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(gone);
    }
    sg_stream *s = sg_stream_resolve(H(h), &err);
    if (s == NULL) {
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(err);
    }
    uint64_t foreign = e->capture == NULL ? sg_ipc_foreign_record(e) : 0;
    if (foreign != 0) {
        /* The event's last record was made by another process: the stream waits for that
         * record (not a later one) through the shared state; no host wait, and no order the
         * checker can see.  Not modelled under capture. */
        CUresult r = CUDA_SUCCESS;
        if (s->capture != NULL) {
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        } else {
            sg_op *op = sg_ipc_record_done(e, foreign) ? sg_op_new(OP_NOP) : sg_ipc_wait_op(e, foreign);
            r = op ? sg_enqueue(s, op) : CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(r);
    }
    if (e->capture != NULL) {
        /* A wait on a point of a capture: the stream joins (or merges into) it. */
        sg_capture *cap = e->capture;
        if (s->capture != NULL && s->capture != cap) {
            capture_invalidate(s->capture);
            pthread_mutex_unlock(&sg_lock);
            API_RETURN(CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
        }
        if (cap->status != SG_CAPTURE_ACTIVE) {
            pthread_mutex_unlock(&sg_lock);
            API_RETURN(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        }
        if (s->capture == NULL && !capture_join(cap, s)) {
            pthread_mutex_unlock(&sg_lock);
            API_RETURN(CUDA_ERROR_NOT_SUPPORTED);
        }
        uint64_t *mine = cap->vclock[s->capture_index];
        for (int i = 0; i < MAX_MEMBERS; i++)
            if (e->vclock[i] > mine[i]) mine[i] = e->vclock[i];
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(CUDA_SUCCESS);
    }
    if (s->capture != NULL) {
        /* A capturing stream may wait on an event of ordinary work only as an
         * external wait: a node that waits, when the graph runs, for the event's
         * last record then. */
        CUresult r = CUDA_SUCCESS;
        if (flags & 1u) {
            sg_op *op = sg_op_new(OP_EXTERNAL_WAIT);
            if (op) op->u.record.event = e->o.h;
            r = sg_enqueue(s, op);
        } else if (!e->recorded) {
            r = s->capture->status == SG_CAPTURE_ACTIVE ? CUDA_SUCCESS
                                                         : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            capture_invalidate(s->capture);
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(r);
    }
    sg_op *op = sg_op_new(OP_NOP);
    if (op != NULL && e->recorded && !sg_point_done(e->stream, e->seq))
        sg_op_add_dep(op, e->stream, e->seq);
    /* The checker: the stream joins the snapshot of the event's last record, done or not. */
    if (op != NULL && e->recorded && SG_CHECKING()) op->ck_join = sg_ck_event_clock(e);
    CUresult r = sg_enqueue(s, op);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- capture entry points -------------------------------------------------------------------- */

static CUresult begin_capture(uint64_t h, int mode) {
    if (mode < 0 || mode > 2) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = sg_stream_resolve(h, &err);
    CUresult r = CUDA_SUCCESS;
    if (s == NULL) {
        r = err;
    } else if (s->kind == SK_LEGACY) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->capture != NULL) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        sg_capture *cap = calloc(1, sizeof *cap);
        sg_graph *g = calloc(1, sizeof *g);
        /* Grown when full; the new capacity is kept whether realloc moved the array or
         * grew it in place (a capacity updated only on a move let later captures write past
         * the array's end: heap corruption seen in cuda.core's suite). */
        int grow = ncaptures == cap_captures;
        int new_cap = grow ? (cap_captures ? cap_captures * 2 : 4) : cap_captures;
        sg_capture **grown = grow ? realloc(captures, (size_t)new_cap * sizeof *captures) : captures;
        if (grown != NULL) {
            captures = grown;
            cap_captures = new_cap;
        }
        if (cap == NULL || g == NULL || grown == NULL) {
            free(cap);
            free(g);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            sg_handle_new(g, K_GRAPH);
            cap->graph = g;
            cap->id = next_capture_id++;
            cap->status = SG_CAPTURE_ACTIVE;
            cap->mode = mode;
            cap->thread = pthread_self();
            captures[ncaptures++] = cap;
            capture_join(cap, s);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuStreamBeginCapture(CUstream h) {
    API_BEGIN_ARGS("cuStreamBeginCapture", 0, LA(h));
    API_NEED_INIT();
    API_RETURN(begin_capture(H(h), SG_CAPTURE_MODE_GLOBAL));
}

SG_API CUresult cuStreamBeginCapture_v2(CUstream h, int mode) {
    API_BEGIN_ARGS("cuStreamBeginCapture_v2", 0, LA(h), LA(mode));
    API_NEED_INIT();
    API_RETURN(begin_capture(H(h), mode));
}

SG_API CUresult cuStreamEndCapture(CUstream h, CUgraph *graph) {
    API_BEGIN_ARGS("cuStreamEndCapture", LOG_OUT64(1), LA(h), LA(graph));
    API_NEED_INIT();
    if (graph == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    sg_capture *cap = s->capture;
    CUresult r = CUDA_SUCCESS;
    if (cap == NULL) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (cap->members[0] != s) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (cap->mode != SG_CAPTURE_MODE_RELAXED && !pthread_equal(cap->thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else if (cap->status != SG_CAPTURE_ACTIVE) {
        capture_end(cap, 0);
        *graph = NULL;
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        for (int i = 1; i < cap->nmembers; i++) {
            if (cap->members[i] != NULL && cap->vclock[0][i] < cap->vclock[i][i])
                r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        }
        if (r != CUDA_SUCCESS) {
            capture_end(cap, 0);
            *graph = NULL;
        } else {
            sg_graph *g = capture_end(cap, 1);
            *graph = P(g->o.h);
        }
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static CUresult capture_status(sg_stream *s, int *status) {
    if (s->kind == SK_LEGACY) {
        sg_ctx *c = s->ctx;
        for (int i = 0; i < c->nstreams; i++) {
            sg_stream *t = c->streams[i];
            if (t->capture && !(t->flags & SG_STREAM_NON_BLOCKING))
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
    }
    *status = s->capture == NULL ? SG_CAPTURE_NONE
              : s->capture->status == SG_CAPTURE_ACTIVE ? SG_CAPTURE_ACTIVE
                                                        : SG_CAPTURE_INVALIDATED;
    return CUDA_SUCCESS;
}

SG_API CUresult cuStreamIsCapturing(CUstream h, int *status) {
    API_BEGIN_ARGS("cuStreamIsCapturing", LOG_OUT32(1), LA(h), LA(status));
    if (sg_forked_child && status != NULL) *status = SG_CAPTURE_NONE;
    API_FORKED_CHILD_SUCCEEDS();
    API_NEED_INIT();
    if (status == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    RESOLVE_OR_RETURN(s, h);
    CUresult r = capture_status(s, status);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

static CUresult capture_info(uint64_t h, int *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const void **edges, size_t *ndeps) {
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_stream *s = sg_stream_resolve(h, &err);
    if (s == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return err;
    }
    int st = 0;
    CUresult r = status ? capture_status(s, &st) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        if (status) *status = st;
        if (s->capture != NULL) {
            if (id) *id = s->capture->id;
            if (graph) *graph = P(s->capture->graph->o.h);
        } else if (graph) {
            *graph = NULL;
        }
        if (deps) *deps = NULL;
        if (edges) *edges = NULL;
        if (ndeps) *ndeps = 0;
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuStreamGetCaptureInfo_v2(CUstream h, int *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, size_t *ndeps) {
    API_BEGIN_ARGS("cuStreamGetCaptureInfo_v2", LOG_OUT32(1) | LOG_OUT64(2) | LOG_OUT64(3) | LOG_OUT64(4) | LOG_OUT64(5), LA(h), LA(status), LA(id), LA(graph), LA(deps), LA(ndeps));
    API_NEED_INIT();
    API_RETURN(capture_info(H(h), status, id, graph, deps, NULL, ndeps));
}

SG_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, int *status, cuuint64_t *id, CUgraph *graph,
                                          const CUgraphNode **deps, const void **edges,
                                          size_t *ndeps) {
    API_BEGIN_ARGS("cuStreamGetCaptureInfo_v3", LOG_OUT32(1) | LOG_OUT64(2) | LOG_OUT64(3) | LOG_OUT64(4) | LOG_OUT64(5), LA(h), LA(status), LA(id), LA(graph), LA(deps), LA(ndeps));
    API_NEED_INIT();
    API_RETURN(capture_info(H(h), status, id, graph, deps, edges, ndeps));
}

SG_API CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    API_BEGIN_ARGS("cuThreadExchangeStreamCaptureMode", LOG_OUT32(0), LA(mode));
    API_NEED_INIT();
    if (mode == NULL || *mode < 0 || *mode > 2) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    int old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    API_RETURN(CUDA_SUCCESS);
}

/* ---- graphs: a captured graph runs its operations in capture order -------------------------- */

typedef struct {
    sg_obj o;
    sg_op **nodes;
    int n;
    sg_urefs refs;     /* its own references to its graph's user objects */
    sg_dep *launched;  /* per stream, the last operation of its latest launch there */
    struct sg_vc **launched_vc; /* the checker's clock of each such point (NULL: not checked) */
    int nlaunched, cap_launched;
} sg_graph_exec;

sg_urefs *sg_graph_urefs(uint64_t h) {
    sg_graph *g = sg_handle_get(h, K_GRAPH);
    return g != NULL ? &g->refs : NULL;
}

/* The launch just enqueued on s: the exec's references wait for it at its destruction. */
static void exec_launched(sg_graph_exec *x, sg_stream *s) {
    int i;
    for (i = 0; i < x->nlaunched; i++)
        if (x->launched[i].stream == s->o.h) break;
    if (i == x->nlaunched) {
        if (x->nlaunched == x->cap_launched) {
            int cap = x->cap_launched ? x->cap_launched * 2 : 4;
            sg_dep *grown = realloc(x->launched, (size_t)cap * sizeof *grown);
            if (grown == NULL) return;
            x->launched = grown;
            struct sg_vc **clocks = realloc(x->launched_vc, (size_t)cap * sizeof *clocks);
            if (clocks == NULL) return;
            x->launched_vc = clocks;
            x->cap_launched = cap;
        }
        x->launched[i].stream = s->o.h;
        x->launched_vc[i] = NULL;
        x->nlaunched++;
    }
    x->launched[i].seq = s->submitted;
    /* The checker's clock at that point: the host observes it when the references that
       waited for it go (graph.c), as a destructor run then tells it the launch is done. */
    sg_ck_vc_free(x->launched_vc[i]);
    x->launched_vc[i] = SG_CHECKING() ? sg_ck_stream_clock(s) : NULL;
}

SG_API CUresult cuGraphCreate(CUgraph *ph, unsigned int flags) {
    API_BEGIN_ARGS("cuGraphCreate", LOG_OUT64(0), LA(ph), LA(flags));
    API_NEED_INIT();
    if (ph == NULL || flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    sg_graph *g = calloc(1, sizeof *g);
    if (g == NULL) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_lock(&sg_lock);
    sg_handle_new(g, K_GRAPH);
    *ph = P(g->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuGraphDestroy(CUgraph h) {
    API_BEGIN_ARGS("cuGraphDestroy", 0, LA(h));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_graph *g = sg_handle_get(H(h), K_GRAPH);
    int in_capture = 0;
    for (int i = 0; g && i < ncaptures; i++)
        if (captures[i]->graph == g) in_capture = 1;
    if (g != NULL && !in_capture) {
        sg_handle_drop(g->o.h);
        graph_free(g);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(g == NULL ? CUDA_ERROR_INVALID_VALUE : in_capture ? CUDA_ERROR_NOT_PERMITTED : CUDA_SUCCESS);
}

SG_API CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *count) {
    API_BEGIN_ARGS("cuGraphGetNodes", LOG_OUT64(2), LA(h), LA(nodes), LA(count));
    API_NEED_INIT();
    if (count == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_graph *g = sg_handle_get(H(h), K_GRAPH);
    if (g != NULL) {
        if (nodes != NULL) {
            for (size_t i = 0; i < *count && i < (size_t)g->n; i++)
                nodes[i] = P(H(g) ^ ((uint64_t)(i + 1) << 3)); /* opaque per-node values */
        }
        *count = (size_t)g->n;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

static CUresult instantiate(CUgraphExec *ph, uint64_t graph) {
    if (ph == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    sg_graph *g = sg_handle_get(graph, K_GRAPH);
    if (g == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    sg_graph_exec *x = calloc(1, sizeof *x);
    sg_op **nodes = calloc((size_t)g->n + 1, sizeof *nodes);
    if (x == NULL || nodes == NULL) {
        free(x);
        free(nodes);
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < g->n; i++) nodes[i] = sg_op_clone(g->nodes[i]);
    x->nodes = nodes;
    x->n = g->n;
    sg_urefs_copy(&x->refs, &g->refs);
    sg_handle_new(x, K_GEXEC);
    *ph = P(x->o.h);
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *ph, CUgraph graph,
                                            unsigned long long flags) {
    API_BEGIN_ARGS("cuGraphInstantiateWithFlags", LOG_OUT64(0), LA(ph), LA(graph), LA(flags));
    API_NEED_INIT();
    (void)flags;
    API_RETURN(instantiate(ph, H(graph)));
}

typedef struct {
    cuuint64_t flags;
    CUstream upload_stream;
    CUgraphNode error_node;
    int result;
} sg_instantiate_params;

SG_API CUresult cuGraphInstantiateWithParams(CUgraphExec *ph, CUgraph graph,
                                             sg_instantiate_params *params) {
    API_BEGIN_ARGS("cuGraphInstantiateWithParams", LOG_OUT64(0), LA(ph), LA(graph), LA(params));
    API_NEED_INIT();
    CUresult r = instantiate(ph, H(graph));
    if (params != NULL) {
        params->error_node = NULL;
        params->result = r == CUDA_SUCCESS ? 0 : 1;
    }
    API_RETURN(r);
}

SG_API CUresult cuGraphExecDestroy(CUgraphExec h) {
    API_BEGIN_ARGS("cuGraphExecDestroy", 0, LA(h));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_graph_exec *x = sg_handle_get(H(h), K_GEXEC);
    if (x != NULL) {
        sg_handle_drop(x->o.h);
        /* Its references go once the launches already made have run (the clocks of those
           points handed over: observed by the host then). */
        sg_urefs_release_after(&x->refs, x->launched, x->launched_vc, x->nlaunched);
        for (int i = 0; i < x->n; i++) sg_op_free(x->nodes[i]);
        free(x->nodes);
        free(x->launched);
        free(x->launched_vc);
        free(x);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SG_API CUresult cuGraphUpload(CUgraphExec h, CUstream stream) {
    API_BEGIN_ARGS("cuGraphUpload", 0, LA(h), LA(stream));
    API_NEED_INIT();
    RESOLVE_OR_RETURN(s, stream);
    (void)s;
    sg_graph_exec *x = sg_handle_get(H(h), K_GEXEC);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SG_API CUresult cuGraphLaunch(CUgraphExec h, CUstream stream) {
    API_BEGIN_ARGS("cuGraphLaunch", 0, LA(h), LA(stream));
    API_NEED_INIT();
    RESOLVE_OR_RETURN(s, stream);
    sg_graph_exec *x = sg_handle_get(H(h), K_GEXEC);
    CUresult r = x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; x && i < x->n && r == CUDA_SUCCESS; i++) {
        if (x->nodes[i] == NULL) continue;
        sg_op *op = sg_op_clone(x->nodes[i]);
        sg_event *e = NULL;
        if (op) op->ck_replay = 1;
        if (op && op->type == OP_KERNEL) op->u.kernel.index = sg_kernel_relog(op->u.kernel.index, 1);
        if (op && op->type == OP_EXTERNAL_WAIT) {
            op->type = OP_NOP;
            e = sg_handle_get(op->u.record.event, K_EVENT);
            if (e != NULL && e->recorded && e->capture == NULL && !sg_point_done(e->stream, e->seq))
                sg_op_add_dep(op, e->stream, e->seq);
            if (e != NULL && e->recorded && e->capture == NULL && SG_CHECKING())
                op->ck_join = sg_ck_event_clock(e); /* the event's state at this launch */
            e = NULL;
        } else if (op && op->type == OP_RECORD) {
            e = sg_handle_get(op->u.record.event, K_EVENT);
            if (e != NULL) op->u.record.generation = e->record_gen + 1;
        }
        r = sg_enqueue(s, op);
        if (r == CUDA_SUCCESS && e != NULL && s->capture == NULL) {
            e->record_gen++;
            e->recorded = 1;
            e->capture = NULL;
            e->stream = s->o.h;
            e->seq = s->submitted;
            e->time_valid = 0;
            if (SG_CHECKING()) sg_ck_event_recorded(e, s);
        }
    }
    if (x != NULL && r == CUDA_SUCCESS && s->capture == NULL) exec_launched(x, s);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}
