# What CUDA graphs own: resources whose life a graph captured with them decides.
#
# Under stream capture nothing runs: the graph runs later, maybe many times, maybe from
# another thread, and no event recorded now can say when its last replay is done.  So
# what must live as long as the graph is tied to it with a CUDA user object
# (cuUserObjectCreate, its reference moved into the graph with cuGraphRetainUserObject;
# every executable graph instantiated from it takes references of its own): the event an
# ordering into a capturing stream waits on (_driver_door.pxi's _order_into_capture), and a
# hold handed to a capturing stream (_handover.pxi's _hand_to_graphs).  The driver calls the object's
# destructor once the graph and every executable graph made from it are destroyed and
# their launches have run.
#
# Invariants:
#
# - The destructor (sv_graph_release) runs on a driver thread, or in the thread whose call
#   dropped the last reference, before that call returns (driver 580 on an H200 ran it so
#   for cuUserObjectRelease and cuGraphDestroy), maybe holding the GIL and any lock of
#   ours: it takes neither, runs no Python and makes no CUDA call.  It only pushes its node (made with the object, so nothing is allocated there)
#   on a lock-free stack (sv_graph_released: a compare-and-swap push; the drain takes the
#   whole stack with one exchange, so no node is seen twice) and adds one to
#   sv_pending_entries, which is atomic on every build for that reason: the next view
#   creation (_new_view's one load, already there) or release_pending() then drains it.
# - A node holds one strong reference to its object, taken under the GIL when it is made
#   (_graph_node) and dropped by the drain (or by _graph_node_drop when no user object
#   could be made, in which case the caller still owns what it gave).  Each node is
#   pushed once (the driver runs a destructor once) and drained once: what it carries is
#   acted on exactly once.
# - What a drained node carries: a hold's _Handover (its places that were capturing are
#   recorded then, once their capture has ended, so that the work queued on them before
#   the capture is waited for too; then it goes back to the registry with its events, or
#   is released at once when there is nothing to wait for; one that a graph refused is
#   kept until exit instead), or an ordering's event (context, event, door generation):
#   destroyed, unless the door was reset since (release_driver_resources, use_api).
# - The drain runs Python (a deleter, a producer's finalizer): never from the
#   destructor, only where _check_oldest and release_pending already run such code.
# - release_pending(wait=True) does not wait for graph-owned resources: only their
#   graphs' owner can end them.  At exit they are not released either (a graph alive at
#   exit may still be replayed by a later atexit function; the process's memory goes
#   with it); those already drained are.
#
# Proven by tests/test_gpu_graphs.py (the simulated device: capture, replays, holds
# released after the graph and its executable graphs, exactly once, threads, two devices),
# tests/test_gpu_hold_rule.py (a capture begun after the stream had work queued, a reset
# before the graph gives a hold back) and tests/test_gpu_graph_faults.py (cuUserObjectCreate and
# cuGraphRetainUserObject failing, for orderings, holds and a decorated launch).

from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc


cdef extern from *:
    """
    typedef struct sv_graph_node {
        struct sv_graph_node *next;
        PyObject *obj;  /* a strong reference, dropped by the drain under the GIL */
    } sv_graph_node;

    static sv_graph_node *sv_graph_released = NULL;
    /* Nodes made and not yet drained, by kind (for tests: resources graphs own). */
    static Py_ssize_t sv_graph_live = 0;

    #if defined(_MSC_VER)
    #include <intrin.h>
    static void sv_graph_push(sv_graph_node *node) {
        sv_graph_node *head;
        do {
            head = (sv_graph_node *)sv_graph_released;
            node->next = head;
        } while (_InterlockedCompareExchangePointer((void *volatile *)&sv_graph_released, node, head) != head);
    }
    static sv_graph_node *sv_graph_take_all(void) {
        return (sv_graph_node *)_InterlockedExchangePointer((void *volatile *)&sv_graph_released, NULL);
    }
    static int sv_graph_any(void) { return *(sv_graph_node *volatile *)&sv_graph_released != NULL; }
    #else
    static void sv_graph_push(sv_graph_node *node) {
        sv_graph_node *head = __atomic_load_n(&sv_graph_released, __ATOMIC_RELAXED);
        do {
            node->next = head;
        } while (!__atomic_compare_exchange_n(&sv_graph_released, &head, node, 1,
                                              __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    }
    static sv_graph_node *sv_graph_take_all(void) {
        return __atomic_exchange_n(&sv_graph_released, NULL, __ATOMIC_ACQUIRE);
    }
    static int sv_graph_any(void) {
        return __atomic_load_n(&sv_graph_released, __ATOMIC_RELAXED) != NULL;
    }
    #endif

    /* The user object's destructor (a CUhostFn): a driver thread, no GIL. */
    static void sv_graph_release(void *data) {
        sv_graph_push((sv_graph_node *)data);
        SV_PENDING_ADD(sv_pending_entries, 1);  /* the next view creation drains it */
    }

    static uintptr_t sv_graph_release_address(void) {
        return (uintptr_t)(void *)&sv_graph_release;
    }
    """
    ctypedef struct sv_graph_node:
        sv_graph_node *next
        PyObject *obj
    Py_ssize_t sv_graph_live
    bint sv_graph_any() noexcept nogil
    sv_graph_node *sv_graph_take_all() noexcept nogil
    uintptr_t sv_graph_release_address() noexcept nogil


def _graph_release_address():
    """The address of the user-object destructor (a CUhostFn) whose data is a node made by
    ``_graph_node``: it queues the node's object for the next drain."""
    return sv_graph_release_address()


def _graph_node(obj):
    """A node owning a reference to ``obj``, as an int (the user object's data); MemoryError
    if none can be made.  The destructor queues it; until a user object holds it, the
    caller drops it with ``_graph_node_drop``."""
    cdef sv_graph_node *node = <sv_graph_node *>PyMem_RawMalloc(sizeof(sv_graph_node))
    if node == NULL:
        raise MemoryError("stridedview: no memory for a graph's user object")
    Py_INCREF(obj)
    node.obj = <PyObject *>obj
    node.next = NULL
    SV_PENDING_ADD(sv_graph_live, 1)
    return PyLong_FromVoidPtr(node)


def _graph_node_drop(address):
    """Free a node no user object holds (its creation failed); its reference dropped."""
    cdef sv_graph_node *node = <sv_graph_node *>PyLong_AsVoidPtr(address)
    SV_PENDING_ADD(sv_graph_live, -1)
    Py_DECREF_ptr(node.obj)
    PyMem_RawFree(node)


cdef Py_ssize_t _drain_graphs() noexcept:
    """Act on every object a destroyed graph gave back (a hold: to the registry or released;
    an event: destroyed); how many holds were released.  Never raises.  Where no CUDA call
    may run (a host function: sv_door_may_release), nothing is drained: the next check
    does it."""
    cdef sv_graph_node *node
    cdef sv_graph_node *next_node
    cdef PyObject *obj
    cdef Py_ssize_t released = 0
    if not sv_door_may_release():
        return 0
    node = sv_graph_take_all()
    while node != NULL:
        next_node = node.next
        obj = node.obj
        PyMem_RawFree(node)
        SV_PENDING_ADD(sv_graph_live, -1)
        SV_PENDING_ADD(sv_pending_entries, -1)  # the destructor's count
        released += _graph_gave_back(<object>obj)
        Py_DECREF_ptr(obj)
        node = next_node
    return released


cdef Py_ssize_t _graph_gave_back(object obj) noexcept:
    """What a node carried, now that its graphs are gone: a hold's _Handover (_handover.pxi's
    _hold_given_back: its places that were capturing recorded, then listed or released), or
    an ordering's event ``(context, event, door generation)`` (destroyed, unless the door
    was reset since: its driver state was let go of)."""
    if type(obj) is _Handover:
        return _hold_given_back(<_Handover>obj)
    context, event, generation = obj
    sv_door_destroy_graph_event(PyLong_AsVoidPtr(context), PyLong_AsVoidPtr(event), generation)
    return 0


def _graph_owned():
    """How many resources (holds' hand-overs and orderings' events) graphs own now, given
    back or not yet drained (for tests)."""
    return SV_PENDING_LOAD(sv_graph_live)
