"""The interned address ints and shape/stride tuples: two-way set-associative caches.

A view's ``ptr`` int and its shape and strides tuples come from small caches, so that
a launch loop viewing the same buffers again makes no new objects.  Each key may sit in
either slot of its set, and a miss replaces the slot used less recently: the buffers and
layouts of one launch never evict each other, whatever their addresses hash to.  A hit
is visible as identity (the same int or tuple object as the previous view's).

The caches are the process's on GIL builds and each thread's on free-threaded ones
(these tests view from one thread, so both intern alike).  Where they are compiled out
(a build with -DSV_NO_GIL_FAST_PATHS: ``stridedview._view.fast_paths`` is False), the
same calls must give equal values in new objects every time, as a miss does:
``expect_interned`` asserts whichever the build promises.
"""

from __future__ import annotations

import numpy as np

from stridedview import StridedMemoryView
from stridedview._view import fast_paths

MASK64 = (1 << 64) - 1


def expect_interned(new, cached):
    """``new`` is the interned ``cached`` object where the caches exist; else an equal new one."""
    assert new == cached
    if fast_paths:
        assert new is cached
    else:
        assert new is not cached


def expect_not_interned(new, evicted):
    """A view after an eviction (or in a build without caches) gets an equal new object."""
    assert new == evicted and new is not evicted


def address_set(address):
    """The address cache's set for ``address`` (16 sets, Fibonacci-hashed)."""
    return ((address * 0x9E3779B97F4A7C15) & MASK64) >> 60


def tuple_hash(values):
    """The tuple cache's hash of ``values``: its set is this modulo 32."""
    mix = len(values)
    for value in values:
        mix = ((mix ^ (value & MASK64)) * 0x100000001B3) & MASK64
    return mix ^ (mix >> 29)


def buffers_sharing_a_set(count):
    """``count`` numpy arrays whose data addresses fall into one set of the address cache."""
    by_set = {}
    kept = []
    while True:
        array = np.zeros(64, dtype=np.uint8)
        kept.append(array)
        group = by_set.setdefault(address_set(array.ctypes.data), [])
        group.append(array)
        if len(group) == count:
            return group


def lengths_sharing_a_set(count):
    """``count`` 1-D lengths whose shape tuples fall into one set of the tuple cache."""
    # Grouped by the hash modulo 64: one set of this cache, and one slot of a
    # direct-mapped cache of 64 (which such layouts would thrash).
    by_set = {}
    strides_set = tuple_hash((1,)) % 32  # every such array's strides tuple, (1,)
    for length in range(1000, 100000):
        if tuple_hash((length,)) % 32 == strides_set:
            continue
        group = by_set.setdefault(tuple_hash((length,)) % 64, [])
        group.append(length)
        if len(group) == count:
            return group
    raise AssertionError("no lengths share a set")


def test_two_buffers_of_one_set_stay_interned_together():
    """Views of two buffers whose addresses share a set keep getting their own interned ints."""
    first, second = buffers_sharing_a_set(2)
    ints = [StridedMemoryView(first, -1).ptr, StridedMemoryView(second, -1).ptr]
    for _ in range(3):
        expect_interned(StridedMemoryView(first, -1).ptr, ints[0])
        expect_interned(StridedMemoryView(second, -1).ptr, ints[1])


def test_third_buffer_of_a_set_replaces_the_one_used_least_recently():
    """A third buffer in a full set evicts the buffer viewed longest ago, not the last one."""
    first, second, third = buffers_sharing_a_set(3)
    first_int = StridedMemoryView(first, -1).ptr
    second_int = StridedMemoryView(second, -1).ptr
    expect_interned(StridedMemoryView(first, -1).ptr, first_int)  # second is now the older
    StridedMemoryView(third, -1)
    expect_interned(StridedMemoryView(first, -1).ptr, first_int)
    expect_not_interned(StridedMemoryView(second, -1).ptr, second_int)


def test_two_shapes_of_one_set_stay_interned_together():
    """Views of two layouts whose shape tuples share a set keep getting their own interned tuples."""
    first, second = (np.zeros(n, dtype=np.uint8) for n in lengths_sharing_a_set(2))
    shapes = [StridedMemoryView(first, -1).shape, StridedMemoryView(second, -1).shape]
    for _ in range(3):
        expect_interned(StridedMemoryView(first, -1).shape, shapes[0])
        expect_interned(StridedMemoryView(second, -1).shape, shapes[1])


def test_third_shape_of_a_set_replaces_the_one_used_least_recently():
    """A third layout in a full set evicts the layout viewed longest ago."""
    first, second, third = (np.zeros(n, dtype=np.uint8) for n in lengths_sharing_a_set(3))
    first_shape = StridedMemoryView(first, -1).shape
    second_shape = StridedMemoryView(second, -1).shape
    expect_interned(StridedMemoryView(first, -1).shape, first_shape)
    StridedMemoryView(third, -1)
    expect_interned(StridedMemoryView(first, -1).shape, first_shape)
    expect_not_interned(StridedMemoryView(second, -1).shape, second_shape)
