# Interned ints and tuples: a launch loop views the same buffers, of the same
# layouts, again and again, and an int or tuple found here costs a compare
# instead of an allocation and a deallocation.
#
# Ints and tuples are immutable, so one object may be shared by any number of
# views.  The caches themselves are module-global C arrays of strong
# references: a lookup reads a slot and a replacement drops the reference it
# held, which is safe only while one thread at a time runs them (the GIL).  In a
# free-threaded build another thread could drop the object between the read and
# the caller's new reference, so the caches are compiled out there
# (SV_GIL_FAST_PATHS is 0): every address and layout gets a new object, exactly
# as a miss does here.
#
# Proven equal to the general path by tests/test_intern_caches.py (every slot
# and victim choice against freshly made objects).

from cpython.long cimport PyLong_FromSize_t

cdef tuple _last_itemsize = (None, 0, 0)


# Address ints, interned like the shape tuples: a launch loop views the same
# buffers again and again, and an int found here spares an allocation and a
# deallocation per view.  Two-way set-associative: each address may sit in
# either slot of its set, and a miss replaces the one used less recently, so
# the few buffers of a launch never evict each other (direct-mapped, three
# buffers shared a slot in one process of ten, and two of them missed on every
# launch).  Ints are immutable.
cdef enum:
    _ADDRESS_CACHE_SET_BITS = 4
    _ADDRESS_CACHE_SETS = 1 << _ADDRESS_CACHE_SET_BITS
    _ADDRESS_CACHE_SLOTS = 2 * _ADDRESS_CACHE_SETS  # set s: slots 2s and 2s + 1

cdef uintptr_t _cached_addresses[_ADDRESS_CACHE_SLOTS]
# Strong references, owned by the cache (NULL: empty slot); C arrays rather than
# lists, so that a hit is two loads and a compare.
cdef PyObject *_cached_address_ints[_ADDRESS_CACHE_SLOTS]
# Per set, the way (0 or 1) a miss replaces: the one not used last.
cdef uint8_t _address_victims[_ADDRESS_CACHE_SETS]


cdef inline object _address_int(uintptr_t address):
    """``address`` as a Python int, from the intern cache when it holds it."""
    # Fibonacci hashing: allocators align buffers to 64 bytes and more, so the
    # low bits alone would crowd a few sets.
    cdef Py_ssize_t set_index = <Py_ssize_t>(
        (<uint64_t>address * <uint64_t>0x9E3779B97F4A7C15) >> (64 - _ADDRESS_CACHE_SET_BITS)
    )
    cdef Py_ssize_t slot = 2 * set_index
    if not SV_GIL_FAST_PATHS:
        return PyLong_FromSize_t(address)
    cdef PyObject *cached = _cached_address_ints[slot]
    if cached != NULL and _cached_addresses[slot] == address:
        _address_victims[set_index] = 1
        return <object>cached
    cached = _cached_address_ints[slot + 1]
    if cached != NULL and _cached_addresses[slot + 1] == address:
        _address_victims[set_index] = 0
        return <object>cached
    return _intern_address(address, set_index)


cdef object _intern_address(uintptr_t address, Py_ssize_t set_index):
    cdef object result = address  # typed: an inferred C integer would be cached as a pointer
    cdef Py_ssize_t way = _address_victims[set_index]
    cdef Py_ssize_t slot = 2 * set_index + way
    Py_INCREF(result)
    Py_XDECREF(_cached_address_ints[slot])
    _cached_address_ints[slot] = <PyObject *>result
    _cached_addresses[slot] = address
    _address_victims[set_index] = 1 - way
    return result



# Shape and stride tuples, interned: a launch loop views arrays of the same
# layout again and again, and a tuple found here costs a compare instead of an
# allocation and a deallocation.  Two-way set-associative by a hash of the
# values (a miss replaces the slot of the set used less recently), so that the
# few layouts of one launch do not evict each other; tuples are immutable, so
# sharing one between views is safe.
cdef enum:
    _TUPLE_CACHE_SET_BITS = 5
    _TUPLE_CACHE_SETS = 1 << _TUPLE_CACHE_SET_BITS
    _TUPLE_CACHE_SLOTS = 2 * _TUPLE_CACHE_SETS  # set s: slots 2s and 2s + 1
    _TUPLE_CACHE_MAX_NDIM = 8

cdef int64_t _cached_values[_TUPLE_CACHE_SLOTS][_TUPLE_CACHE_MAX_NDIM]
cdef int32_t _cached_ndim[_TUPLE_CACHE_SLOTS]
cdef PyObject *_cached_tuples[_TUPLE_CACHE_SLOTS]  # strong references (NULL: empty)
# Per set, the way (0 or 1) a miss replaces: the one not used last.
cdef uint8_t _tuple_victims[_TUPLE_CACHE_SETS]


cdef inline bint _tuple_slot_holds(Py_ssize_t slot, const int64_t *values, int32_t ndim) noexcept:
    """Whether cache slot ``slot`` holds the tuple of ``values[:ndim]``."""
    cdef int32_t i
    if _cached_ndim[slot] != ndim:
        return False
    # A few values: compared in place, cheaper than a call to memcmp.
    for i in range(ndim):
        if _cached_values[slot][i] != values[i]:
            return False
    return True


cdef inline tuple _int64_tuple(const int64_t *values, int32_t ndim):
    """``tuple(values[:ndim])`` of Python ints, from the intern cache when it holds it."""
    cdef int32_t i
    cdef uint64_t mix = <uint64_t>ndim
    cdef Py_ssize_t set_index, slot
    if ndim == 0:
        return ()
    if ndim > _TUPLE_CACHE_MAX_NDIM or not SV_GIL_FAST_PATHS:
        return _new_int64_tuple(values, ndim, -1)
    for i in range(ndim):
        mix = (mix ^ <uint64_t>values[i]) * <uint64_t>0x100000001b3
    set_index = <Py_ssize_t>((mix ^ (mix >> 29)) % <uint64_t>_TUPLE_CACHE_SETS)
    slot = 2 * set_index
    if _tuple_slot_holds(slot, values, ndim):
        _tuple_victims[set_index] = 1
        return <tuple>_cached_tuples[slot]
    if _tuple_slot_holds(slot + 1, values, ndim):
        _tuple_victims[set_index] = 0
        return <tuple>_cached_tuples[slot + 1]
    slot += _tuple_victims[set_index]
    _tuple_victims[set_index] ^= 1
    return _new_int64_tuple(values, ndim, slot)


cdef tuple _new_int64_tuple(const int64_t *values, int32_t ndim, Py_ssize_t slot):
    """A new tuple of ``values[:ndim]``, kept in cache slot ``slot`` (-1: not kept)."""
    cdef int32_t i
    cdef object item  # a Python int: PyTuple_SET_ITEM steals the reference we add
    cdef tuple result = PyTuple_New(ndim)
    for i in range(ndim):
        item = values[i]
        Py_INCREF(item)
        PyTuple_SET_ITEM(result, i, item)
    if slot >= 0:
        Py_INCREF(result)
        Py_XDECREF(_cached_tuples[slot])
        _cached_tuples[slot] = <PyObject *>result
        memcpy(_cached_values[slot], values, ndim * sizeof(int64_t))
        _cached_ndim[slot] = ndim
    return result
