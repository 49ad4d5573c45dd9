# The state of the fast paths that keep objects between calls: interned ints and
# tuples (_intern.pxi), the last item size (_view.pyx), the per-type cache slots
# (_producer_types.pxi), spare proxies (_launcher.pxi) and, on free-threaded
# builds, the view freelist (_view_lifecycle.pxi).  All of it is one C struct,
# sv_thread_state, which each fast path reaches through _thread_state() (or
# _thread_state_if_any()) and which holds strong references of its own.
#
# Where it lives, and the invariant that makes it safe:
#
# - GIL builds: one static struct for the process (what were module globals).
#   Only the thread holding the GIL reads or changes it, and no Python code runs
#   between a check of a slot and the use that relies on it.
# - Free-threaded builds (Py_GIL_DISABLED): one struct per Python thread state,
#   as CPython keeps its own freelists in the thread state.  It is made on the
#   thread's first view, registered in the thread state's dict
#   (PyThreadState_GetDict) as a capsule, and released when that dict is
#   cleared: PyThreadState_Clear, which runs as the thread ends (or, at
#   interpreter exit, for threads still alive).  A thread-local C variable
#   caches (thread state, its unique id, the struct); _thread_state() uses the
#   cache only while the current thread state is the one it names (pointer and
#   id: a freed thread state's address may be reused, its id never is within an
#   interpreter, and Cython refuses to import the module into a second one).  A
#   thread state is attached to one OS thread at a time, so no two threads ever
#   reach one struct at once: no lock, no atomic.  Once a thread state's struct
#   is released, none is made again for it (its dict is gone: a new one would
#   never be cleared); views made then, by code run while the thread ends, take
#   the general path.  Nothing here is held across a call into Python code by a
#   caller: each fast path asks for the struct where it uses it.
# - -DSV_NO_GIL_FAST_PATHS (either build): _thread_state() is the constant NULL,
#   every fast path's test of it is false at compile time, and only the general
#   path is compiled.
#
# "Held by nobody else" (spares and kept views, _launcher.pxi) is _is_unique():
# a reference count of 1 with the GIL.  Without it a count of 1 proves nothing
# (another thread may be about to take a reference), so there it is the test of
# CPython 3.14's PyUnstable_Object_IsUniquelyReferenced: the object is owned by
# this thread (biased reference counting: only the owner changes the local
# count), its local count is 1, and its shared count is 0, flags included (a
# "maybe weakref" flag lets another thread revive a reference with _Py_TryIncref;
# a queued or merged object has another owner or none).  Another thread can then
# reach the object only through the collector (gc.get_objects(), which stops
# the world: never between the test and the use, where no Python code runs).  The
# shared count is loaded with acquire ordering, so that whatever a thread did
# with the object before dropping its reference happens before our reuse.
#
# Proven equal to the general path by the tests of each fast path (run on both
# kinds of build), tests/test_free_threading.py (threads started and ended in a
# loop: each one's struct made and released, counted by _live_thread_states())
# and the -DSV_NO_GIL_FAST_PATHS build's suite.

cdef extern from *:
    """
    #if defined(SV_NO_GIL_FAST_PATHS)
    #define SV_FAST_PATHS 0
    #else
    #define SV_FAST_PATHS 1
    #endif
    #if SV_FAST_PATHS && defined(Py_GIL_DISABLED)
    #define SV_PER_THREAD_STATE 1
    #else
    #define SV_PER_THREAD_STATE 0
    #endif

    #define SV_ADDRESS_CACHE_SET_BITS 4
    #define SV_ADDRESS_CACHE_SETS (1 << SV_ADDRESS_CACHE_SET_BITS)
    #define SV_ADDRESS_CACHE_SLOTS (2 * SV_ADDRESS_CACHE_SETS)
    #define SV_TUPLE_CACHE_SET_BITS 5
    #define SV_TUPLE_CACHE_SETS (1 << SV_TUPLE_CACHE_SET_BITS)
    #define SV_TUPLE_CACHE_SLOTS (2 * SV_TUPLE_CACHE_SETS)
    #define SV_TUPLE_CACHE_MAX_NDIM 8
    #define SV_TYPE_SLOTS 64
    #define SV_SPARE_PROXY_SLOTS 16
    #define SV_FREE_VIEW_SLOTS 16

    typedef struct sv_thread_state {
        /* _intern.pxi: interned address ints and shape/stride tuples (strong
           references, NULL: empty), and the last dtype's item size and DLPack type. */
        uintptr_t cached_addresses[SV_ADDRESS_CACHE_SLOTS];
        PyObject *cached_address_ints[SV_ADDRESS_CACHE_SLOTS];
        uint8_t address_victims[SV_ADDRESS_CACHE_SETS];
        uint8_t tuple_victims[SV_TUPLE_CACHE_SETS];
        int32_t cached_ndim[SV_TUPLE_CACHE_SLOTS];
        PyObject *cached_tuples[SV_TUPLE_CACHE_SLOTS];
        int64_t cached_values[SV_TUPLE_CACHE_SLOTS][SV_TUPLE_CACHE_MAX_NDIM];
        PyObject *last_itemsize_dtype;
        int64_t last_itemsize;
        uint32_t last_dl_dtype;  /* its DLPack type, packed as _dl_dtype_of packs it */
        /* _producer_types.pxi: the last description and the direct-mapped
           slots (strong references to _ProducerType, NULL: empty). */
        PyObject *last_info;
        PyObject *type_slots[SV_TYPE_SLOTS];
        /* _launcher.pxi: emptied proxies for later launches (strong). */
        PyObject *spare_proxies[SV_SPARE_PROXY_SLOTS];
        Py_ssize_t spare_proxy_count;
        /* _view_lifecycle.pxi, free-threaded builds: deallocated views, their
           memory kept for _new_view (GIL builds use Cython's own freelist). */
        PyObject *free_views[SV_FREE_VIEW_SLOTS];
        Py_ssize_t free_view_count;
        /* The thread state this struct belongs to (free-threaded builds). */
        uint64_t tstate_id;
    } sv_thread_state;

    /* Whether `o` is held by nobody but the caller's one reference (see above). */
    #ifdef Py_GIL_DISABLED
    static CYTHON_INLINE int sv_is_unique(PyObject *o) {
        return _Py_IsOwnedByCurrentThread(o)
            && _Py_atomic_load_uint32_relaxed(&o->ob_ref_local) == 1
            && _Py_atomic_load_ssize_acquire(&o->ob_ref_shared) == 0;
    }
    /* Whether this thread owns `o` (its local count is this thread's alone). */
    #define sv_owned_here(o) _Py_IsOwnedByCurrentThread((PyObject *)(o))
    #else
    #define sv_is_unique(o) (Py_REFCNT(o) == 1)
    #define sv_owned_here(o) 1
    #endif

    /* The key of the struct's capsule in a thread state's dict (set at import). */
    static PyObject *sv_thread_state_key = NULL;

    #if SV_PER_THREAD_STATE
    static void sv_thread_state_release(sv_thread_state *st) {
        /* Everything the struct holds, dropped.  Nothing reaches `st` any more (the
           caller detached it), so code run by a release finds no state or another. */
        Py_ssize_t i;
        for (i = 0; i < st->free_view_count; i++)
            PyObject_GC_Del(st->free_views[i]);
        st->free_view_count = 0;
        for (i = 0; i < SV_ADDRESS_CACHE_SLOTS; i++) Py_CLEAR(st->cached_address_ints[i]);
        for (i = 0; i < SV_TUPLE_CACHE_SLOTS; i++) Py_CLEAR(st->cached_tuples[i]);
        Py_CLEAR(st->last_itemsize_dtype);
        Py_CLEAR(st->last_info);
        for (i = 0; i < SV_TYPE_SLOTS; i++) Py_CLEAR(st->type_slots[i]);
        while (st->spare_proxy_count > 0) {
            PyObject *proxy = st->spare_proxies[--st->spare_proxy_count];
            Py_DECREF(proxy);
        }
    }
    #endif

    #if !SV_FAST_PATHS
    #define sv_thread_state_get() ((sv_thread_state *)NULL)
    #define sv_thread_state_if_any() ((sv_thread_state *)NULL)
    #define sv_live_thread_states() ((Py_ssize_t)0)
    #elif !SV_PER_THREAD_STATE
    static sv_thread_state sv_global_state;
    #define sv_thread_state_get() (&sv_global_state)
    #define sv_thread_state_if_any() (&sv_global_state)
    #define sv_live_thread_states() ((Py_ssize_t)1)
    #else
    #if defined(_MSC_VER)
    #define SV_THREAD_LOCAL __declspec(thread)
    #elif defined(__GNUC__) || defined(__clang__)
    #define SV_THREAD_LOCAL __thread
    #else
    #define SV_THREAD_LOCAL _Thread_local
    #endif
    #if defined(__GNUC__) || defined(__clang__)
    #define SV_LIKELY(x) __builtin_expect(!!(x), 1)
    #else
    #define SV_LIKELY(x) (x)
    #endif
    /* This OS thread's cache: the struct of the thread state it last used, and
       the id of the last thread state whose struct was released on it. */
    typedef struct {
        PyThreadState *tstate;
        uint64_t tstate_id;
        sv_thread_state *state;
        uint64_t released_id;
    } sv_thread_cache;
    static SV_THREAD_LOCAL sv_thread_cache sv_tls;
    static const char sv_thread_state_name[] = "stridedview._view.thread_state";
    static Py_ssize_t sv_live_states = 0;  /* structs made and not yet released */
    #define sv_live_thread_states() _Py_atomic_load_ssize_relaxed(&sv_live_states)

    static void sv_thread_state_destroy(PyObject *capsule) {
        /* The capsule's destructor: its thread state's dict is being cleared
           (PyThreadState_Clear), on that thread or, at exit, on another. */
        sv_thread_state *st = (sv_thread_state *)PyCapsule_GetPointer(
            capsule, sv_thread_state_name);
        PyThreadState *current = PyThreadState_GetUnchecked();
        if (st == NULL) {
            PyErr_Clear();
            return;
        }
        if (sv_tls.state == st) {
            sv_tls.tstate = NULL;
            sv_tls.tstate_id = 0;
            sv_tls.state = NULL;
        }
        if (current != NULL && current->id == st->tstate_id)
            sv_tls.released_id = st->tstate_id;
        sv_thread_state_release(st);
        PyMem_RawFree(st);
        _Py_atomic_add_ssize(&sv_live_states, -1);
    }

    static sv_thread_state *sv_thread_state_find(PyThreadState *ts) {
        /* The struct of thread state `ts` (the current one), from its dict or made
           and registered there; NULL where none can be had (no error is left). */
        PyObject *saved, *dict, *capsule = NULL;
        sv_thread_state *st = NULL;
        if (ts == NULL || sv_thread_state_key == NULL || sv_tls.released_id == ts->id)
            return NULL;
        saved = PyErr_GetRaisedException();
        dict = PyThreadState_GetDict();  /* borrowed: this thread state's own */
        if (dict == NULL || PyDict_GetItemRef(dict, sv_thread_state_key, &capsule) < 0)
            goto done;
        if (capsule != NULL) {  /* this thread state's, met again (thread states swapped) */
            st = (sv_thread_state *)PyCapsule_GetPointer(capsule, sv_thread_state_name);
            Py_DECREF(capsule);
            goto done;
        }
        st = (sv_thread_state *)PyMem_RawCalloc(1, sizeof(sv_thread_state));
        if (st == NULL)
            goto done;
        st->tstate_id = ts->id;
        capsule = PyCapsule_New(st, sv_thread_state_name, sv_thread_state_destroy);
        if (capsule == NULL) {
            PyMem_RawFree(st);
            st = NULL;
            goto done;
        }
        _Py_atomic_add_ssize(&sv_live_states, 1);
        if (PyDict_SetItem(dict, sv_thread_state_key, capsule) < 0)
            st = NULL;  /* released with the capsule */
        Py_DECREF(capsule);
    done:
        if (st != NULL) {
            sv_tls.tstate = ts;
            sv_tls.tstate_id = ts->id;
            sv_tls.state = st;
        }
        PyErr_Clear();
        PyErr_SetRaisedException(saved);
        return st;
    }

    static CYTHON_INLINE sv_thread_state *sv_thread_state_get(void) {
        PyThreadState *ts = PyThreadState_GetUnchecked();
        if (SV_LIKELY(ts == sv_tls.tstate && ts != NULL && ts->id == sv_tls.tstate_id))
            return sv_tls.state;
        return sv_thread_state_find(ts);
    }

    /* The struct if this thread state has one already; never makes one (what a
       deallocation asks: it may run while the thread state is being cleared). */
    static CYTHON_INLINE sv_thread_state *sv_thread_state_if_any(void) {
        PyThreadState *ts = PyThreadState_GetUnchecked();
        if (SV_LIKELY(ts == sv_tls.tstate && ts != NULL && ts->id == sv_tls.tstate_id))
            return sv_tls.state;
        return NULL;
    }
    #endif
    """
    bint SV_FAST_PATHS
    bint SV_PER_THREAD_STATE
    enum:
        SV_ADDRESS_CACHE_SET_BITS
        SV_ADDRESS_CACHE_SETS
        SV_ADDRESS_CACHE_SLOTS
        SV_TUPLE_CACHE_SET_BITS
        SV_TUPLE_CACHE_SETS
        SV_TUPLE_CACHE_SLOTS
        SV_TUPLE_CACHE_MAX_NDIM
        SV_TYPE_SLOTS
        SV_SPARE_PROXY_SLOTS
        SV_FREE_VIEW_SLOTS
    ctypedef struct sv_thread_state:
        uintptr_t cached_addresses[SV_ADDRESS_CACHE_SLOTS]
        PyObject *cached_address_ints[SV_ADDRESS_CACHE_SLOTS]
        uint8_t address_victims[SV_ADDRESS_CACHE_SETS]
        uint8_t tuple_victims[SV_TUPLE_CACHE_SETS]
        int32_t cached_ndim[SV_TUPLE_CACHE_SLOTS]
        PyObject *cached_tuples[SV_TUPLE_CACHE_SLOTS]
        int64_t cached_values[SV_TUPLE_CACHE_SLOTS][SV_TUPLE_CACHE_MAX_NDIM]
        PyObject *last_itemsize_dtype
        int64_t last_itemsize
        uint32_t last_dl_dtype
        PyObject *last_info
        PyObject *type_slots[SV_TYPE_SLOTS]
        PyObject *spare_proxies[SV_SPARE_PROXY_SLOTS]
        Py_ssize_t spare_proxy_count
        PyObject *free_views[SV_FREE_VIEW_SLOTS]
        Py_ssize_t free_view_count
    sv_thread_state *_thread_state "sv_thread_state_get"() noexcept
    sv_thread_state *_thread_state_if_any "sv_thread_state_if_any"() noexcept
    bint _is_unique "sv_is_unique"(PyObject *) noexcept
    bint _owned_here "sv_owned_here"(PyObject *) noexcept
    Py_ssize_t _live_thread_state_count "sv_live_thread_states"() noexcept
    PyObject *_thread_state_key "sv_thread_state_key"


# Objects looked up or built on first use and then only read (the dtype tables of
# _export.pxi and _view.pyx, numpy.ndarray in _from_numpy.pxi, torch.Tensor and its
# is_neg in _torch_bits.pxi): a plain global assignment would let two threads that
# both made one each replace the other's and drop it while a third still reads it.
# The slot is a C pointer, NULL until published; the first object published wins,
# for good (its reference is the slot's, never dropped), and a loser's is dropped
# unseen.  Without the GIL the publication is a compare-and-exchange with release
# ordering and the read an acquire load: a reader sees the object complete.  A C
# int set after such objects (numpy's export kind) is stored with release and
# loaded with acquire ordering, so a reader that sees it set sees them too.
cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #define sv_load_published(slot) ((PyObject *)_Py_atomic_load_ptr_acquire(slot))
    #define sv_load_int_acquire(p) _Py_atomic_load_int_acquire(p)
    #define sv_store_int_release(p, v) _Py_atomic_store_int_release((p), (v))
    #else
    #define sv_load_published(slot) (*(slot))
    #define sv_load_int_acquire(p) (*(p))
    #define sv_store_int_release(p, v) (*(p) = (v))
    #endif
    /* Publish `table` in *slot unless a table is there: the one published, borrowed. */
    static PyObject *sv_publish_once(PyObject **slot, PyObject *table) {
        PyObject *expected = NULL;
        Py_INCREF(table);
    #ifdef Py_GIL_DISABLED
        if (_Py_atomic_compare_exchange_ptr(slot, &expected, table))
            return table;
    #else
        if (*slot == NULL) {
            *slot = table;
            return table;
        }
        expected = *slot;
    #endif
        Py_DECREF(table);
        return expected;
    }
    """
    PyObject *_load_published "sv_load_published"(PyObject **) noexcept
    PyObject *_publish_once "sv_publish_once"(PyObject **, object) noexcept
    int _load_int_acquire "sv_load_int_acquire"(int *) noexcept
    void _store_int_release "sv_store_int_release"(int *, int) noexcept


if SV_PER_THREAD_STATE:
    _thread_state_key_object = "stridedview._view.thread_state"  # kept: the key stays alive
    _thread_state_key = <PyObject *>_thread_state_key_object


def _live_thread_states():
    """How many per-thread states exist (free-threaded builds; 1 on GIL builds with the
    fast paths, 0 without them): for the tests of their creation and release."""
    return _live_thread_state_count()
