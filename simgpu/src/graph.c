/* simgpu user objects: a resource whose life CUDA graphs share.
 *
 * cuUserObjectCreate makes an object with a destructor and a reference count owned by
 * the caller; cuUserObjectRetain/Release change the caller's count;
 * cuGraphRetainUserObject gives a graph references (new ones, or the caller's moved
 * with CU_GRAPH_USER_OBJECT_MOVE), cuGraphReleaseUserObject takes them back.  An
 * executable graph holds references of its own to every object its graph held when it
 * was instantiated.  A graph's references go when it is destroyed (or when a capture
 * that was building it fails), an executable graph's when it is destroyed and every
 * launch of it made so far has run.
 *
 * When the last reference goes in an entry point (cuUserObjectRelease,
 * cuGraphReleaseUserObject, cuGraphDestroy, a failed capture, cuGraphExecDestroy with
 * no launch pending) the destructor runs in the calling thread before the call
 * returns, with no simulator lock held (sg_api_leave runs sg_user_objects_run_due): driver
 * 580 on an H200 ran it so for cuUserObjectRelease and for cuGraphDestroy of a graph
 * holding the last reference.  References an executable graph drops only once its
 * queued launches have run go on one driver thread of the simulator's own (started on
 * first need), which runs the destructors they make due, also with no lock held.
 * A destructor may make no CUDA call (NOT_PERMITTED, as in a host function).
 *
 * Everything else here runs under sg_lock; the release thread waits on sg_progress,
 * which every completed operation broadcasts, for the launches an executable graph's
 * release waits for. */
#include "sim.h"

enum { SG_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1, SG_GRAPH_USER_OBJECT_MOVE = 1 };

typedef struct {
    sg_obj o;
    void *ptr;
    CUhostFn destroy;
    long long refs;
} sg_uobj;

/* References to drop once every point in deps has run (the release thread's list); or,
 * with refs NULL, a destructor due in the thread that made it (due_head). */
typedef struct sg_release {
    struct sg_release *next;
    sg_uref *refs;
    int nrefs;
    sg_dep *deps;
    struct sg_vc **clocks; /* the checker's clock of each point (observed as they go), or NULL */
    int ndeps;
    CUhostFn destroy;
    void *ptr;
} sg_release;

static sg_release *releases;  /* in the order they were made */
static int release_thread_started;

static void *release_thread(void *arg);

static void release_push(sg_release *r) {
    sg_release **at = &releases;
    while (*at != NULL) at = &(*at)->next;
    r->next = NULL;
    *at = r;
    if (!release_thread_started) {
        pthread_attr_t attr;
        pthread_t thread;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&thread, &attr, release_thread, NULL) == 0) release_thread_started = 1;
        pthread_attr_destroy(&attr);
    }
    pthread_cond_broadcast(&sg_progress);
}

/* Destructors made due by this thread, run by sg_user_objects_run_due once it holds no
 * lock; in the order their objects died. */
static __thread sg_release *due_head, *due_tail;

/* Drop count references of obj (lock held); the last one makes its destructor due in
 * the calling thread. */
static void uobj_drop(uint64_t h, unsigned count) {
    sg_uobj *u = sg_handle_get(h, K_UOBJ);
    if (u == NULL) return;
    u->refs -= count;
    if (u->refs > 0) return;
    sg_handle_drop(u->o.h);
    sg_count("user_objects_live", -1);
    sg_release *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->destroy = u->destroy;
        r->ptr = u->ptr;
        if (due_tail != NULL) due_tail->next = r; else due_head = r;
        due_tail = r;
    }
    free(u);
}

void sg_user_objects_run_due(void) {
    while (due_head != NULL) {
        sg_release *r = due_head;  /* taken first: a destructor makes no CUDA call, but */
        due_head = r->next;        /* nothing here depends on that */
        if (due_head == NULL) due_tail = NULL;
        int in_host_fn = sg_in_host_fn;
        sg_in_host_fn = 1; /* a destructor may make no CUDA call */
        r->destroy(r->ptr);
        sg_in_host_fn = in_host_fn;
        sg_count("user_object_destructors", 1);
        free(r);
    }
}

static int release_ready(const sg_release *r) {
    for (int i = 0; i < r->ndeps; i++)
        if (!sg_point_done(r->deps[i].stream, r->deps[i].seq)) return 0;
    return 1;
}

static void *release_thread(void *arg) {
    (void)arg;
    pthread_mutex_lock(&sg_lock);
    for (;;) {
        sg_release **at = &releases, *r = NULL;
        while (*at != NULL) {
            if (release_ready(*at)) {
                r = *at;
                *at = r->next;
                break;
            }
            at = &(*at)->next;
        }
        if (r == NULL) {
            pthread_cond_wait(&sg_progress, &sg_lock);
            continue;
        }
        /* The points it waited for have run: what the destructors then tell the host. */
        for (int i = 0; r->clocks != NULL && i < r->ndeps; i++) sg_ck_observe(r->clocks[i]);
        free(r->clocks);
        for (int i = 0; i < r->nrefs; i++) uobj_drop(r->refs[i].obj, r->refs[i].count);
        free(r->refs);
        free(r->deps);
        free(r);
        if (due_head != NULL) {
            pthread_mutex_unlock(&sg_lock);
            sg_user_objects_run_due();
            pthread_mutex_lock(&sg_lock);
        }
    }
    return NULL;
}

/* ---- reference lists, for graphs and executable graphs (stream.c) ---------------------- */

static sg_uref *urefs_find(sg_urefs *l, uint64_t obj) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i].obj == obj) return &l->v[i];
    return NULL;
}

static int urefs_add(sg_urefs *l, uint64_t obj, unsigned count) {
    sg_uref *found = urefs_find(l, obj);
    if (found != NULL) {
        found->count += count;
        return 1;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        sg_uref *grown = realloc(l->v, (size_t)cap * sizeof *grown);
        if (grown == NULL) return 0;
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n].obj = obj;
    l->v[l->n].count = count;
    l->n++;
    return 1;
}

int sg_urefs_copy(sg_urefs *dst, const sg_urefs *src) {
    for (int i = 0; i < src->n; i++) {
        sg_uobj *u = sg_handle_get(src->v[i].obj, K_UOBJ);
        if (u == NULL || !urefs_add(dst, src->v[i].obj, src->v[i].count)) continue;
        u->refs += src->v[i].count;
    }
    return 1;
}

void sg_urefs_release(sg_urefs *l, const sg_dep *after, int nafter) {
    sg_urefs_release_after(l, after, NULL, nafter);
}

void sg_urefs_release_after(sg_urefs *l, const sg_dep *after, struct sg_vc **clocks, int nafter) {
    int pending = 0;
    for (int i = 0; i < nafter; i++)
        if (!sg_point_done(after[i].stream, after[i].seq)) pending = 1;
    if (l->n > 0 && pending) {
        sg_release *r = calloc(1, sizeof *r);
        sg_dep *deps = malloc((size_t)nafter * sizeof *deps);
        struct sg_vc **taken = clocks != NULL ? malloc((size_t)nafter * sizeof *taken) : NULL;
        if (r != NULL && deps != NULL && (clocks == NULL || taken != NULL)) {
            memcpy(deps, after, (size_t)nafter * sizeof *deps);
            if (taken != NULL) {
                memcpy(taken, clocks, (size_t)nafter * sizeof *taken);
                for (int i = 0; i < nafter; i++) clocks[i] = NULL;
            }
            r->refs = l->v;
            r->nrefs = l->n;
            r->deps = deps;
            r->clocks = taken;
            r->ndeps = nafter;
            release_push(r);
            l->v = NULL;
            l->n = l->cap = 0;
            return;
        }
        free(r);
        free(deps); /* no memory to wait: released now, as a driver would not */
        free(taken);
    }
    /* Released now: the points have run (or nothing waits), and the host is told so by the
       destructors that run as the calling entry point returns. */
    for (int i = 0; clocks != NULL && l->n > 0 && i < nafter; i++) {
        sg_ck_observe(clocks[i]);
        clocks[i] = NULL;
    }
    for (int i = 0; clocks != NULL && i < nafter; i++) {
        sg_ck_vc_free(clocks[i]);
        clocks[i] = NULL;
    }
    for (int i = 0; i < l->n; i++) uobj_drop(l->v[i].obj, l->v[i].count);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ---- entry points ----------------------------------------------------------------------------- */

SG_API CUresult cuUserObjectCreate(void **object_out, void *ptr, CUhostFn destroy,
                                   unsigned int initial_refcount, unsigned int flags) {
    API_BEGIN_ARGS("cuUserObjectCreate", LOG_OUT64(0), LA(object_out), LA(ptr), LA(destroy), LA(initial_refcount), LA(flags));
    API_NEED_INIT();
    if (object_out == NULL || destroy == NULL || initial_refcount == 0 ||
        flags != SG_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    sg_uobj *u = calloc(1, sizeof *u);
    if (u == NULL) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    u->ptr = ptr;
    u->destroy = destroy;
    u->refs = initial_refcount;
    pthread_mutex_lock(&sg_lock);
    sg_handle_new(u, K_UOBJ);
    *object_out = P(u->o.h);
    sg_count("user_objects_live", 1);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuUserObjectRetain(void *object, unsigned int count) {
    API_BEGIN_ARGS("cuUserObjectRetain", 0, LA(object), LA(count));
    API_NEED_INIT();
    if (count == 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_uobj *u = sg_handle_get(H(object), K_UOBJ);
    if (u != NULL) u->refs += count;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(u != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SG_API CUresult cuUserObjectRelease(void *object, unsigned int count) {
    API_BEGIN_ARGS("cuUserObjectRelease", 0, LA(object), LA(count));
    API_NEED_INIT();
    if (count == 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_uobj *u = sg_handle_get(H(object), K_UOBJ);
    if (u != NULL) uobj_drop(H(object), count);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(u != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

SG_API CUresult cuGraphRetainUserObject(CUgraph graph, void *object, unsigned int count,
                                        unsigned int flags) {
    API_BEGIN_ARGS("cuGraphRetainUserObject", 0, LA(graph), LA(object), LA(count), LA(flags));
    API_NEED_INIT();
    if (count == 0 || (flags & ~(unsigned)SG_GRAPH_USER_OBJECT_MOVE))
        API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_urefs *refs = sg_graph_urefs(H(graph));
    sg_uobj *u = sg_handle_get(H(object), K_UOBJ);
    if (refs == NULL || u == NULL) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (!urefs_add(refs, u->o.h, count)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!(flags & SG_GRAPH_USER_OBJECT_MOVE)) {
        u->refs += count; /* new references; with MOVE the caller's become the graph's */
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuGraphReleaseUserObject(CUgraph graph, void *object, unsigned int count) {
    API_BEGIN_ARGS("cuGraphReleaseUserObject", 0, LA(graph), LA(object), LA(count));
    API_NEED_INIT();
    if (count == 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_urefs *refs = sg_graph_urefs(H(graph));
    sg_uref *found = refs ? urefs_find(refs, H(object)) : NULL;
    if (found == NULL) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (found->count < count) {
        /* More than the graph holds: driver 580 on an H200 answered CUDA_SUCCESS and ran no
         * destructor (a graph holding one reference, count 2), and a release of the one
         * held succeeded after it.  Modelled as releasing nothing; what the driver did to
         * its counts is not known. */
    } else {
        found->count -= count;
        if (found->count == 0) *found = refs->v[--refs->n];
        uobj_drop(H(object), count);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}
