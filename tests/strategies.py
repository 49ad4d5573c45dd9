"""Hypothesis strategies for the fuzz tests: hostile CUDA Array Interface dicts, DLPack
tensor specifications for the ctypes producer, and stream arguments.

Every strategy leans towards the edges a parser gets wrong (0, 1, -1, 2**31, 2**32,
2**63 - 1, 2**63, 2**64, products just below and above 2**63, ndim 64 and 65) while
still producing valid inputs often enough that the success path is exercised too.

Data pointers are never real memory: the view never reads the data, it only computes.
``SAFE_PTR`` is an address nothing is mapped at; the fuzz tests register a range above it
with the fake driver, so that a CAI view's ``device_id`` can be resolved.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from hypothesis import strategies as st

_STRATEGIES: dict = {}


def _once(key, factory):
    """The strategy ``factory()`` built once per ``key``: hypothesis strategies are costly to
    build and validate, and composites drawing fresh ones each time run ten times slower."""
    strategy = _STRATEGIES.get(key)
    if strategy is None:
        strategy = _STRATEGIES[key] = factory()
    return strategy


@functools.cache
def _ints(lo, hi):
    return st.integers(lo, hi)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1

#: An address with nothing behind it: parsers must never dereference a data pointer.
SAFE_PTR = 0x7E57_0000_0000
#: How far above SAFE_PTR the fuzzed pointers go (and the fake driver knows them).
SAFE_SPAN = 2**32

#: A consumer / producer stream handle no stream has (the fuzzers' "unknown" choice).
UNKNOWN_STREAM = 0x5EED_0000

#: Integers on the edges: int32, int64, uint64, and products around 2**63.
EDGE_INTS = (
    0, 1, -1, 2, 3, 4, 7, 8, 16, 64, 65,
    2**31 - 1, 2**31, 2**32 - 1, 2**32,
    3037000499, 3037000500,  # squares just below and just above 2**63 - 1
    2**62, 2**63 - 2, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**65, 2**100,
    -2, -8, -(2**31), -(2**31) - 1, -(2**63), -(2**63) - 1, -(2**64), -(2**100),
)
EDGE_INT64 = tuple(v for v in EDGE_INTS if INT64_MIN <= v <= INT64_MAX)
EDGE_UINT64 = tuple(v for v in EDGE_INTS if 0 <= v <= UINT64_MAX)
EDGE_INT32 = tuple(v for v in EDGE_INTS if INT32_MIN <= v <= INT32_MAX)


@functools.cache
def wide_ints() -> st.SearchStrategy[int]:
    """Any Python int, with the edges and small values weighted up."""
    return st.one_of(
        st.sampled_from(EDGE_INTS),
        st.integers(-4, 16),
        st.integers(-(2**70), 2**70),
    )


@functools.cache
def int64s() -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from(EDGE_INT64), st.integers(-4, 16), st.integers(INT64_MIN, INT64_MAX)
    )


@functools.cache
def uint64s() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(EDGE_UINT64), st.integers(0, 64), st.integers(0, UINT64_MAX))


@functools.cache
def int32s() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(EDGE_INT32), st.integers(-4, 20), st.integers(INT32_MIN, INT32_MAX))


class Opaque:
    """An arbitrary object with no protocol at all."""

    def __repr__(self):
        return "Opaque()"


class Index:
    """An object with ``__index__`` (numpy integers behave so)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __repr__(self):
        return f"Index({self.value!r})"


class CudaStream:
    """An object speaking ``__cuda_stream__``, returning ``answer`` (any object)."""

    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer

    def __repr__(self):
        return f"CudaStream({self.answer!r})"


@functools.cache
def scalars() -> st.SearchStrategy[object]:
    """Leaf values of any type a dict from a hostile producer could hold."""
    return st.one_of(
        st.none(),
        st.booleans(),
        wide_ints(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.complex_numbers(max_magnitude=1e3),
        st.text(max_size=6),
        st.binary(max_size=6),
        st.sampled_from([np.int64(3), np.int32(-1), np.uint64(2**64 - 1), np.float32(1.5), np.bool_(True)]),
        st.builds(Opaque),
        st.just(Ellipsis),
    )


@functools.cache
def garbage() -> st.SearchStrategy[object]:
    """Any nesting of scalars in lists, tuples and dicts."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=4), inner, max_size=3),
        ),
        max_leaves=8,
    )


# --- stream arguments -------------------------------------------------------------------------

@functools.cache
def stream_args(known: tuple[int, ...] = ()) -> st.SearchStrategy[object]:
    """``stream_ptr`` values: None, -1, the special handles, ``known`` handles, edges and junk."""
    handles = st.one_of(
        st.sampled_from((-1, 0, 1, 2) + tuple(known)),
        st.sampled_from((UNKNOWN_STREAM, 2**63, UINT64_MAX, 2**64, -2, -(2**63))),
    )
    return st.one_of(
        st.just(None),
        st.just(-1),
        handles,
        handles.map(Index),
        handles.map(lambda h: CudaStream((0, h))),
        st.sampled_from([True, False, 1.0, "1", b"\x01", Opaque(), [1], np.int64(7), np.uint8(1)]),
        garbage().map(CudaStream),
        st.sampled_from([CudaStream((0, True)), CudaStream((0,)), CudaStream([0, 5]), CudaStream((0, 2.0))]),
    )


# --- the CUDA Array Interface -----------------------------------------------------------------

#: A key to leave out of a CAI dict.
ABSENT = object()

NATIVE_TYPESTRS = (
    "<f4", "<f8", "<f2", "<i1", "<i2", "<i4", "<i8", "|i1", "|u1", "<u2", "<u4", "<u8",
    "|b1", "<c8", "<c16", "|V2", "<V2", "|V4", "|V8", "=f4", "=i8", "<M8", "<m8[ns]",
    "<U1", "|S3", "<f16",
)
ODD_TYPESTRS = (
    ">f4", ">i8", "|O8", "<O8", "|V0", "<U0", "|S0", "<q9", "<i0", "<f3", "f4", "<f", "",
    "<", "<<f4", "|S99999999999999999999", "<U1073741824", "<M8[foo]", "<f4\x00", "xf4",
    "!f4", "@f4", "<b2", "<?1", "|a4", "<f4 ", "<\u00e9\u00e9", "|V-1",
)


@functools.cache
@st.composite
def typestrs(draw) -> str | object:
    choice = draw(_ints(0, 9))
    if choice < 6:
        return draw(_once(1, lambda: st.sampled_from(NATIVE_TYPESTRS)))
    if choice < 8:
        return draw(_once(2, lambda: st.sampled_from(ODD_TYPESTRS)))
    if choice == 8:
        order = draw(_once(3, lambda: st.sampled_from("<>|=!@x")))
        kind = draw(_once(4, lambda: st.sampled_from("biufcmMOSUVaxz?e")))
        size = draw(_once(5, lambda: st.sampled_from(["", "0", "1", "2", "3", "4", "8", "16", "-1", str(2**31), str(2**64)])))
        return order + kind + size
    return draw(_once(6, lambda: st.one_of(st.text(max_size=6), garbage())))


def draw_descr(draw, typestr) -> object:
    """A ``descr`` for ``typestr`` (a plain function of ``draw``: no strategy built per call)."""
    choice = draw(_ints(0, 9))
    if choice < 4:
        return ABSENT
    if choice == 4:
        return None
    if choice < 7:
        return [("", typestr)]  # the CAI default: not structured
    if choice == 7:
        return draw(_STRUCTURED_DESCRS)
    return draw(garbage())


_STRUCTURED_DESCRS = st.sampled_from([
            [("x", "<f4"), ("y", "<i4")],
            [("x", "<f4")],
            [("a", "<f2"), ("b", "<f2")],
            [("a", "<f8", (2,))],
            [("a", "|O")],
            [("", "<f4"), ("", "<f4")],
            [("a", "<f4"), ("a", "<f4")],
            [("a", "<f4", (2**31, 2**31))],
            [("a", "<f4", (-1,))],
            [("a", "<f4", (0,))],
            [("a", [("b", "<f4")])],
            [(1, 2)],
            [("a",)],
            [[("a", "<f4")]],
            [("", ">f4")],
            [("x", ">f4")],
        ])


@functools.cache
@st.composite
def cai_shapes(draw) -> object:
    """Mostly tuples of small extents; also edges, deep ndim (64, 65, ...), lists and junk."""
    choice = draw(_ints(0, 11))
    if choice < 5:
        return tuple(draw(_once(7, lambda: st.lists(st.integers(0, 5), max_size=5))))
    if choice < 7:
        return tuple(draw(_once(8, lambda: st.lists(st.one_of(st.integers(0, 5), wide_ints()), max_size=5))))
    if choice == 7:
        ndim = draw(_once(9, lambda: st.sampled_from([32, 63, 64, 65, 100, 1000])))
        extents = draw(_once(10, lambda: st.sampled_from([1, 2, 0])))
        shape = [1] * ndim
        if extents != 1:
            shape[draw(_ints(0, ndim - 1))] = extents
        return tuple(shape)
    if choice == 8:
        return draw(_once(11, lambda: st.sampled_from([(3037000499, 3037000499), (3037000500, 3037000500),
                                     (2**31, 2**32), (2**31, 2**32 - 1), (2**62, 2), (2**62, 1, 2),
                                     (0, 2**62, 2**62), (2**63 - 1,), (2**63,), (-(2**63),),
                                     (-(2**63) - 1,), (0, -1), (2**64, 0)])))
    if choice == 9:
        return list(draw(_once(12, lambda: st.lists(st.integers(0, 5), max_size=4))))
    if choice == 10:
        return tuple(draw(_once(13, lambda: st.lists(scalars(), max_size=3))))
    return draw(garbage())


@functools.cache
def _byte_stride_for(itemsize):
    return st.one_of(
        st.integers(-16, 16).map(lambda k: k * itemsize),
        st.integers(-64, 64),
        int64s(),
        wide_ints(),
    )


def draw_cai_strides(draw, shape, itemsize) -> object:
    """``strides`` for ``shape`` (a plain function of ``draw``: no strategy built per call)."""
    choice = draw(_ints(0, 9))
    if choice < 3:
        return ABSENT
    if choice < 4:
        return None
    ndim = len(shape) if isinstance(shape, (tuple, list)) else draw(_ints(0, 3))
    if choice < 8 and ndim <= 70:
        strides = tuple(draw(_once(
            ("byte strides", itemsize, ndim),
            lambda: st.lists(_byte_stride_for(itemsize), min_size=ndim, max_size=ndim),
        )))
        return list(strides) if choice == 7 else strides
    if choice == 8:
        return tuple(draw(_once(14, lambda: st.lists(st.integers(-8, 8), max_size=4))))  # wrong length, mostly
    return draw(garbage())


@st.composite
def cai_dicts(draw, known_streams: tuple[int, ...] = ()) -> object:
    """A ``__cuda_array_interface__`` value: mostly a dict, every key valid, odd, junk or absent."""
    if draw(_ints(0, 30)) == 0:
        return draw(garbage())
    interface: dict = {}

    def put(key, value):
        if value is not ABSENT:
            interface[key] = value

    put("version", draw(_once(15, lambda: st.one_of(
        st.sampled_from([3, 3, 3, 2, 1, 0]), st.sampled_from([ABSENT, -1, 4, True, "3", 3.0, 2**64]),
    ))))
    shape = draw(_once(16, lambda: st.one_of(cai_shapes(), st.just(ABSENT))) if draw(_ints(0, 20)) == 0 else cai_shapes())
    put("shape", shape)
    typestr = draw(_once(17, lambda: st.just(ABSENT)) if draw(_ints(0, 30)) == 0 else typestrs())
    put("typestr", typestr)
    if isinstance(typestr, str):
        put("descr", draw_descr(draw, typestr))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            itemsize = max(np.dtype(typestr).itemsize, 1) if isinstance(typestr, str) else 4
    except Exception:
        itemsize = 4
    ptr = draw(_once(18, lambda: st.one_of(
        st.integers(0, SAFE_SPAN - 1).map(lambda k: SAFE_PTR + k * 8),
        st.just(SAFE_PTR),
        st.just(0),
        st.sampled_from([UINT64_MAX, 2**64, -1, -(2**63), 2**63, True, 1.0, None, "0x10"]),
    )))
    readonly = draw(_once(19, lambda: st.sampled_from([False, True, False, 0, 1, 2, None, "yes", 1.0, np.bool_(True)])))
    data_choice = draw(_ints(0, 20))
    if data_choice == 0:
        put("data", ABSENT)
    elif data_choice == 1:
        put("data", [[ptr, readonly], (ptr,), (ptr, readonly, 0), ptr, None][draw(_ints(0, 4))])
    else:
        put("data", (ptr, readonly))
    put("strides", draw_cai_strides(draw, shape, itemsize))
    put("mask", draw(_once(20, lambda: st.sampled_from([ABSENT] * 8 + [None, None, Opaque(), False, 0]))))
    put("stream", draw(_once(("stream key", known_streams), lambda: st.one_of(
        st.just(ABSENT), st.just(ABSENT), st.just(None),
        st.sampled_from((1, 2) + tuple(known_streams)),
        st.sampled_from([0, -1, UNKNOWN_STREAM, 2**64, UINT64_MAX, True, 1.5, "1"]),
    ))))
    if draw(_ints(0, 4)) == 0:  # unknown keys are ignored (drawn now and then: garbage is costly)
        extra = draw(_once(22, lambda: st.dictionaries(st.text(max_size=5), garbage(), max_size=2)))
        for key, value in extra.items():
            interface.setdefault(key, value)
    return interface


# --- DLPack ------------------------------------------------------------------------------------

#: Sentinel capsule name: the capsule is given a NULL name.
NULL_NAME = "<NULL>"

VALID_DTYPES = (
    (0, 8, 1), (0, 16, 1), (0, 32, 1), (0, 64, 1), (1, 8, 1), (1, 64, 1), (2, 16, 1), (2, 32, 1),
    (2, 64, 1), (4, 16, 1), (5, 64, 1), (5, 128, 1), (6, 8, 1), (7, 8, 1), (10, 8, 1), (14, 8, 1),
    (15, 6, 1), (16, 6, 1), (17, 4, 1),
)
ODD_DTYPES = (
    (0, 12, 1), (0, 0, 1), (4, 32, 1), (2, 8, 1), (6, 1, 1), (3, 64, 1), (18, 8, 1), (31, 255, 1),
    (32, 8, 1), (255, 255, 1), (2, 32, 4), (2, 32, 0), (0, 8, 65535), (17, 8, 1), (15, 8, 1),
    (5, 32, 1),
)

DEVICE_TYPES = (1, 1, 1, 2, 2, 3, 13, 4, 7, 10, 0, 18, 19, -1, INT32_MAX, INT32_MIN)


@functools.cache
@st.composite
def dlpack_dtypes(draw):
    choice = draw(_ints(0, 9))
    if choice < 6:
        return draw(_once(23, lambda: st.sampled_from(VALID_DTYPES)))
    if choice < 9:
        return draw(_once(24, lambda: st.sampled_from(ODD_DTYPES)))
    return (draw(_ints(0, 255)), draw(_ints(0, 255)), draw(_ints(0, 65535)))


@functools.cache
@st.composite
def dlpack_layouts(draw):
    """(shape array, ndim, strides array) with ndim never past an array's length.

    shape None is a NULL shape pointer; strides None a NULL strides pointer.  A
    producer lying about ndim beyond its arrays makes any consumer read past them,
    which no consumer can detect: that is not fuzzed.
    """
    choice = draw(_ints(0, 11))
    if choice < 5:
        shape = draw(_once(25, lambda: st.lists(st.integers(0, 5), max_size=5)))
    elif choice < 7:
        shape = draw(_once(26, lambda: st.lists(st.one_of(st.integers(0, 5), int64s()), max_size=5)))
    elif choice == 7:
        n = draw(_once(27, lambda: st.sampled_from([63, 64, 65, 200, 5000])))
        shape = [1] * n
        shape[draw(_ints(0, n - 1))] = draw(_once(28, lambda: st.sampled_from([0, 2, 3])))
    elif choice == 8:
        shape = list(draw(_once(29, lambda: st.sampled_from([
            (3037000499, 3037000499), (3037000500, 3037000500), (2**31, 2**32), (2**31, 2**32 - 1),
            (2**62, 2), (0, 2**62, 2**62), (2**63 - 1,), (2**63 - 1, 1), (2**63 - 1, 2, 0),
            (1, -1), (-(2**63),), (2**40, 2**40, 0, -1),
        ]))))
    else:
        shape = draw(_once(30, lambda: st.lists(st.integers(0, 3), max_size=3)))
    null_shape = draw(_ints(0, 15)) == 0
    ndim_choice = draw(_ints(0, 9))
    if ndim_choice < 7:
        ndim = len(shape)
    elif ndim_choice < 9:
        ndim = draw(_ints(0, len(shape)))
    else:
        ndim = draw(_once(31, lambda: st.sampled_from([-1, -7, INT32_MIN])))
    strides_choice = draw(_ints(0, 6))
    if strides_choice < 2:
        strides = None
    elif strides_choice < 4:
        strides = draw(_once(
            ("small strides", len(shape)),
            lambda: st.lists(st.integers(-4, 8), min_size=len(shape), max_size=len(shape)),
        ))
    else:
        strides = draw(_once(
            ("int64 strides", len(shape)),
            lambda: st.lists(int64s(), min_size=len(shape), max_size=len(shape)),
        ))
    if null_shape:
        shape_array = None
        ndim = [0, ndim, 3, -1][draw(_ints(0, 3))]
        if strides is not None and len(strides) < max(ndim, 0):
            strides = None
    else:
        shape_array = shape
    return shape_array, ndim, strides


@functools.cache
@st.composite
def dlpack_specs(draw):
    """Everything the ctypes producer writes into one capsule, plus how it answers."""
    kind = draw(_once(32, lambda: st.sampled_from(["versioned", "legacy"])))
    shape, ndim, strides = draw(dlpack_layouts())
    device_type = draw(_once(33, lambda: st.sampled_from(DEVICE_TYPES)))
    device_id = draw(_once(34, lambda: st.one_of(st.just(0), st.just(0), st.integers(0, 8), int32s())))
    device = (device_type, device_id)
    reported_choice = draw(_ints(0, 19))
    if reported_choice < 16:
        reported = device
    elif reported_choice < 18:
        reported = (draw(_once(35, lambda: st.sampled_from(DEVICE_TYPES))), draw(_ints(0, 2)))
    else:
        reported = draw(_once(36, lambda: st.one_of(
            st.sampled_from([(1,), (1, 0, 0), [1, 0], (1.0, 0), (True, False), (2**31, 0), (1, 2**40),
                             None, "cpu", (np.int64(1), np.int32(0))]),
            garbage(),
        )))
    if kind == "versioned":
        names = ["dltensor_versioned"] * 12 + ["used_dltensor_versioned", "used_dltensor", "used_x"]
    else:
        names = ["dltensor"] * 12 + ["used_dltensor", "used_dltensor_versioned"]
    names += ["foo", "", "DLTENSOR", "dltensor_", NULL_NAME]
    name = draw(_once(("names", kind), lambda: st.sampled_from(names)))
    mode = draw(_once(38, lambda: st.sampled_from(["capsule"] * 18 + ["not_capsule", "raise"])))
    return {
        "kind": kind,
        "old_api": draw(_ints(0, 7)) == 0,
        "version": (
            draw(_once(39, lambda: st.sampled_from([1, 1, 1, 1, 0, 2, 2**32 - 1]))),
            draw(_once(40, lambda: st.sampled_from([0, 1, 2, 3, 4, 2**32 - 1]))),
        ),
        "flags": draw(_once(41, lambda: st.one_of(st.integers(0, 7), uint64s()))),
        "device": device,
        "reported_device": reported,
        "dtype": draw(dlpack_dtypes()),
        "shape": shape,
        "ndim": ndim,
        "strides": strides,
        "byte_offset": draw(_once(42, lambda: st.one_of(st.just(0), st.just(0), st.integers(0, 4096), uint64s()))),
        "data": draw(_once(43, lambda: st.one_of(
            st.just(SAFE_PTR), st.just(0), st.integers(0, SAFE_SPAN).map(lambda k: SAFE_PTR + k),
            uint64s(),
        ))),
        "capsule_name": name,
        "null_deleter": draw(_ints(0, 9)) == 0,
        "mode": mode,
        # What __dlpack__ returns in mode "not_capsule" (drawn only then: garbage is costly).
        "returns": draw(garbage()) if mode == "not_capsule" else None,
        # (class, message): the test makes a fresh exception per example.
        "raises": draw(_once(44, lambda: st.sampled_from([
            (BufferError, "producer refuses"), (TypeError, "bad stream"), (RuntimeError, "boom"),
            (ValueError, "no"), (TypeError, "unexpected keyword argument 'max_version'"),
        ]))) if mode == "raise" else (BufferError, "unused"),
    }


@functools.cache
@st.composite
def exchange_specs(draw):
    """A DLTensor lent through the DLPack C exchange API (no capsule, no names, no version)."""
    shape, ndim, strides = draw(dlpack_layouts())
    return {
        "device": (draw(_once(45, lambda: st.sampled_from(DEVICE_TYPES))), draw(_once(46, lambda: st.one_of(st.just(0), int32s())))),
        "dtype": draw(dlpack_dtypes()),
        "shape": shape,
        "ndim": ndim,
        "strides": strides,
        "byte_offset": draw(_once(47, lambda: st.one_of(st.just(0), st.integers(0, 4096), uint64s()))),
        "data": draw(_once(48, lambda: st.one_of(st.just(SAFE_PTR), st.just(0), uint64s()))),
        # The producer's current work stream: 0 (NULL, the legacy default stream), 1, 2,
        # "fake" (the fuzzer's own ordinary stream), "unknown" (UNKNOWN_STREAM), or None
        # (the exchange API's current_work_stream slot is NULL).
        "work_stream": draw(_once(49, lambda: st.sampled_from([0, 0, 1, 2, "fake", "fake", "unknown", None]))),
    }


# --- Layouts (tests/test_layout.py) ------------------------------------------------------

#: Element types the layout tests draw, of item sizes 1 to 16.
LAYOUT_DTYPES = ("int8", "int16", "float32", "int64", "complex128")


@st.composite
def strided_layouts(draw, max_ndim=4, max_extent=4, max_stride=6):
    """``(shape, strides in elements, dtype name)``: 0-d to ``max_ndim``-d, extents 0 to
    ``max_extent`` (extent 1 weighted up), strides from -``max_stride`` to ``max_stride``
    (0 and negative included), so zero-size, broadcast and reversed layouts all occur."""
    ndim = draw(st.integers(0, max_ndim))
    shape = tuple(
        draw(st.one_of(st.just(1), st.integers(0, max_extent))) for _ in range(ndim)
    )
    strides = tuple(
        draw(st.one_of(st.integers(-max_stride, max_stride), st.just(0), st.just(1)))
        for _ in range(ndim)
    )
    # Now and then a gap-free layout (C order or a permutation), where reshape succeeds.
    if ndim and draw(st.integers(0, 3)) == 0:
        order = draw(st.permutations(range(ndim)))
        step, dense = 1, [0] * ndim
        for axis in reversed(order):
            dense[axis] = step
            step *= max(shape[axis], 1)
        strides = tuple(dense)
    return shape, strides, draw(st.sampled_from(LAYOUT_DTYPES))


@st.composite
def shapes_of_size(draw, size, max_ndim=5):
    """A shape whose extents multiply to ``size``, extent-1 axes sprinkled in, one extent
    sometimes -1 (to be inferred)."""
    if size == 0:
        shape = list(draw(st.lists(st.integers(0, 4), min_size=1, max_size=max_ndim)))
        shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    factors, rest, p = [], size, 2
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    bins = draw(st.integers(0, max_ndim)) if factors else draw(st.integers(0, 2))
    bins = max(bins, 1) if factors else bins
    shape = [1] * bins
    for factor in factors:
        shape[draw(st.integers(0, bins - 1))] *= factor
    shape = tuple(shape)
    if shape and draw(st.booleans()):
        unknown = draw(st.integers(0, len(shape) - 1))
        shape = shape[:unknown] + (-1,) + shape[unknown + 1:]
    return shape
