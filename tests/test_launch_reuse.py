"""A launcher's proxies are reused between launches, never while anyone else can see them.

The launcher keeps a proxy that only it still holds once the function returns
(emptied: obj None, nothing referenced) and hands it out again on a later launch.
These tests pin what that must never change: a proxy the function keeps (in a
list, a traceback, a suspended generator) keeps its object for good; nested
launches, launches from another thread while the function runs, and a proxy found
through the garbage collector each see proxies of their own; no argument is held
once a launch returns; and a reused proxy behaves as a new one.
"""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

from stridedview import StridedMemoryView, ViewableArgument, _view, args_viewable_as_strided_memory

pytestmark = pytest.mark.usefixtures("forbidden_driver")


def _check(condition, what):
    """Raise AssertionError(what) unless condition (plain asserts vanish under python -O)."""
    if not condition:
        raise AssertionError(what)


def _arrays(count, start=0):
    return [np.arange(4.0) + start + i for i in range(count)]


@args_viewable_as_strided_memory((0, 1, 2))
def _views(a, b, c):
    return [a.view(-1).ptr, b.view(-1).ptr, c.view(-1).ptr]


def test_a_kept_proxy_keeps_its_object_through_later_launches():
    """Proxies the function stores in a list keep their obj (and view it) however many
    launches follow, and are never handed to a later launch."""
    kept = []

    @args_viewable_as_strided_memory((0, 1))
    def keep(a, b):
        kept.append((a, b))

    first = _arrays(2)
    keep(*first)
    for round_ in range(20):
        keep(*_arrays(2, start=10 * (round_ + 1)))
        _views(*_arrays(3, start=500))
    _check(kept[0][0].obj is first[0] and kept[0][1].obj is first[1], kept[0])
    _check(kept[0][0].view(-1).ptr == first[0].ctypes.data, "the kept proxy views another array")
    proxies = [proxy for pair in kept for proxy in pair]
    _check(len({id(proxy) for proxy in proxies}) == len(proxies), "a kept proxy was handed out again")


def test_nested_launches_get_distinct_proxies():
    """A function that launches itself (and another launcher) gets, at every depth,
    proxies of its own: after the nested launches return, each depth's proxies still
    hold that depth's arrays."""
    seen = {}

    @args_viewable_as_strided_memory((0, 1))
    def nested(a, b, depth):
        if depth:
            nested(*_arrays(2, start=100 * depth), depth - 1)
            _views(*_arrays(3, start=1000 + depth))
        seen[depth] = (a, a.obj, b, b.obj)
        return a.obj, b.obj

    top = _arrays(2)
    got = nested(*top, 4)
    _check(got[0] is top[0] and got[1] is top[1], "the outer proxies lost their arrays")
    for depth, (a, a_obj, b, b_obj) in seen.items():
        _check(a.obj is a_obj and b.obj is b_obj, f"depth {depth}'s proxies were reused")
    proxies = [item for entry in seen.values() for item in (entry[0], entry[2])]
    _check(len({id(p) for p in proxies}) == len(proxies), "two depths shared a proxy")


def test_another_thread_launching_inside_the_function_shares_no_proxy():
    """While the function runs (here: waits for another thread), launches of the same
    launcher from another thread never get its proxies."""
    holder = {}

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c, wait_for=None):
        if wait_for is not None:
            worker = threading.Thread(target=wait_for)
            worker.start()
            worker.join()
            holder["after"] = (a.obj, b.obj, c.obj)
            holder["ptrs"] = (a.view(-1).ptr, b.view(-1).ptr, c.view(-1).ptr)
        return a, b, c

    other = _arrays(3, start=50)
    errors = []

    def hammer():
        try:
            for _ in range(200):
                got = launch(*other)
                if [proxy.obj for proxy in got] != other:
                    errors.append("the other thread's proxies lost their arrays")
        except Exception as exc:  # reported below, from the main thread
            errors.append(repr(exc))

    mine = _arrays(3)
    launch(*mine, wait_for=hammer)
    _check(not errors, errors)
    _check(all(x is y for x, y in zip(holder["after"], mine)), "a proxy changed while in use")
    _check(holder["ptrs"] == tuple(a.ctypes.data for a in mine), holder["ptrs"])


def test_a_raising_function_keeps_its_proxies_in_the_traceback():
    """An exception from the function: its frame, kept by the traceback, keeps its
    proxies and their arrays through later launches; once the exception is dropped
    the arrays' reference counts are back where they started."""

    @args_viewable_as_strided_memory((0, 1))
    def fail(a, b):
        raise ValueError("kernel failed")

    arrays = _arrays(2)
    before = [sys.getrefcount(a) for a in arrays]
    try:
        fail(*arrays)
    except ValueError as exc:
        caught = exc
    tb = caught.__traceback__
    while tb.tb_frame.f_code is not fail.__wrapped__.__code__:
        tb = tb.tb_next
    frame = tb.tb_frame
    proxies = (frame.f_locals["a"], frame.f_locals["b"])
    for _ in range(20):
        _views(*_arrays(3, start=7))
        with pytest.raises(ValueError):
            fail(*_arrays(2, start=3))
    _check(proxies[0].obj is arrays[0] and proxies[1].obj is arrays[1], "a proxy was reused")
    del caught, tb, frame, proxies
    after = [sys.getrefcount(a) for a in arrays]
    _check(after == before, (before, after))


def test_no_argument_is_held_after_launches():
    """After launches that drop their proxies, no argument is referenced by the
    launcher or by a spare proxy (reference counts back to their start)."""
    arrays = _arrays(3)
    before = [sys.getrefcount(a) for a in arrays]
    for _ in range(50):
        _views(*arrays)
    after = [sys.getrefcount(a) for a in arrays]
    _check(after == before, (before, after))


def test_a_proxy_found_through_the_collector_is_never_handed_out():
    """A spare proxy reached through gc.get_objects() and held is not handed to a
    later launch: what the holder sees does not change."""
    _views(*_arrays(3))  # leaves spares (where the build keeps them)
    gc.collect()
    found = [
        o for o in gc.get_objects()
        if type(o) is ViewableArgument and o.obj is None
    ]
    if not _view.gil_fast_paths:  # spares compiled out: every launch's proxies are freed
        _check(not found, f"{len(found)} emptied proxies kept by a build without spares")
        return
    _check(found, "no spare proxy was found to hold (none kept?)")
    for _ in range(20):
        _views(*_arrays(3, start=9))
    _check(all(o.obj is None for o in found), "a proxy held elsewhere was handed out")


def test_garbage_collection_inside_the_function():
    """gc.collect() inside the function (between views, after nested launches) leaves
    the proxies and their views intact."""
    arrays = _arrays(3)

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        _views(*_arrays(3, start=30))
        gc.collect()
        first = a.view(-1)
        gc.collect()
        return (a.obj, b.obj, c.obj), (first.ptr, b.view(-1).ptr, c.view(-1).ptr)

    for _ in range(5):
        objs, ptrs = launch(*arrays)
        _check(all(x is y for x, y in zip(objs, arrays)), objs)
        _check(ptrs == tuple(a.ctypes.data for a in arrays), ptrs)


def test_a_reused_proxy_behaves_as_a_new_one():
    """A proxy handed out after launches of other types gives the same obj, repr and
    view as a ViewableArgument made for the same argument."""
    got = {}

    @args_viewable_as_strided_memory((0,))
    def take(a):
        got["repr"] = repr(a)
        got["obj"] = a.obj
        view = a.view(-1)
        got["view"] = (view.ptr, view.shape, view.strides, view.dtype, view.readonly)

    samples = [
        np.arange(6.0).reshape(2, 3),
        bytearray(b"abcdef"),
        np.arange(10, dtype=np.int16)[::3],
        memoryview(b"xyz"),
    ]
    for _ in range(3):
        for sample in samples:
            take(sample)
            fresh = ViewableArgument(sample)
            view = fresh.view(-1)
            _check(got["obj"] is sample, got["obj"])
            _check(got["repr"] == repr(fresh), (got["repr"], repr(fresh)))
            expected = (view.ptr, view.shape, view.strides, view.dtype, view.readonly)
            _check(got["view"] == expected, (got["view"], expected))


def test_a_suspended_generator_keeps_its_proxy():
    """A generator function as launcher: the generator's frame holds its proxy, which
    keeps its array while later launches run."""

    @args_viewable_as_strided_memory((0,))
    def gen(a):
        yield a.obj
        yield a.obj

    arrays = _arrays(1)
    suspended = gen(arrays[0])
    _check(next(suspended) is arrays[0], "first yield")
    for _ in range(20):
        _views(*_arrays(3, start=40))
    _check(next(suspended) is arrays[0], "the suspended generator's proxy was reused")


@pytest.mark.parametrize("ndim", [0, 1, 8, 9, 12, 32])
def test_views_of_any_rank_after_reuse(ndim):
    """Views of up to and past 8 dimensions, made one after another (each reusing the
    memory of the ones before), give their array's layout, by the constructor and by
    a proxy."""

    @args_viewable_as_strided_memory((0,))
    def take(a):
        view = a.view(-1)
        return view.shape, view.strides, view.ptr

    for rank in (ndim, 12, ndim, 2, ndim):
        array = np.zeros((1, 2) * (rank // 2) + (3,) * (rank % 2), dtype=np.float32)
        if rank > 1:
            array = array.swapaxes(0, rank - 1)
        expected = (
            array.shape,
            tuple(s // array.itemsize for s in array.strides),
            array.ctypes.data,
        )
        view = StridedMemoryView(array, -1)
        _check((view.shape, view.strides, view.ptr) == expected, (view.shape, expected))
        _check(take(array) == expected, (take(array), expected))
        del view


class _HostCAI:
    """A CUDA Array Interface producer over a numpy array's memory (stream_ptr None refused)."""

    def __init__(self, array):
        self.array = array
        host = array.__array_interface__
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": array.shape,
            "typestr": host["typestr"],
            "data": (host["data"][0], False),
            "strides": host["strides"],
        }


def _init_outcome(args, kwargs):
    """What __init__ on a fresh view does with these arguments: the fields or the error."""
    view = StridedMemoryView.__new__(StridedMemoryView)
    try:
        view.__init__(*args, **kwargs)
    except (TypeError, BufferError) as exc:
        return type(exc), str(exc)
    return view.ptr, view.shape, view.strides, view.dtype, view.readonly, view.exporting_obj


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((), {}),
        (("cai",), {}),
        (("cai", -1), {}),
        (("cai", None), {}),
        (("cai",), {"stream_ptr": -1}),
        ((), {"obj": "cai", "stream_ptr": -1}),
        (("cai", -1, 3), {}),
        (("cai",), {"stream": -1}),
        (("numpy",), {}),
        (("numpy", 7), {}),
        (("numpy", -1, None), {}),
    ],
)
def test_constructor_call_does_what_init_does(args, kwargs):
    """StridedMemoryView(...) (its own vectorcall for one or two positional arguments,
    Cython's for the rest) gives the view or the error that __init__ gives for the same
    arguments: the stream is passed on, counts and keywords are checked."""
    array = np.arange(12.0).reshape(3, 4)[:, ::2]
    named = {"cai": _HostCAI(array), "numpy": array}
    args = tuple(named.get(a, a) if isinstance(a, str) else a for a in args)
    kwargs = {k: named.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    expected = _init_outcome(args, kwargs)
    try:
        view = StridedMemoryView(*args, **kwargs)
    except (TypeError, BufferError) as exc:
        got = (type(exc), str(exc))
    else:
        got = (view.ptr, view.shape, view.strides, view.dtype, view.readonly, view.exporting_obj)
    _check(got == expected, (got, expected))


def test_a_view_made_from_a_reused_object_starts_empty():
    """A view allocated where a view of many dimensions, a held buffer and a read-only
    flag were (the freelist) starts as a new one: C layout of its own, no owner, and
    views keep their own layout through the C-level fields (via _asdict and export)."""
    big = np.zeros((1,) * 12, dtype=np.int8)
    readonly = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    for _ in range(20):
        views = [StridedMemoryView(big, -1), StridedMemoryView(memoryview(readonly), -1)]
        del views
        small = StridedMemoryView(np.arange(3.0), -1)
        _check(small.shape == (3,) and small.strides == (1,), small)
        _check(not small.readonly, "readonly carried over from a freed view")
        exported = np.from_dlpack(small)
        _check(exported.shape == (3,) and exported.strides == (8,), exported.strides)
        zero_d = StridedMemoryView(np.float32(2.0), -1)
        _check(zero_d.shape == () and np.from_dlpack(zero_d).shape == (), zero_d)


# --- Kept views ----------------------------------------------------------------------
# A launcher's proxy keeps the last view it made; when the proxy is parked and nothing
# else holds that view, the view is emptied (fields None, C fields zero, as a new one
# starts) and the proxy's next view() fills it again instead of allocating one.


def _c_layout_matches(view):
    from test_hot_path_review import assert_c_layout_matches

    assert_c_layout_matches(view)
    return True


def _fields(view):
    return (
        view.ptr, view.shape, view.strides, view.dtype, view.device_id,
        view.is_device_accessible, view.readonly, view.exporting_obj, view.ready_stream,
    )


def test_a_launch_loop_fills_its_views_again_as_new_ones():
    """Launch after launch, over arrays of other ranks, dtypes, flags and producers, each
    proxy's view (filled again where the build keeps views) gives what a new view of the
    same argument gives, C layout included; in a build with the GIL the objects are reused."""
    class HostInterface:
        """A producer through numpy's array interface only (a host buffer's)."""

        def __init__(self, array):
            self.__array_interface__ = array.__array_interface__
            self.array = array

    rounds = [
        (np.arange(12.0).reshape(3, 4)[:, ::2], np.array(2.5, dtype=np.float32),
         np.frombuffer(b"abcdefgh", dtype=np.uint8)),
        (np.zeros((2, 1, 3), dtype=np.int16)[::-1], np.arange(5),
         HostInterface(np.arange(8, dtype=np.int32).reshape(2, 4)[:, 1:])),
        (np.arange(6.0)[::3], np.zeros((1,) * 8, dtype=np.complex64), np.arange(4.0)),
    ]
    seen_ids = []

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        got = []
        for arg in (a, b, c):
            view = arg.view(stream_ptr=-1)
            fresh = StridedMemoryView(arg.obj, stream_ptr=-1)
            got.append((_fields(view) == _fields(fresh), _c_layout_matches(view), id(view)))
        return got

    for _ in range(4):
        for arrays in rounds:
            got = launch(*arrays)
            _check(all(same and c_same for same, c_same, _ in got), got)
            seen_ids.append(tuple(ident for _, _, ident in got))
    if _view.gil_fast_paths:
        # Three views in all, passed from launch to launch (spare proxies come back in
        # any order).
        ids = {ident for launch_ids in seen_ids for ident in launch_ids}
        _check(len(ids) == 3, f"views were not filled again: {seen_ids}")


def test_a_view_the_function_returns_is_never_filled_again():
    """Views the function returns (or stores) keep their fields through later launches of
    other arrays."""
    kept = []

    @args_viewable_as_strided_memory((0,))
    def take(a):
        view = a.view(-1)
        kept.append((view, _fields(view)))
        return view

    arrays = [np.arange(float(n + 1)) * (n + 1) for n in range(10)]
    for array in arrays:
        take(array)
        take(np.zeros((2, 2), dtype=np.int8))  # a later launch that would refill it
    for (view, fields), array in zip(kept[::2], arrays):
        _check(_fields(view) == fields and view.exporting_obj is array, (view, fields))


def test_a_parked_view_found_through_the_collector_is_never_filled_again():
    """An emptied view reached through the collector (a parked proxy's) and held stays
    empty (as a new view: read-only flags and all cleared) through later launches: the
    launch fills a view of its own."""
    read_only = np.frombuffer(b"abcdefgh" * 4, dtype=np.float64)
    _views(read_only, read_only[1:], read_only[::2])
    gc.collect()
    proxies = [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]
    parked = [
        r for p in proxies for r in gc.get_referents(p) if type(r) is StridedMemoryView
    ]
    if not _view.gil_fast_paths:
        _check(not parked, "a build without spares keeps views")
        return
    _check(parked, "no parked view found (none kept?)")
    new = _fields(StridedMemoryView.__new__(StridedMemoryView))
    _check(all(_fields(v) == new for v in parked), [_fields(v) for v in parked])
    for _ in range(20):
        ptrs = _views(*_arrays(3, start=7))
        _check(all(p != 0 for p in ptrs), ptrs)
    _check(all(v.dtype is None and v.shape is None and v.ptr is None for v in parked), parked)


def test_a_launch_holds_nothing_of_its_views_once_it_returns():
    """Once a launch returns, its views hold nothing: an array is freed when its last
    reference goes (no collection needed), and a capsule's deleter has run once, whether
    the proxy was parked or kept by the function."""
    import weakref

    from producers import DLPackProducer, deleter_calls

    for _ in range(3):
        array = np.arange(4.0)
        alive = weakref.ref(array)
        _views(array, np.arange(2.0), np.arange(3.0))
        del array
        _check(alive() is None, "an array outlived its launch")

    kept_proxies = []

    @args_viewable_as_strided_memory((0,))
    def view_once(a, keep):
        a.view(-1)
        if keep:
            kept_proxies.append(a)

    for keep in (False, True, False):
        producer = DLPackProducer(device=(1, 0))
        view_once(producer, keep)
        _check(deleter_calls(producer) == 1, (keep, deleter_calls(producer)))


def test_a_view_in_a_traceback_is_never_filled_again():
    """A view a raising function left in its traceback keeps its fields through later
    launches."""

    @args_viewable_as_strided_memory((0,))
    def fail(a):
        view = a.view(-1)  # noqa: F841 - kept by the traceback's frame
        raise RuntimeError("after the view")

    array = np.arange(5.0)
    try:
        fail(array)
    except RuntimeError as exc:
        error = exc
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    view = tb.tb_frame.f_locals["view"]
    before = _fields(view)
    for _ in range(10):
        _views(*_arrays(3, start=3))
        fail_free = _views(np.arange(2.0), np.arange(2.0), np.arange(2.0))
        _check(fail_free, fail_free)
    _check(_fields(view) == before and view.exporting_obj is array, (_fields(view), before))



_handed_out = []  # ids of the proxies and views a _recorded launch was given


@args_viewable_as_strided_memory((0, 1, 2))
def _recorded(a, b, c):
    # ids only: holding the objects would change the counts under test
    _handed_out.extend(map(id, (a, b, c, a.view(-1), b.view(-1), c.view(-1))))



def _launch_while_held_as_arguments(proxy, view, rounds):
    """Launch ``rounds`` times while ``proxy`` and ``view`` are this frame's parameters
    (on CPython 3.14 and later, borrowed stack references of the caller's locals)."""
    for round_ in range(rounds):
        _recorded(*_arrays(3, start=100 + round_))


def _park_and_find():
    """A proxy the last launch parked (the next launch's first candidate) and its
    emptied view, found through the collector: (None, None) in a build without spares."""
    _handed_out.clear()
    _recorded(*_arrays(3))
    last_parked = set(_handed_out[:3])
    gc.collect()
    proxy = next((o for o in gc.get_objects() if id(o) in last_parked), None)
    if proxy is None:
        return None, None
    view = next((r for r in gc.get_referents(proxy) if type(r) is StridedMemoryView), None)
    return proxy, view


@pytest.mark.parametrize("passed_on", [False, True], ids=["local", "local-and-argument"])
def test_objects_held_only_by_frame_locals_are_never_reused(passed_on):
    """A spare proxy and its emptied view, held by nothing but a local variable (and the
    parameters it is passed to, which CPython 3.14 and later pass as borrowed stack
    references, uncounted), are never handed to a later launch: the reference count
    the launcher reads still counts the local that backs every borrowed reference."""
    # The collector's list, the generators and the returned tuple are gone: the two
    # locals are the only references the test holds.
    proxy, view = _park_and_find()
    if not _view.gil_fast_paths:  # spares compiled out: every launch's proxies are freed
        _check(proxy is None, "an emptied proxy kept by a build without spares")
        return
    _check(proxy is not None and view is not None, "no parked proxy and view (none kept?)")
    _handed_out.clear()
    if passed_on:
        _launch_while_held_as_arguments(proxy, view, 20)
    else:
        for round_ in range(20):
            _recorded(*_arrays(3, start=200 + round_))
    _check(len(_handed_out) == 20 * 6, len(_handed_out))
    _check(id(proxy) not in _handed_out, "a proxy held by a local was handed to a launch")
    _check(id(view) not in _handed_out, "a view held by a local was filled by a launch")
    _check(proxy.obj is None and view.ptr is None, (proxy.obj, view.ptr))
