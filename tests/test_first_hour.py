"""What a new user meets in the first hour: the hints of the common mistakes, the guard for
torch's negative-stride abort, and the build facts the report shows (issue 22)."""

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


def test_numpy_object_dtype_gets_no_from_array_interface_hint():
    """An object array, which no protocol here carries, keeps numpy's own message."""
    with pytest.raises(BufferError) as info:
        StridedMemoryView(np.zeros(2, dtype=object))
    assert "from_array_interface" not in str(info.value)


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
    assert isinstance(_view.gil_fast_paths, bool)
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
