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


# --- issue 39: the third pass's frictions ---------------------------------------------------


class _LegacyPinnedBuffer:
    """A Buffer as cuda.core's legacy pinned resource makes it: device-accessible and
    host-accessible, whose ``device_id`` property raises (the resource is bound to no GPU)."""

    def __init__(self, data, device_accessible=True):
        self.data = data
        self.is_device_accessible = device_accessible
        self.is_host_accessible = True
        self.is_managed = False

    @property
    def handle(self):
        return self.data.ctypes.data

    @property
    def size(self):
        return self.data.nbytes

    @property
    def device_id(self):
        raise RuntimeError("a pinned memory resource is not bound to any GPU")


def test_from_buffer_takes_a_pinned_buffer_whose_device_id_raises():
    """from_buffer views a legacy pinned Buffer (its device_id raises RuntimeError) as pinned
    memory of device 0, as the constructor does through its DLPack; a host Buffer's device_id
    is never read."""
    data = np.zeros(16, dtype=np.uint8)
    view = StridedMemoryView.from_buffer(_LegacyPinnedBuffer(data), (4,), dtype=np.float32)
    assert view.__dlpack_device__() == (3, 0) and view.device_id == 0
    assert view.ptr == data.ctypes.data and view.shape == (4,) and view.is_device_accessible
    host = StridedMemoryView.from_buffer(_LegacyPinnedBuffer(data, device_accessible=False), (16,), itemsize=1)
    assert host.device_id == -1 and not host.is_device_accessible


@pytest.mark.parametrize("stream", [12345, type("S", (), {"__cuda_stream__": lambda self: (0, 7)})()],
                         ids=["handle", "stream-object"])
def test_view_of_a_stream_says_view_takes_none(stream):
    """smv.view(stream) (the launcher argument's view(stream_ptr) in mind) is told that
    StridedMemoryView.view takes a layout and no stream, and which view does."""
    with pytest.raises(TypeError, match=r"^view: layout must have shape, strides and itemsize.*: "
                       r"a stream\? StridedMemoryView\.view\(layout=None, dtype=None\) takes none .*"
                       r"ViewableArgument\.view\(stream_ptr\)"):
        StridedMemoryView(np.zeros(3)).view(stream)
    with pytest.raises(TypeError) as info:
        StridedMemoryView(np.zeros(3)).view((2, 3))
    assert "a stream?" not in str(info.value)  # not a stream: no hint


@pytest.mark.parametrize("name", ["ptr", "shape", "strides", "dtype", "device_id"])
def test_launch_argument_field_says_call_view(name):
    """A view's field read from a launcher's argument is an AttributeError saying to call
    .view(stream_ptr) first; hasattr stays False, and the view has the field."""
    seen = {}

    @args_viewable_as_strided_memory([0])
    def launch(x):
        seen["has"] = hasattr(x, name)
        with pytest.raises(AttributeError, match=rf"^'ViewableArgument' object has no attribute "
                           rf"'{name}': it is the launch argument, not its view; call "
                           rf"\.view\(stream_ptr\) .* read \.{name} from the StridedMemoryView"):
            getattr(x, name)
        return getattr(x.view(), name)

    array = np.zeros((2, 3))
    assert launch(array) == getattr(StridedMemoryView(array), name)
    assert seen["has"] is False


def test_a_capsule_passed_for_its_array_is_told_to_pass_the_array():
    """A DLPack capsule given where the array belongs (constructor and decorator) is refused with
    "pass the array itself"; the capsule is left unconsumed."""
    import ctypes

    capsule = np.arange(3.0).__dlpack__()
    with pytest.raises(BufferError, match=r"^stridedview: a PyCapsule \('dltensor'\) is not an array: "
                       r"pass the array itself"):
        StridedMemoryView(capsule)

    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x

    with pytest.raises(BufferError, match=r"^args_viewable_as_strided_memory: argument 'x' "
                       r"\('PyCapsule' object\).*: pass the array itself, not a capsule of it"):
        launch(capsule)
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert get_name(capsule) == b"dltensor"


def test_a_stream_object_with_only_ptr_is_told_to_pass_ptr():
    """A stream object without __cuda_stream__ but with an int .ptr (CuPy's, before it had the
    protocol) is told to pass stream.ptr; one with neither gets no hint."""
    class CupyStyleStream:
        ptr = 0x1234

    with pytest.raises(TypeError, match=r"^stream: stream_ptr must be None, an int, or an object "
                       r"with __cuda_stream__ \(got .*CupyStyleStream.*\): pass its handle, "
                       r"stream_ptr=stream\.ptr \(an int here\)$"):
        StridedMemoryView(np.zeros(2), stream_ptr=CupyStyleStream())
    with pytest.raises(TypeError) as info:
        StridedMemoryView(np.zeros(2), stream_ptr=object())
    assert str(info.value).endswith(")")


def test_a_big_endian_array_is_told_how_to_convert():
    """A big-endian numpy array gets a message naming the conversion, numpy's refusal chained."""
    array = np.arange(3, dtype=">f4")
    with pytest.raises(BufferError, match=r"^dlpack: numpy cannot export the non-native byte order "
                       r"of '>f4' through DLPack \(.*\).*convert it first, e\.g\. "
                       r"array\.astype\(array\.dtype\.newbyteorder\('='\)\)$") as info:
        StridedMemoryView(array)
    assert isinstance(info.value.__cause__, BufferError)
    converted = StridedMemoryView(array.astype(array.dtype.newbyteorder("=")))
    assert converted.dtype == np.dtype("=f4")


def test_device_messages_show_no_unknown_device(fake):
    """A CAI view of device memory refused as a host buffer names its device once known, and
    never shows '(device ?)' before (the error path does not call the driver)."""
    class DeviceCAI:
        __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0x20000, False), "version": 3}

    view = StridedMemoryView(DeviceCAI(), stream_ptr=-1)
    for export in (memoryview, lambda v: v.__array_interface__):
        with pytest.raises(BufferError) as info:
            export(view)
        assert "(device ?)" not in str(info.value)
        assert "the view holds CUDA device memory, " in str(info.value)
    assert fake.calls == [] or all(call[0] != "cuPointerGetAttribute" for call in fake.calls)
    fake.register_pointer(0x20000, 12, device=1)
    assert view.device_id == 1
    with pytest.raises(BufferError, match=r"the view holds CUDA device memory \(device 1\), "):
        memoryview(view)


def test_help_points_at_the_documentation_not_the_stubs():
    """help(StridedMemoryView) sends readers to the documentation, not a private stub file,
    and names record_stream."""
    doc = StridedMemoryView.__doc__
    assert "_view.pyi" not in doc and "record_stream" in doc
    assert "API reference" in doc


@pytest.mark.slow
@pytest.mark.parametrize("simulated", [True, False], ids=["simulated-device", "real-gpu"])
def test_gpu_import_names_the_extra_the_device_needs(pytester, monkeypatch, simulated):
    """A gpu test whose library is missing names the extra that device needs: on the simulated
    device it skips (README's "No GPU?" command is green with the test extra alone), naming
    the full extra (its numba-cuda), not the gpu extra (whose CuPy cannot run there), and under
    STRIDEDVIEW_REQUIRE_INTEROP=1 (CI) that skip fails the run; on a real GPU it fails, naming
    the gpu extra."""
    from pathlib import Path

    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    conftest = Path(__file__).with_name("conftest.py").read_text()
    pytester.makeconftest(
        conftest + f"\n\ndef has_cuda_gpu():\n    return True\n\n\ndef simulated_gpu():\n    return {simulated}\n"
    )
    pytester.makeini("[pytest]\nmarkers =\n    gpu: gpu\n    real_gpu: real\n    simgpu: sim\n")
    pytester.makepyfile(test_gpu=(
        "import pytest\nfrom conftest import gpu_import\n\n\n@pytest.mark.gpu\n"
        "def test_needs():\n    gpu_import('stridedview_no_such_gpu_library')\n"
    ))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    out = result.stdout.str()
    if simulated:
        result.assert_outcomes(skipped=1)
        assert "could not import 'stridedview_no_such_gpu_library'" in out
        assert "on the simulated CUDA device this gpu test needs the full extra" in out
        assert 'pip install -e ".[test,full]"' in out and "has a CUDA GPU" not in out
        monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
        refused = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        assert refused.ret != 0 and "skips not allowed" in refused.stdout.str()
    else:
        result.assert_outcomes(failed=1)
        assert "this machine has a CUDA GPU but stridedview_no_such_gpu_library" in out
        assert '".[test,gpu]"' in out and "simulated" not in out


# --- the documentation a new user reads -----------------------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _read(relative: str) -> str:
    return (ROOT / relative).read_text()


def test_record_stream_is_where_launcher_authors_look():
    """README's 30 seconds and the quick start say when record_stream is needed (temporaries from
    a stream-ordered allocator) and name the example that runs without a GPU; that example and
    the launcher example exist, and the launcher example orders by default."""
    for page in ("README.md", "docs/quickstart.md"):
        text = " ".join(_read(page).split())
        assert "record_stream" in text and "stream-ordered allocator" in text, page
        assert "examples/launcher_temporaries.py" in text, page
    launcher = _read("examples/launcher.py")
    assert "stream_ptr: int | None = None" in launcher and "stream_ptr: int = -1" not in launcher


def test_mpi_page_says_what_dlpack_stream_none_orders():
    """docs/mpi.md no longer says a view's __dlpack__(stream=None) orders nothing: it records an
    event and makes the legacy stream wait (docs/concepts.md's table; tests/test_export.py)."""
    text = " ".join(_read("docs/mpi.md").split())
    assert "`__dlpack__(stream=None)` orders nothing" not in text
    assert "legacy default stream" in text and "wait" in text


def test_testing_without_a_gpu_page_names_the_extra_and_the_command():
    """The users' page on the simulated device names its distribution, the commands (the
    plugin's flag, the runner, the clone's wrapper), kernels that compute, and what the
    simulator cannot show; it is in the user's part of the docs."""
    text = " ".join(_read("docs/testing-without-a-gpu.md").split())
    assert "pip install stridedview stridedview-simgpu" in text and "pip install ./simgpu" in text
    assert "pytest --simgpu" in text and "simgpu-run python" in text
    assert "simgpu/with-simulator.sh python -m pytest" in text
    assert "Kernels that compute" in text and "What it cannot show" in text
    index = _read("docs/index.md")
    users = index[index.index(":caption: Using stridedview"):index.index(":caption: Reference")]
    assert "testing-without-a-gpu" in users
    assert (ROOT / "simgpu" / "with-simulator.sh").stat().st_mode & 0o111


def test_maintainer_material_is_out_of_the_users_pages():
    """The user's performance page has no commit hashes (the dated log is a maintainers' page),
    the quick start names no maintainer tool, README says which Pythons run the slow tests,
    the changelog lists the report's six verdicts, and the quick run's footer does not call
    --rest the command that runs everything."""
    import re

    from stridedview import _report

    performance = _read("docs/performance.md")
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", performance)
              if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    assert hashes == []
    index = _read("docs/index.md")
    maintainers = index[index.index(":caption: For maintainers"):]
    assert "performance-log" in maintainers
    assert re.search(r"\b[0-9a-f]{7}\b", _read("docs/performance-log.md"))  # the log keeps them
    assert "quickstart_report" not in _read("docs/quickstart.md") + _read("README.md")
    assert "the whole suite on each" not in _read("README.md")
    changelog = _read("docs/changelog.md")
    assert all(f'"{mark}"' in changelog for mark in _report.MARKS.values())
    assert "runs them all" not in _read("tests/conftest.py")


def test_readme_says_what_to_do_when_the_torch_index_is_unreachable():
    """README's torch step says how to fail fast when download.pytorch.org is unreachable and
    how to go on without torch (not PyPI's several-GB CUDA build)."""
    text = " ".join(_read("README.md").split())
    assert "--timeout 10 --retries 0" in text
    assert 'pip install -e ".[test]" jax numba-cuda' in text
    # A configured extra index is used without a word: the step says how to see which
    # torch came (PyPI's CUDA build or the CPU one).
    assert "PIP_EXTRA_INDEX_URL" in text and "+cpu" in text and "torch.__version__" in text


def test_the_python_policy_is_stated_and_kept():
    """README states the policy (each CPython until its end of life, while numpy ships wheels
    for it), and the package, the wheels and CI follow it: 3.10, past its end of life, is
    neither required, built, classified nor given a CI stage."""
    import tomllib

    readme = " ".join(_read("README.md").split())
    assert "until its end of life, while numpy ships wheels for it" in readme
    project = tomllib.loads(_read("pyproject.toml"))
    assert project["project"]["requires-python"] == ">=3.11"
    assert not any("3.10" in c for c in project["project"]["classifiers"])
    assert "cp310" not in project["tool"]["cibuildwheel"]["build"]
    assert project["tool"]["mypy"]["python_version"] == "3.11"
    assert "stage_py3.10" not in _read(".ci/run") and '"py3.10' not in _read(".ci/run")
