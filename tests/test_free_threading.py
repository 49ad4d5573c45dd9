"""Free-threaded CPython: the GIL stays off, the fast paths keep their state per thread,
and many threads constructing, launching, exporting and dropping views at once get the
answers one thread gets.

These tests run on every build (in seconds); they matter most where threads really run at
once: CI runs the suite on a free-threaded CPython 3.13 with the GIL off (.ci/run), where a
race in a cache shows as a wrong field, a lost or doubled deleter call or a crash.  The
switch interval is set to 1 us as in tests/test_threads.py, so that on a GIL build threads
interleave between almost any two bytecodes too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from collections import Counter

import numpy as np
import pytest

from producers import DELETER_CALLS, forget, make_producer
from stridedview import StridedMemoryView, ViewableArgument, _view, args_viewable_as_strided_memory
from test_cai import CAIProducer
from test_threads import fast_switching, run_threads  # noqa: F401 - fixture used by autouse

THREADS = 8
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_fast_paths_keep_their_state_per_thread_on_a_free_threaded_build():
    """The caches, freelist and spares keep their state per thread on a free-threaded
    interpreter and per process with the GIL (or are compiled out: -DSV_NO_GIL_FAST_PATHS)."""
    assert isinstance(_view.fast_paths, bool)
    assert _view.gil_fast_paths is _view.fast_paths  # the older name
    if not _view.fast_paths:
        assert _view.fast_paths_state is None
    else:
        assert _view.fast_paths_state == ("thread" if FREE_THREADED else "process")


def test_the_freelist_keeps_only_views_this_thread_owns():
    """A view another thread made (its memory that thread's heap's), freed here once that
    thread ended, is not kept in this thread's freelist: reused here, the collector would
    hand it back to its memory's owner, which would then run its deallocator whoever
    dropped it.  This thread's own freed views are kept (room made first).  Only
    free-threaded builds with the fast paths keep a freelist per thread: elsewhere this
    thread's list stays empty (GIL builds keep Cython's, per process)."""
    arrays = [np.zeros(2) for _ in range(20)]
    made = []
    worker = threading.Thread(target=lambda: made.extend(StridedMemoryView(a, stream_ptr=-1) for a in arrays[:4]))
    worker.start()
    worker.join()
    foreign = {id(v) for v in made}
    own = [StridedMemoryView(a, stream_ptr=-1) for a in arrays]  # (the freelist emptied)
    own_addresses = {id(v) for v in own[-4:]}
    del made[:]  # freed here: their owner ended, so their counts were merged
    del own[-4:]
    kept = set(_view._free_view_addresses())
    if FREE_THREADED and _view.fast_paths:
        assert foreign.isdisjoint(kept)
        assert own_addresses <= kept
    else:
        assert kept == set()


FIELDS = ("ptr", "shape", "strides", "dtype", "exporting_obj")


def test_field_getattro_only_where_attribute_reads_are_not_specialised():
    """The field-reading tp_getattro is in on free-threaded 3.13 with the fast paths,
    and only there (3.14t specialises LOAD_ATTR, which a tp_getattro of ours would stop)."""
    expected = _view.fast_paths and FREE_THREADED and sys.version_info < (3, 14)
    assert _view.field_getattro is expected


def test_field_reads_equal_the_generic_lookup():
    """``view.ptr`` and the other member fields read through the type's tp_getattro give
    the very objects the generic lookup (object.__getattribute__, the member descriptor)
    gives, by interned and by freshly built names, on new, derived, exported-from and
    launcher-parked views; other names and missing ones behave as generically."""
    matrix = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = make_producer("versioned", shape=(2, 5), dtype="int16", hold_capsules=False)
    views = [
        StridedMemoryView(matrix),
        StridedMemoryView(matrix)[1:, ::2],
        StridedMemoryView(CAIProducer(matrix), stream_ptr=-1),
        StridedMemoryView(producer),
        StridedMemoryView.__new__(StridedMemoryView),
    ]
    kept = []
    launch = args_viewable_as_strided_memory((0,))(lambda a: kept.append(a.view(-1)))
    launch(matrix)
    views.append(kept.pop())
    for view in views:
        for name in FIELDS:
            built = "".join(list(name))  # not the interned object
            generic = object.__getattribute__(view, name)
            assert getattr(view, name) is generic
            assert getattr(view, built) is generic
            assert type(view).__dict__[name].__get__(view, type(view)) is generic
        if view.shape is not None:  # a property, generic on every build
            assert view.ndim == object.__getattribute__(view, "ndim") == len(view.shape)
        with pytest.raises(AttributeError, match="no_such_field"):
            view.no_such_field
    del views, view
    forget(producer)


def test_field_reads_race_nothing_while_views_come_and_go():
    """Threads reading the fields of views other threads are making and dropping, and of
    one shared view, get each view's own objects (the field-reading tp_getattro on 3.13t)."""
    shared = StridedMemoryView(np.arange(6.0).reshape(2, 3))
    expected = {name: getattr(shared, name) for name in FIELDS}

    def work(index):
        own = np.full((index + 1, 2), index, dtype=np.int32)
        for _ in range(300):
            view = StridedMemoryView(own)
            assert view.shape == (index + 1, 2) and view.strides == (2, 1)
            assert view.ptr == own.ctypes.data and view.dtype == np.int32
            assert view.exporting_obj is own
            for name in FIELDS:
                assert getattr(shared, name) is expected[name]

    run_threads([work] * THREADS)


def test_first_views_and_exports_in_many_threads_at_once():
    """In a fresh process, eight threads make their first views and DLPack exports at
    once: the dtype tables built on first use are published once, and every thread
    reads a complete one (ThreadSanitizer found two threads replacing each other's)."""
    code = (
        "import sys, threading, numpy\n"
        "from stridedview import StridedMemoryView\n"
        "dtypes = ['int8', 'uint16', 'int32', 'float32', 'float64', 'complex64', 'bool', 'int64']\n"
        "barrier = threading.Barrier(len(dtypes))\n"
        "errors = []\n"
        "def work(name):\n"
        "    try:\n"
        "        array = numpy.arange(6).astype(name).reshape(2, 3)\n"
        "        barrier.wait()\n"
        "        for _ in range(50):\n"
        "            back = numpy.from_dlpack(StridedMemoryView(array))\n"
        "            assert back.dtype == array.dtype and (back == array).all(), name\n"
        "    except BaseException as exc:\n"
        "        errors.append(repr(exc))\n"
        "threads = [threading.Thread(target=work, args=(n,)) for n in dtypes]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(errors)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_import_leaves_the_gil_as_the_interpreter_has_it():
    """Importing stridedview (and viewing, launching) never turns the GIL on: off stays off on 3.13t."""
    code = (
        "import sys, numpy, stridedview\n"
        "from stridedview import StridedMemoryView, args_viewable_as_strided_memory\n"
        "StridedMemoryView(numpy.ones(3))\n"
        "launch = args_viewable_as_strided_memory((0,))(lambda a: a.view(-1).ptr)\n"
        "launch(numpy.ones(2))\n"
        "print(getattr(sys, '_is_gil_enabled', lambda: True)())\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("False" if FREE_THREADED else "True")


def _fields(view):
    """Every field that needs no driver (a CAI view's device_id asks the driver for its pointer)."""
    fields = (view.ptr, view.shape, view.strides, view.dtype, view.readonly, view.is_device_accessible)
    if view.exporting_obj.__class__ is CAIProducer:
        return fields
    return (*fields, view.device_id)


@pytest.mark.slow
def test_many_threads_construct_launch_export_and_drop():
    """Eight threads construct views of every producer kind, launch, re-export and drop them,
    and hand views to each other: every field is the one-thread answer, every ctypes capsule
    is released exactly once, and every reference taken is given back."""
    matrix = np.arange(48, dtype=np.float32).reshape(6, 8)
    sliced = matrix[1:, ::3]
    scalar = np.array(2.5)
    readonly = np.arange(5, dtype=np.int16)
    readonly.flags.writeable = False
    record = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")])
    versioned = make_producer("versioned", shape=(3, 5), dtype="int16", hold_capsules=False)
    legacy = make_producer("legacy", shape=(7,), strides=(2,), dtype="uint8", hold_capsules=False)
    cai = CAIProducer(np.arange(10, dtype=np.int32).reshape(2, 5))
    buffer = bytearray(range(16))
    sources = {
        "matrix": lambda: StridedMemoryView(matrix, stream_ptr=-1),
        "sliced": lambda: StridedMemoryView(sliced),
        "scalar": lambda: StridedMemoryView(scalar),
        "readonly": lambda: StridedMemoryView(readonly),
        "record": lambda: StridedMemoryView.from_array_interface(record),
        "versioned": lambda: StridedMemoryView(versioned),
        "legacy": lambda: StridedMemoryView(legacy),
        "cai": lambda: StridedMemoryView(cai, stream_ptr=-1),
        "buffer": lambda: StridedMemoryView(buffer),
    }
    expected = {name: _fields(make()) for name, make in sources.items()}
    objects = [matrix, sliced, scalar, readonly, record, versioned, legacy, cai, buffer]
    refcounts = [sys.getrefcount(o) for o in objects]
    before = {id(p): set(p.tensor_ids) for p in (versioned, legacy)}

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        return [_fields(arg.view(-1)) for arg in (a, b, c)]

    launch_expected = [expected["matrix"], expected["sliced"], expected["scalar"]]
    handoff: list[list] = [[] for _ in range(THREADS)]
    lock = threading.Lock()
    iterations = 400

    def work(index):
        for round_ in range(iterations):
            for name, make in sources.items():
                view = make()
                if _fields(view) != expected[name]:
                    raise AssertionError(f"{name}: {_fields(view)} != {expected[name]}")
                if name in ("matrix", "sliced", "versioned"):
                    out = np.from_dlpack(view)  # re-export through DLPack
                    if out.ctypes.data != view.ptr or out.shape != view.shape:
                        raise AssertionError(f"{name}: numpy.from_dlpack of the view")
                    del out
                    view.__dlpack__(max_version=(1, 3))  # a capsule dropped unconsumed
                if name in ("matrix", "buffer", "readonly"):
                    exported = memoryview(view)  # the buffer protocol
                    if exported.readonly != view.readonly or exported.nbytes != np.asarray(view).nbytes:
                        raise AssertionError(f"{name}: buffer export")
                    exported.release()
                if name == "cai":
                    again = StridedMemoryView(view, stream_ptr=-1)  # a view of a view
                    if _fields(again) != expected[name]:
                        raise AssertionError("a view of a CAI view")
                    del again
                if (round_ + index) % 3 == 0:
                    with lock:  # the next thread drops this one
                        handoff[(index + 1) % THREADS].append(view)
                del view
            if launch(matrix, sliced, scalar) != launch_expected:
                raise AssertionError("a decorated launch saw other arguments")
            with lock:
                taken = handoff[index][:]
                handoff[index].clear()
            del taken

    run_threads([work] * THREADS, timeout=300)
    for bucket in handoff:
        bucket.clear()
    assert [sys.getrefcount(o) for o in objects] == refcounts
    for producer in (versioned, legacy):
        new = set(producer.tensor_ids) - before[id(producer)]
        counts = Counter(DELETER_CALLS[i] for i in new)
        assert counts == Counter({1: THREADS * iterations}), f"deleter calls per capsule: {counts}"
        forget(producer)


def test_threads_viewing_types_that_change_under_them():
    """Threads view instances of classes that other threads keep redefining (__dlpack__ given
    and taken away): each view follows the class as it is when viewed, and nothing crashes."""
    classes = [type(f"Changing{i}", (np.ndarray,), {}) for i in range(4)]
    arrays = [np.arange(6, dtype=np.float64).view(cls) for cls in classes]
    calls = Counter()

    def own_dlpack(self, **kwargs):
        calls[threading.get_ident()] += 1
        return np.ndarray.__dlpack__(self, **kwargs)

    def viewer(index):
        for round_ in range(400):
            array = arrays[(index + round_) % len(arrays)]
            view = StridedMemoryView(array)
            if view.ptr != array.ctypes.data or view.shape != (6,) or view.dtype != np.float64:
                raise AssertionError(repr(view))

    def changer(index):
        for round_ in range(400):
            cls = classes[(index + round_) % len(classes)]
            if round_ % 2:
                cls.__dlpack__ = own_dlpack
            elif "__dlpack__" in cls.__dict__:
                del cls.__dlpack__

    run_threads([viewer] * (THREADS - 2) + [changer] * 2, timeout=300)
    for cls in classes:  # settled: each class now viewed through what it has
        cls.__dlpack__ = own_dlpack
    calls.clear()
    for array in arrays:
        StridedMemoryView(array)
    assert sum(calls.values()) == len(arrays)


def test_threads_fill_the_dtype_caches_at_once():
    """Threads resolving many CAI typestrs and buffer formats for the first time at once
    (the dtype caches filled, and replaced, concurrently) all get numpy's dtype."""
    typestrs = ["<i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8",
                "<c8", "<c16", "|b1", "|V3", "|V5", "|V7", "|V9", "|V11", "|V13"]
    producers = [CAIProducer(np.zeros(4, dtype=np.dtype(t))) for t in typestrs]

    def work(index):
        for round_ in range(200):
            position = (index * 7 + round_) % len(producers)
            view = StridedMemoryView(producers[position], stream_ptr=-1)
            if view.dtype != np.dtype(typestrs[position]):
                raise AssertionError(f"{typestrs[position]} read as {view.dtype}")

    run_threads([work] * THREADS, timeout=300)



# --- The per-thread fast paths under load ---------------------------------------------------
# On a free-threaded build the interned objects, the type caches, the spare proxies and
# the views they keep, and the view freelist live in a state per thread, made on a
# thread's first view and released as it ends; objects shared between threads are never
# reused unless this thread provably holds the only reference.  These tests give those
# rules the situations that would break them: threads coming and going, proxies and views
# handed between threads while their launcher's thread reuses its own, classes changed
# and made under the viewers, and the collector handing other threads references to
# emptied spares.  (On a GIL build the same code runs with one state for the process.)

#: How many times the threads are started and joined (each time: every state made and
#: released).  tools/tsan.sh runs these tests under ThreadSanitizer with fewer.
ROUNDS = int(os.environ.get("STRIDEDVIEW_STRESS_ROUNDS", "6"))
#: Iterations of each worker in one round.
ITERATIONS = int(os.environ.get("STRIDEDVIEW_STRESS_ITERATIONS", "40"))


def _exchange_lender():
    """A host producer lending its DLTensor through the DLPack C exchange API."""
    import test_fuzz

    spec = {"device": (1, 0), "dtype": (2, 32, 1), "shape": [4], "ndim": 1, "strides": None,
            "byte_offset": 0, "data": 0x10000, "work_stream": None}
    return test_fuzz.ExchangeProducer(spec)


def _every_producer_kind():
    """{name: (object, make(object) -> view)}: every kind of producer installed here."""
    import array

    matrix = np.arange(48, dtype=np.float32).reshape(6, 8)
    readonly = np.arange(5, dtype=np.int16)
    readonly.flags.writeable = False
    plain = lambda obj: StridedMemoryView(obj, stream_ptr=-1)  # noqa: E731
    kinds = {
        "numpy": (matrix, plain),
        "numpy slice": (matrix[1:, ::3], lambda obj: StridedMemoryView(obj)),
        "numpy 0-d": (np.array(2.5), plain),
        "numpy read-only": (readonly, plain),
        "numpy 12-d": (np.zeros((1,) * 12), plain),  # a shape block: never kept
        # numpy's own __dlpack__ refuses bfloat16: a capsule producer lends it.
        "bfloat16": (make_producer("versioned", shape=(6,), dtype="bfloat16",
                                   hold_capsules=False), plain),
        "array interface": (np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
                            StridedMemoryView.from_array_interface),
        "versioned capsule": (make_producer("versioned", shape=(3, 5), dtype="int16",
                                            hold_capsules=False), plain),
        "legacy capsule": (make_producer("legacy", shape=(7,), strides=(2,), dtype="uint8",
                                         hold_capsules=False), plain),
        "exchange api": (_exchange_lender(), plain),
        "cai": (CAIProducer(np.arange(10, dtype=np.int32).reshape(2, 5)), plain),
        "bytearray": (bytearray(range(16)), plain),
        "array.array": (array.array("d", [1.0, 2.0, 3.0]), plain),
        "memoryview": (memoryview(bytes(8)).cast("i"), plain),
    }
    kinds["view of a view"] = (plain(matrix[::2]), plain)
    for module, make in (("torch", lambda m: m.arange(6.0).reshape(2, 3).t()),
                         ("jax", lambda m: m.numpy.arange(6.0))):
        try:
            library = __import__(module)
        except ImportError:
            continue
        kinds[module] = (make(library), plain)
    return kinds


def _changing_classes():
    """Subclasses of numpy.ndarray whose __dlpack__ a changer thread gives and takes away,
    with an instance of each (its view is the same whatever the class has)."""
    classes = [type(f"Changing{i}", (np.ndarray,), {}) for i in range(3)]
    return classes, [np.arange(6, dtype=np.float64).view(cls) for cls in classes]


def _own_dlpack(self, **kwargs):
    return np.ndarray.__dlpack__(self, **kwargs)


def _expected_fields(view):
    return (*_fields(view), view.exporting_obj)


def test_threads_coming_and_going_under_load():
    """Rounds of eight threads, started together and joined, each round making and
    releasing every thread's state: the threads view every producer kind installed, launch
    with field-reading bodies, re-export (DLPack, the buffer protocol) and drop; launch
    bodies hand their proxies and views to other threads, which view them and keep them a
    while; a changer thread redefines classes under them and makes new ones; a collector
    thread takes references to emptied spares through gc.get_objects() and checks that
    nothing fills them while it holds them.  Every field is the one-thread answer, every
    capsule is released exactly once, every reference is given back, and the count of
    per-thread states comes back to where it started after each round."""
    import gc

    kinds = _every_producer_kind()
    expected = {name: _expected_fields(make(obj)) for name, (obj, make) in kinds.items()}
    classes, instances = _changing_classes()
    names = list(kinds)
    # A launch's proxies view their objects as StridedMemoryView(obj) does: not the
    # structured array, which only from_array_interface views.
    launchable = [n for n in names if n != "array interface"]
    objects = [obj for obj, _ in kinds.values()] + instances
    capsule_producers = [kinds[n][0] for n in ("versioned capsule", "legacy capsule")]
    before = {id(p): set(p.tensor_ids) for p in capsule_producers}
    refcounts = [sys.getrefcount(o) for o in objects]  # capsule_producers' references included
    handoff: list = []  # proxies and views handed between threads
    lock = threading.Lock()

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c, hand_over=False):
        fields = [_expected_fields(arg.view(stream_ptr=-1)) for arg in (a, b, c)]
        if hand_over:
            view = b.view(-1)
            with lock:
                handoff.append(("proxy", a, fields[0]))
                handoff.append(("view", view, fields[1]))
        return fields

    def check_handed(item):
        kind, obj, fields = item
        got = _expected_fields(obj.view(-1) if kind == "proxy" else obj)
        if got != fields:
            raise AssertionError(f"a {kind} handed between threads changed: {got} != {fields}")

    def worker(index):
        for step in range(ITERATIONS):
            name = names[(index + step) % len(names)]
            obj, make = kinds[name]
            view = make(obj)
            if _expected_fields(view) != expected[name]:
                raise AssertionError(f"{name}: {_expected_fields(view)} != {expected[name]}")
            if name in ("numpy", "versioned capsule", "exchange api"):
                if name != "exchange api":
                    np.from_dlpack(view)  # re-exported through DLPack
                view.__dlpack__(max_version=(1, 3))  # a capsule dropped unconsumed
            if name in ("numpy", "bytearray", "memoryview"):
                memoryview(view).release()  # the buffer protocol
            instance = instances[(index + step) % len(instances)]
            if StridedMemoryView(instance).ptr != instance.ctypes.data:
                raise AssertionError("a class changed under the viewer was viewed wrongly")
            trio = [launchable[(index + step + k) % len(launchable)] for k in range(3)]
            args = [kinds[n][0] for n in trio]
            want = [expected[n] for n in trio]
            if launch(*args, hand_over=step % 4 == index % 4) != want:
                raise AssertionError("a launch saw other fields")
            taken = []
            with lock:
                if step % 3 == 0 and handoff:
                    taken = handoff[-2:]
                    del handoff[-2:]
            for item in taken:
                check_handed(item)

    def changer(index):
        for step in range(ITERATIONS):
            cls = classes[step % len(classes)]
            if step % 2:
                cls.__dlpack__ = _own_dlpack
            elif "__dlpack__" in cls.__dict__:
                del cls.__dlpack__
            fresh = type(f"Fresh{step}", (np.ndarray,), {})  # a type no cache has seen
            array = np.arange(3.0).view(fresh)
            if StridedMemoryView(array).ptr != array.ctypes.data:
                raise AssertionError("a new class viewed wrongly")

    def collector(index):
        for step in range(max(ITERATIONS // 8, 2)):
            # The spare proxies of every thread (emptied: obj None) and their emptied
            # views; held here, none may be handed to a launch or filled.
            spares = [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]
            held = [(p, r, (r.ptr, r.shape)) for p in spares[:8] for r in gc.get_referents(p)
                    if type(r) is StridedMemoryView]
            del spares
            for _ in range(20):  # launches run meanwhile (an emptied view keeps ptr and shape)
                if any(p.obj is not None or v.exporting_obj is not None or (v.ptr, v.shape) != kept
                       for p, v, kept in held):
                    raise AssertionError("a spare or its view held by another thread was used")
            del held

    baseline = _view._live_thread_states()
    for round_ in range(ROUNDS):
        run_threads([worker] * (THREADS - 2) + [changer, collector], timeout=600)
        handoff.clear()
        assert _view._live_thread_states() == baseline, (round_, _view._live_thread_states())
    for item in list(handoff):
        check_handed(item)
    handoff.clear()
    gc.collect()
    assert [sys.getrefcount(o) for o in objects] == refcounts
    for producer in capsule_producers:
        new = set(producer.tensor_ids) - before[id(producer)]
        counts = Counter(DELETER_CALLS[i] for i in new)
        assert set(counts) <= {1}, f"deleter calls per capsule: {counts}"
        forget(producer)
    kinds["exchange api"][0].close()


def test_a_thread_holding_a_spare_never_sees_it_reused():
    """Another thread holding a parked proxy and its emptied view (found through the
    collector) in locals only: forty launches on this thread never hand them out, as
    none may use an object another thread can reach (a count of one is no proof where
    threads run at once; the proxy and view are reused only while this thread owns them
    and holds their only reference)."""
    import gc

    @args_viewable_as_strided_memory((0, 1, 2))
    def record(a, b, c):
        handed.extend((id(a), id(a.view(-1)), id(b), id(b.view(-1)), id(c), id(c.view(-1))))

    handed: list[int] = []
    arrays = [np.arange(4.0) + i for i in range(3)]
    record(*arrays)
    gc.collect()
    spares = [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]
    if not _view.fast_paths:
        assert not spares
        return
    assert spares, "no spare proxy kept"
    found = threading.Event()
    done = threading.Event()
    ids = []

    def holder():
        proxy = spares[0]
        view = next((r for r in gc.get_referents(proxy) if type(r) is StridedMemoryView), None)
        kept = None if view is None else (view.ptr, view.shape)  # an emptied view keeps them
        ids.extend((id(proxy), id(view)))
        found.set()
        done.wait(60)
        if proxy.obj is not None or (
            view is not None and (view.exporting_obj is not None or (view.ptr, view.shape) != kept)
        ):
            raise AssertionError("a proxy or view held by another thread was filled")

    thread = threading.Thread(target=holder)
    thread.start()
    found.wait(60)
    del spares
    handed.clear()
    for round_ in range(40):
        record(*[a + round_ for a in arrays])
    done.set()
    thread.join(60)
    assert len(handed) == 40 * 6
    assert not set(ids) & set(handed), "an object another thread holds was handed to a launch"


def test_proxies_viewed_from_other_threads_while_their_launch_runs():
    """A launch body hands its proxies to other threads, which call view() on them while
    the body (on the launcher's thread, which owns the proxies) views them too: every
    view is right, and the proxies, kept by the other threads, keep their objects."""
    arrays = [np.arange(12.0).reshape(3, 4) + i for i in range(3)]
    expected = [_fields(StridedMemoryView(a, stream_ptr=-1)) for a in arrays]
    kept = []

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        proxies = (a, b, c)
        errors = []

        def other():
            for _ in range(50):
                for proxy, want in zip(proxies, expected):
                    if _fields(proxy.view(stream_ptr=-1)) != want:
                        errors.append(proxy)

        threads = [threading.Thread(target=other) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(50):
            for proxy, want in zip(proxies, expected):
                if _fields(proxy.view(-1)) != want:
                    errors.append(proxy)
        for t in threads:
            t.join(60)
        kept.append(proxies)
        return errors

    for _ in range(5):
        assert launch(*arrays) == []
    assert all(p.obj is a for proxies in kept for p, a in zip(proxies, arrays))


def test_views_made_in_one_thread_and_freed_in_another():
    """Views made on some threads and dropped on others (each dropping thread's freelist
    takes them, its next views reuse their memory) are right wherever they end up."""
    import queue

    arrays = [np.arange(i + 2, dtype=np.int64) for i in range(4)]
    expected = [_fields(StridedMemoryView(a, stream_ptr=-1)) for a in arrays]
    channel: queue.Queue = queue.Queue(maxsize=64)

    def maker(index):
        for step in range(400):
            channel.put(StridedMemoryView(arrays[(index + step) % 4], stream_ptr=-1))
        channel.put(None)

    def dropper(index):
        step = 0
        while True:  # until a maker's end (each maker sends one None, each dropper takes one)
            step += 1
            view = channel.get()
            if view is None:
                return
            if _fields(view) not in expected:
                raise AssertionError(repr(view))
            del view
            mine = StridedMemoryView(arrays[step % 4], stream_ptr=-1)  # reuses freed memory
            if _fields(mine) != expected[step % 4]:
                raise AssertionError(repr(mine))

    run_threads([maker, maker, dropper, dropper], timeout=300)
