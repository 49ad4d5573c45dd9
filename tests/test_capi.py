"""The C-level API: a Cython extension (``from stridedview cimport StridedMemoryView``) and a
C extension (``stridedview.h`` from ``stridedview.get_include()``), both compiled here in a
temporary directory against the package under test, read every view's layout as C values.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import stridedview
from producers import DTYPES, make_producer
from stridedview import StridedMemoryView

from conftest import NO_COMPILER_ENV, NO_COMPILER_SKIP_REASON


def _c_compiler() -> str | None:
    """The C compiler Python's build tools would call, if it is on PATH."""
    import shutil
    import sysconfig

    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


# Only CI's wheel stage sets the variable, and only a machine truly without a compiler
# skips: with one on PATH the tests run whatever the variable says.
if os.environ.get(NO_COMPILER_ENV, "") == "1" and _c_compiler() is None:
    pytest.skip(NO_COMPILER_SKIP_REASON, allow_module_level=True)

pytest.importorskip("Cython")
pytest.importorskip("setuptools")

CYTHON_SOURCE = '''
# cython: language_level=3
from libc.stdint cimport int32_t, int64_t, uintptr_t
from stridedview cimport StridedMemoryView


def layout(StridedMemoryView view):
    """Every C-level accessor, as a tuple of Python values."""
    cdef int i, ndim = view.c_ndim()
    cdef const int64_t *shape = view.c_shape()
    cdef const int64_t *strides = view.c_strides()
    return (
        <uintptr_t>view.c_ptr(), ndim,
        tuple([shape[i] for i in range(ndim)]), tuple([strides[i] for i in range(ndim)]),
        view.c_itemsize(), view.c_size(), view.c_device_type(), view.c_readonly(),
        (view.c_dtype().code, view.c_dtype().bits, view.c_dtype().lanes),
        view.c_itemsize_bits(),
    )


def sum_1d(StridedMemoryView view):
    """Sum a 1-d view of int32, float32 or float64 elements, read as the type c_dtype() names."""
    cdef char *data = <char *>view.c_ptr()
    cdef int64_t i, step = view.c_strides()[0] * view.c_itemsize()
    cdef double total = 0
    cdef int code = view.c_dtype().code, bits = view.c_dtype().bits
    for i in range(view.c_shape()[0]):
        if code == 0 and bits == 32:
            total += (<int32_t *>(data + i * step))[0]
        elif code == 2 and bits == 32:
            total += (<float *>(data + i * step))[0]
        elif code == 2 and bits == 64:
            total += (<double *>(data + i * step))[0]
        else:
            raise TypeError(f"no sum for DLPack type ({code}, {bits})")
    return total


def device_id(StridedMemoryView view):
    """c_device_id(): the device ordinal, or the exception device_id raises."""
    return view.c_device_id()


def ptr_plus_ndim(StridedMemoryView view):
    return <uintptr_t>view.c_ptr() + view.c_ndim()


def sum_float64(StridedMemoryView view):
    """Sum a 2-d float64 view with its element strides, as a kernel would address it."""
    cdef const double *data = <const double *>view.c_ptr()
    cdef const int64_t *shape = view.c_shape()
    cdef const int64_t *strides = view.c_strides()
    cdef double total = 0
    cdef int64_t i, j
    for i in range(shape[0]):
        for j in range(shape[1]):
            total += data[i * strides[0] + j * strides[1]]
    return total
'''

C_SOURCE = r'''
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "stridedview.h"

static PyObject *layout(PyObject *self, PyObject *obj)
{
    if (!StridedView_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "not a StridedMemoryView");
        return NULL;
    }
    int ndim = StridedView_Ndim(obj);
    const int64_t *shape = StridedView_Shape(obj), *strides = StridedView_Strides(obj);
    PyObject *shape_tuple = PyTuple_New(ndim), *strides_tuple = PyTuple_New(ndim);
    for (int i = 0; i < ndim; i++) {
        PyTuple_SET_ITEM(shape_tuple, i, PyLong_FromLongLong(shape[i]));
        PyTuple_SET_ITEM(strides_tuple, i, PyLong_FromLongLong(strides[i]));
    }
    StridedViewDType dtype = StridedView_DType(obj);
    return Py_BuildValue("(KiNNLLii(iii)L)", (unsigned long long)(uintptr_t)StridedView_Ptr(obj),
                         ndim, shape_tuple, strides_tuple, (long long)StridedView_Itemsize(obj),
                         (long long)StridedView_Size(obj), StridedView_DeviceType(obj),
                         StridedView_Readonly(obj), (int)dtype.code, (int)dtype.bits,
                         (int)dtype.lanes, (long long)StridedView_ItemsizeBits(obj));
}

/* Sum a 1-d view of int32, float32 or float64 elements, read as the type the header names. */
static PyObject *sum_1d(PyObject *self, PyObject *obj)
{
    StridedViewDType dtype = StridedView_DType(obj);
    const char *data = (const char *)StridedView_Ptr(obj);
    int64_t step = StridedView_Strides(obj)[0] * StridedView_Itemsize(obj);
    double total = 0;
    for (int64_t i = 0; i < StridedView_Shape(obj)[0]; i++) {
        const char *item = data + i * step;
        if (dtype.code == STRIDEDVIEW_DTYPE_INT && dtype.bits == 32) {
            total += *(const int32_t *)item;
        } else if (dtype.code == STRIDEDVIEW_DTYPE_FLOAT && dtype.bits == 32) {
            total += *(const float *)item;
        } else if (dtype.code == STRIDEDVIEW_DTYPE_FLOAT && dtype.bits == 64) {
            total += *(const double *)item;
        } else {
            return PyErr_Format(PyExc_TypeError, "no sum for DLPack type (%d, %d)",
                                (int)dtype.code, (int)dtype.bits);
        }
    }
    return PyFloat_FromDouble(total);
}

/* StridedView_DeviceId: the ordinal, or NULL with its exception. */
static PyObject *device_id(PyObject *self, PyObject *obj)
{
    if (!StridedView_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "not a StridedMemoryView");
        return NULL;
    }
    int32_t ordinal = -7;
    if (StridedView_DeviceId(obj, &ordinal) < 0) {
        return NULL;
    }
    return PyLong_FromLong(ordinal);
}

static PyObject *api_version(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(II)", StridedView_CAPI->version, StridedView_CAPI->size);
}

static PyMethodDef methods[] = {
    {"layout", layout, METH_O, NULL},
    {"sum_1d", sum_1d, METH_O, NULL},
    {"device_id", device_id, METH_O, NULL},
    {"api_version", api_version, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sv_c_probe", NULL, -1, methods};

PyMODINIT_FUNC PyInit_sv_c_probe(void)
{
    if (StridedView_Import() < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}
'''

SETUP = '''
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("sv_cy_probe", ["sv_cy_probe.pyx"])],
        include_path=[{package_parent!r}],
        quiet=True,
    )
    + [Extension("sv_c_probe", ["sv_c_probe.c"], include_dirs=[{include!r}])],
)
'''


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """The two probe extensions, built against the package under test."""
    build = tmp_path_factory.mktemp("capi")
    package_parent = str(Path(stridedview.__file__).resolve().parent.parent)
    (build / "sv_cy_probe.pyx").write_text(CYTHON_SOURCE)
    (build / "sv_c_probe.c").write_text(C_SOURCE)
    (build / "setup.py").write_text(
        SETUP.format(package_parent=package_parent, include=stridedview.get_include())
    )
    env = dict(os.environ, PYTHONPATH=package_parent + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=build, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(build))
    try:
        import sv_c_probe
        import sv_cy_probe
    finally:
        sys.path.remove(str(build))
    return sv_cy_probe, sv_c_probe, build


def dlpack_type(dtype):
    """(code, bits, lanes) of a numpy dtype, from the DLPack specification's table of
    producers.py; (0, 0, 0) where no DLPack type describes it."""
    if dtype.fields is not None or dtype.name not in DTYPES:
        return (0, 0, 0)
    return (*DTYPES[dtype.name], 1)


def python_layout(view):
    # Device views here are CUDA Array Interface views (DLPack's kDLCUDA, 2), whose
    # device_id would need the driver.
    device_type = 2 if view.is_device_accessible else 1
    # Packed sub-byte elements have no dtype and no whole-byte item size (0 in C); a
    # vector type's void dtype names its DLPack type in its metadata.
    if view.dtype is None:
        itemsize, dl_type = 0, tuple(view.dlpack_dtype)
    elif view.dtype.metadata and "dlpack_dtype" in view.dtype.metadata:
        itemsize, dl_type = view.itemsize, tuple(view.dtype.metadata["dlpack_dtype"])
    else:
        itemsize, dl_type = view.itemsize, dlpack_type(view.dtype)
    return (view.ptr, view.ndim, view.shape, view.strides, itemsize, view.size,
            device_type, view.readonly, dl_type, view.itemsize_bits)


class Cai:
    def __init__(self, **interface):
        self.__cuda_array_interface__ = dict(
            {"shape": (3, 4), "typestr": "<i2", "data": (0x10000, True), "version": 3}, **interface
        )


def views():
    """(id, view) of views of many layouts and origins."""
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    deep = np.zeros((1,) * 10 + (3,), dtype=np.int8)
    readonly = np.arange(4.0)
    readonly.setflags(write=False)
    return [
        ("3d", StridedMemoryView(base)),
        ("sliced", StridedMemoryView(base[::-1, 1:, ::2])),
        ("transposed", StridedMemoryView(base.T)),
        ("0d", StridedMemoryView(np.array(1.5))),
        ("empty", StridedMemoryView(np.zeros((0, 7), dtype=np.int32))),
        ("11d-heap-dims", StridedMemoryView(deep)),
        ("readonly", StridedMemoryView(readonly)),
        ("bytes", StridedMemoryView(b"abc")),
        ("from-buffer", StridedMemoryView.from_buffer(bytearray(64), (4, 2), (4, 1), dtype=np.float32)),
        ("view-of-view", StridedMemoryView(StridedMemoryView(base[:, ::2]))),
        ("cai-row-major", StridedMemoryView(Cai(), stream_ptr=-1)),
        ("cai-strided", StridedMemoryView(Cai(strides=(2, 24)), stream_ptr=-1)),
        # A strided CAI view's DLPack type, from the last dtype's cache or looked up.
        ("cai-strided-float32", StridedMemoryView(Cai(typestr="<f4", strides=(4, 48)), stream_ptr=-1)),
        ("cai-strided-float32-again", StridedMemoryView(Cai(typestr="<f4", strides=(48, 4)), stream_ptr=-1)),
        # Derived layouts: each refreshes the C fields it changed.
        ("derived-index", StridedMemoryView(base)[1:, ::-2, 3]),
        ("derived-transpose", StridedMemoryView(base).transpose(2, 0, 1)),
        ("derived-reshape", StridedMemoryView(base).reshape(6, 10)),
        ("derived-dtype", StridedMemoryView(base).view(dtype=np.float32)),
        ("derived-broadcast", StridedMemoryView(base)[0, 0].broadcast_to((2, 5))),
        ("derived-12d", StridedMemoryView(deep)[..., None]),
        # Element types: each DLPack code a producer can send, and types DLPack has none for.
        ("bool", StridedMemoryView(np.array([True, False]))),
        ("uint16", StridedMemoryView(np.arange(3, dtype=np.uint16))),
        ("complex128", StridedMemoryView(np.zeros(2, dtype=np.complex128))),
        ("bfloat16", StridedMemoryView(make_producer(dtype="bfloat16", shape=(3,)))),
        ("float8_e5m2", StridedMemoryView(make_producer(dtype="float8_e5m2", shape=(2, 2)))),
        ("float4-padded", StridedMemoryView(make_producer(dtype="float4_e2m1fn", shape=(4,), flags=4))),
        ("float4-packed", StridedMemoryView(make_producer(dtype="float4_e2m1fn", shape=(2, 8)))),
        ("float4-pairs", StridedMemoryView(make_producer(dtype=(17, 4, 2), shape=(4,)))),
        ("float32x4", StridedMemoryView(make_producer(dtype=(2, 32, 4), shape=(3,)))),
        ("complex32", StridedMemoryView(make_producer(dtype="complex32", shape=(3,)))),
        ("bcomplex32", StridedMemoryView(make_producer(dtype="bcomplex32", shape=(3,)))),
        ("int4-ml_dtypes-array", StridedMemoryView(np.zeros(3, dtype=ml_dtypes.int4))),
        ("packed-reshaped", StridedMemoryView(make_producer(dtype="int4", shape=(16,))).reshape(2, 8)),
        ("structured", StridedMemoryView.from_array_interface(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))),
        ("datetime", StridedMemoryView.from_array_interface(np.zeros(2, dtype="M8[s]"))),
        ("cai-v2-bfloat16-as-V2", StridedMemoryView(Cai(typestr="<V2", version=2), stream_ptr=-1)),
        ("derived-dtype-int32", StridedMemoryView(base).view(dtype=np.int32)),
    ]


VIEWS = views()


@pytest.mark.slow
@pytest.mark.parametrize("view", [pytest.param(v, id=i) for i, v in VIEWS])
def test_cython_extension_reads_the_layout_as_c_values(probes, view):
    """A Cython extension's c_ptr/c_ndim/c_shape/c_strides/... equal the view's Python fields."""
    cython_probe, _, _ = probes
    assert cython_probe.layout(view) == python_layout(view)


@pytest.mark.parametrize("view", [pytest.param(v, id=i) for i, v in VIEWS])
def test_c_extension_reads_the_layout_through_the_header(probes, view):
    """A C extension using stridedview.h reads the same layout at the offsets the package reports."""
    _, c_probe, _ = probes
    assert c_probe.layout(view) == python_layout(view)


@pytest.mark.parametrize(
    "array", [np.arange(5, dtype=np.int32), np.arange(5, dtype=np.float32), np.arange(10.0)[::-2]],
    ids=["int32", "float32", "float64-strided"],
)
@pytest.mark.parametrize("probe", ["cython", "c"])
def test_c_consumers_tell_the_element_type(probes, probe, array):
    """A Cython and a C consumer read c_dtype()/StridedView_DType() to pick the element type,
    so an int32 view is summed as int32, not as float32; a type they do not handle is refused."""
    extension = probes[0] if probe == "cython" else probes[1]
    assert extension.sum_1d(StridedMemoryView(array)) == array.sum()
    with pytest.raises(TypeError, match=r"no sum for DLPack type \(1, 8\)"):
        extension.sum_1d(StridedMemoryView(np.arange(3, dtype=np.uint8)))


def test_header_and_pxd_offer_the_same_accessors():
    """stridedview.h's StridedView_* readers and _view.pxd's c_* accessors name the same fields,
    and the header's StridedViewCAPI and _c_api.pxi's declaration list the same offsets."""
    package = Path(stridedview.__file__).parent
    header = (Path(stridedview.get_include()) / "stridedview.h").read_text()
    pxd = (package / "_view.pxd").read_text()
    c_api = (package / "_c_api.pxi").read_text()
    readers = set(re.findall(r"static inline [\w *]+?\bStridedView_(\w+)\(PyObject \*view\)", header))
    accessors = set(re.findall(r"cdef inline [\w *]+?\bc_(\w+)\(self\) noexcept", pxd))
    camel = {
        "".join(part.capitalize() for part in name.split("_")).replace("Dtype", "DType")
        for name in accessors
    }
    assert camel == readers == {
        "Ptr", "Ndim", "Shape", "Strides", "Itemsize", "ItemsizeBits", "Size", "DeviceType",
        "Readonly", "DType",
    }
    header_fields = re.findall(r"^\s+Py_ssize_t (\w+_offset);", header, re.M)
    pxi_fields = re.findall(r"^\s+Py_ssize_t (\w+_offset)$", c_api, re.M)
    assert header_fields == pxi_fields and "dtype_offset" in header_fields
    # The device ordinal: a call on both sides (a CAI view asks the driver), appended last.
    assert "static inline int StridedView_DeviceId(PyObject *view, int32_t *device_id)" in header
    assert "cdef int32_t c_device_id(self) except -2" in pxd
    table = header[header.index("typedef struct StridedViewCAPI {"):header.index("} StridedViewCAPI;")]
    assert table.rstrip().splitlines()[-1].lstrip().startswith("int (*device_id)(PyObject *view, int32_t *out);")
    assert re.search(r"^\s+int \(\*device_id\)\(object, int32_t \*\) except -1$", c_api, re.M)


def test_cython_kernel_addresses_elements_with_the_strides(probes):
    """A Cython loop over c_ptr with c_strides reads exactly the view's elements."""
    cython_probe, _, _ = probes
    array = np.arange(30, dtype=np.float64).reshape(5, 6)[::-2, 1::2]
    assert cython_probe.sum_float64(StridedMemoryView(array)) == array.sum()


def test_c_extension_checks_the_type_and_the_api_version(probes):
    """The header's StridedView_Check refuses other objects; the imported table has this version."""
    _, c_probe, _ = probes
    with pytest.raises(TypeError, match="not a StridedMemoryView"):
        c_probe.layout(np.zeros(3))
    version, size = c_probe.api_version()
    header = (Path(stridedview.get_include()) / "stridedview.h").read_text()
    assert version == int(re.search(r"#define STRIDEDVIEW_C_API_VERSION (\d+)", header).group(1))
    offsets = re.findall(r"^\s+Py_ssize_t \w+_offset;", header, re.M)
    functions = re.findall(r"^\s+int \(\*\w+\)\(", header, re.M)
    assert size == 4 + 4 + 8 + 8 * len(offsets) + 8 * len(functions)  # the header's table, whole


def test_cython_accessors_compile_to_field_reads(probes):
    """The accessors are inlined field reads: the generated C looks up no attribute on the view."""
    _, _, build = probes
    generated = (build / "sv_cy_probe.c").read_text()
    body = re.search(
        r"static PyObject \*__pyx_pf_\w*ptr_plus_ndim\([^;{]*\) \{\n.*?\n\}\n", generated, re.S
    ).group(0)
    assert "GetAttr" not in body and "__pyx_n_s" not in body
    assert "StridedMemoryView_c_ptr(__pyx_v_view)" in body
    accessor = re.search(
        r"static CYTHON_INLINE void \*__pyx_f_\w*StridedMemoryView_c_ptr\([^;{]*\) \{\n.*?\n\}\n",
        generated, re.S,
    ).group(0)
    assert "->_ptr" in accessor


def test_shipped_files_are_in_the_package():
    """The .pxd files and the header ship with the package (package-data) and get_include finds them."""
    package = Path(stridedview.__file__).parent
    assert (package / "__init__.pxd").is_file()
    assert (package / "_view.pxd").is_file()
    assert Path(stridedview.get_include()) == package / "include"
    assert (Path(stridedview.get_include()) / "stridedview.h").is_file()
    # The clone's pyproject.toml (the package may be installed elsewhere, from a wheel).
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"stridedview.include" = ["*.h"]' in pyproject
    assert textwrap.dedent(stridedview.get_include.__doc__ or "").strip()


# --- the device ordinal ------------------------------------------------------------------


def device_views():
    """(id, view, ordinal) of views whose device ordinal needs no driver."""
    return [
        ("host", StridedMemoryView(np.zeros(3)), -1),
        ("bytes", StridedMemoryView(b"abc"), -1),
        ("cuda-0", StridedMemoryView(make_producer(device=(2, 0)), stream_ptr=-1), 0),
        ("cuda-1", StridedMemoryView(make_producer(device=(2, 1)), stream_ptr=-1), 1),
        ("cuda-3-derived", StridedMemoryView(make_producer(device=(2, 3), shape=(4, 2)), stream_ptr=-1)[1:].T, 3),
        ("pinned", StridedMemoryView(make_producer(device=(3, 0))), 0),
        ("managed", StridedMemoryView(make_producer(device=(13, 0)), stream_ptr=-1), 0),
    ]


@pytest.mark.parametrize("probe", ["cython", "c"])
@pytest.mark.parametrize("view,ordinal", [pytest.param(v, o, id=i) for i, v, o in device_views()])
def test_c_consumers_read_the_device_ordinal(probes, probe, view, ordinal):
    """c_device_id() and StridedView_DeviceId() give the device ordinal: -1 for host memory,
    the DLPack device_id for CUDA memory (device 1 reads 1), 0 for pinned and managed memory;
    the same as the view's device_id."""
    extension = probes[0] if probe == "cython" else probes[1]
    assert extension.device_id(view) == ordinal == view.device_id


@pytest.mark.parametrize("probe", ["cython", "c"])
def test_c_device_ordinal_of_a_cai_view_asks_the_driver(probes, probe, fake):
    """A CUDA Array Interface view's ordinal is asked of the driver on first use, through the
    C API as through device_id, and a failing driver call raises the same CUDAError."""
    extension = probes[0] if probe == "cython" else probes[1]
    fake.register_pointer(0x10000, 24, device=1)
    view = StridedMemoryView(Cai(), stream_ptr=-1)
    assert "device_id=?" in repr(view)
    assert extension.device_id(view) == 1 and view.device_id == 1
    unknown = StridedMemoryView(Cai(data=(0x900000, True)), stream_ptr=-1)  # no device owns it
    with pytest.raises(stridedview.CUDAError) as info:
        extension.device_id(unknown)
    with pytest.raises(stridedview.CUDAError) as again:
        unknown.device_id
    assert info.value.name == again.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_c_api_device_ordinal_refuses_another_object_through_ctypes():
    """The table's device_id function checks its argument itself: a ctypes caller has no
    StridedView_Check in front of it."""
    import ctypes

    import stridedview._view

    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = get_pointer(stridedview._view._C_API, b"stridedview._view._C_API")
    # version, size, view_type, then the offsets; the function pointer follows them.
    header = (Path(stridedview.get_include()) / "stridedview.h").read_text()
    offsets = len(re.findall(r"^\s+Py_ssize_t \w+_offset;", header, re.M))
    function = ctypes.c_void_p.from_address(table + 16 + 8 * offsets).value
    device_id_of = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_int32))(function)
    out = ctypes.c_int32(-7)
    with pytest.raises(TypeError, match=r"^StridedView_DeviceId: the object must be a StridedMemoryView \(got array"):
        device_id_of(np.zeros(3), ctypes.byref(out))
    assert out.value == -7
    assert device_id_of(StridedMemoryView(make_producer(device=(2, 1)), stream_ptr=-1), ctypes.byref(out)) == 0
    assert out.value == 1


def test_header_says_what_lanes_holds_for_undescribed_elements(probes):
    """stridedview.h's comment on lanes says what a C consumer reads: the lanes (1 but for
    vector types), or 0 with bits 0."""
    _, c_probe, _ = probes
    header = (Path(stridedview.get_include()) / "stridedview.h").read_text()
    assert (
        "uint16_t lanes;  /* lanes per element (1 but for vector types); 0 with bits 0 "
        "(no DLPack type describes the elements) */"
    ) in header
    structured = StridedMemoryView.from_array_interface(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    assert c_probe.layout(structured)[-2] == (0, 0, 0)
    assert c_probe.layout(StridedMemoryView(np.zeros(2, np.float32)))[-2] == (2, 32, 1)
