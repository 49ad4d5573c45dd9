"""Free-threaded CPython: the GIL stays off, the GIL-only machinery is compiled out, and
many threads constructing, launching, exporting and dropping views at once get the answers
one thread gets.

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
from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory
from test_cai import CAIProducer
from test_threads import fast_switching, run_threads  # noqa: F401 - fixture used by autouse

THREADS = 8
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_gil_fast_paths_are_compiled_out_of_a_free_threaded_build():
    """On a free-threaded interpreter the GIL-guarded caches, freelist and spares are not compiled in."""
    assert isinstance(_view.gil_fast_paths, bool)
    if FREE_THREADED:
        assert _view.gil_fast_paths is False


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

