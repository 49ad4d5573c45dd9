# Interned ints and tuples: a launch loop views the same buffers, of the same
# layouts, again and again, and an int or tuple found here costs a compare
# instead of an allocation and a deallocation.
#
# Ints and tuples are immutable, so one object may be shared by any number of
# views, in any thread.  The caches themselves are C arrays of strong references
# in the fast paths' state (_thread_state.pxi): a lookup reads a slot and a
# replacement drops the reference it held, which is safe only while one thread
# at a time runs them: the GIL, or a free-threaded build's per-thread state
# (each thread interns its own objects, which it also owns for the interpreter's
# biased reference counting: its references to them are cheap local ones).
# Where the state is compiled out (-DSV_NO_GIL_FAST_PATHS), or a thread has
# none (_thread_state() NULL: a thread ending), every address and layout gets a
# new object, exactly as a miss does here.  The last dtype's item size is kept
# there too (_store_c_layout), the dtype and its size read and written together.
#
# Proven equal to the general path by tests/test_intern_caches.py (every slot
# and victim choice against freshly made objects).

from cpython.long cimport PyLong_FromSize_t


# Address ints, interned like the shape tuples: a launch loop views the same
# buffers again and again, and an int found here spares an allocation and a
# deallocation per view.  Two-way set-associative: each address may sit in
# either slot of its set, and a miss replaces the one used less recently, so
# the few buffers of a launch never evict each other (direct-mapped, three
# buffers shared a slot in one process of ten, and two of them missed on every
# launch).  Ints are immutable.
# Sixteen sets of two (SV_ADDRESS_CACHE_*); set s: slots 2s and 2s + 1.  Strong
# references, owned by the cache (NULL: empty slot); C arrays rather than lists,
# so that a hit is two loads and a compare.  Per set, the way (0 or 1) a miss
# replaces: the one not used last.
cdef enum:
    _ADDRESS_CACHE_SET_BITS = SV_ADDRESS_CACHE_SET_BITS


cdef inline object _address_int(uintptr_t address):
    """``address`` as a Python int, from the intern cache when it holds it."""
    # Fibonacci hashing: allocators align buffers to 64 bytes and more, so the
    # low bits alone would crowd a few sets.
    cdef Py_ssize_t set_index = <Py_ssize_t>(
        (<uint64_t>address * <uint64_t>0x9E3779B97F4A7C15) >> (64 - _ADDRESS_CACHE_SET_BITS)
    )
    cdef Py_ssize_t slot = 2 * set_index
    cdef sv_thread_state *st = _thread_state()
    if st == NULL:
        return PyLong_FromSize_t(address)
    cdef PyObject *cached = st.cached_address_ints[slot]
    if cached != NULL and st.cached_addresses[slot] == address:
        st.address_victims[set_index] = 1
        return <object>cached
    cached = st.cached_address_ints[slot + 1]
    if cached != NULL and st.cached_addresses[slot + 1] == address:
        st.address_victims[set_index] = 0
        return <object>cached
    return _intern_address(st, address, set_index)


cdef object _intern_address(sv_thread_state *st, uintptr_t address, Py_ssize_t set_index):
    cdef object result = address  # typed: an inferred C integer would be cached as a pointer
    cdef Py_ssize_t way = st.address_victims[set_index]
    cdef Py_ssize_t slot = 2 * set_index + way
    cdef PyObject *old = st.cached_address_ints[slot]
    Py_INCREF(result)
    st.cached_address_ints[slot] = <PyObject *>result
    st.cached_addresses[slot] = address
    st.address_victims[set_index] = 1 - way
    Py_XDECREF(old)  # after the slot is consistent: freeing an int runs no code, but still
    return result



# Shape and stride tuples, interned: a launch loop views arrays of the same
# layout again and again, and a tuple found here costs a compare instead of an
# allocation and a deallocation.  Two-way set-associative by a hash of the
# values (a miss replaces the slot of the set used less recently), so that the
# few layouts of one launch do not evict each other; tuples are immutable, so
# sharing one between views is safe.
# Thirty-two sets of two (SV_TUPLE_CACHE_*; set s: slots 2s and 2s + 1) of tuples
# of at most 8 values: per slot its values, its ndim and the tuple (a strong
# reference, NULL: empty); per set, the way (0 or 1) a miss replaces.
cdef enum:
    _TUPLE_CACHE_SETS = SV_TUPLE_CACHE_SETS
    _TUPLE_CACHE_MAX_NDIM = SV_TUPLE_CACHE_MAX_NDIM


cdef inline bint _tuple_slot_holds(
    sv_thread_state *st, Py_ssize_t slot, const int64_t *values, int32_t ndim
) noexcept:
    """Whether cache slot ``slot`` holds the tuple of ``values[:ndim]``."""
    cdef int32_t i
    if st.cached_ndim[slot] != ndim:
        return False
    # A few values: compared in place, cheaper than a call to memcmp.
    for i in range(ndim):
        if st.cached_values[slot][i] != values[i]:
            return False
    return True


cdef inline tuple _int64_tuple(const int64_t *values, int32_t ndim):
    """``tuple(values[:ndim])`` of Python ints, from the intern cache when it holds it."""
    cdef int32_t i
    cdef uint64_t mix = <uint64_t>ndim
    cdef Py_ssize_t set_index, slot
    if ndim == 0:
        return ()
    cdef sv_thread_state *st = _thread_state()
    if ndim > _TUPLE_CACHE_MAX_NDIM or st == NULL:
        return _new_int64_tuple(NULL, values, ndim, -1)
    for i in range(ndim):
        mix = (mix ^ <uint64_t>values[i]) * <uint64_t>0x100000001b3
    set_index = <Py_ssize_t>((mix ^ (mix >> 29)) % <uint64_t>_TUPLE_CACHE_SETS)
    slot = 2 * set_index
    if _tuple_slot_holds(st, slot, values, ndim):
        st.tuple_victims[set_index] = 1
        return <tuple>st.cached_tuples[slot]
    if _tuple_slot_holds(st, slot + 1, values, ndim):
        st.tuple_victims[set_index] = 0
        return <tuple>st.cached_tuples[slot + 1]
    slot += st.tuple_victims[set_index]
    st.tuple_victims[set_index] ^= 1
    return _new_int64_tuple(st, values, ndim, slot)


cdef tuple _new_int64_tuple(
    sv_thread_state *st, const int64_t *values, int32_t ndim, Py_ssize_t slot
):
    """A new tuple of ``values[:ndim]``, kept in ``st``'s cache slot ``slot`` (-1: not kept)."""
    cdef int32_t i
    cdef object item  # a Python int: PyTuple_SET_ITEM steals the reference we add
    cdef tuple result = PyTuple_New(ndim)
    cdef PyObject *old
    for i in range(ndim):
        item = values[i]
        Py_INCREF(item)
        PyTuple_SET_ITEM(result, i, item)
    if slot >= 0:
        old = st.cached_tuples[slot]
        Py_INCREF(result)
        st.cached_tuples[slot] = <PyObject *>result
        memcpy(st.cached_values[slot], values, ndim * sizeof(int64_t))
        st.cached_ndim[slot] = ndim
        Py_XDECREF(old)
    return result
