"""What a new user meets in the first hour: the hints of the common mistakes, the guard for
torch's negative-stride abort, and the build facts the report shows."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import stridedview
from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory


@pytest.mark.parametrize("dtype", [[("a", "<f4"), ("b", "<i4")], "M8[s]", "m8[ms]", "S3", "U2"])
def test_numpy_dtype_dlpack_refuses_points_to_from_array_interface(dtype):
    """A numpy array whose dtype DLPack cannot carry names from_array_interface, which then views it."""
    array = np.zeros(3, dtype=dtype)
    with pytest.raises(BufferError, match=r"from_array_interface\(array\)") as info:
        StridedMemoryView(array)
    assert isinstance(info.value.__cause__, BufferError)  # numpy's own refusal, chained
    view = StridedMemoryView.from_array_interface(array)
    assert view.dtype == array.dtype and view.ptr == array.ctypes.data


def test_numpy_object_array_is_told_to_convert():
    """An object array, which no protocol carries, is refused with numpy's reason chained and a
    conversion to make first, not from_array_interface (which refuses it too)."""
    with pytest.raises(BufferError) as info:
        StridedMemoryView(np.zeros(2, dtype=object))
    message = str(info.value)
    assert message.startswith("dlpack: numpy cannot export an object array through DLPack (")
    assert message.endswith("convert it first, e.g. array.astype(numpy.float64)")
    assert "from_array_interface" not in message
    assert isinstance(info.value.__cause__, BufferError)  # numpy's own refusal
    with pytest.raises(BufferError, match="holds Python objects"):
        StridedMemoryView.from_array_interface(np.zeros(2, dtype=object))


class _DLPackOnly:
    def __dlpack__(self, **kwargs):
        return np.zeros(2).__dlpack__(**kwargs)


@pytest.mark.parametrize("entry", [StridedMemoryView, StridedMemoryView.from_dlpack])
def test_producer_without_dlpack_device_is_told_which_method_is_missing(entry):
    """A producer with __dlpack__ alone is told that __dlpack_device__ is missing, by the
    constructor and by from_dlpack alike."""
    with pytest.raises(BufferError, match=r"^dlpack: '_DLPackOnly' object has __dlpack__ but no "
                       r"__dlpack_device__: .*add the missing method$"):
        entry(_DLPackOnly())


@pytest.mark.parametrize("name", ["ptr", "shape", "strides", "dtype", "device_id", "readonly",
                                  "exporting_obj", "ready_stream", "ndim", "nbytes", "T", "view"])
def test_assigning_to_a_view_names_the_attribute(name):
    """Assigning to or deleting any attribute of a view names it and says what to do instead;
    the view is unchanged."""
    view = StridedMemoryView(np.zeros((2, 3)))
    before = view._asdict()
    with pytest.raises(AttributeError, match=rf"^StridedMemoryView\.{name} is read-only and cannot "
                       r"be assigned \(got 'int'\): .*make another view instead"):
        setattr(view, name, 0)
    with pytest.raises(AttributeError, match=rf"^StridedMemoryView\.{name} is read-only and cannot be deleted"):
        delattr(view, name)
    assert view._asdict() == before


def test_assigning_an_unknown_attribute_keeps_python_s_message():
    """A name the class does not have gets Python's own AttributeError (a view has no __dict__)."""
    with pytest.raises(AttributeError, match="has no attribute 'colour'"):
        StridedMemoryView(np.zeros(2)).colour = "red"


def test_decorated_list_gets_the_constructor_hint():
    """A list through the decorator gets the numpy.asarray hint the constructor gives."""
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x

    with pytest.raises(BufferError, match=r"numpy\.asarray\(obj\)"):
        launch([1.0, 2.0])


def test_proxy_view_names_stream_ptr_for_a_wrong_keyword():
    """arg.view(stream=...) says the keyword is stream_ptr; view(stream_ptr=...) works."""
    @args_viewable_as_strided_memory([0])
    def launch(x, **keywords):
        return x.view(**keywords)

    with pytest.raises(TypeError, match="'stream': the stream is passed as stream_ptr"):
        launch(np.zeros(2), stream=1)
    assert launch(np.zeros(2), stream_ptr=1).shape == (2,)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: np.float64(1.5), False),  # 0-d: min(view.strides) raised here
        (lambda: np.zeros((2, 3)), False),
        (lambda: np.zeros((2, 3))[:, ::-1], True),
        (lambda: np.zeros((2, 3))[::-1], True),
        (lambda: np.broadcast_to(np.zeros(3), (2, 3)), False),
    ],
)
def test_has_negative_stride(make, expected):
    """has_negative_stride is True exactly when some stride is negative, 0-d views included."""
    array = make()
    view = StridedMemoryView(array)
    assert view.has_negative_stride is expected
    assert view.has_negative_stride == any(s < 0 for s in array.strides)


def test_build_facts_are_exposed():
    """The build's C++ guard and GIL fast paths are plain bools the report can show."""
    assert isinstance(_view._built_with_cxx_guard, bool)
    assert isinstance(_view.fast_paths, bool)
    assert stridedview.__version__


@pytest.mark.torch
@pytest.mark.interop
def test_torch_cannot_take_a_negative_stride_view_as_the_docs_say(tmp_path):
    """torch.from_dlpack of a negative-stride view kills the process under torch 2.13 and raises
    RuntimeError under torch 2.14, as the report and the interop guide say (in a child process)."""
    torch = pytest.importorskip("torch")
    code = (
        "import numpy, torch\n"
        "from stridedview import StridedMemoryView\n"
        "torch.from_dlpack(StridedMemoryView(numpy.arange(6.0)[::-1]))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if release == (2, 13):
        assert completed.returncode < 0, completed  # killed by a signal (SIGABRT), no exception
    elif release == (2, 14):
        assert completed.returncode == 1 and "RuntimeError" in completed.stderr, completed
    else:  # not tested: the docs say only that torch cannot take it
        assert completed.returncode != 0, completed


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros((0, 3), np.float32),
        lambda: np.arange(12.0).reshape(3, 4)[:, 4:],  # a slice keeps its base's strides
        lambda: np.zeros((3, 0)).T,
        lambda: np.zeros(0, np.int16),
    ],
    ids=["fresh", "sliced", "transposed", "1-d"],
)
def test_an_empty_array_gives_one_view_by_every_entry_point(make):
    """An empty array's views all have strides of 0, whichever protocol made them (numpy's DLPack
    export, its array interface, the buffer protocol, from_buffer, a CUDA Array Interface dict)
    and so do views derived from them."""
    from test_export import HostCAI

    array = make()
    zeros = (0,) * array.ndim
    views = {
        "constructor": StridedMemoryView(array),
        "from_dlpack": StridedMemoryView.from_dlpack(array),
        "from_array_interface": StridedMemoryView.from_array_interface(array),
        "buffer protocol": StridedMemoryView(memoryview(np.ascontiguousarray(array))),
        "from_buffer": StridedMemoryView.from_buffer(bytearray(8), array.shape, dtype=array.dtype),
        "cuda array interface": StridedMemoryView(HostCAI(np.ascontiguousarray(array)), -1),
        "a slice of a view": StridedMemoryView(
            np.zeros((array.shape[0] + 1,) + array.shape[1:], array.dtype)
        )[: array.shape[0]],
    }
    for entry, view in views.items():
        assert (view.shape, view.strides, view.byte_strides) == (array.shape, zeros, zeros), entry
        assert view.is_c_contiguous and view.is_f_contiguous
    exported = np.from_dlpack(views["from_array_interface"])
    assert exported.shape == array.shape and exported.size == 0
