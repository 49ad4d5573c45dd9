# The driver door in C: ``order_after`` for the common warm cases, without
# Python.  _driver.py stays the general path (and the only one that loads a
# driver); this file is a shortcut in front of it for the calls that dominate a
# launch: an ordinary producer stream (a handle > 2), or a producer's default
# stream (0, 1, 2) whose data device is known (``device``, or the device of the
# memory at ``ptr``), and any consumer stream.
#
# What it does: ``_door_order(producer, consumer, device, ptr)`` answers 1 ("done": the
# consumer now waits for the producer's work so far) or 0 ("not handled": the
# caller calls ``_driver_module().order_after`` exactly as before), or raises
# the CUDAError the Python path would raise for the same failing call
# (``CUDAError(f"{name} failed: {error_name}", error_name)``, the name from the
# driver's cuGetErrorName).  Warm, one ordering is two driver calls through
# function pointers (cuStreamIsCapturing on the consumer, cuEventRecord,
# cuStreamWaitEvent), the same three the Python path makes, with the same semantics
# (_driver.py's docstring); after a producer's default stream, the same five
# (capture query, push the device's primary context, record, pop, wait; plus
# cuPointerGetAttribute when only ``ptr`` is known).  A legacy consumer stream (0,
# 1) is not queried: it never captures.
#
# Invariants:
#
# - The door is on only when the driver in use is the real cuda-bindings
#   (``_driver._api is cuda.bindings.driver``, cuInit done by _driver.py,
#   ``_driver._c_door`` true: STRIDEDVIEW_NO_C_DRIVER=1 sets it false, and the
#   per-thread-default-stream mode of cuda-bindings
#   (CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM) keeps it off too, so that
#   handle 0 means what the bindings make it mean).  It never loads a driver: the
#   library is found with dlopen("libcuda.so.1", RTLD_NOLOAD), i.e. only the one
#   cuda-bindings already loaded, and each entry point is resolved once through
#   that library's cuGetProcAddress_v2 (CUDA version 12000, default stream
#   semantics, symbolStatus checked and a NULL function taken as missing even with
#   CUDA_SUCCESS: driver 580 answers a symbol newer than the version asked for so;
#   tests/test_gpu_driver_door.py, too_old_for), so the prototypes below are those of CUDA
#   12.0 (CUresult int, handles void *) and nothing of cuda-bindings is needed at
#   build time (one wheel works with cuda-bindings 12 and 13).  A fake installed
#   through ``_driver.use_api`` turns the door off: every call then takes the
#   Python path, unchanged.
# - State: sv_door_state is 0 (not decided yet: decided by the next ordering the
#   door could do, in Python, after _driver._driver() has loaded the bindings and
#   called cuInit, as order_after would at that point), 1 (on:
#   the function pointers are set) or -1 (off).  It is published with release
#   ordering after the pointers and read with acquire ordering, and decided under
#   sv_door_lock, so threads racing to decide it agree.  ``use_api`` calls
#   ``_driver._door_reset_hook`` (this file's _driver_door_reset) before the
#   driver changes: every thread's C events are destroyed, every cache emptied and
#   the state goes back to 0.  Like use_api itself, that requires that no other
#   thread be ordering streams meanwhile.
# - Per-thread caches, one sv_door_thread per OS thread (a ``__thread`` pointer:
#   per thread on free-threaded builds by construction; no Python object in it,
#   so no GIL is needed to touch it): (ordinary stream handle -> its context)
#   (SV_DOOR_STREAMS entries, replaced round-robin) and (context -> this thread's
#   event, CU_EVENT_DISABLE_TIMING, created in that context) (SV_DOOR_EVENTS
#   entries; a thread using more contexts than that takes the Python path for the
#   others).  One event per (context, thread), reused: see CUDA_SEMANTICS.md.
#   Each struct is on a list (sv_door_threads, under sv_door_lock) for the reset.
#   Its events are destroyed (each with its context pushed, through the function
#   pointers: no Python there) when the thread ends: by a capsule in the thread
#   state's dict, released by PyThreadState_Clear before a join on the thread
#   returns (the struct is then closed for that thread state: code it runs later
#   takes the Python path; a new thread state on the same OS thread opens it
#   again), and by a pthread key's destructor at the OS thread's end.  The struct
#   is freed by whichever of the two comes last (both under sv_door_lock), so
#   neither ever reaches freed memory, and the ``__thread`` pointer is cleared
#   when the OS thread ends.  After a fork the lock is made anew in the child.  Nothing is destroyed at process exit (the main
#   thread's events go with the process), as in _driver.py.
# - Stale entries: a record failing with CUDA_ERROR_INVALID_HANDLE or
#   CUDA_ERROR_INVALID_CONTEXT (a driver reporting a remembered stream or event
#   stale) unless both the context and the event were fresh: the stream's
#   context is looked up afresh, the dead event of an unchanged context destroyed
#   and replaced, and the record tried once more; a second failure raises.  A real
#   driver reports neither a primary context reset (which keeps the context's
#   handle and kills its events) nor a destroyed stream: naming those handles
#   crashes it (driver 580: SIGSEGV).  stridedview.release_driver_resources()
#   (sv_door_reset through _driver.use_api) destroys this door's events before a
#   reset; the simulator ends the process where a real driver would crash.
# - A default-stream consumer (0, 1, 2) waits in the calling thread's current
#   context; with none current the wait answers CUDA_ERROR_INVALID_CONTEXT and
#   the call is left to the Python path (which waits in the data device's
#   primary context; its own record again is harmless: the wait uses the newest
#   record).
# - A producer's default stream (0, 1, 2) is that of the data device's primary
#   context (retained once per device, in sv_door_primary, released by the
#   reset; the Python path retains its own), pushed around the record whatever
#   the calling thread has current, never cached by handle; a default consumer
#   with no current context waits inside it, and a default consumer naming the
#   same stream of the same context is a no-op (_driver.py's
#   _order_after_default, exactly).  With no device and no pointer (a view's
#   ready stream 1 or 2) both are the current context's: the Python path.
# - A consumer stream that may capture (any but the legacy stream, 0 and 1) is asked
#   first (cuStreamIsCapturing, one call): anything but "not capturing" (a capture, a
#   failing query: a per-thread stream with no context current) leaves the ordering to
#   the Python path, whose capture path makes the graph's external event wait
#   (_driver.py's _order_into_capture): a plain wait would invalidate the capture.
# - Not built on Windows or without gcc/clang builtins (SV_DOOR_AVAILABLE 0): the
#   door then stays off and everything takes the Python path.
#
# Hand-overs (_handover.pxi; _driver.py's check_stream and record_handover stay
# the general path): the warm cases are done here too, with the same rules as
# _driver.py's.
#
# - A place (check_stream's tuple) for an ordinary handle whose context this
#   thread's stream table knows (or cuStreamGetCtx tells), and for 0 and 1 with a
#   context current, is made by _door_place, the context as an int (which
#   _driver.py's calls take as a CUcontext); 2, no current context and any failure
#   go to check_stream.
# - A hand-over's record (_door_record_entry, sv_door_handover_record): per place,
#   cuStreamIsCapturing must answer NONE, then an event from this thread's C pool
#   for that context (created there, with CU_EVENT_DISABLE_TIMING, when empty; the
#   context pushed around the create when not current) is recorded.  A default
#   stream's place (0, 1) has its context pushed around all of it when not current
#   (the handle names the current context's stream); an ordinary stream is reached
#   by its handle, which carries its context, with no context call (as
#   sv_door_order records on a producer's stream).  Anything else (a capture
#   status other than NONE, any failing call, a ninth context, a per-thread stream
#   (2) released other than by its live recording thread) gives back the events
#   recorded so far and leaves the whole entry to _driver.record_handover (which
#   records it again, or waits, defers, keeps or releases it as it always did); a
#   stale-looking failure forgets the stream's remembered context.  An entry of
#   one place (not a per-thread stream) also reads its stream's id
#   (cuStreamGetId, resolved if the driver has it; 0: unknown), so that a later
#   hand-over may record its event again (sv_door_hev_record_again, the same
#   steps on the entry's event, only while the id reads the same: _handover.pxi's
#   _join_youngest); a failure there changes nothing.
# - Such an entry keeps its (context, event) pairs in C (sv_door_hev, owned by the
#   _Handover): queried with cuEventQuery (NOT_READY: not done; any other failure:
#   done, the event dropped, not reused), waited for with cuEventSynchronize, and
#   its events given back on release to the releasing thread's C pool (at most
#   SV_DOOR_POOL_LIMIT per context, the rest destroyed with their context pushed).
#   C events never reach _driver.py's pools, nor its events the C pools.
# - The pools live in the per-thread struct: destroyed with its other events when
#   the thread ends (or its thread state is cleared) and by the reset (use_api
#   releases every pending hand-over first, so none is in flight then);
#   _door_trim_pools (through _driver.trim_event_pool) destroys the calling
#   thread's free ones.
#
# sv_door_stream_is_capturing, sv_door_event_record and sv_door_event_query call
# the driver through the same pointers, for use only while the door is on;
# _door_raise raises their failures as _driver.py would.
#
# Tests: tests/test_gpu_driver_door.py (the C path taken, its call counts, its
# events destroyed at thread end and at use_api, stale events and contexts; the
# hand-overs' C record, pools, fallback, thread end and use_api), and
# the gpu suite run with STRIDEDVIEW_NO_C_DRIVER=1 and without.

cdef extern from *:
    """
    #if !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
    #define SV_DOOR_AVAILABLE 1
    #include <dlfcn.h>
    #include <pthread.h>
    #include <stdlib.h>
    #else
    #define SV_DOOR_AVAILABLE 0
    #endif

    #define SV_DOOR_NOT_HANDLED (-1)
    #define SV_CUDA_SUCCESS 0
    #define SV_CUDA_ERROR_INVALID_CONTEXT 201
    #define SV_CUDA_ERROR_INVALID_HANDLE 400
    #define SV_CU_EVENT_DISABLE_TIMING 2
    #define SV_DOOR_STREAMS 16
    #define SV_DOOR_EVENTS 8
    #define SV_DOOR_DEVICES 64
    #define SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
    #define SV_CUDA_ERROR_NOT_READY 600
    #define SV_DOOR_POOLS 8          /* hand-over pools (contexts) per thread */
    #define SV_DOOR_POOL_LIMIT 1024  /* free hand-over events kept per (context, thread) */

    typedef int sv_CUresult;

    typedef struct sv_door_api {
        sv_CUresult (*cuGetErrorName)(sv_CUresult, const char **);
        sv_CUresult (*cuCtxGetCurrent)(void **);
        sv_CUresult (*cuCtxPushCurrent)(void *);
        sv_CUresult (*cuCtxPopCurrent)(void **);
        sv_CUresult (*cuStreamGetCtx)(void *, void **);
        sv_CUresult (*cuEventCreate)(void **, unsigned int);
        sv_CUresult (*cuEventDestroy)(void *);
        sv_CUresult (*cuEventRecord)(void *, void *);
        sv_CUresult (*cuStreamWaitEvent)(void *, void *, unsigned int);
        sv_CUresult (*cuDeviceGet)(int *, int);
        sv_CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
        sv_CUresult (*cuDevicePrimaryCtxRelease)(int);
        sv_CUresult (*cuPointerGetAttribute)(void *, int, unsigned long long);
        /* For the hand-over code (not used by the ordering itself). */
        sv_CUresult (*cuStreamIsCapturing)(void *, int *);
        sv_CUresult (*cuEventQuery)(void *);
        sv_CUresult (*cuEventSynchronize)(void *);
        /* Optional (NULL: a driver before 12.0): a stream's process-unique id, which
           lets a hand-over record a pending entry's event again (sv_door_handover_record). */
        sv_CUresult (*cuStreamGetId)(void *, unsigned long long *);
    } sv_door_api;

    static sv_door_api sv_door_fn;
    static int sv_door_state = 0;  /* 0 undecided, 1 on, -1 off */

    static inline int sv_door_state_load(void) {
    #if SV_DOOR_AVAILABLE
        return __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE);
    #else
        return -1;
    #endif
    }

    #if SV_DOOR_AVAILABLE

    typedef struct sv_door_thread {
        uintptr_t stream_handle[SV_DOOR_STREAMS];  /* 0: empty */
        void *stream_context[SV_DOOR_STREAMS];
        unsigned stream_victim;
        int n_events;
        void *event_context[SV_DOOR_EVENTS];
        void *event[SV_DOOR_EVENTS];
        unsigned long long ordered;      /* orderings done here */
        unsigned long long events_made;  /* events this thread's door created */
        /* Hand-overs: free events per context (SV_DOOR_POOLS contexts, each array of
           SV_DOOR_POOL_LIMIT made on first use), and the hand-overs recorded here. */
        int n_pools;
        void *pool_context[SV_DOOR_POOLS];
        void **pool_event[SV_DOOR_POOLS];
        int pool_count[SV_DOOR_POOLS];
        unsigned long long handed;     /* hand-overs recorded here in C */
        unsigned long long recorded;   /* their events */
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
    static long long sv_door_events_live = 0;  /* under sv_door_lock */
    /* Hand-over events made by the door and not yet destroyed (pooled or in flight). */
    static long long sv_door_handover_live = 0;  /* atomic */
    /* Each device's primary context, retained once (NULL: not yet), and its CUdevice;
       written under sv_door_lock, read with acquire ordering; released by the reset. */
    static void *sv_door_primary[SV_DOOR_DEVICES];
    static int sv_door_primary_device[SV_DOOR_DEVICES];

    /* Destroy event ``event`` of ``context`` with its context pushed; errors ignored
       (a reset context's events are already gone). */
    static void sv_door_destroy_event(void *context, void *event) {
        void *popped;
        if (sv_door_fn.cuCtxPushCurrent(context) == SV_CUDA_SUCCESS) {
            sv_door_fn.cuEventDestroy(event);
            sv_door_fn.cuCtxPopCurrent(&popped);
        } else {
            sv_door_fn.cuEventDestroy(event);
        }
    }

    /* Every event of ``t`` destroyed, its caches emptied; sv_door_lock held. */
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

    /* The capsule's destructor: the Python thread state holding it is cleared
       (PyThreadState_Clear, as the thread ends, before a join on it returns; at
       interpreter exit for threads still alive).  Its events destroyed, the struct
       closed (not used again for that thread state), and freed if its OS thread
       has already ended. */
    static void sv_door_thread_close(PyObject *capsule) {
        sv_door_thread *t = (sv_door_thread *)PyCapsule_GetPointer(capsule, "stridedview._driver_door");
        int finalizing;
        if (t == NULL) { PyErr_Clear(); return; }
    #if PY_VERSION_HEX >= 0x030D0000
        finalizing = Py_IsFinalizing();
    #else
        finalizing = _Py_IsFinalizing();
    #endif
        pthread_mutex_lock(&sv_door_lock);
        /* At interpreter exit nothing is destroyed (the driver may be shutting down;
           the process's resources go with it), as in _driver.py. */
        sv_door_clear_locked(t, !finalizing && __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1);
        t->closed = 1;
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

    /* The pthread key's destructor: the OS thread ends.  Its events destroyed (if
       its thread state did not already); the struct freed, unless a capsule still
       names it (a thread state outliving its OS thread): the capsule frees it. */
    static void sv_door_thread_end(void *p) {
        sv_door_thread *t = (sv_door_thread *)p;
        int keep;
        pthread_mutex_lock(&sv_door_lock);
        sv_door_clear_locked(t, __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1);
        keep = t->capsule_live;
        if (keep) t->thread_gone = 1;
        else sv_door_unlink_locked(t);
        pthread_mutex_unlock(&sv_door_lock);
        if (sv_door_tls == t) sv_door_tls = NULL;
        if (!keep) free(t);
    }

    /* Tie ``t`` to the current thread state: a capsule in its dict, released when
       the thread state is cleared.  0 if there is none to tie it to. */
    static int sv_door_thread_register(sv_door_thread *t) {
        PyThreadState *ts = PyThreadState_Get();
        PyObject *dict, *capsule;
        uint64_t id = PyThreadState_GetID(ts);
        if (t->closed && id == t->closed_tstate_id) return 0;  /* code run as it ends */
        dict = PyThreadState_GetDict();
        if (dict == NULL) return 0;
        capsule = PyCapsule_New(t, "stridedview._driver_door", sv_door_thread_close);
        if (capsule == NULL) { PyErr_Clear(); return 0; }
        pthread_mutex_lock(&sv_door_lock);
        t->capsule_live = 1;
        t->capsule_tstate_id = id;
        t->closed = 0;
        pthread_mutex_unlock(&sv_door_lock);
        if (PyDict_SetItemString(dict, "stridedview._driver_door", capsule) < 0) {
            PyErr_Clear();  /* the capsule's release below closes the struct */
        }
        Py_DECREF(capsule);
        return !t->closed;
    }

    /* This thread's struct, made on first use (the GIL held, or the thread state
       attached); NULL if none can be had. */
    static sv_door_thread *sv_door_thread_new(void) {
        sv_door_thread *t = (sv_door_thread *)calloc(1, sizeof(sv_door_thread));
        if (t == NULL) return NULL;
        if (pthread_setspecific(sv_door_key, t) != 0) { free(t); return NULL; }
        pthread_mutex_lock(&sv_door_lock);
        t->next = sv_door_threads;
        if (sv_door_threads) sv_door_threads->prev = t;
        sv_door_threads = t;
        pthread_mutex_unlock(&sv_door_lock);
        sv_door_tls = t;
        /* Closed with the thread state, so that its events are gone when a join on
           the thread returns (the key's destructor runs later, at the OS thread's
           end).  Without a thread-state dict: the key alone. */
        sv_door_thread_register(t);
        return t;
    }

    static inline sv_door_thread *sv_door_thread_get(void) {
        sv_door_thread *t = sv_door_tls;
        if (t == NULL) return sv_door_thread_new();
        if (!t->closed) return t;
        /* Closed: its thread state was cleared.  A new thread state on the same OS
           thread (PyGILState_Ensure from a C thread) opens it again; code run by the
           cleared one as it ends takes the Python path. */
        return sv_door_thread_register(t) ? t : NULL;
    }

    static void sv_door_atfork_child(void) {
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        sv_door_lock = fresh;  /* another thread may have held it at the fork */
    }

    /* Resolve every entry point through the loaded driver's cuGetProcAddress_v2.
       0: the door is on; -1: off (no such library loaded, a symbol missing). */
    static int sv_door_open(void) {
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
        if (!sv_door_key_made) {
            if (pthread_key_create(&sv_door_key, sv_door_thread_end) != 0) goto off;
            sv_door_key_made = 1;
            pthread_atfork(NULL, NULL, sv_door_atfork_child);
        }
        /* Only the library cuda-bindings already loaded: never load a driver here. */
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib == NULL) goto off;
        get_proc = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
        dlclose(lib);  /* still loaded: cuda-bindings holds its own reference */
        if (get_proc == NULL) goto off;
    #define SV_DOOR_RESOLVE(name) do { \\
            void *pfn = NULL; int status = -1; \\
            if (get_proc(#name, &pfn, 12000, 0, &status) != SV_CUDA_SUCCESS || status != 0 \\
                || pfn == NULL) goto off; \\
            *(void **)&fn.name = pfn; \\
        } while (0)
        SV_DOOR_RESOLVE(cuGetErrorName);
        SV_DOOR_RESOLVE(cuCtxGetCurrent);
        SV_DOOR_RESOLVE(cuCtxPushCurrent);
        SV_DOOR_RESOLVE(cuCtxPopCurrent);
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
        SV_DOOR_RESOLVE(cuEventQuery);
        SV_DOOR_RESOLVE(cuEventSynchronize);
    #undef SV_DOOR_RESOLVE
        {
            void *pfn = NULL; int status = -1;
            if (get_proc("cuStreamGetId", &pfn, 12000, 0, &status) != SV_CUDA_SUCCESS || status != 0)
                pfn = NULL;
            *(void **)&fn.cuStreamGetId = pfn;
        }
        sv_door_fn = fn;
        __atomic_store_n(&sv_door_state, 1, __ATOMIC_RELEASE);
        result = 0;
        goto done;
    off:
        __atomic_store_n(&sv_door_state, -1, __ATOMIC_RELEASE);
    done:
        pthread_mutex_unlock(&sv_door_lock);
        return result;
    }

    /* The state decided: off (the driver is not the real bindings). */
    static void sv_door_close(void) {
        pthread_mutex_lock(&sv_door_lock);
        if (sv_door_state == 0) __atomic_store_n(&sv_door_state, -1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&sv_door_lock);
    }

    /* use_api: every thread's events destroyed (while the pointers are those of the
       driver that made them), every cache emptied, the state undecided again. */
    static void sv_door_reset(void) {
        sv_door_thread *t;
        pthread_mutex_lock(&sv_door_lock);
        int on = sv_door_state == 1, i;
        for (t = sv_door_threads; t != NULL; t = t->next) sv_door_clear_locked(t, on);
        for (i = 0; i < SV_DOOR_DEVICES; i++) {
            if (sv_door_primary[i] != NULL && on)
                sv_door_fn.cuDevicePrimaryCtxRelease(sv_door_primary_device[i]);
            __atomic_store_n(&sv_door_primary[i], NULL, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&sv_door_state, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&sv_door_lock);
    }

    static int sv_door_find_event(sv_door_thread *t, void *context) {
        int i;
        for (i = 0; i < t->n_events; i++)
            if (t->event_context[i] == context) return i;
        return -1;
    }

    /* Forget (and destroy) this thread's event of ``context``. */
    static void sv_door_drop_event(sv_door_thread *t, void *context) {
        int i = sv_door_find_event(t, context);
        if (i < 0) return;
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
        if (t->n_events == SV_DOOR_EVENTS) return SV_DOOR_NOT_HANDLED;
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
        pthread_mutex_lock(&sv_door_lock);
        t->event_context[t->n_events] = context;
        t->event[t->n_events] = *event;
        t->n_events++;
        sv_door_events_live++;
        pthread_mutex_unlock(&sv_door_lock);
        t->events_made++;
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
        if (i < 0) {
            i = (int)(t->stream_victim++ % SV_DOOR_STREAMS);
        }
        t->stream_handle[i] = stream;
        t->stream_context[i] = *context;
        return SV_CUDA_SUCCESS;
    }

    static inline int sv_door_stale(sv_CUresult r) {
        return r == SV_CUDA_ERROR_INVALID_HANDLE || r == SV_CUDA_ERROR_INVALID_CONTEXT;
    }

    /* Whether ``consumer`` may be capturing a graph (or its status cannot be had here):
       the ordering is then _driver.py's, whose capture path makes the graph's external
       event wait.  One driver call, but none for the legacy stream (0 and 1: the door
       is off in cuda-bindings' per-thread mode), which never captures. */
    static inline int sv_door_consumer_capturing(uintptr_t consumer) {
        int status = 0;
        if (consumer <= 1) return 0;
        return sv_door_fn.cuStreamIsCapturing((void *)consumer, &status) != SV_CUDA_SUCCESS
               || status != 0;
    }

    /* ``consumer`` waits for the ordinary stream ``producer``'s work so far.
       SV_CUDA_SUCCESS: done; SV_DOOR_NOT_HANDLED: left to the Python path;
       else the failing call's CUresult, its name in *call. */
    static sv_CUresult sv_door_order(uintptr_t producer, uintptr_t consumer, const char **call) {
        sv_door_thread *t = sv_door_thread_get();
        void *context, *fresh, *event;
        int looked_up, created;
        sv_CUresult r;
        if (t == NULL) return SV_DOOR_NOT_HANDLED;
        if (sv_door_consumer_capturing(consumer)) return SV_DOOR_NOT_HANDLED;
        r = sv_door_context_of(t, producer, &context, &looked_up, call);
        if (r != SV_CUDA_SUCCESS) return r;
        r = sv_door_event_in(t, context, &event, &created, call);
        if (r != SV_CUDA_SUCCESS) return r;
        r = sv_door_fn.cuEventRecord(event, (void *)producer);
        if (r != SV_CUDA_SUCCESS) {
            if (!sv_door_stale(r) || (looked_up && created)) { *call = "cuEventRecord"; return r; }
            /* A stale context (the handle reused) or a dead event (a reset context):
               look the stream up afresh, replace a dead event, record once more. */
            sv_door_forget_stream(t, producer);
            r = sv_door_context_of(t, producer, &fresh, &looked_up, call);
            if (r != SV_CUDA_SUCCESS) return r;
            if (fresh == context) sv_door_drop_event(t, context);
            r = sv_door_event_in(t, fresh, &event, &created, call);
            if (r != SV_CUDA_SUCCESS) return r;
            r = sv_door_fn.cuEventRecord(event, (void *)producer);
            if (r != SV_CUDA_SUCCESS) { *call = "cuEventRecord"; return r; }
        }
        r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, 0);
        if (r != SV_CUDA_SUCCESS) {
            if (r == SV_CUDA_ERROR_INVALID_CONTEXT && consumer <= 2) return SV_DOOR_NOT_HANDLED;
            *call = "cuStreamWaitEvent";
            return r;
        }
        t->ordered++;
        return SV_CUDA_SUCCESS;
    }

    /* The primary context of device ``ordinal``, retained once. */
    static sv_CUresult sv_door_primary_context(int ordinal, void **context, const char **call) {
        void *found;
        int device;
        sv_CUresult r = SV_CUDA_SUCCESS;
        if (ordinal < 0 || ordinal >= SV_DOOR_DEVICES) return SV_DOOR_NOT_HANDLED;
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

    static sv_CUresult sv_door_create_current(sv_door_thread *t, void *context, void **event,
                                              const char **call) {
        sv_CUresult r;
        if (t->n_events == SV_DOOR_EVENTS) return SV_DOOR_NOT_HANDLED;
        r = sv_door_fn.cuEventCreate(event, SV_CU_EVENT_DISABLE_TIMING);
        if (r != SV_CUDA_SUCCESS) { *call = "cuEventCreate"; return r; }
        pthread_mutex_lock(&sv_door_lock);
        t->event_context[t->n_events] = context;
        t->event[t->n_events] = *event;
        t->n_events++;
        sv_door_events_live++;
        pthread_mutex_unlock(&sv_door_lock);
        t->events_made++;
        return SV_CUDA_SUCCESS;
    }

    /* Record this thread's event of ``context``, the current context, on ``stream``;
       a dead event (its context reset) replaced and the record tried once more. */
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
        r = sv_door_create_current(t, context, event, call);
        if (r != SV_CUDA_SUCCESS) return r;
        r = sv_door_fn.cuEventRecord(*event, (void *)stream);
        if (r != SV_CUDA_SUCCESS) *call = "cuEventRecord";
        return r;
    }

    static inline int sv_door_same_default(uintptr_t a, uintptr_t b) {
        return (a == 2) == (b == 2);
    }

    /* ``consumer`` waits for the default stream ``producer`` (0, 1, 2) of device
       ``ordinal``'s primary context (_driver.py's _order_after_default). */
    static sv_CUresult sv_door_order_default(uintptr_t producer, uintptr_t consumer, int ordinal,
                                             const char **call) {
        sv_door_thread *t = sv_door_thread_get();
        void *primary, *current = NULL, *event = NULL, *popped;
        int wait_inside = 0;
        sv_CUresult r, r_pop;
        if (t == NULL) return SV_DOOR_NOT_HANDLED;
        r = sv_door_primary_context(ordinal, &primary, call);
        if (r != SV_CUDA_SUCCESS) return r;
        if (consumer <= 2) {
            r = sv_door_fn.cuCtxGetCurrent(&current);
            if (r != SV_CUDA_SUCCESS) { *call = "cuCtxGetCurrent"; return r; }
            wait_inside = current == NULL;  /* no current context: the consumer's is the primary */
            if ((current == NULL || current == primary) && sv_door_same_default(producer, consumer))
                return SV_CUDA_SUCCESS;  /* one stream */
        }
        /* (A per-thread consumer with no current context: the wait is the Python path's.) */
        if (sv_door_consumer_capturing(consumer)) return SV_DOOR_NOT_HANDLED;
        r = sv_door_fn.cuCtxPushCurrent(primary);
        if (r != SV_CUDA_SUCCESS) { *call = "cuCtxPushCurrent"; return r; }
        r = sv_door_record_in_current(t, primary, producer, &event, call);
        if (r == SV_CUDA_SUCCESS && wait_inside) {
            r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, 0);
            if (r != SV_CUDA_SUCCESS) *call = "cuStreamWaitEvent";
        }
        r_pop = sv_door_fn.cuCtxPopCurrent(&popped);
        if (r != SV_CUDA_SUCCESS) return r;  /* the first error explains what went wrong */
        if (r_pop != SV_CUDA_SUCCESS) { *call = "cuCtxPopCurrent"; return r_pop; }
        if (!wait_inside) {
            r = sv_door_fn.cuStreamWaitEvent((void *)consumer, event, 0);
            if (r != SV_CUDA_SUCCESS) { *call = "cuStreamWaitEvent"; return r; }
        }
        t->ordered++;
        return SV_CUDA_SUCCESS;
    }

    /* The device ordinal of the memory at ``ptr``. */
    static sv_CUresult sv_door_pointer_device(uintptr_t ptr, int *ordinal, const char **call) {
        sv_CUresult r = sv_door_fn.cuPointerGetAttribute(
            ordinal, SV_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (unsigned long long)ptr);
        if (r != SV_CUDA_SUCCESS) *call = "cuPointerGetAttribute";
        return r;
    }

    static unsigned long long sv_door_thread_ordered(void) {
        return sv_door_tls ? sv_door_tls->ordered : 0;
    }
    static int sv_door_thread_events(void) {
        return sv_door_tls ? sv_door_tls->n_events : 0;
    }
    static long long sv_door_live_events(void) {
        long long n;
        pthread_mutex_lock(&sv_door_lock);
        n = sv_door_events_live;
        pthread_mutex_unlock(&sv_door_lock);
        return n;
    }

    /* --- hand-overs (_handover.pxi): events from a pool per (context, thread) --- */

    typedef struct sv_door_hev {
        int n;
        /* The id (cuStreamGetId) of the stream of an entry's one place, read when it was
           recorded; 0: unknown (more places, no cuStreamGetId, a failed call). */
        unsigned long long stream_id;
        /* That place's stream handle (set with stream_id, by _door_record_entry): a later
           hand-over on the same place records the event again on it (_join_youngest). */
        uintptr_t stream;
        struct { void *context; void *event; } item[1];  /* n of them */
    } sv_door_hev;

    static sv_door_hev *sv_door_hev_new(int n) {
        sv_door_hev *h = (sv_door_hev *)malloc(sizeof(sv_door_hev) + (size_t)(n > 1 ? n - 1 : 0) * sizeof(h->item[0]));
        if (h != NULL) {
            h->n = 0;
            h->stream_id = 0;
            h->stream = 0;
        }
        return h;
    }

    /* This thread's pool of ``context`` (made when ``make`` and there is room); -1: none. */
    static int sv_door_pool_of(sv_door_thread *t, void *context, int make) {
        int i;
        void **events;
        for (i = 0; i < t->n_pools; i++)
            if (t->pool_context[i] == context) return i;
        if (!make || t->n_pools == SV_DOOR_POOLS) return -1;
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

    /* Destroy the free events of this thread's pool ``i`` (dead: a reset context);
       ``context`` is current. */
    static void sv_door_pool_drop(sv_door_thread *t, int i) {
        int k;
        for (k = 0; k < t->pool_count[i]; k++) {
            sv_door_fn.cuEventDestroy(t->pool_event[i][k]);
            __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
        }
        t->pool_count[i] = 0;
    }

    /* Record an event from this thread's pool of ``context`` (created there when the
       pool is empty, ``context`` current: pushed around the create when it is not) on
       ``stream``, after cuStreamIsCapturing said NONE; for a default-stream handle (0, 1,
       2) ``context`` is made current around the whole (pushed when it is not), an
       ordinary stream is reached by its handle alone (its context is its own).  SV_CUDA_SUCCESS: recorded, *event set.
       Anything else (a capture status other than NONE, a failing call, no pool slot):
       the caller gives back what it recorded and leaves the whole entry to _driver.py;
       *event is then an event to give back (a failing pop after the record) or NULL.
       With ``stream_id`` (not NULL), the stream's id is read too (0 when it cannot be).

       Or, given an event (*event not NULL: a pending entry's, recorded on ``stream``
       when its id was *stream_id, not 0), record that event again on ``stream``, only
       if the stream's id is still *stream_id (the same stream, not another one made
       at the same handle since: ids are never reused); anything else changes nothing
       and returns a failure (SV_DOOR_NOT_HANDLED when no call failed). */
    static sv_CUresult sv_door_handover_record(sv_door_thread *t, void *context, uintptr_t stream,
                                               void **event, unsigned long long *stream_id) {
        void *current = NULL, *popped, *ev = NULL, *again = *event;
        int pushed = 0, status = -1, i = -1;
        unsigned long long id = 0;
        sv_CUresult r, r_pop;
        if (again != NULL && (stream_id == NULL || *stream_id == 0 || sv_door_fn.cuStreamGetId == NULL))
            return SV_DOOR_NOT_HANDLED;
        *event = NULL;
        if (stream <= 2) {
            /* A default-stream handle names the current context's stream: ``context``
               made current.  An ordinary stream carries its context (as sv_door_order's
               record on a producer's stream): no context call, unless an event must be
               created (below). */
            r = sv_door_fn.cuCtxGetCurrent(&current);
            if (r != SV_CUDA_SUCCESS) return r;
            if (current != context) {
                r = sv_door_fn.cuCtxPushCurrent(context);
                if (r != SV_CUDA_SUCCESS) return r;
                pushed = 1;
            }
        }
        r = sv_door_fn.cuStreamIsCapturing((void *)stream, &status);
        if (r == SV_CUDA_SUCCESS && status != 0) r = SV_DOOR_NOT_HANDLED;
        if (r == SV_CUDA_SUCCESS && stream_id != NULL && sv_door_fn.cuStreamGetId != NULL) {
            if (sv_door_fn.cuStreamGetId((void *)stream, &id) != SV_CUDA_SUCCESS) id = 0;
            if (again != NULL && id != *stream_id) r = SV_DOOR_NOT_HANDLED;
            else if (again == NULL) *stream_id = id;
        }
        if (again != NULL) {
            if (r == SV_CUDA_SUCCESS) r = sv_door_fn.cuEventRecord(again, (void *)stream);
            ev = again;  /* the entry's, whatever happened */
        } else if (r == SV_CUDA_SUCCESS) {
            i = sv_door_pool_of(t, context, 1);
            if (i < 0) r = SV_DOOR_NOT_HANDLED;
            else if (t->pool_count[i] > 0) ev = t->pool_event[i][--t->pool_count[i]];
            else {
                /* Created in ``context``: current already for a default stream, else
                   made current around the create (an event belongs to the context
                   current at its creation). */
                void *creator = context;
                int around = 0;
                if (stream > 2) {
                    r = sv_door_fn.cuCtxGetCurrent(&creator);
                    if (r == SV_CUDA_SUCCESS && creator != context) {
                        r = sv_door_fn.cuCtxPushCurrent(context);
                        around = r == SV_CUDA_SUCCESS;
                    }
                }
                if (r == SV_CUDA_SUCCESS) r = sv_door_fn.cuEventCreate(&ev, SV_CU_EVENT_DISABLE_TIMING);
                if (r == SV_CUDA_SUCCESS) {
                    __atomic_add_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
                    t->events_made++;
                } else {
                    ev = NULL;
                }
                if (around) {
                    r_pop = sv_door_fn.cuCtxPopCurrent(&popped);
                    if (r == SV_CUDA_SUCCESS && r_pop != SV_CUDA_SUCCESS) r = r_pop;  /* ev given back */
                }
            }
        }
        if (r == SV_CUDA_SUCCESS && again == NULL) {
            r = sv_door_fn.cuEventRecord(ev, (void *)stream);
            if (r != SV_CUDA_SUCCESS) {
                /* Destroyed with ``context`` current (pushed here for an ordinary stream;
                   a push that fails, a gone context, destroys without it). */
                int around = !pushed && stream > 2
                             && sv_door_fn.cuCtxPushCurrent(context) == SV_CUDA_SUCCESS;
                sv_door_fn.cuEventDestroy(ev);
                __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
                ev = NULL;
                if (sv_door_stale(r)) sv_door_pool_drop(t, i);  /* a reset context's are all dead */
                if (around) sv_door_fn.cuCtxPopCurrent(&popped);
            }
        }
        if (pushed) {
            r_pop = sv_door_fn.cuCtxPopCurrent(&popped);
            if (r == SV_CUDA_SUCCESS && r_pop != SV_CUDA_SUCCESS) r = r_pop;
        }
        *event = ev;
        return r;
    }

    /* Destroy a hand-over event (its context pushed); its count dropped. */
    static void sv_door_handover_destroy(void *context, void *event) {
        if (__atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1)
            sv_door_destroy_event(context, event);
        __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
    }

    /* ``event`` of ``context`` back to this thread's pool (destroyed beyond the limit,
       or with no pool to take it: the door off, the thread's struct closed). */
    static void sv_door_handover_give(void *context, void *event) {
        sv_door_thread *t;
        int i;
        if (__atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1 && (t = sv_door_thread_get()) != NULL) {
            i = sv_door_pool_of(t, context, 1);
            if (i >= 0 && t->pool_count[i] < SV_DOOR_POOL_LIMIT) {
                t->pool_event[i][t->pool_count[i]++] = event;
                return;
            }
        }
        sv_door_handover_destroy(context, event);
    }

    /* Every event of ``h`` back to the pool; ``h`` freed. */
    static void sv_door_hev_release(sv_door_hev *h) {
        int k;
        for (k = 0; k < h->n; k++)
            if (h->item[k].event != NULL) sv_door_handover_give(h->item[k].context, h->item[k].event);
        free(h);
    }

    /* Every event of ``h`` destroyed (a hand-over dropped unreleased); ``h`` freed.  At
       interpreter exit nothing is destroyed (the events go with the process). */
    static void sv_door_hev_discard(sv_door_hev *h) {
        int k;
    #if PY_VERSION_HEX >= 0x030D0000
        if (Py_IsFinalizing()) h->n = 0;
    #else
        if (_Py_IsFinalizing()) h->n = 0;
    #endif
        for (k = 0; k < h->n; k++)
            if (h->item[k].event != NULL) sv_door_handover_destroy(h->item[k].context, h->item[k].event);
        free(h);
    }

    /* Whether every event of ``h`` has completed (cuEventQuery: NOT_READY is not done;
       any other failure counts as done, the event dropped, not reused). */
    static int sv_door_hev_done(sv_door_hev *h) {
        int k;
        sv_CUresult r;
        for (k = 0; k < h->n; k++) {
            if (h->item[k].event == NULL) continue;
            r = __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1
                ? sv_door_fn.cuEventQuery(h->item[k].event) : -1;
            if (r == SV_CUDA_ERROR_NOT_READY) return 0;
            if (r != SV_CUDA_SUCCESS) {
                h->item[k].event = NULL;
                __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
            }
        }
        return 1;
    }

    /* Block until every event of ``h`` has completed (cuEventSynchronize); a failed
       wait drops its event, as above. */
    static void sv_door_hev_wait(sv_door_hev *h) {
        int k;
        sv_CUresult r;
        for (k = 0; k < h->n; k++) {
            if (h->item[k].event == NULL) continue;
            r = __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) == 1
                ? sv_door_fn.cuEventSynchronize(h->item[k].event) : -1;
            if (r != SV_CUDA_SUCCESS) {
                h->item[k].event = NULL;
                __atomic_sub_fetch(&sv_door_handover_live, 1, __ATOMIC_RELAXED);
            }
        }
    }

    /* The calling thread's current context (for check_stream's default handles). */
    static sv_CUresult sv_door_current_context(void **context) {
        return sv_door_fn.cuCtxGetCurrent(context);
    }

    /* An ordinary stream's context, from this thread's table (or cuStreamGetCtx). */
    static sv_CUresult sv_door_stream_context(uintptr_t stream, void **context) {
        sv_door_thread *t = sv_door_thread_get();
        int looked_up;
        const char *call;
        if (t == NULL) return SV_DOOR_NOT_HANDLED;
        return sv_door_context_of(t, stream, context, &looked_up, &call);
    }

    /* A stale place: its handle forgotten by this thread's table. */
    static void sv_door_stream_forget(uintptr_t stream) {
        if (sv_door_tls != NULL) sv_door_forget_stream(sv_door_tls, stream);
    }

    static unsigned long long sv_door_thread_handed(void) {
        return sv_door_tls ? sv_door_tls->handed : 0;
    }
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
    /* Destroy this thread's free hand-over events; how many. */
    static void sv_door_hev_add(sv_door_hev *h, void *context, void *event) {
        h->item[h->n].context = context;
        h->item[h->n].event = event;
        h->n++;
    }
    static void sv_door_thread_count_handed(sv_door_thread *t, int events) {
        t->handed++;
        t->recorded += (unsigned long long)events;
    }
    /* Record the one event of a pending entry (``h``, recorded on ``stream`` alone)
       again on ``stream``, as sv_door_handover_record does (only while the stream's id
       is still the one read then); counted as a hand-over of one event. */
    static sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t stream) {
        void *event = h->item[0].event;
        sv_CUresult r;
        if (h->n != 1 || event == NULL || h->stream_id == 0) return SV_DOOR_NOT_HANDLED;
        r = sv_door_handover_record(t, h->item[0].context, stream, &event, &h->stream_id);
        if (r == SV_CUDA_SUCCESS) sv_door_thread_count_handed(t, 1);
        return r;
    }
    static unsigned long long sv_door_thread_recorded(void) {
        return sv_door_tls ? sv_door_tls->recorded : 0;
    }
    static long long sv_door_trim_pools(void) {
        sv_door_thread *t = sv_door_tls;
        long long n = 0;
        int i, k;
        if (t == NULL || __atomic_load_n(&sv_door_state, __ATOMIC_ACQUIRE) != 1) return 0;
        for (i = 0; i < t->n_pools; i++) {
            for (k = 0; k < t->pool_count[i]; k++) {
                sv_door_handover_destroy(t->pool_context[i], t->pool_event[i][k]);
                n++;
            }
            t->pool_count[i] = 0;
        }
        return n;
    }

    /* Whether this OS thread's struct was closed with the current thread state: code
       run as that thread state ends (its dict cleared), which takes the Python path. */
    static int sv_door_thread_ending(void) {
        sv_door_thread *t = sv_door_tls;
        return t != NULL && t->closed
            && t->closed_tstate_id == PyThreadState_GetID(PyThreadState_Get());
    }

    #else  /* !SV_DOOR_AVAILABLE */

    typedef struct sv_door_hev { int n; unsigned long long stream_id; uintptr_t stream; } sv_door_hev;
    typedef struct sv_door_thread { int unused; } sv_door_thread;
    static sv_door_thread *sv_door_thread_get(void) { return NULL; }
    static sv_door_hev *sv_door_hev_new(int n) { (void)n; return NULL; }
    static sv_CUresult sv_door_handover_record(sv_door_thread *t, void *context, uintptr_t stream,
                                               void **event, unsigned long long *stream_id) {
        (void)t; (void)context; (void)stream; (void)stream_id; return SV_DOOR_NOT_HANDLED;
    }
    static void sv_door_handover_give(void *context, void *event) { (void)context; (void)event; }
    static void sv_door_hev_release(sv_door_hev *h) { (void)h; }
    static void sv_door_hev_discard(sv_door_hev *h) { (void)h; }
    static int sv_door_hev_done(sv_door_hev *h) { (void)h; return 1; }
    static void sv_door_hev_wait(sv_door_hev *h) { (void)h; }
    static sv_CUresult sv_door_current_context(void **context) { (void)context; return SV_DOOR_NOT_HANDLED; }
    static sv_CUresult sv_door_stream_context(uintptr_t stream, void **context) {
        (void)stream; (void)context; return SV_DOOR_NOT_HANDLED;
    }
    static void sv_door_stream_forget(uintptr_t stream) { (void)stream; }
    static unsigned long long sv_door_thread_handed(void) { return 0; }
    static long long sv_door_thread_pooled(void) { return 0; }
    static int sv_door_thread_ending(void) { return 0; }
    static long long sv_door_handover_events(void) { return 0; }
    static long long sv_door_trim_pools(void) { return 0; }
    static void sv_door_hev_add(sv_door_hev *h, void *context, void *event) {
        (void)h; (void)context; (void)event;
    }
    static void sv_door_thread_count_handed(sv_door_thread *t, int events) { (void)t; (void)events; }
    static sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t stream) {
        (void)t; (void)h; (void)stream; return SV_DOOR_NOT_HANDLED;
    }
    static unsigned long long sv_door_thread_recorded(void) { return 0; }

    static int sv_door_open(void) { return -1; }
    static void sv_door_close(void) {}
    static void sv_door_reset(void) {}
    static sv_CUresult sv_door_order(uintptr_t producer, uintptr_t consumer, const char **call) {
        (void)producer; (void)consumer; (void)call;
        return SV_DOOR_NOT_HANDLED;
    }
    static sv_CUresult sv_door_order_default(uintptr_t producer, uintptr_t consumer, int ordinal,
                                             const char **call) {
        (void)producer; (void)consumer; (void)ordinal; (void)call;
        return SV_DOOR_NOT_HANDLED;
    }
    static sv_CUresult sv_door_pointer_device(uintptr_t ptr, int *ordinal, const char **call) {
        (void)ptr; (void)ordinal; (void)call;
        return SV_DOOR_NOT_HANDLED;
    }
    static unsigned long long sv_door_thread_ordered(void) { return 0; }
    static int sv_door_thread_events(void) { return 0; }
    static long long sv_door_live_events(void) { return 0; }

    #endif

    /* For the hand-over code (a small C API; the ordering does not use these): the
       driver's own calls through the door's pointers, with handles as integers.
       Valid only while sv_door_state_load() == 1 (the pointers are then the real
       driver's, the one _driver._api names); each returns the call's CUresult
       (SV_DOOR_NOT_HANDLED where the door is not built). */
    static inline sv_CUresult sv_door_stream_is_capturing(uintptr_t stream, int *status) {
    #if SV_DOOR_AVAILABLE
        return sv_door_fn.cuStreamIsCapturing((void *)stream, status);
    #else
        (void)stream; (void)status; return SV_DOOR_NOT_HANDLED;
    #endif
    }
    static inline sv_CUresult sv_door_event_record(uintptr_t event, uintptr_t stream) {
    #if SV_DOOR_AVAILABLE
        return sv_door_fn.cuEventRecord((void *)event, (void *)stream);
    #else
        (void)event; (void)stream; return SV_DOOR_NOT_HANDLED;
    #endif
    }
    static inline sv_CUresult sv_door_event_query(uintptr_t event) {
    #if SV_DOOR_AVAILABLE
        return sv_door_fn.cuEventQuery((void *)event);
    #else
        (void)event; return SV_DOOR_NOT_HANDLED;
    #endif
    }

    /* The driver's name of ``code`` (what _driver.py's _error_name gives). */
    static const char *sv_door_error_name(sv_CUresult code) {
        const char *name = NULL;
        if (sv_door_state_load() == 1 && sv_door_fn.cuGetErrorName(code, &name) == SV_CUDA_SUCCESS)
            return name;
        return NULL;
    }
    """
    int SV_DOOR_AVAILABLE
    int SV_DOOR_NOT_HANDLED
    int SV_CUDA_SUCCESS
    ctypedef int sv_CUresult
    int sv_door_state_load() nogil
    int sv_door_open() nogil
    void sv_door_close() nogil
    void sv_door_reset() nogil
    sv_CUresult sv_door_order(uintptr_t producer, uintptr_t consumer, const char **call) nogil
    sv_CUresult sv_door_order_default(uintptr_t producer, uintptr_t consumer, int ordinal, const char **call) nogil
    sv_CUresult sv_door_pointer_device(uintptr_t ptr, int *ordinal, const char **call) nogil
    unsigned long long sv_door_thread_ordered() nogil
    int sv_door_thread_events() nogil
    long long sv_door_live_events() nogil
    const char *sv_door_error_name(sv_CUresult code) nogil
    # The hand-over code's C API (see the C comment above): only while
    # sv_door_state_load() == 1; a failure raised with _door_raise(code, b"name").
    sv_CUresult sv_door_stream_is_capturing(uintptr_t stream, int *status) nogil
    sv_CUresult sv_door_event_record(uintptr_t event, uintptr_t stream) nogil
    sv_CUresult sv_door_event_query(uintptr_t event) nogil
    # Hand-overs recorded in C (see _door_record_entry): an entry's events.
    ctypedef struct sv_door_hev:
        int n
        unsigned long long stream_id
        uintptr_t stream
    ctypedef struct sv_door_thread:
        pass
    sv_door_thread *sv_door_thread_get()
    sv_door_hev *sv_door_hev_new(int n) nogil
    void sv_door_hev_add(sv_door_hev *h, void *context, void *event) nogil
    sv_CUresult sv_door_handover_record(
        sv_door_thread *t, void *context, uintptr_t stream, void **event,
        unsigned long long *stream_id,
    ) nogil
    void sv_door_handover_give(void *context, void *event)
    void sv_door_hev_release(sv_door_hev *h)
    void sv_door_hev_discard(sv_door_hev *h) nogil
    int sv_door_hev_done(sv_door_hev *h) nogil
    void sv_door_hev_wait(sv_door_hev *h) nogil
    sv_CUresult sv_door_current_context(void **context) nogil
    sv_CUresult sv_door_stream_context(uintptr_t stream, void **context)
    void sv_door_stream_forget(uintptr_t stream) nogil
    void sv_door_thread_count_handed(sv_door_thread *t, int events) nogil
    sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t stream) nogil
    unsigned long long sv_door_thread_recorded() nogil
    unsigned long long sv_door_thread_handed() nogil
    long long sv_door_thread_pooled() nogil
    int sv_door_thread_ending() noexcept
    long long sv_door_handover_events() nogil
    long long sv_door_trim_pools() nogil


cdef int _door_decide() except -1:
    """Decide, once the Python path has loaded the driver, whether the door is on."""
    import os
    import sys

    driver = _driver_module()
    driver._door_reset_hook = _driver_door_reset
    driver._door_trim_hook = _door_trim_pools
    if not driver._c_door:
        sv_door_close()
        return 0
    if driver._api is None or not driver._initialized:
        # Loaded (and cuInit called) by the Python path, as order_after would at
        # once: the same CUDAError, with its stream_ptr=-1 hint, if there is no driver.
        driver._driver()
    if (
        driver._api is not sys.modules.get("cuda.bindings.driver")
        or os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
    ):
        sv_door_close()
        return 0
    sv_door_open()
    return 0


cdef int _door_raise(sv_CUresult code, const char *call) except -1:
    """Raise the CUDAError _driver.py raises for ``call`` failing with ``code``."""
    from stridedview._errors import CUDAError

    cdef const char *found = sv_door_error_name(code)
    name = found.decode() if found != NULL else f"CUresult {code}"
    raise CUDAError(f"{call.decode()} failed: {name}", name)


cdef int _door_order(object producer, object consumer, object device, object ptr) except -1:
    """``order_after(producer, consumer, device, ptr)`` in C: 1 when done, 0 when the
    caller must call ``_driver_module().order_after`` (the door off or undecided, a
    case left to the Python path); CUDAError as order_after."""
    cdef int state = sv_door_state_load()
    cdef uintptr_t p, c, address = 0
    cdef int ordinal = -1
    cdef const char *call = NULL
    cdef sv_CUresult r
    if state == -1:
        return 0
    if type(producer) is not int or type(consumer) is not int:
        return 0
    try:
        p = producer
        c = consumer
    except OverflowError:  # not a handle (negative, too large): the Python path says so
        return 0
    if p == c and p > 2:
        return 1  # one stream: nothing to order, no driver loaded (as order_after)
    if p <= 2:
        # A producer's default stream is the data device's: known, or that of the
        # memory at ptr; with neither, the current context's (the Python path).
        if device is not None:
            if type(device) is not int or not 0 <= device < 64:
                return 0
            ordinal = device
        elif type(ptr) is not int or ptr == 0 or ptr < 0 or ptr >= _UINTPTR_LIMIT:
            return 0
        else:
            address = ptr
    if state != 1:
        _door_decide()
        if sv_door_state_load() != 1:
            return 0
    if p > 2:
        r = sv_door_order(p, c, &call)
    else:
        r = SV_CUDA_SUCCESS
        if ordinal < 0:
            r = sv_door_pointer_device(address, &ordinal, &call)
        if r == SV_CUDA_SUCCESS:
            r = sv_door_order_default(p, c, ordinal, &call)
    if r == SV_CUDA_SUCCESS:
        return 1
    if r == SV_DOOR_NOT_HANDLED:
        return 0
    _door_raise(r, call)
    return -1


cdef inline int _order_after(object producer, object consumer, object device=None, object ptr=0) except -1:
    """``_driver.order_after(producer, consumer, device, ptr)``, through the C door
    when it handles the call."""
    if _door_order(producer, consumer, device, ptr) == 0:
        _driver_module().order_after(producer, consumer, device, ptr)
    return 0


cdef extern from "Python.h":
    unsigned long PyThread_get_thread_ident() nogil
    object PyLong_FromVoidPtr(void *)


cdef extern from *:
    """
    /* An exact int's value as a handle (``*out``); 0, no exception left set, when it is
       negative or past 2**64.  A small int's digits read in C (no exception state saved
       around a conversion that may fail), else PyLong_AsSize_t. */
    static inline int sv_handle_value(PyObject *o, uintptr_t *out) {
        size_t v;
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
            Py_ssize_t c = PyUnstable_Long_CompactValue((PyLongObject *)o);
            if (c < 0)
                return 0;
            *out = (uintptr_t)c;
            return 1;
        }
    #elif PY_VERSION_HEX >= 0x030B0000
        {
            Py_ssize_t size = Py_SIZE(o);
            const digit *d = ((PyLongObject *)o)->ob_digit;
            if (size >= 0 && size <= 2) {
                v = size == 0 ? 0 : size == 1 ? (size_t)d[0]
                    : (size_t)d[0] | (size_t)d[1] << PyLong_SHIFT;
                *out = (uintptr_t)v;
                return 1;
            }
        }
    #endif
        v = PyLong_AsSize_t(o);
        if (v == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        *out = (uintptr_t)v;
        return 1;
    }
    """
    int sv_handle_value(object, uintptr_t *) noexcept


cdef int _door_place_context(object handle, uintptr_t *stream, void **context) except -1:
    """The context of ``_driver.check_stream(handle)``'s place, found in C: for an ordinary
    handle, from this thread's stream table (or cuStreamGetCtx); for 0 and 1, the current
    context.  1 when found (``*stream``, ``*context`` set); 0 when left to check_stream
    (the door off, handle 2, no current context, any failing call, whose error it raises).
    _handover.pxi's _stream_place builds the place, the context as an int (which
    _driver.py's calls take as they take a CUcontext)."""
    cdef int state = sv_door_state_load()
    cdef uintptr_t h
    cdef sv_CUresult r
    if state == -1 or type(handle) is not int or not sv_handle_value(handle, &h):
        return 0
    if state != 1:
        _door_decide()  # (as check_stream would: the driver loaded, cuInit called)
        if sv_door_state_load() != 1:
            return 0
    if h == 2:
        return 0
    context[0] = NULL
    if h <= 1:
        r = sv_door_current_context(context)
    else:
        r = sv_door_stream_context(h, context)
    if r != SV_CUDA_SUCCESS or context[0] == NULL:
        return 0
    stream[0] = h
    return 1


def _door_trim_pools():
    """Destroy the calling thread's free C hand-over events; how many
    (_driver.trim_event_pool adds them to its own)."""
    return sv_door_trim_pools()


def _driver_door_reset():
    """Destroy every thread's C-door events and forget its caches; the door is decided
    again by the next ordering (``_driver.use_api`` calls it before the driver changes)."""
    sv_door_reset()


def _driver_door_info():
    """For tests: the door's state (1 on, -1 off, 0 undecided), the orderings it did on
    this thread, this thread's events and every thread's live events."""
    return {
        "state": sv_door_state_load(),
        "ordered": sv_door_thread_ordered(),
        "thread_events": sv_door_thread_events(),
        "live_events": sv_door_live_events(),
        "available": bool(SV_DOOR_AVAILABLE),
    }


def _driver_door_handover_info():
    """For tests: the hand-overs the door recorded on this thread and their events, this
    thread's free C
    hand-over events, and every thread's C hand-over events (free or in flight)."""
    return {
        "handed": sv_door_thread_handed(),
        "recorded": sv_door_thread_recorded(),
        "pooled": sv_door_thread_pooled(),
        "handover_events": sv_door_handover_events(),
    }


def _thread_state_cleared():
    """Whether the calling thread state's dict was cleared: code run as its thread ends,
    seen by _driver.py's marker (_thread_state.pxi's last section) or by this thread's
    door struct, closed with that thread state."""
    return bool(_tstate_cleared() or sv_door_thread_ending())
