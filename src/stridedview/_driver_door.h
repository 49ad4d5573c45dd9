/* The driver door: every decision stridedview makes with the CUDA driver about streams,
 * written once, in C, called from the compiled core (_driver_door.pxi is its Cython face).
 *
 * What it decides: what a stream handle names (an ordinary handle its own stream and
 * context; 0, 1 and 2 a default stream of a context chosen by the rules of
 * _driver_door.pxi); how a consumer stream is ordered after a producer's (an event recorded
 * on the producer's stream, waited on by the consumer's, never the host); where a
 * hand-over's events are recorded, and when an event counts as done.  _driver.py only
 * loads cuda-bindings, calls cuInit and names errors; the door never loads a driver: it
 * finds the libcuda.so.1 cuda-bindings loaded (dlopen RTLD_NOLOAD) and resolves each entry
 * point once through its cuGetProcAddress_v2 (CUDA 12.0 signatures, default-stream
 * semantics), so one build serves cuda-bindings 12 and 13 alike.
 *
 * Invariants (tests/test_gpu_driver_door.py, test_gpu_hold_rule.py, the gpu suite):
 *
 * - sv_door_state: 0 undecided, 1 on (the pointers set, published with release ordering,
 *   read with acquire), -1 off (no driver library, a needed entry point missing, a fake
 *   driver installed): decided under sv_door_lock.  sv_door_reset (use_api,
 *   release_driver_resources) destroys every event the door made, releases the primary
 *   contexts it retained, forgets every cache, bumps sv_door_generation and makes the state
 *   0 again; no other thread may order streams meanwhile.
 * - Per OS thread, one sv_door_thread (a __thread pointer; no Python object in it): its
 *   ordering events, one per context (CU_EVENT_DISABLE_TIMING; one event per (context,
 *   thread), reused: a wait uses what the event captured when the wait was enqueued), its
 *   streams' contexts, its hand-over event pools per context.  Closed with its Python thread
 *   state (a capsule in the thread state's dict, released by PyThreadState_Clear before a
 *   join returns), freed by whichever of that and the OS thread's end (a pthread key) comes
 *   last.  Code run after the close (a view released as its thread ends) uses a temporary
 *   struct whose events are destroyed when the call returns.
 * - An answer that says neither "done" nor "gone" is never taken for either.  An event
 *   query or wait answering SUCCESS is done; one answering a name of "gone" (the event's
 *   context was destroyed or the driver is shutting down: INVALID_HANDLE, INVALID_CONTEXT,
 *   CONTEXT_IS_DESTROYED, DEINITIALIZED) is done, its work discarded; NOT_READY, and every
 *   other answer (NOT_PERMITTED inside a host function, any unexpected error), is not done:
 *   the hold stays pending and is asked again.  A record that cannot be made now (a capture
 *   beside or on the stream, NOT_PERMITTED, an unexpected error) is tried again later.
 *   Where no event is left to ask, a release still needs the driver's leave: a probe
 *   answering NOT_PERMITTED (sv_door_may_release) keeps the hold, and a drain of what graphs
 *   gave back waits, for the next check outside the host function.
 * - Events of an earlier door generation (before sv_door_reset) are never named again: they
 *   belong to a driver state release_driver_resources() let go of (a reset may have killed
 *   them, and a real driver crashes on a killed event).
 * - A per-thread default stream (2) is its thread's: recorded there by that thread, on its
 *   context's legacy stream (which waits for every blocking stream, per-thread ones
 *   included) by another thread while it lives, and, once its thread ended, through the
 *   event that thread recorded on its per-thread stream as it ended (sv_door_final): no
 *   host wait, so no capture anywhere is invalidated.
 */
#ifndef SV_DRIVER_DOOR_H
#define SV_DRIVER_DOOR_H

#if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
#define SV_DOOR_AVAILABLE 1
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#else
#define SV_DOOR_AVAILABLE 0
#endif
#include <stdint.h>

#define SV_DOOR_NOT_HANDLED (-1)
#define SV_CUDA_SUCCESS 0
#define SV_CUDA_ERROR_INVALID_VALUE 1
#define SV_CUDA_ERROR_DEINITIALIZED 4
#define SV_CUDA_ERROR_INVALID_CONTEXT 201
#define SV_CUDA_ERROR_INVALID_HANDLE 400
#define SV_CUDA_ERROR_NOT_READY 600
#define SV_CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#define SV_CUDA_ERROR_NOT_PERMITTED 800
#define SV_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define SV_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
#define SV_CUDA_ERROR_STREAM_CAPTURE_ISOLATION 905
#define SV_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT 906
#define SV_CU_EVENT_DISABLE_TIMING 2
#define SV_CU_EVENT_WAIT_EXTERNAL 1
#define SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define SV_CAPTURE_NONE 0
#define SV_CAPTURE_ACTIVE 1
#define SV_CAPTURE_INVALIDATED 2
#define SV_DOOR_STREAMS 16       /* remembered stream contexts per thread (round-robin) */
#define SV_DOOR_EVENTS 8         /* ordering events per thread (one per context; evicted round-robin) */
#define SV_DOOR_DEVICES 64
#define SV_DOOR_POOLS 8          /* hand-over pools (contexts) per thread; more contexts: own events */
#define SV_DOOR_POOL_LIMIT 1024  /* free hand-over events kept per (context, thread) */
#define SV_DOOR_PTDS 8           /* contexts whose per-thread stream a thread recorded views on */

typedef int sv_CUresult;

/* Whether an answer says the event's (or stream's) context is gone, its work discarded. */
static inline int sv_door_gone(sv_CUresult r) {
    return r == SV_CUDA_ERROR_INVALID_HANDLE || r == SV_CUDA_ERROR_INVALID_CONTEXT
        || r == SV_CUDA_ERROR_CONTEXT_IS_DESTROYED || r == SV_CUDA_ERROR_DEINITIALIZED;
}

/* Whether a failed record of a remembered context or event may be stale (a reset context's
   event, a handle reused): looked up afresh and tried once more. */
static inline int sv_door_stale(sv_CUresult r) {
    return r == SV_CUDA_ERROR_INVALID_HANDLE || r == SV_CUDA_ERROR_INVALID_CONTEXT;
}

typedef struct sv_door_api {
    sv_CUresult (*cuGetErrorName)(sv_CUresult, const char **);
    sv_CUresult (*cuCtxGetCurrent)(void **);
    sv_CUresult (*cuCtxPushCurrent)(void *);
    sv_CUresult (*cuCtxPopCurrent)(void **);
    sv_CUresult (*cuCtxSynchronize)(void);
    sv_CUresult (*cuStreamGetCtx)(void *, void **);
    sv_CUresult (*cuEventCreate)(void **, unsigned int);
    sv_CUresult (*cuEventDestroy)(void *);
    sv_CUresult (*cuEventRecord)(void *, void *);
    sv_CUresult (*cuStreamWaitEvent)(void *, void *, unsigned int);
    sv_CUresult (*cuDeviceGet)(int *, int);
    sv_CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
    sv_CUresult (*cuDevicePrimaryCtxRelease)(int);
    sv_CUresult (*cuPointerGetAttribute)(void *, int, unsigned long long);
    sv_CUresult (*cuStreamIsCapturing)(void *, int *);
    sv_CUresult (*cuStreamGetCaptureInfo)(void *, int *, unsigned long long *, void **,
                                          const void **, size_t *);
    sv_CUresult (*cuEventQuery)(void *);
    sv_CUresult (*cuEventSynchronize)(void *);
    sv_CUresult (*cuUserObjectCreate)(void **, void *, void (*)(void *), unsigned int, unsigned int);
    sv_CUresult (*cuUserObjectRelease)(void *, unsigned int);
    sv_CUresult (*cuGraphRetainUserObject)(void *, void *, unsigned int, unsigned int);
    /* Optional (NULL: a driver before 12.0): a stream's process-unique id, which lets a
       hand-over record a pending entry's event again (sv_door_hev_record_again). */
    sv_CUresult (*cuStreamGetId)(void *, unsigned long long *);
} sv_door_api;

static sv_door_api sv_door_fn;

/* The calls that block the host until device work is done, made with the thread state
   detached (the GIL released): a host function queued before that work runs Python, and
   needs it.  Never called with sv_door_lock held. */
static sv_CUresult sv_door_event_synchronize(void *event) {
    sv_CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = sv_door_fn.cuEventSynchronize(event);
    Py_END_ALLOW_THREADS
    return r;
}

static sv_CUresult sv_door_ctx_synchronize(void) {
    sv_CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = sv_door_fn.cuCtxSynchronize();
    Py_END_ALLOW_THREADS
    return r;
}

static int sv_door_state = 0;            /* 0 undecided, 1 on, -1 off */
static unsigned sv_door_generation = 1;  /* bumped by every reset (atomic) */
static int sv_door_zero_is_per_thread = 0;  /* cuda-bindings' per-thread mode: 0 names 2 */

static inline int sv_door_state_load(void) {
#if SV_DOOR_AVAILABLE
    return __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE);
#else
    return -1;
#endif
}

static inline unsigned sv_door_generation_load(void) {
#if SV_DOOR_AVAILABLE
    return __atomic_load_n(&sv_door_generation, __ATOMIC_ACQUIRE);
#else
    return 0;
#endif
}

/* A hand-over's events (one item per place), owned by its _Handover. */
enum {
    SV_ITEM_DONE = 0,   /* nothing to wait for: completed, or its context gone */
    SV_ITEM_POOLED,     /* an event of a pool: back to the releasing thread's pool */
    SV_ITEM_OWN,        /* an event made for it alone (no pool slot): destroyed at release */
    SV_ITEM_FINAL,      /* an ended thread's per-thread stream: its final event (sv_door_final) */
    SV_ITEM_AWAIT,      /* a place that was capturing: recorded once its capture has ended */
};

typedef struct sv_door_item {
    int kind;
    int final_index;              /* SV_ITEM_FINAL: the sv_door_final entry */
    void *context;
    void *event;
    uintptr_t handle;             /* SV_ITEM_AWAIT: the place, recorded later */
    unsigned long long serial;
} sv_door_item;

typedef struct sv_door_hev {
    int n;
    unsigned generation;          /* the door generation its events belong to */
    /* The id (cuStreamGetId) of the stream of an entry's one place, read when it was
       recorded; 0: unknown (more places, no cuStreamGetId, a failed call). */
    unsigned long long stream_id;
    /* That place's stream handle: a later hand-over on the same place records the event
       again on it (_handover.pxi's _join_youngest). */
    uintptr_t stream;
    sv_door_item item[1];         /* n of them */
} sv_door_hev;

#if SV_DOOR_AVAILABLE

typedef struct sv_door_thread {
    uintptr_t stream_handle[SV_DOOR_STREAMS];  /* 0: empty */
    void *stream_context[SV_DOOR_STREAMS];
    unsigned stream_victim;
    int n_events;
    unsigned event_victim;
    void *event_context[SV_DOOR_EVENTS];
    void *event[SV_DOOR_EVENTS];
    unsigned long long ordered;      /* orderings done here */
    unsigned long long events_made;  /* events this thread's door created */
    int n_pools;
    void *pool_context[SV_DOOR_POOLS];
    void **pool_event[SV_DOOR_POOLS];
    int pool_count[SV_DOOR_POOLS];
    unsigned long long handed;     /* hand-overs recorded here */
    unsigned long long recorded;   /* their events */
    /* The contexts whose per-thread stream this thread recorded views on: recorded as the
       thread ends (sv_door_final). */
    int n_ptds;
    void *ptds_context[SV_DOOR_PTDS];
    unsigned long long serial;     /* unique in the process, never 0, never reused */
    int temporary;       /* a struct for one call (code run after the close) */
    int closed;          /* its thread state cleared: not used by that one again */
    int capsule_live;    /* a thread state's capsule names it */
    int thread_gone;     /* its OS thread ended first: the capsule frees it */
    uint64_t capsule_tstate_id, closed_tstate_id;
    struct sv_door_thread *prev, *next;
} sv_door_thread;

static pthread_mutex_t sv_door_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t sv_door_key;
static int sv_door_key_made = 0;
static sv_door_thread *sv_door_threads = NULL;
static __thread sv_door_thread *sv_door_tls = NULL;
static unsigned long long sv_door_next_serial = 1;   /* atomic */
static long long sv_door_events_live = 0;           /* ordering events, under sv_door_lock */
static long long sv_door_handover_live = 0;         /* hand-over events (pooled, in flight), atomic */
static void *sv_door_primary[SV_DOOR_DEVICES];
static int sv_door_primary_device[SV_DOOR_DEVICES];

/* --- the final events of per-thread streams whose threads ended -------------------------- */

enum { SV_FINAL_RECORDED = 1, SV_FINAL_DONE, SV_FINAL_UNKNOWN };

typedef struct sv_door_final_entry {
    unsigned long long serial;
    void *context;
    void *event;       /* SV_FINAL_RECORDED: recorded on that thread's per-thread stream */
    int state;
    unsigned generation;
} sv_door_final_entry;

/* Append-only (entries are a few words; a thread that recorded views on its per-thread
   stream leaves one per context); under sv_door_lock. */
static sv_door_final_entry *sv_door_final = NULL;
static int sv_door_final_count = 0, sv_door_final_cap = 0;

static int sv_door_final_add(unsigned long long serial, void *context, void *event, int state) {
    if (sv_door_final_count == sv_door_final_cap) {
        int cap = sv_door_final_cap ? 2 * sv_door_final_cap : 16;
        sv_door_final_entry *grown = (sv_door_final_entry *)realloc(
            sv_door_final, (size_t)cap * sizeof(*grown));
        if (grown == NULL) return -1;
        sv_door_final = grown;
        sv_door_final_cap = cap;
    }
    sv_door_final[sv_door_final_count].serial = serial;
    sv_door_final[sv_door_final_count].context = context;
    sv_door_final[sv_door_final_count].event = event;
    sv_door_final[sv_door_final_count].state = state;
    sv_door_final[sv_door_final_count].generation = sv_door_generation_load();
    return sv_door_final_count++;
}

/* The newest final entry of (serial, context), -1 if none; under sv_door_lock. */
static int sv_door_final_find(unsigned long long serial, void *context) {
    int i;
    for (i = sv_door_final_count - 1; i >= 0; i--)
        if (sv_door_final[i].serial == serial && sv_door_final[i].context == context) return i;
    return -1;
}

/* --- per-thread structs ------------------------------------------------------------------ */

/* Destroy event ``event`` of ``context`` with its context pushed; errors ignored (an event of
   a context reset is already gone). */
static void sv_door_destroy_event(void *context, void *event) {
    void *popped;
    if (sv_door_fn.cuCtxPushCurrent(context) == SV_CUDA_SUCCESS) {
        sv_door_fn.cuEventDestroy(event);
        sv_door_fn.cuCtxPopCurrent(&popped);
    } else {
        sv_door_fn.cuEventDestroy(event);
    }
}

/* Every event of ``t`` destroyed (when ``destroy``), its caches emptied; sv_door_lock held. */
static void sv_door_clear_locked(sv_door_thread *t, int destroy) {
    int i;
    for (i = 0; i < t->n_events; i++) {
        if (destroy) sv_door_destroy_event(t->event_context[i], t->event[i]);
        sv_door_events_live--;
        t->event[i] = NULL;
        t->event_context[i] = NULL;
    }
    t->n_events = 0;
    for (i = 0; i < t->n_pools; i++) {
        int k;
        for (k = 0; k < t->pool_count[i]; k++) {
            if (destroy) sv_door_destroy_event(t->pool_context[i], t->pool_event[i][k]);
            __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
        }
        free(t->pool_event[i]);
        t->pool_event[i] = NULL;
        t->pool_context[i] = NULL;
        t->pool_count[i] = 0;
    }
    t->n_pools = 0;
    for (i = 0; i < SV_DOOR_STREAMS; i++) {
        t->stream_handle[i] = 0;
        t->stream_context[i] = NULL;
    }
}

static void sv_door_unlink_locked(sv_door_thread *t) {
    if (t->prev) t->prev->next = t->next; else sv_door_threads = t->next;
    if (t->next) t->next->prev = t->prev;
}

static int sv_door_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* As the thread ends, on its own OS thread: an event recorded on its per-thread stream of
   each context it recorded views on, so that a view released later by another thread waits
   for everything that stream will ever run (no work can be queued on it once its thread is
   gone).  A record that cannot be made leaves an entry saying so (SV_FINAL_UNKNOWN).
   sv_door_lock not held (driver calls). */
static void sv_door_record_finals(sv_door_thread *t) {
    int i;
    for (i = 0; i < t->n_ptds; i++) {
        void *context = t->ptds_context[i], *event = NULL, *popped;
        int state = SV_FINAL_UNKNOWN, status = -1;
        if (sv_door_fn.cuCtxPushCurrent(context) == SV_CUDA_SUCCESS) {
            if (sv_door_fn.cuStreamIsCapturing((void *)2, &status) == SV_CUDA_SUCCESS
                && status == SV_CAPTURE_NONE
                && sv_door_fn.cuEventCreate(&event, SV_CU_EVENT_DISABLE_TIMING) == SV_CUDA_SUCCESS) {
                if (sv_door_fn.cuEventRecord(event, (void *)2) == SV_CUDA_SUCCESS) {
                    state = SV_FINAL_RECORDED;
                } else {
                    sv_door_fn.cuEventDestroy(event);
                    event = NULL;
                }
            }
            sv_door_fn.cuCtxPopCurrent(&popped);
        }
        pthread_mutex_lock(&sv_door_lock);
        if (sv_door_final_add(t->serial, context, event, state) < 0 && event != NULL)
            sv_door_fn.cuEventDestroy(event);  /* (no memory: the hold stays pending) */
        pthread_mutex_unlock(&sv_door_lock);
    }
    t->n_ptds = 0;
}

/* The capsule's destructor: the Python thread state holding it is cleared (as the thread
   ends, before a join on it returns; at interpreter exit for threads still alive).  The
   per-thread streams' final events recorded (on the thread's own OS thread only), its
   events destroyed, the struct closed, and freed if its OS thread has already ended. */
static void sv_door_thread_close(PyObject *capsule) {
    sv_door_thread *t = (sv_door_thread *)PyCapsule_GetPointer(capsule, "stridedview._driver_door");
    int finalizing, on;
    if (t == NULL) { PyErr_Clear(); return; }
    finalizing = sv_door_finalizing();
    on = !finalizing && sv_door_state_load() == 1;
    if (on && sv_door_tls == t && t->n_ptds > 0) sv_door_record_finals(t);
    pthread_mutex_lock(&sv_door_lock);
    /* At interpreter exit nothing is destroyed (the driver may be shutting down; the
       process's resources go with it). */
    sv_door_clear_locked(t, on);
    __atomic_store_n(&t->closed, 1, __ATOMIC_RELEASE);
    t->closed_tstate_id = t->capsule_tstate_id;
    t->capsule_live = 0;
    if (t->thread_gone) {
        sv_door_unlink_locked(t);
        pthread_mutex_unlock(&sv_door_lock);
        free(t);
        return;
    }
    pthread_mutex_unlock(&sv_door_lock);
}

/* The pthread key's destructor: the OS thread ends.  Its events destroyed (if its thread
   state did not already); the struct freed, unless a capsule still names it. */
static void sv_door_thread_end(void *p) {
    sv_door_thread *t = (sv_door_thread *)p;
    int keep;
    pthread_mutex_lock(&sv_door_lock);
    if (t->n_ptds > 0) {
        int i;
        for (i = 0; i < t->n_ptds; i++)  /* never recorded (no thread state cleared first) */
            sv_door_final_add(t->serial, t->ptds_context[i], NULL, SV_FINAL_UNKNOWN);
        t->n_ptds = 0;
    }
    sv_door_clear_locked(t, sv_door_state_load() == 1);
    keep = t->capsule_live;
    if (keep) t->thread_gone = 1;
    else sv_door_unlink_locked(t);
    pthread_mutex_unlock(&sv_door_lock);
    if (sv_door_tls == t) sv_door_tls = NULL;
    if (!keep) free(t);
}

/* Tie ``t`` to the current thread state: a capsule in its dict, released when the thread
   state is cleared.  0 if there is none to tie it to. */
static int sv_door_thread_register(sv_door_thread *t) {
    PyThreadState *ts = PyThreadState_Get();
    PyObject *dict, *capsule;
    uint64_t id = PyThreadState_GetID(ts);
    int closed;
    pthread_mutex_lock(&sv_door_lock);
    closed = t->closed && id == t->closed_tstate_id;
    pthread_mutex_unlock(&sv_door_lock);
    if (closed) return 0;  /* code run as its thread state ends */
    dict = PyThreadState_GetDict();
    if (dict == NULL) return 0;
    capsule = PyCapsule_New(t, "stridedview._driver_door", sv_door_thread_close);
    if (capsule == NULL) { PyErr_Clear(); return 0; }
    pthread_mutex_lock(&sv_door_lock);
    t->capsule_live = 1;
    t->capsule_tstate_id = id;
    __atomic_store_n(&t->closed, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sv_door_lock);
    if (PyDict_SetItemString(dict, "stridedview._driver_door", capsule) < 0) {
        PyErr_Clear();  /* the capsule's release below closes the struct */
    }
    Py_DECREF(capsule);
    pthread_mutex_lock(&sv_door_lock);
    closed = t->closed;
    pthread_mutex_unlock(&sv_door_lock);
    return !closed;
}

/* This thread's struct, made on first use (the thread state attached); NULL if none. */
static sv_door_thread *sv_door_thread_new(void) {
    sv_door_thread *t = (sv_door_thread *)calloc(1, sizeof(sv_door_thread));
    if (t == NULL) return NULL;
    if (pthread_setspecific(sv_door_key, t) != 0) { free(t); return NULL; }
    t->serial = __atomic_fetch_add(&sv_door_next_serial, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&sv_door_lock);
    t->next = sv_door_threads;
    if (sv_door_threads) sv_door_threads->prev = t;
    sv_door_threads = t;
    pthread_mutex_unlock(&sv_door_lock);
    sv_door_tls = t;
    /* Closed with the thread state, so that its events are gone when a join on the thread
       returns (the key's destructor runs later, at the OS thread's end). */
    sv_door_thread_register(t);
    return t;
}

/* This thread's struct; NULL once its thread state was cleared (code run as it ends). */
static inline sv_door_thread *sv_door_thread_get(void) {
    sv_door_thread *t = sv_door_tls;
    if (t == NULL) return sv_door_thread_new();
    if (!__atomic_load_n(&t->closed, __ATOMIC_ACQUIRE)) return t;
    /* A new thread state on the same OS thread (PyGILState_Ensure from a C thread) opens
       it again; code run by the cleared one as it ends gets NULL. */
    return sv_door_thread_register(t) ? t : NULL;
}

/* This thread's struct, or, for code run as its thread state ends, ``temporary`` (zeroed
   here; the caller passes it to sv_door_thread_done when the call returns). */
static sv_door_thread *sv_door_thread_or_temporary(sv_door_thread *temporary) {
    sv_door_thread *t = sv_door_thread_get();
    if (t != NULL) return t;
    memset(temporary, 0, sizeof(*temporary));
    temporary->temporary = 1;
    temporary->serial = sv_door_tls != NULL ? sv_door_tls->serial : 0;
    return temporary;
}

/* A temporary struct's events destroyed (nothing for the thread's own). */
static void sv_door_thread_done(sv_door_thread *t) {
    if (t == NULL || !t->temporary) return;
    pthread_mutex_lock(&sv_door_lock);
    sv_door_clear_locked(t, sv_door_state_load() == 1);
    pthread_mutex_unlock(&sv_door_lock);
}

static void sv_door_atfork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    sv_door_lock = fresh;  /* another thread may have held it at the fork */
}

/* --- opening, closing, resetting --------------------------------------------------------- */

/* The name of the entry point the last sv_door_open could not resolve. */
static const char *sv_door_missing = NULL;

/* Resolve every entry point through the loaded driver's cuGetProcAddress_v2.  0: the door is
   on; -1: off (no such library loaded, an entry point missing: sv_door_missing). */
static int sv_door_open(int zero_is_per_thread) {
    typedef sv_CUresult (*get_proc_t)(const char *, void **, int, unsigned long long, int *);
    void *lib;
    get_proc_t get_proc;
    sv_door_api fn;
    int result = -1;
    pthread_mutex_lock(&sv_door_lock);
    if (sv_door_state != 0) {
        result = sv_door_state == 1 ? 0 : -1;
        goto done;
    }
    sv_door_missing = NULL;
    if (!sv_door_key_made) {
        if (pthread_key_create(&sv_door_key, sv_door_thread_end) != 0) goto off;
        sv_door_key_made = 1;
        pthread_atfork(NULL, NULL, sv_door_atfork_child);
    }
    /* Only the library cuda-bindings already loaded: never load a driver here. */
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) { sv_door_missing = "libcuda.so.1"; goto off; }
    get_proc = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
    dlclose(lib);  /* still loaded: cuda-bindings holds its own reference */
    if (get_proc == NULL) { sv_door_missing = "cuGetProcAddress_v2"; goto off; }
#define SV_DOOR_RESOLVE(name) do { \
        void *pfn = NULL; int status = -1; \
        if (get_proc(#name, &pfn, 12000, 0, &status) != SV_CUDA_SUCCESS || status != 0 \
            || pfn == NULL) { sv_door_missing = #name; goto off; } \
        *(void **)&fn.name = pfn; \
    } while (0)
    SV_DOOR_RESOLVE(cuGetErrorName);
    SV_DOOR_RESOLVE(cuCtxGetCurrent);
    SV_DOOR_RESOLVE(cuCtxPushCurrent);
    SV_DOOR_RESOLVE(cuCtxPopCurrent);
    SV_DOOR_RESOLVE(cuCtxSynchronize);
    SV_DOOR_RESOLVE(cuStreamGetCtx);
    SV_DOOR_RESOLVE(cuEventCreate);
    SV_DOOR_RESOLVE(cuEventDestroy);
    SV_DOOR_RESOLVE(cuEventRecord);
    SV_DOOR_RESOLVE(cuStreamWaitEvent);
    SV_DOOR_RESOLVE(cuDeviceGet);
    SV_DOOR_RESOLVE(cuDevicePrimaryCtxRetain);
    SV_DOOR_RESOLVE(cuDevicePrimaryCtxRelease);
    SV_DOOR_RESOLVE(cuPointerGetAttribute);
    SV_DOOR_RESOLVE(cuStreamIsCapturing);
    SV_DOOR_RESOLVE(cuStreamGetCaptureInfo);
    SV_DOOR_RESOLVE(cuEventQuery);
    SV_DOOR_RESOLVE(cuEventSynchronize);
    SV_DOOR_RESOLVE(cuUserObjectCreate);
    SV_DOOR_RESOLVE(cuUserObjectRelease);
    SV_DOOR_RESOLVE(cuGraphRetainUserObject);
#undef SV_DOOR_RESOLVE
    {
        void *pfn = NULL; int status = -1;
        if (get_proc("cuStreamGetId", &pfn, 12000, 0, &status) != SV_CUDA_SUCCESS || status != 0)
            pfn = NULL;
        *(void **)&fn.cuStreamGetId = pfn;
    }
    sv_door_fn = fn;
    sv_door_zero_is_per_thread = zero_is_per_thread;
    __atomic_store_n(&sv_door_state, 1, __ATOMIC_RELEASE);
    result = 0;
    goto done;
off:
    __atomic_store_n(&sv_door_state, -1, __ATOMIC_RELEASE);
done:
    pthread_mutex_unlock(&sv_door_lock);
    return result;
}

/* The state decided: off (the driver in use is not cuda-bindings'). */
static void sv_door_close(void) {
    pthread_mutex_lock(&sv_door_lock);
    if (sv_door_state == 0) {
        sv_door_missing = "cuda.bindings.driver";
        __atomic_store_n(&sv_door_state, -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&sv_door_lock);
}

/* use_api and release_driver_resources: every thread's events destroyed (while the pointers
   are those of the driver that made them), every final event waited for and destroyed,
   every cache emptied, the primary contexts released, the generation bumped, the state
   undecided again. */
static void sv_door_reset(void) {
    sv_door_thread *t;
    int i, n, on;
    sv_door_final_entry *finals = NULL;
    /* The final events first, waited for with no lock held (the thread state detached). */
    pthread_mutex_lock(&sv_door_lock);
    on = sv_door_state == 1;
    n = sv_door_final_count;
    if (on && n > 0 && (finals = (sv_door_final_entry *)malloc((size_t)n * sizeof(*finals))) != NULL)
        memcpy(finals, sv_door_final, (size_t)n * sizeof(*finals));
    pthread_mutex_unlock(&sv_door_lock);
    for (i = 0; finals != NULL && i < n; i++)
        if (finals[i].state == SV_FINAL_RECORDED) sv_door_event_synchronize(finals[i].event);
    free(finals);
    pthread_mutex_lock(&sv_door_lock);
    on = sv_door_state == 1;
    for (t = sv_door_threads; t != NULL; t = t->next) sv_door_clear_locked(t, on);
    for (i = 0; i < sv_door_final_count; i++) {
        if (sv_door_final[i].state == SV_FINAL_RECORDED && on)
            sv_door_destroy_event(sv_door_final[i].context, sv_door_final[i].event);
        if (sv_door_final[i].state == SV_FINAL_RECORDED) sv_door_final[i].state = SV_FINAL_DONE;
        sv_door_final[i].event = NULL;
    }
    for (i = 0; i < SV_DOOR_DEVICES; i++) {
        if (sv_door_primary[i] != NULL && on)
            sv_door_fn.cuDevicePrimaryCtxRelease(sv_door_primary_device[i]);
        __atomic_store_n(&sv_door_primary[i], NULL, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&sv_door_generation, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&sv_door_state, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sv_door_lock);
}

/* --- contexts, streams, ordering events -------------------------------------------------- */

/* The driver's name of ``code`` (NULL when it has none). */
static const char *sv_door_error_name(sv_CUresult code) {
    const char *name = NULL;
    if (sv_door_state_load() == 1 && sv_door_fn.cuGetErrorName(code, &name) == SV_CUDA_SUCCESS)
        return name;
    return NULL;
}

/* What a default-stream handle names in cuda-bindings' mode: 0 is the per-thread stream in
   its per-thread mode (CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM), the legacy one else. */
static inline uintptr_t sv_door_handle(uintptr_t h) {
    return h == 0 && sv_door_zero_is_per_thread ? 2 : h;
}

static int sv_door_find_event(sv_door_thread *t, void *context) {
    int i;
    for (i = 0; i < t->n_events; i++)
        if (t->event_context[i] == context) return i;
    return -1;
}

/* Forget (and destroy) this thread's ordering event at index ``i``. */
static void sv_door_drop_event_at(sv_door_thread *t, int i) {
    pthread_mutex_lock(&sv_door_lock);
    sv_door_destroy_event(t->event_context[i], t->event[i]);
    sv_door_events_live--;
    t->n_events--;
    t->event_context[i] = t->event_context[t->n_events];
    t->event[i] = t->event[t->n_events];
    t->event_context[t->n_events] = NULL;
    t->event[t->n_events] = NULL;
    pthread_mutex_unlock(&sv_door_lock);
}

static void sv_door_drop_event(sv_door_thread *t, void *context) {
    int i = sv_door_find_event(t, context);
    if (i >= 0) sv_door_drop_event_at(t, i);
}

/* Room for one more ordering event: the oldest-chosen one destroyed when all are taken (a
   wait already enqueued keeps what the event captured; the driver frees it once done). */
static void sv_door_event_room(sv_door_thread *t) {
    if (t->n_events == SV_DOOR_EVENTS) sv_door_drop_event_at(t, (int)(t->event_victim++ % SV_DOOR_EVENTS));
}

static void sv_door_keep_event(sv_door_thread *t, void *context, void *event) {
    pthread_mutex_lock(&sv_door_lock);
    t->event_context[t->n_events] = context;
    t->event[t->n_events] = event;
    t->n_events++;
    sv_door_events_live++;
    pthread_mutex_unlock(&sv_door_lock);
    t->events_made++;
}

/* This thread's event of ``context`` (created there on first use: *created). */
static sv_CUresult sv_door_event_in(sv_door_thread *t, void *context, void **event,
                                    int *created, const char **call) {
    void *current = NULL, *popped;
    sv_CUresult r, r_pop = SV_CUDA_SUCCESS;
    int i = sv_door_find_event(t, context);
    *created = 0;
    if (i >= 0) {
        *event = t->event[i];
        return SV_CUDA_SUCCESS;
    }
    r = sv_door_fn.cuCtxGetCurrent(&current);
    if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
    if (current == context) {
        r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
    } else {
        r = sv_door_fn.cuCtxPushCurrent(context);
        if (r != SV_CUDA_SUCCESS) { *call = "cuCtxPushCurrent"; return r; }
        r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
        r_pop = sv_door_fn.cuCtxPopCurrent(&popped);
    }
    if (r != SV_CUDA_SUCCESS) { *call = "cuEventCreate"; return r; }
    /* Kept before the pop's error is reported, so that the event is never lost. */
    sv_door_event_room(t);
    sv_door_keep_event(t, context, *event);
    *created = 1;
    if (r_pop != SV_CUDA_SUCCESS) { *call = "cuCtxPopCurrent"; return r_pop; }
    return SV_CUDA_SUCCESS;
}

static inline int sv_door_find_stream(sv_door_thread *t, uintptr_t stream) {
    int i;
    for (i = 0; i < SV_DOOR_STREAMS; i++)
        if (t->stream_handle[i] == stream) return i;
    return -1;
}

static void sv_door_forget_stream(sv_door_thread *t, uintptr_t stream) {
    int i = sv_door_find_stream(t, stream);
    if (i >= 0) { t->stream_handle[i] = 0; t->stream_context[i] = NULL; }
}

/* ``stream``'s context, remembered (*looked_up: asked the driver now). */
static sv_CUresult sv_door_context_of(sv_door_thread *t, uintptr_t stream, void **context,
                                      int *looked_up, const char **call) {
    sv_CUresult r;
    int i = sv_door_find_stream(t, stream);
    if (i >= 0) {
        *context = t->stream_context[i];
        *looked_up = 0;
        return SV_CUDA_SUCCESS;
    }
    *looked_up = 1;
    r = sv_door_fn.cuStreamGetCtx((void *)stream, context);
    if (r != SV_CUDA_SUCCESS) { *call = "cuStreamGetCtx"; return r; }
    i = sv_door_find_stream(t, 0);
    if (i < 0) i = (int)(t->stream_victim++ % SV_DOOR_STREAMS);
    t->stream_handle[i] = stream;
    t->stream_context[i] = *context;
    return SV_CUDA_SUCCESS;
}

/* The primary context of device ``ordinal``, retained once. */
static sv_CUresult sv_door_primary_context(int ordinal, void **context, const char **call) {
    void *found;
    int device;
    sv_CUresult r = SV_CUDA_SUCCESS;
    if (ordinal < 0 || ordinal >= SV_DOOR_DEVICES) {
        *call = "cuDeviceGet";
        return SV_CUDA_ERROR_INVALID_VALUE;
    }
    found = __atomic_load_n(&sv_door_primary[ordinal], __ATOMIC_ACQUIRE);
    if (found != NULL) { *context = found; return SV_CUDA_SUCCESS; }
    pthread_mutex_lock(&sv_door_lock);
    found = sv_door_primary[ordinal];
    if (found == NULL) {
        r = sv_door_fn.cuDeviceGet(&device, ordinal);
        if (r != SV_CUDA_SUCCESS) *call = "cuDeviceGet";
        else {
            r = sv_door_fn.cuDevicePrimaryCtxRetain(&found, device);
            if (r != SV_CUDA_SUCCESS) *call = "cuDevicePrimaryCtxRetain";
            else {
                sv_door_primary_device[ordinal] = device;
                __atomic_store_n(&sv_door_primary[ordinal], found, __ATOMIC_RELEASE);
            }
        }
    }
    pthread_mutex_unlock(&sv_door_lock);
    *context = found;
    return r;
}

/* The device ordinal of the memory at ``ptr``; for 0 (no memory), the current device's. */
static sv_CUresult sv_door_pointer_device(uintptr_t ptr, int *ordinal, const char **call) {
    sv_CUresult r = sv_door_fn.cuPointerGetAttribute(
        ordinal, SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (unsigned long long)ptr);
    if (r != SV_CUDA_SUCCESS) *call = "cuPointerGetAttribute";
    return r;
}

/* The context a default-stream handle names for memory of device ``ordinal`` (-1: unknown,
   then ``ptr``'s device, or none): the calling thread's current context, or with none
   current, that device's primary context. */
static sv_CUresult sv_door_default_context(int ordinal, uintptr_t ptr, void **context,
                                           const char **call) {
    sv_CUresult r = sv_door_fn.cuCtxGetCurrent(context);
    if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
    if (*context != NULL) return SV_CUDA_SUCCESS;
    if (ordinal < 0) {
        if (ptr == 0) { *call = "cuCtxGetCurrent"; return SV_CUDA_ERROR_INVALID_CONTEXT; }
        r = sv_door_pointer_device(ptr, &ordinal, call);
        if (r != SV_CUDA_SUCCESS) return r;
    }
    return sv_door_primary_context(ordinal, context, call);
}

/* Run with ``context`` current: pushed when it is not (*pushed), popped by sv_door_leave. */
static sv_CUresult sv_door_enter(void *context, int *pushed, const char **call) {
    void *current = NULL;
    sv_CUresult r = sv_door_fn.cuCtxGetCurrent(&current);
    *pushed = 0;
    if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
    if (current == context) return SV_CUDA_SUCCESS;
    r = sv_door_fn.cuCtxPushCurrent(context);
    if (r != SV_CUDA_SUCCESS) { *call = "cuCtxPushCurrent"; return r; }
    *pushed = 1;
    return SV_CUDA_SUCCESS;
}

/* The pop of sv_door_enter; a failing pop reported unless ``r`` already is a failure (the
   first error is the one that explains what went wrong). */
static sv_CUresult sv_door_leave(int pushed, sv_CUresult r, const char **call) {
    void *popped;
    sv_CUresult r_pop;
    if (!pushed) return r;
    r_pop = sv_door_fn.cuCtxPopCurrent(&popped);
    if (r == SV_CUDA_SUCCESS && r_pop != SV_CUDA_SUCCESS) { *call = "cuCtxPopCurrent"; return r_pop; }
    return r;
}

/* This thread's event of ``context``, the current context, recorded on ``stream``; a dead
   event (its context reset) replaced and the record tried once more. */
static sv_CUresult sv_door_record_in_current(sv_door_thread *t, void *context, uintptr_t stream,
                                             void **event, const char **call) {
    sv_CUresult r;
    int i = sv_door_find_event(t, context);
    if (i >= 0) {
        *event = t->event[i];
        r = sv_door_fn.cuEventRecord(*event, (void *)stream);
        if (r == SV_CUDA_SUCCESS) return r;
        if (!sv_door_stale(r)) { *call = "cuEventRecord"; return r; }
        sv_door_drop_event(t, context);
    }
    r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
    if (r != SV_CUDA_SUCCESS) { *call = "cuEventCreate"; return r; }
    sv_door_event_room(t);
    sv_door_keep_event(t, context, *event);
    r = sv_door_fn.cuEventRecord(*event, (void *)stream);
    if (r != SV_CUDA_SUCCESS) *call = "cuEventRecord";
    return r;
}

/* This thread's event of ordinary ``stream``'s context recorded on it; a stale context (the
   handle reused) or a dead event (a reset context) looked up afresh and tried once more. */
static sv_CUresult sv_door_record_on_stream(sv_door_thread *t, uintptr_t stream, void **context,
                                            void **event, const char **call) {
    void *fresh;
    int looked_up, created;
    sv_CUresult r = sv_door_context_of(t, stream, context, &looked_up, call);
    if (r != SV_CUDA_SUCCESS) return r;
    r = sv_door_event_in(t, *context, event, &created, call);
    if (r != SV_CUDA_SUCCESS) return r;
    r = sv_door_fn.cuEventRecord(*event, (void *)stream);
    if (r == SV_CUDA_SUCCESS) return r;
    if (!sv_door_stale(r) || (looked_up && created)) { *call = "cuEventRecord"; return r; }
    sv_door_forget_stream(t, stream);
    r = sv_door_context_of(t, stream, &fresh, &looked_up, call);
    if (r != SV_CUDA_SUCCESS) return r;
    if (fresh == *context) sv_door_drop_event(t, *context);
    *context = fresh;
    r = sv_door_event_in(t, fresh, event, &created, call);
    if (r != SV_CUDA_SUCCESS) return r;
    r = sv_door_fn.cuEventRecord(*event, (void *)stream);
    if (r != SV_CUDA_SUCCESS) *call = "cuEventRecord";
    return r;
}

/* ``consumer``'s capture status, asked in ``context`` when not NULL (a default stream of
   that context); the legacy stream (0, 1) never captures and is not asked. */
static sv_CUresult sv_door_capture_status(uintptr_t consumer, void *context, int *status,
                                          const char **call) {
    int pushed = 0;
    sv_CUresult r = SV_CUDA_SUCCESS;
    *status = SV_CAPTURE_NONE;
    if (consumer <= 1) return SV_CUDA_SUCCESS;
    if (context != NULL) {
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) return r;
    }
    r = sv_door_fn.cuStreamIsCapturing((void *)consumer, status);
    if (r != SV_CUDA_SUCCESS) *call = "cuStreamIsCapturing";
    return sv_door_leave(pushed, r, call);
}

/* ``consumer`` waits on ``event``; ``context`` (not NULL: a default consumer stream with no
   current context, the data device's primary context) pushed around the wait. */
static sv_CUresult sv_door_wait(uintptr_t consumer, void *event, void *context, unsigned flags,
                                const char **call) {
    int pushed = 0;
    sv_CUresult r;
    if (context != NULL) {
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) return r;
    }
    r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, flags);
    if (r != SV_CUDA_SUCCESS) *call = "cuStreamWaitEvent";
    return sv_door_leave(pushed, r, call);
}

/* The context a consumer default stream (0, 1, 2) with no current context is the data
   device's primary context's: NULL for any other consumer, or with a context current.
   ``ordinal`` -1 and ``ptr`` 0: unknown, INVALID_CONTEXT (as the wait itself answers). */
static sv_CUresult sv_door_consumer_context(uintptr_t consumer, int ordinal, uintptr_t ptr,
                                            void **context, const char **call) {
    void *current = NULL;
    sv_CUresult r;
    *context = NULL;
    if (consumer > 2) return SV_CUDA_SUCCESS;
    r = sv_door_fn.cuCtxGetCurrent(&current);
    if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
    if (current != NULL) return SV_CUDA_SUCCESS;
    return sv_door_default_context(ordinal, ptr, context, call);
}

/* --- hand-over events ---------------------------------------------------------------------- */

static sv_door_hev *sv_door_hev_new(int n) {
    size_t extra = (size_t)(n > 1 ? n - 1 : 0) * sizeof(sv_door_item);
    sv_door_hev *h = (sv_door_hev *)calloc(1, sizeof(sv_door_hev) + extra);
    if (h != NULL) {
        h->generation = sv_door_generation_load();
    }
    return h;
}

/* This thread's pool of ``context`` (made when there is room); -1: none. */
static int sv_door_pool_of(sv_door_thread *t, void *context) {
    int i;
    void **events;
    for (i = 0; i < t->n_pools; i++)
        if (t->pool_context[i] == context) return i;
    if (t->n_pools == SV_DOOR_POOLS) return -1;
    events = (void **)malloc(SV_DOOR_POOL_LIMIT * sizeof(void *));
    if (events == NULL) return -1;
    pthread_mutex_lock(&sv_door_lock);  /* (the reset walks the structs under it) */
    i = t->n_pools;
    t->pool_context[i] = context;
    t->pool_event[i] = events;
    t->pool_count[i] = 0;
    t->n_pools++;
    pthread_mutex_unlock(&sv_door_lock);
    return i;
}

/* Destroy the free events of this thread's pool ``i`` (dead: a reset context). */
static void sv_door_pool_drop(sv_door_thread *t, int i) {
    int k;
    if (i < 0) return;
    for (k = 0; k < t->pool_count[i]; k++) {
        sv_door_fn.cuEventDestroy(t->pool_event[i][k]);
        __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
    }
    t->pool_count[i] = 0;
}

/* A hand-over event of ``context``: from this thread's pool (*kind SV_ITEM_POOLED), or made
   for this hand-over alone when there is no pool slot (a ninth context, a temporary struct:
   SV_ITEM_OWN).  A new event is created with ``context`` current (an event belongs to the
   context current at its creation): pushed around the create unless ``current`` says it is
   current already; a pooled one needs no context call. */
static sv_CUresult sv_door_take_event(sv_door_thread *t, void *context, int current, void **event,
                                      int *kind, int *pool, const char **call) {
    sv_CUresult r;
    int pushed = 0;
    int i = t->temporary ? -1 : sv_door_pool_of(t, context);
    *pool = i;
    *kind = i >= 0 ? SV_ITEM_POOLED : SV_ITEM_OWN;
    if (i >= 0 && t->pool_count[i] > 0) {
        *event = t->pool_event[i][--t->pool_count[i]];
        return SV_CUDA_SUCCESS;
    }
    if (!current) {
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) return r;
    }
    r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
    if (r == SV_CUDA_SUCCESS) {
        __atomic_add_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
        t->events_made++;
    } else {
        *call = "cuEventCreate";
    }
    r = sv_door_leave(pushed, r, call);
    if (r != SV_CUDA_SUCCESS && *event != NULL && pushed) {
        /* the pop failed after the create: the event is given up */
        sv_door_destroy_event(context, *event);
        __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
        *event = NULL;
    }
    return r;
}

/* Destroy a hand-over event (its context pushed, while the door is on and the event is of
   this generation); its count dropped. */
static void sv_door_handover_destroy(void *context, void *event, unsigned generation) {
    if (sv_door_state_load() == 1 && generation == sv_door_generation_load())
        sv_door_destroy_event(context, event);
    __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
}

/* ``event`` of ``context`` back to this thread's pool (destroyed beyond the limit, or with no
   pool to take it). */
static void sv_door_handover_give(void *context, void *event, int kind, unsigned generation) {
    sv_door_thread *t;
    int i;
    if (kind == SV_ITEM_POOLED && sv_door_state_load() == 1 && generation == sv_door_generation_load()
        && (t = sv_door_thread_get()) != NULL) {
        i = sv_door_pool_of(t, context);
        if (i >= 0 && t->pool_count[i] < SV_DOOR_POOL_LIMIT) {
            t->pool_event[i][t->pool_count[i]++] = event;
            return;
        }
    }
    sv_door_handover_destroy(context, event, generation);
}

static inline int sv_door_item_has_event(const sv_door_item *item) {
    return (item->kind == SV_ITEM_POOLED || item->kind == SV_ITEM_OWN) && item->event != NULL;
}

/* Every event of ``h`` back to the pool (or destroyed); ``h`` freed. */
static void sv_door_hev_release(sv_door_hev *h) {
    int k;
    for (k = 0; k < h->n; k++)
        if (sv_door_item_has_event(&h->item[k]))
            sv_door_handover_give(h->item[k].context, h->item[k].event, h->item[k].kind, h->generation);
    free(h);
}

/* Every event of ``h`` destroyed (a hand-over dropped unreleased); ``h`` freed.  At
   interpreter exit nothing is destroyed (the events go with the process). */
static void sv_door_hev_discard(sv_door_hev *h) {
    int k;
    if (!sv_door_finalizing()) {
        for (k = 0; k < h->n; k++)
            if (sv_door_item_has_event(&h->item[k]))
                sv_door_handover_destroy(h->item[k].context, h->item[k].event, h->generation);
    }
    free(h);
}

/* An item's event done, as a query or a wait answered ``r``: 1 done (SUCCESS, or gone: the
   event is then dropped, never reused), 0 not (NOT_READY, or an answer that says neither). */
static int sv_door_item_answered(sv_door_item *item, sv_CUresult r, unsigned generation) {
    if (r == SV_CUDA_SUCCESS) return 1;
    if (sv_door_gone(r)) {
        item->event = NULL;
        item->kind = SV_ITEM_DONE;
        __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
        (void)generation;
        return 1;
    }
    return 0;
}

/* A final event (an ended thread's per-thread stream) done: asked with a query, or waited
   for; once done it is destroyed and its entry says so. */
static int sv_door_final_done(int index, int wait) {
    void *event, *context;
    sv_CUresult r;
    int done;
    pthread_mutex_lock(&sv_door_lock);
    if (sv_door_final[index].state != SV_FINAL_RECORDED) {
        done = sv_door_final[index].state == SV_FINAL_DONE;
        pthread_mutex_unlock(&sv_door_lock);
        return done;
    }
    event = sv_door_final[index].event;
    context = sv_door_final[index].context;
    pthread_mutex_unlock(&sv_door_lock);
    r = wait ? sv_door_event_synchronize(event) : sv_door_fn.cuEventQuery(event);
    if (r != SV_CUDA_SUCCESS && !sv_door_gone(r)) return 0;
    pthread_mutex_lock(&sv_door_lock);
    if (sv_door_final[index].state == SV_FINAL_RECORDED && sv_door_final[index].event == event) {
        sv_door_final[index].state = SV_FINAL_DONE;
        sv_door_final[index].event = NULL;
        if (r == SV_CUDA_SUCCESS) sv_door_destroy_event(context, event);
    }
    pthread_mutex_unlock(&sv_door_lock);
    return 1;
}

/* Whether this thread may release a hold now that nothing is left to wait for: not where
   every CUDA call answers NOT_PERMITTED (a host function, a graph's destructor), since the
   producer's deleter may need the driver there and its release may not be its last word.
   Asked where no event was: an event's query answering SUCCESS already said so.  The
   door's entry point is asked even after a reset (state 0 again: the library stays
   loaded, its pointers set); with none ever resolved, no driver could refuse, and it may. */
static int sv_door_may_release(void) {
    void *current = NULL;
    sv_CUresult (*get_current)(void **) = __atomic_load_n(&sv_door_fn.cuCtxGetCurrent, __ATOMIC_ACQUIRE);
    if (get_current == NULL) return 1;
    return get_current(&current) != SV_CUDA_ERROR_NOT_PERMITTED;
}

/* Whether every event of ``h`` has completed (wait 0: cuEventQuery, never blocking; wait 1:
   cuEventSynchronize).  Events of an earlier door generation are not named: their driver
   state was let go of (release_driver_resources, which waited for what it could), and they
   count as done.  An item still waiting for its capture to end (SV_ITEM_AWAIT) is not done.
   Where no event was asked (every item done already, or of an earlier generation), done
   only where a release may run (sv_door_may_release). */
static int sv_door_hev_check(sv_door_hev *h, int wait) {
    int k, done = 1, asked = 0;
    sv_CUresult r;
    if (h->generation != sv_door_generation_load())
        return sv_door_may_release();  /* (its places' streams were waited for by release_driver_resources) */
    for (k = 0; k < h->n; k++) {
        sv_door_item *item = &h->item[k];
        if (item->kind == SV_ITEM_AWAIT) return 0;
        if (item->kind == SV_ITEM_FINAL) {
            if (!sv_door_final_done(item->final_index, wait)) {
                if (!wait) return 0;
                done = 0;
            }
            continue;
        }
        if (!sv_door_item_has_event(item)) continue;
        if (sv_door_state_load() != 1) return 0;  /* (no driver to ask: reset meanwhile) */
        r = wait ? sv_door_event_synchronize(item->event) : sv_door_fn.cuEventQuery(item->event);
        asked = 1;
        if (!sv_door_item_answered(item, r, h->generation)) {
            if (!wait) return 0;
            done = 0;  /* a failed wait: the others still waited for, this one asked again */
        }
    }
    return done && (asked || sv_door_may_release());
}

static int sv_door_hev_done(sv_door_hev *h) { return sv_door_hev_check(h, 0); }
static int sv_door_hev_wait(sv_door_hev *h) { return sv_door_hev_check(h, 1); }

/* --- hand-over records: one place --------------------------------------------------------- */

/* What recording one place did (sv_door_place_record). */
enum {
    SV_PLACE_RECORDED = 0,  /* the item is set: an event, a final event, or done */
    SV_PLACE_CAPTURING,     /* the stream is capturing: *graph and *capture_id set */
    SV_PLACE_LATER,         /* not now (a capture beside or on it, NOT_PERMITTED, an
                               unexpected answer: *why, *call); the entry is tried again */
};

/* Whether the thread whose struct has ``serial`` lives (its thread state not cleared). */
static int sv_door_thread_alive(unsigned long long serial) {
    sv_door_thread *t;
    int alive = 0;
    pthread_mutex_lock(&sv_door_lock);
    for (t = sv_door_threads; t != NULL; t = t->next) {
        if (t->serial == serial) {
            alive = !t->closed && !t->thread_gone;
            break;
        }
    }
    pthread_mutex_unlock(&sv_door_lock);
    return alive;
}

/* Note that this thread recorded a view on its per-thread stream of ``context`` (so that it
   records that stream's final event as it ends). */
static void sv_door_note_ptds(sv_door_thread *t, void *context) {
    int i;
    if (t == NULL || t->temporary) return;
    for (i = 0; i < t->n_ptds; i++)
        if (t->ptds_context[i] == context) return;
    if (t->n_ptds < SV_DOOR_PTDS) t->ptds_context[t->n_ptds++] = context;
}

/* The context's capture status of ``stream`` (current context already ``context`` for a
   default handle); SV_PLACE_CAPTURING with its graph, SV_PLACE_LATER, or SV_PLACE_RECORDED
   meaning "not capturing: go on" (with *gone set when the stream or its context is gone). */
static int sv_door_place_capture(uintptr_t stream, void **graph, unsigned long long *capture_id,
                                 sv_CUresult *why, const char **call, int *gone) {
    int status = -1;
    sv_CUresult r = sv_door_fn.cuStreamIsCapturing((void *)stream, &status);
    *gone = 0;
    if (r != SV_CUDA_SUCCESS) {
        *why = r;
        *call = "cuStreamIsCapturing";
        if (sv_door_gone(r)) { *gone = 1; return SV_PLACE_RECORDED; }
        return SV_PLACE_LATER;  /* IMPLICIT (a capture beside), NOT_PERMITTED, unexpected */
    }
    if (status == SV_CAPTURE_NONE) return SV_PLACE_RECORDED;
    if (status == SV_CAPTURE_ACTIVE) {
        int info_status = -1;
        const void *deps = NULL;
        size_t ndeps = 0;
        r = sv_door_fn.cuStreamGetCaptureInfo((void *)stream, &info_status, capture_id, graph,
                                              &deps, &ndeps);
        if (r == SV_CUDA_SUCCESS && info_status == SV_CAPTURE_ACTIVE) return SV_PLACE_CAPTURING;
        *why = r == SV_CUDA_SUCCESS ? SV_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : r;
        *call = "cuStreamGetCaptureInfo";
        return SV_PLACE_LATER;  /* its capture ended or failed between the two questions */
    }
    *why = SV_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;  /* until cuStreamEndCapture ends it */
    *call = "cuStreamIsCapturing";
    return SV_PLACE_LATER;
}

/* Record a hand-over event on ``stream`` of ``context`` (the current context already, for a
   default handle); the item set.  A stale pooled event (a reset context) is replaced once;
   a stream that is gone while its context lives (a driver reporting it destroyed: its work
   may still run) has its context waited for, unless a capture beside it forbids the wait;
   a context that is gone discarded the work. */
static int sv_door_record_event(sv_door_thread *t, void *context, uintptr_t stream,
                                sv_door_item *item, sv_CUresult *why, const char **call) {
    void *event = NULL, *other = NULL;
    int kind, pool, tries, pushed = 0;
    sv_CUresult r = SV_CUDA_SUCCESS;
    for (tries = 0; tries < 2; tries++) {
        event = NULL;
        /* A default stream's context is current already; an ordinary stream carries its own
           (reached by its handle, no context call unless an event must be created). */
        r = sv_door_take_event(t, context, stream <= 2, &event, &kind, &pool, call);
        if (r == SV_CUDA_SUCCESS) {
            r = sv_door_fn.cuEventRecord(event, (void *)stream);
            if (r == SV_CUDA_SUCCESS) {
                item->kind = kind;
                item->context = context;
                item->event = event;
                return SV_PLACE_RECORDED;
            }
            *call = "cuEventRecord";
            sv_door_handover_destroy(context, event, sv_door_generation_load());
            if (sv_door_stale(r)) sv_door_pool_drop(t, pool);  /* a reset context's are all dead */
        }
        if (!sv_door_stale(r)) break;
    }
    *why = r;
    if (sv_door_gone(r) && stream > 2) {
        /* The stream recorded on is gone (or its context): only its context can say when
           its queued work is done. */
        r = sv_door_fn.cuStreamGetCtx((void *)stream, &other);
        if (r == SV_CUDA_SUCCESS && other == context) { *call = "cuEventRecord"; return SV_PLACE_LATER; }
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) {
            *why = r;
            if (!sv_door_gone(r)) return SV_PLACE_LATER;
            item->kind = SV_ITEM_DONE;  /* the context is gone: its work was discarded */
            return SV_PLACE_RECORDED;
        }
        {
            int status = -1;
            /* A host wait beside a capturing blocking stream would invalidate it (the
               legacy stream answers IMPLICIT then): tried again later. */
            r = sv_door_fn.cuStreamIsCapturing((void *)1, &status);
            if (r == SV_CUDA_SUCCESS) {
                r = sv_door_ctx_synchronize();
                *call = "cuCtxSynchronize";
            } else {
                *call = "cuStreamIsCapturing";
            }
        }
        sv_door_leave(pushed, SV_CUDA_SUCCESS, call);
        if (r == SV_CUDA_SUCCESS || sv_door_gone(r)) {
            item->kind = SV_ITEM_DONE;
            return SV_PLACE_RECORDED;
        }
        *why = r;
        return SV_PLACE_LATER;
    }
    if (sv_door_gone(r)) {  /* a default stream's context gone: its work discarded */
        item->kind = SV_ITEM_DONE;
        return SV_PLACE_RECORDED;
    }
    return SV_PLACE_LATER;
}

/* Record place (``handle``, ``context``, ``serial``) of a hand-over into ``item``: one of
   SV_PLACE_*.  ``serial``: for the per-thread stream (2), the recording thread's struct. */
static int sv_door_place_record(sv_door_thread *t, uintptr_t handle, void *context,
                                unsigned long long serial, sv_door_item *item, void **graph,
                                unsigned long long *capture_id, sv_CUresult *why, const char **call) {
    int pushed = 0, outcome, gone = 0;
    uintptr_t stream = handle;
    sv_CUresult r;
    *why = SV_CUDA_SUCCESS;
    *call = NULL;
    item->kind = SV_ITEM_DONE;
    item->context = context;
    item->event = NULL;
    item->handle = handle;
    item->serial = serial;
    if (handle == 2 && !(serial != 0 && serial == t->serial && !t->temporary)) {
        if (serial != 0 && sv_door_thread_alive(serial)) {
            stream = 1;  /* another live thread's per-thread stream: its context's legacy stream */
        } else {
            /* Its thread ended: the event it recorded as it ended covers everything that
               stream will ever run. */
            int index, state;
            pthread_mutex_lock(&sv_door_lock);
            index = serial != 0 ? sv_door_final_find(serial, context) : -1;
            state = index >= 0 ? sv_door_final[index].state : SV_FINAL_UNKNOWN;
            if (index >= 0 && sv_door_final[index].generation != sv_door_generation_load())
                state = SV_FINAL_DONE;  /* released by release_driver_resources */
            pthread_mutex_unlock(&sv_door_lock);
            if (state == SV_FINAL_DONE) return SV_PLACE_RECORDED;
            if (state == SV_FINAL_RECORDED) {
                item->kind = SV_ITEM_FINAL;
                item->final_index = index;
                return SV_PLACE_RECORDED;
            }
            *why = SV_CUDA_ERROR_NOT_READY;
            *call = "cuEventRecord";
            return SV_PLACE_LATER;  /* nothing says when that stream is done: kept */
        }
    }
    if (stream <= 2) {
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) {
            *why = r;
            return sv_door_gone(r) ? SV_PLACE_RECORDED : SV_PLACE_LATER;
        }
    }
    outcome = sv_door_place_capture(stream, graph, capture_id, why, call, &gone);
    if (outcome == SV_PLACE_RECORDED && !gone) {
        outcome = sv_door_record_event(t, context, stream, item, why, call);
    } else if (outcome == SV_PLACE_RECORDED && gone && stream > 2) {
        /* (the stream named no stream: what a record on it would answer decides) */
        outcome = sv_door_record_event(t, context, stream, item, why, call);
    } else if (outcome == SV_PLACE_CAPTURING) {
        item->kind = SV_ITEM_AWAIT;
    }
    sv_door_leave(pushed, SV_CUDA_SUCCESS, call);
    return outcome;
}

/* An entry of one place: its stream's id read (0 when it cannot be). */
static unsigned long long sv_door_stream_id(uintptr_t stream) {
    unsigned long long id = 0;
    if (stream <= 2 || sv_door_fn.cuStreamGetId == NULL) return 0;
    if (sv_door_fn.cuStreamGetId((void *)stream, &id) != SV_CUDA_SUCCESS) return 0;
    return id;
}

/* Record the one event of a pending entry (``h``, recorded on ordinary ``stream`` alone) again
   on ``stream``: only while the stream is not capturing and its id is still the one read
   then (the same stream, not another made at the handle since: ids are never reused). */
static sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t stream) {
    void *event = h->item[0].event;
    int status = -1;
    sv_CUresult r;
    if (h->n != 1 || !sv_door_item_has_event(&h->item[0]) || h->stream_id == 0 || stream <= 2
        || h->generation != sv_door_generation_load())
        return SV_DOOR_NOT_HANDLED;
    r = sv_door_fn.cuStreamIsCapturing((void *)stream, &status);
    if (r != SV_CUDA_SUCCESS) return r;
    if (status != SV_CAPTURE_NONE || sv_door_stream_id(stream) != h->stream_id)
        return SV_DOOR_NOT_HANDLED;
    r = sv_door_fn.cuEventRecord(event, (void *)stream);
    if (r == SV_CUDA_SUCCESS) {
        t->handed++;
        t->recorded++;
    }
    return r;
}

/* --- ordering ------------------------------------------------------------------------------- */

/* What the ordering functions answer besides a CUresult: the consumer stream is capturing a
   graph (the capture path of _driver_door.pxi makes the graph's external event wait), or its
   capture was invalidated (no wait can be added to it until the capture is ended). */
#define SV_DOOR_CAPTURING (-2)
#define SV_DOOR_CONSUMER_INVALIDATED (-3)

static inline int sv_door_same_default(uintptr_t a, uintptr_t b) {
    return (a == 2) == (b == 2);
}

/* Whether ``consumer`` captures: SV_CUDA_SUCCESS (not capturing), SV_DOOR_CAPTURING,
   SV_DOOR_CONSUMER_INVALIDATED, or a failing query.  A per-thread consumer with no current
   context is asked in the data device's primary context (*wait_context set to it). */
static sv_CUresult sv_door_consumer_capture(uintptr_t consumer, int ordinal, uintptr_t ptr,
                                            void **wait_context, const char **call) {
    int status = SV_CAPTURE_NONE;
    sv_CUresult r;
    if (consumer <= 1) return SV_CUDA_SUCCESS;
    r = sv_door_capture_status(consumer, *wait_context, &status, call);
    if (r == SV_CUDA_ERROR_INVALID_CONTEXT && consumer == 2 && *wait_context == NULL
        && (ordinal >= 0 || ptr != 0)) {
        r = sv_door_consumer_context(consumer, ordinal, ptr, wait_context, call);
        if (r != SV_CUDA_SUCCESS) return r;
        if (*wait_context == NULL) { *call = "cuStreamIsCapturing"; return SV_CUDA_ERROR_INVALID_CONTEXT; }
        r = sv_door_capture_status(consumer, *wait_context, &status, call);
    }
    if (r != SV_CUDA_SUCCESS) return r;
    if (status == SV_CAPTURE_ACTIVE) return SV_DOOR_CAPTURING;
    if (status == SV_CAPTURE_INVALIDATED) return SV_DOOR_CONSUMER_INVALIDATED;
    return SV_CUDA_SUCCESS;
}

/* ``consumer`` waits on ``event``; a default consumer stream that has no current context
   (the wait answers INVALID_CONTEXT) waits in the data device's primary context. */
static sv_CUresult sv_door_wait_consumer(uintptr_t consumer, void *event, void *wait_context,
                                         int ordinal, uintptr_t ptr, const char **call) {
    sv_CUresult r = sv_door_wait(consumer, event, wait_context, 0, call);
    if (r != SV_CUDA_ERROR_INVALID_CONTEXT || consumer > 2 || wait_context != NULL
        || (ordinal < 0 && ptr == 0))
        return r;
    r = sv_door_consumer_context(consumer, ordinal, ptr, &wait_context, call);
    if (r != SV_CUDA_SUCCESS) return r;
    if (wait_context == NULL) { *call = "cuStreamWaitEvent"; return SV_CUDA_ERROR_INVALID_CONTEXT; }
    return sv_door_wait(consumer, event, wait_context, 0, call);
}

/* ``consumer`` waits for the ordinary stream ``producer``'s work so far: this thread's event
   of the producer's context recorded on it, the consumer made to wait. */
static sv_CUresult sv_door_order(sv_door_thread *t, uintptr_t producer, uintptr_t consumer,
                                 int ordinal, uintptr_t ptr, const char **call) {
    void *context, *event, *wait_context = NULL;
    sv_CUresult r = sv_door_consumer_capture(consumer, ordinal, ptr, &wait_context, call);
    if (r != SV_CUDA_SUCCESS) return r;
    r = sv_door_record_on_stream(t, producer, &context, &event, call);
    if (r != SV_CUDA_SUCCESS) return r;
    r = sv_door_wait_consumer(consumer, event, wait_context, ordinal, ptr, call);
    if (r == SV_CUDA_SUCCESS) t->ordered++;
    return r;
}

/* ``consumer`` waits for the default stream ``producer`` (0, 1, 2) of ``context`` (the data
   device's primary context, or with ``current`` the calling thread's current context): the
   record made with that context current (pushed, never cached by handle); a default consumer
   naming the same stream of the same context orders nothing; a default consumer with no
   current context waits inside that context too. */
static sv_CUresult sv_door_order_default(sv_door_thread *t, uintptr_t producer, uintptr_t consumer,
                                         void *context, const char **call) {
    void *current = NULL, *event = NULL;
    int wait_inside = 0, pushed = 0;
    sv_CUresult r;
    if (consumer <= 2) {
        r = sv_door_fn.cuCtxGetCurrent(&current);
        if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
        wait_inside = current == NULL;  /* no current context: the consumer's is the producer's */
        if ((current == NULL || current == context) && sv_door_same_default(producer, consumer))
            return SV_CUDA_SUCCESS;  /* one stream */
    }
    if (consumer > 1 && !wait_inside) {
        /* The consumer's context is current (or it is an ordinary stream): asked here. */
        int status = SV_CAPTURE_NONE;
        r = sv_door_fn.cuStreamIsCapturing((void *)consumer, &status);
        if (r != SV_CUDA_SUCCESS) { *call = "cuStreamIsCapturing"; return r; }
        if (status == SV_CAPTURE_ACTIVE) return SV_DOOR_CAPTURING;
        if (status == SV_CAPTURE_INVALIDATED) return SV_DOOR_CONSUMER_INVALIDATED;
    }
    r = sv_door_enter(context, &pushed, call);
    if (r != SV_CUDA_SUCCESS) return r;
    if (consumer > 1 && wait_inside) {
        /* A per-thread consumer with no current context: its stream is this context's. */
        int status = SV_CAPTURE_NONE;
        r = sv_door_fn.cuStreamIsCapturing((void *)consumer, &status);
        if (r != SV_CUDA_SUCCESS) { *call = "cuStreamIsCapturing"; return sv_door_leave(pushed, r, call); }
        if (status == SV_CAPTURE_ACTIVE) return sv_door_leave(pushed, SV_DOOR_CAPTURING, call);
        if (status == SV_CAPTURE_INVALIDATED) return sv_door_leave(pushed, SV_DOOR_CONSUMER_INVALIDATED, call);
    }
    r = sv_door_record_in_current(t, context, producer, &event, call);
    if (r == SV_CUDA_SUCCESS && (wait_inside || !pushed)) {
        r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, 0);
        if (r != SV_CUDA_SUCCESS) *call = "cuStreamWaitEvent";
        r = sv_door_leave(pushed, r, call);
    } else {
        r = sv_door_leave(pushed, r, call);
        if (r == SV_CUDA_SUCCESS) {
            r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, 0);
            if (r != SV_CUDA_SUCCESS) *call = "cuStreamWaitEvent";
        }
    }
    if (r == SV_CUDA_SUCCESS) t->ordered++;
    return r;
}

/* The capture path's questions and its event (_driver_door.pxi's _order_into_capture). */

/* ``stream``'s capture status, capture id and graph, asked with ``context`` current (NULL:
   whatever is current). */
static sv_CUresult sv_door_capture_info(uintptr_t stream, void *context, int *status,
                                        unsigned long long *capture_id, void **graph,
                                        const char **call) {
    int pushed = 0;
    const void *deps = NULL;
    size_t ndeps = 0;
    sv_CUresult r = SV_CUDA_SUCCESS;
    if (context != NULL) {
        r = sv_door_enter(context, &pushed, call);
        if (r != SV_CUDA_SUCCESS) return r;
    }
    *status = SV_CAPTURE_NONE;
    *capture_id = 0;
    *graph = NULL;
    if (stream > 1) {  /* (the legacy stream never captures) */
        r = sv_door_fn.cuStreamGetCaptureInfo((void *)stream, status, capture_id, graph, &deps, &ndeps);
        if (r != SV_CUDA_SUCCESS) *call = "cuStreamGetCaptureInfo";
    }
    return sv_door_leave(pushed, r, call);
}

/* A new event (its own, not this thread's: it is the graph's, or destroyed after the join)
   created in ``context`` and recorded on ``stream``; destroyed again on failure. */
static sv_CUresult sv_door_new_recorded_event(void *context, uintptr_t stream, void **event,
                                              const char **call) {
    int pushed = 0;
    sv_CUresult r = sv_door_enter(context, &pushed, call);
    if (r != SV_CUDA_SUCCESS) return r;
    *event = NULL;
    r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
    if (r != SV_CUDA_SUCCESS) {
        *call = "cuEventCreate";
    } else {
        r = sv_door_fn.cuEventRecord(*event, (void *)stream);
        if (r != SV_CUDA_SUCCESS) {
            *call = "cuEventRecord";
            sv_door_fn.cuEventDestroy(*event);
            *event = NULL;
        }
    }
    r = sv_door_leave(pushed, r, call);
    if (r != SV_CUDA_SUCCESS && *event != NULL) {
        sv_door_destroy_event(context, *event);
        *event = NULL;
    }
    return r;
}

/* An ordering's event a graph owned, destroyed now that the graph is gone; one of an earlier
   door generation (release_driver_resources since) is left alone. */
static void sv_door_destroy_graph_event(void *context, void *event, unsigned generation) {
    if (sv_door_state_load() == 1 && generation == sv_door_generation_load())
        sv_door_destroy_event(context, event);
}

/* A user object carrying ``data`` (a graph node) with ``count`` references, whose destructor
   is ``destroy`` (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC); the caller moves them into graphs. */
static sv_CUresult sv_door_user_object(void **object, void *data, void (*destroy)(void *),
                                       unsigned count, const char **call) {
    sv_CUresult r = sv_door_fn.cuUserObjectCreate(object, data, destroy, count, 1);
    if (r != SV_CUDA_SUCCESS) *call = "cuUserObjectCreate";
    return r;
}

/* One of the user object's references moved into ``graph`` (CU_GRAPH_USER_OBJECT_MOVE). */
static sv_CUresult sv_door_graph_take(void *graph, void *object, const char **call) {
    sv_CUresult r = sv_door_fn.cuGraphRetainUserObject(graph, object, 1, 1);
    if (r != SV_CUDA_SUCCESS) *call = "cuGraphRetainUserObject";
    return r;
}

static void sv_door_user_object_release(void *object, unsigned count) {
    sv_door_fn.cuUserObjectRelease(object, count);
}

/* --- counters for tests -------------------------------------------------------------------- */

static unsigned long long sv_door_thread_ordered(void) { return sv_door_tls ? sv_door_tls->ordered : 0; }
static int sv_door_thread_events(void) { return sv_door_tls ? sv_door_tls->n_events : 0; }
static long long sv_door_live_events(void) {
    long long n;
    pthread_mutex_lock(&sv_door_lock);
    n = sv_door_events_live;
    pthread_mutex_unlock(&sv_door_lock);
    return n;
}
static unsigned long long sv_door_thread_handed(void) { return sv_door_tls ? sv_door_tls->handed : 0; }
static unsigned long long sv_door_thread_recorded(void) { return sv_door_tls ? sv_door_tls->recorded : 0; }
static long long sv_door_thread_pooled(void) {
    long long n = 0;
    int i;
    if (sv_door_tls == NULL) return 0;
    for (i = 0; i < sv_door_tls->n_pools; i++) n += sv_door_tls->pool_count[i];
    return n;
}
static long long sv_door_handover_events(void) {
    return __atomic_load_n(&sv_door_handover_live, __ATOMIC_RELAXED);
}
static long long sv_door_trim_pools(void) {
    sv_door_thread *t = sv_door_tls;
    long long n = 0;
    int i, k;
    if (t == NULL || sv_door_state_load() != 1) return 0;
    for (i = 0; i < t->n_pools; i++) {
        for (k = 0; k < t->pool_count[i]; k++) {
            sv_door_handover_destroy(t->pool_context[i], t->pool_event[i][k], sv_door_generation_load());
            n++;
        }
        t->pool_count[i] = 0;
    }
    return n;
}
static int sv_door_final_entries(void) {
    int n;
    pthread_mutex_lock(&sv_door_lock);
    n = sv_door_final_count;
    pthread_mutex_unlock(&sv_door_lock);
    return n;
}
/* The calling thread's serial (0: none yet). */
static unsigned long long sv_door_thread_serial(void) { return sv_door_tls ? sv_door_tls->serial : 0; }

/* Whether this OS thread's struct was closed with the current thread state: code run as that
   thread state ends. */
static int sv_door_thread_ending(void) {
    sv_door_thread *t = sv_door_tls;
    int closed;
    if (t == NULL) return 0;
    pthread_mutex_lock(&sv_door_lock);
    closed = t->closed && t->closed_tstate_id == PyThreadState_GetID(PyThreadState_Get());
    pthread_mutex_unlock(&sv_door_lock);
    return closed;
}

#else  /* !SV_DOOR_AVAILABLE: the door stays off, and ordering says so (_door_require) */

typedef struct sv_door_thread { int temporary; unsigned long long serial; } sv_door_thread;
static const char *sv_door_missing = "a platform the driver door is built for";
static sv_door_thread *sv_door_thread_get(void) { return NULL; }
static sv_door_thread *sv_door_thread_or_temporary(sv_door_thread *t) { return t; }
static void sv_door_thread_done(sv_door_thread *t) { (void)t; }
static int sv_door_open(int z) { (void)z; return -1; }
static void sv_door_close(void) {}
static void sv_door_reset(void) {}
static const char *sv_door_error_name(sv_CUresult code) { (void)code; return NULL; }
static sv_door_hev *sv_door_hev_new(int n) { (void)n; return NULL; }
static void sv_door_hev_release(sv_door_hev *h) { free(h); }
static void sv_door_hev_discard(sv_door_hev *h) { free(h); }
static int sv_door_may_release(void) { return 1; }
static int sv_door_hev_done(sv_door_hev *h) { (void)h; return 1; }
static int sv_door_hev_wait(sv_door_hev *h) { (void)h; return 1; }
static sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t s) {
    (void)t; (void)h; (void)s; return SV_DOOR_NOT_HANDLED;
}
static unsigned long long sv_door_thread_ordered(void) { return 0; }
static int sv_door_thread_events(void) { return 0; }
static long long sv_door_live_events(void) { return 0; }
static unsigned long long sv_door_thread_handed(void) { return 0; }
static unsigned long long sv_door_thread_recorded(void) { return 0; }
static long long sv_door_thread_pooled(void) { return 0; }
static long long sv_door_handover_events(void) { return 0; }
static long long sv_door_trim_pools(void) { return 0; }
static int sv_door_final_entries(void) { return 0; }
static unsigned long long sv_door_thread_serial(void) { return 0; }
static int sv_door_thread_ending(void) { return 0; }

#endif

#endif
