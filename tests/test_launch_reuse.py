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
import re
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


@pytest.mark.slow
def test_a_proxy_found_through_the_collector_is_never_handed_out():
    """A spare proxy reached through gc.get_objects() and held is not handed to a
    later launch: what the holder sees does not change."""
    _views(*_arrays(3))  # leaves spares (where the build keeps them)
    gc.collect()
    found = [
        o for o in gc.get_objects()
        if type(o) is ViewableArgument and o.obj is None
    ]
    if not _view.fast_paths:  # spares compiled out: every launch's proxies are freed
        _check(not found, f"{len(found)} emptied proxies kept by a build without spares")
        return
    _check(found, "no spare proxy was found to hold (none kept?)")
    for _ in range(20):
        _views(*_arrays(3, start=9))
    _check(all(o.obj is None for o in found), "a proxy held elsewhere was handed out")


@pytest.mark.slow
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
# else holds that view, the view is emptied (as a new one starts: its producer, stream
# and C fields cleared, but its value fields, ptr, shape, strides and dtype, which keep
# the last view's int, tuples and dtype for the next fill to replace) and the proxy's
# next view() fills it again instead of allocating one.

VALUE_FIELDS = 4  # _fields(view)[:4]: ptr, shape, strides, dtype


def _emptied_as_new(fields, new):
    """Whether a view's _fields equal a new view's but for its value fields."""
    return fields[VALUE_FIELDS:] == new[VALUE_FIELDS:]


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
    if _view.fast_paths:
        # Three views in all, passed from launch to launch.
        ids = {ident for launch_ids in seen_ids for ident in launch_ids}
        _check(len(ids) == 3, f"views were not filled again: {seen_ids}")


def test_each_argument_gets_the_proxy_it_had_in_the_last_launch():
    """Where the build keeps spare proxies, they come back argument by argument: the
    proxy (and kept view) that served argument i serves argument i of the next launch,
    which for a launch loop is the same array again (the torch reader's memo of the
    layout a kept view last held pays off only so).  Without spares (a build without the
    fast paths) each launch still views its own arrays."""
    @args_viewable_as_strided_memory((0, 1, 2))
    def proxy_ids(a, b, c):
        return [id(a), id(b), id(c)], [arg.view(-1).ptr for arg in (a, b, c)]

    arrays = _arrays(3)
    pointers = [array.ctypes.data for array in arrays]
    first, seen = proxy_ids(*arrays)
    _check(seen == pointers, seen)
    for _ in range(5):
        got, seen = proxy_ids(*arrays)
        _check(seen == pointers, seen)
        if _view.fast_paths:
            _check(got == first, f"the proxies came back in another order: {first} -> {got}")


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


@pytest.mark.slow
def test_a_parked_view_found_through_the_collector_is_never_filled_again():
    """An emptied view reached through the collector (a parked proxy's) and held stays
    emptied (as a new view, read-only flags and all cleared, its value fields the last
    view's) through later launches: the launch fills a view of its own."""
    read_only = np.frombuffer(b"abcdefgh" * 4, dtype=np.float64)
    ptrs_before = _views(read_only, read_only[1:], read_only[::2])
    gc.collect()
    proxies = [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]
    parked = [
        r for p in proxies for r in gc.get_referents(p) if type(r) is StridedMemoryView
    ]
    if not _view.fast_paths:
        _check(not parked, "a build without spares keeps views")
        return
    _check(parked, "no parked view found (none kept?)")
    new = _fields(StridedMemoryView.__new__(StridedMemoryView))
    found = [_fields(v) for v in parked]
    _check(all(_emptied_as_new(fields, new) for fields in found), found)
    # The value fields kept are those of the launch's last views.
    _check({fields[0] for fields in found} >= set(ptrs_before), (found, ptrs_before))
    for _ in range(20):
        ptrs = _views(*_arrays(3, start=7))
        _check(all(p != 0 for p in ptrs), ptrs)
    _check([_fields(v) for v in parked] == found, "a held emptied view was filled again")


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


@pytest.mark.slow
@pytest.mark.parametrize("passed_on", [False, True], ids=["local", "local-and-argument"])
def test_objects_held_only_by_frame_locals_are_never_reused(passed_on):
    """A spare proxy and its emptied view, held by nothing but a local variable (and the
    parameters it is passed to, which CPython 3.14 and later pass as borrowed stack
    references, uncounted), are never handed to a later launch: the reference count
    the launcher reads still counts the local that backs every borrowed reference."""
    # The collector's list, the generators and the returned tuple are gone: the two
    # locals are the only references the test holds.
    proxy, view = _park_and_find()
    if not _view.fast_paths:  # spares compiled out: every launch's proxies are freed
        _check(proxy is None, "an emptied proxy kept by a build without spares")
        return
    _check(proxy is not None and view is not None, "no parked proxy and view (none kept?)")
    emptied = _fields(view)
    _handed_out.clear()
    if passed_on:
        _launch_while_held_as_arguments(proxy, view, 20)
    else:
        for round_ in range(20):
            _recorded(*_arrays(3, start=200 + round_))
    _check(len(_handed_out) == 20 * 6, len(_handed_out))
    _check(id(proxy) not in _handed_out, "a proxy held by a local was handed to a launch")
    _check(id(view) not in _handed_out, "a view held by a local was filled by a launch")
    _check(proxy.obj is None and _fields(view) == emptied, (proxy.obj, _fields(view)))


# --- Filled from outside ---------------------------------------------------------------
# Nothing but a launcher fills a launcher's proxy or the view it keeps, and nothing fills
# a view twice: a view filled over what it holds loses a capsule's deleter, a proxy filled
# from outside keeps a view of an object its launcher never passed.  Each test counts the
# deleter calls of every capsule made (producers nobody else holds): exactly one each.


def _not_released_once(*producers):
    """{tensor id: deleter calls} of every capsule these producers made whose deleter did
    not run exactly once."""
    from producers import DELETER_CALLS

    return {
        tensor_id: DELETER_CALLS[tensor_id]
        for producer in producers
        for tensor_id in producer.tensor_ids
        if DELETER_CALLS[tensor_id] != 1
    }


def _capsule_producers(count):
    from producers import DLPackProducer

    return [DLPackProducer(device=(1, 0)) for _ in range(count)]


def _spare_proxies():
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]


def _parked_views():
    """The emptied views the spare proxies keep, as the report found them."""
    return [
        r for p in _spare_proxies() for r in gc.get_referents(p) if type(r) is StridedMemoryView
    ]


def _refusal(call, *args):
    """The message of the TypeError ``call(*args)`` raises, or None if it returns."""
    try:
        call(*args)
    except TypeError as exc:
        return str(exc)
    return None


@pytest.mark.slow
def test_a_parked_view_found_through_the_collector_cannot_be_initialised():
    """The report: a parked proxy's emptied view, found through gc.get_objects(), refuses
    __init__, bound or called unbound (it was accepted, and the next launch filled the view
    over the capsule it took: deleter calls 0 of 1); it stays as a new view, the producer is
    never asked, and every capsule of the launches around it is released exactly once."""
    launched = _capsule_producers(6)
    intruder = _capsule_producers(1)[0]
    _views(*_arrays(3))  # numpy views hold no capsule: kept and emptied
    parked = _parked_views()
    if _view.fast_paths:
        _check(len(parked) >= 3, f"{len(parked)} parked views found (none kept?)")
    else:
        _check(not parked, "a build without spares keeps views")
    refusals = []
    for view in parked:
        refusals.append(_refusal(view.__init__, intruder, -1))
        refusals.append(_refusal(StridedMemoryView.__init__, view, intruder))
    new = _fields(StridedMemoryView.__new__(StridedMemoryView))
    emptied = [_fields(view) for view in parked]
    view = None
    del parked
    _launch_and_check_released(launched, intruder)  # takes the spares, fills their views
    _check(
        all(m is not None and m.startswith("StridedMemoryView is kept empty by a launcher")
            for m in refusals),
        refusals,
    )
    _check(all(_emptied_as_new(fields, new) for fields in emptied), emptied)
    _check(not intruder.tensor_ids, "a refused __init__ asked the producer for a capsule")



def _launch_and_check_released(launched, *others):
    """Launch ``launched`` three at a time (the spares and their views taken again), each
    view at its producer's address, then check that every capsule, ``others``' too, has
    been released exactly once."""
    for start in range(0, len(launched), 3):
        ptrs = _views(*launched[start:start + 3])
        _check(ptrs == [p.expected_ptr for p in launched[start:start + 3]], ptrs)
    gc.collect()
    leaked = _not_released_once(*others, *launched)
    _check(not leaked, f"capsules not released exactly once (tensor id: deleter calls): {leaked}")

@pytest.mark.slow
def test_a_kept_view_holding_something_is_let_go_not_filled_over():
    """The proxy fills its kept view again only if the view holds nothing (no capsule,
    buffer or C layout, which every complete fill sets), whatever the proxy's flag says: a
    parked view filled in place (no public call can: _view._fill_parked_view stands for a
    fill from outside) is let go by the next launch, which views its own arguments, and the
    capsule it took is released exactly once."""
    _views(*_arrays(3))
    parked = _parked_views()
    if not _view.fast_paths:  # no view kept, and a new view is no parked one
        _check(not parked, "a build without spares keeps views")
        new = StridedMemoryView.__new__(StridedMemoryView)
        _check(not _view._fill_parked_view(new, np.arange(2.0), -1), "a new view was filled")
        return
    _check(len(parked) >= 3, f"{len(parked)} parked views found (none kept?)")
    intruders = _capsule_producers(len(parked))
    filled = [_view._fill_parked_view(v, p, -1) for v, p in zip(parked, intruders)]
    _check(all(filled), f"parked views not filled: {filled}")
    del parked
    _launch_and_check_released(_capsule_producers(6), *intruders)


@pytest.mark.slow
def test_a_proxy_cannot_be_initialised_again():
    """A parked proxy found through the collector, a proxy the function kept and a proxy
    made directly refuse __init__: a parked one would view (and keep its view of) an object
    its launcher never passed, holding that capsule until some later launch took the spare
    (deleter calls 0 of 1 once everything else was dropped).  Every capsule is released
    exactly once as soon as nothing holds it, with no launch after."""
    kept = []

    @args_viewable_as_strided_memory((0,))
    def keep(a):
        kept.append(a)

    keep(np.arange(2.0))
    launched = _capsule_producers(3)
    _views(*launched)
    spares = _spare_proxies()
    if _view.fast_paths:
        _check(len(spares) >= 3, f"{len(spares)} spare proxies found (none kept?)")
    intruder = _capsule_producers(1)[0]
    refusals = []
    for proxy in spares + kept + [ViewableArgument(np.arange(3.0))]:
        message = _refusal(proxy.__init__, intruder)
        refusals.append(message)
        if message is None:
            proxy.view(-1)  # what its new holder would do next; the view is dropped at once
    del spares, kept, proxy
    gc.collect()
    leaked = _not_released_once(intruder, *launched)
    _check(not leaked, f"capsules not released exactly once (tensor id: deleter calls): {leaked}")
    _check(
        all(m is not None and m.startswith("ViewableArgument is already initialised")
            for m in refusals),
        refusals,
    )
    fresh = ViewableArgument.__new__(ViewableArgument)
    fresh.__init__(np.arange(4.0))  # a proxy nobody initialised: once
    _check(fresh.view(-1).shape == (4,), "a new proxy's __init__ was refused")


def test_a_launcher_cannot_be_initialised_again():
    """A launcher's __init__ refuses once it has a function.  Called from an argument's
    property while the launch wraps its arguments, a new argument table was read past its
    end (a crash); a launcher made without __init__ takes one (after a failed one too)."""
    message = "args_viewable_as_strided_memory: this launcher is already initialised"

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        return a.view(-1).ptr, b.view(-1).ptr, c.view(-1).ptr

    with pytest.raises(TypeError, match=re.escape(message)):
        launch.__init__(lambda x: x, ((0, "x"),), ())
    refusals = []

    class Reinitialising:
        """Host memory through the array interface; reading its CAI re-initialises the launcher."""

        def __init__(self, array):
            self.array = array
            self.__array_interface__ = array.__array_interface__

        @property
        def __cuda_array_interface__(self):
            refusals.append(_refusal(launch.__init__, lambda x: x, ((0, "x"),), ()))
            return None

    arrays = _arrays(3)
    for _ in range(3):
        got = launch(Reinitialising(arrays[0]), arrays[1], arrays[2])
        _check(got == tuple(a.ctypes.data for a in arrays), got)
    _check(refusals and all(m == message for m in refusals), refusals)

    bare = type(launch).__new__(type(launch))
    with pytest.raises(ValueError):
        bare.__init__(launch.__wrapped__, ((0,),), ())  # a malformed table: nothing set
    bare.__init__(launch.__wrapped__, ((0, "a"), (1, "b"), (2, "c")), ())
    _check(bare(*arrays) == tuple(a.ctypes.data for a in arrays), "the late __init__ was lost")
    with pytest.raises(TypeError, match=re.escape(message)):
        bare.__init__(launch.__wrapped__, (), ())


@pytest.mark.parametrize(
    "way", ["init", "init unbound", "init after __new__", "copy", "deepcopy", "pickle", "subclass"]
)
def test_no_way_fills_a_view_twice(way):
    """Every way to fill a view holding a capsule again from outside is refused (a view is
    final, and not copied); pickling makes a new view of a copy of the elements, leaving this
    one as it was; its capsule is released once, when it dies."""
    import copy
    import pickle

    first, second = _capsule_producers(2)
    if way == "init after __new__":
        view = StridedMemoryView.__new__(StridedMemoryView)
        view.__init__(first, -1)
    else:
        view = StridedMemoryView(first, -1)
    attempts = {
        "init": lambda: view.__init__(second, -1),
        "init unbound": lambda: StridedMemoryView.__init__(view, second),
        "init after __new__": lambda: view.__init__(second),
        "copy": lambda: copy.copy(view),
        "deepcopy": lambda: copy.deepcopy(view),
        "pickle": lambda: pickle.loads(pickle.dumps(view)),
        "subclass": lambda: type("Refilled", (StridedMemoryView,), {}),
    }
    if way == "pickle":
        copied = attempts[way]()
        _check(copied.ptr != view.ptr and copied.shape == view.shape, copied)
        del copied
    else:
        with pytest.raises(TypeError):
            attempts[way]()
    _check(view.exporting_obj is first and view.ptr == first.expected_ptr, view)
    del view, attempts
    leaked = _not_released_once(first, second)
    _check(not leaked, f"capsules not released exactly once (tensor id: deleter calls): {leaked}")
    _check(len(first.tensor_ids) == 1 and not second.tensor_ids, "a capsule too many was asked for")


def _empty_view_calls(other):
    """(name, call) for every public attribute and method of a view, on view ``v``."""
    return [
        (name, lambda v, name=name: getattr(v, name))
        for name in dir(StridedMemoryView)
        if not name.startswith("__") and name not in ("from_dlpack", "from_any_interface")
    ] + [
        ("repr", repr),
        ("__dlpack__", lambda v: v.__dlpack__()),
        ("__dlpack__ 1.0", lambda v: v.__dlpack__(max_version=(1, 0))),
        ("__dlpack_device__", lambda v: v.__dlpack_device__()),
        ("__cuda_array_interface__", lambda v: v.__cuda_array_interface__),
        ("__array_interface__", lambda v: v.__array_interface__),
        ("memoryview", memoryview),
        ("numpy.asarray", np.asarray),
        ("numpy.from_dlpack", np.from_dlpack),
        ("a view of it", lambda v: StridedMemoryView(v, -1)),
        ("_asdict", lambda v: v._asdict()),
        ("index", lambda v: v[0]),
        ("iter", lambda v: list(v)),
        ("transpose", lambda v: v.transpose()),
        ("reshape", lambda v: v.reshape(1)),
        ("squeeze", lambda v: v.squeeze()),
        ("broadcast_to", lambda v: v.broadcast_to((2,))),
        ("view", lambda v: v.view()),
        ("view dtype", lambda v: v.view(dtype=np.int8)),
        ("copy_from", lambda v: v.copy_from(other, None)),
        ("copy_to", lambda v: v.copy_to(other)),
        ("as_tensor_map", lambda v: v.as_tensor_map((1,))),
        ("match", lambda v: _match(v)),
    ]


def _match(view):
    match view:
        case StridedMemoryView(ptr, shape, strides, dtype):
            return ptr, shape, strides, dtype
    return None


@pytest.mark.slow
@pytest.mark.parametrize("which", ["__new__", "parked"])
def test_an_empty_view_answers_everything_and_is_initialised_once(which):
    """A view never initialised (StridedMemoryView.__new__) or a launcher's emptied one:
    every attribute and method answers or raises an ordinary error (never a crash); the
    first takes one __init__ (its capsule released once, when it dies), the second none."""
    if which == "parked":
        _views(*_arrays(3))
        views = _parked_views()
        if not _view.fast_paths:
            _check(not views, "a build without spares keeps views")
            return
        _check(views, "no parked view found (none kept?)")
        view = views[0]
        del views
    else:
        view = StridedMemoryView.__new__(StridedMemoryView)
    other = StridedMemoryView.__new__(StridedMemoryView)
    for name, call in _empty_view_calls(other):
        try:
            call(view)
        except (TypeError, ValueError, BufferError, AttributeError, IndexError):
            pass
    producer = _capsule_producers(1)[0]
    message = _refusal(view.__init__, producer, -1)
    if which == "parked":
        _check(message is not None and message.startswith("StridedMemoryView is kept empty"), message)
    else:
        _check(message is None and view.ptr == producer.expected_ptr, (message, view))
        _check(_refusal(view.__init__, producer, -1) == "StridedMemoryView is already initialised", view)
    del view
    leaked = _not_released_once(producer)
    _check(not leaked, f"capsules not released exactly once (tensor id: deleter calls): {leaked}")
