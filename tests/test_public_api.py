"""The public surface: every public name documented, typed and importable as promised.

Public means: ``stridedview.__all__``; the public methods and properties of
``StridedMemoryView`` and ``ViewableArgument`` (plus the protocol methods a view
exports, ``__dlpack__``, ``__dlpack_device__`` and ``__cuda_array_interface__``);
``stridedview.typing.__all__`` with the protocols' methods; and the public modules of
``PUBLIC_MODULES`` (``stridedview.mpi``), their ``__all__`` and its classes' methods.  The docs' API
reference is generated from these docstrings, so a missing one is a hole there.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import stridedview
import stridedview.typing
from stridedview import StridedMemoryView, ViewableArgument

REPO_ROOT = Path(__file__).resolve().parent.parent

# Protocol methods a view offers so that it can be handed on; public although dunder.
EXPORT_DUNDERS = ("__dlpack__", "__dlpack_device__", "__cuda_array_interface__")

#: Public modules beyond the package and stridedview.typing, each with an ``__all__``.
PUBLIC_MODULES = ("stridedview.mpi", "stridedview.ipc")


def own_docstring(obj: object, name: str) -> str:
    """``obj``'s docstring without the signature line Cython's ``embedsignature`` prepends.

    A method without a docstring still has a ``__doc__`` there: just the signature,
    ``StridedMemoryView.view(self, stream_ptr=None)``.  That alone does not count.
    """
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    doc = inspect.cleandoc(getattr(obj, "__doc__", None) or "")
    lines = doc.splitlines()
    if lines and re.match(rf"^([\w.]+\.)?{re.escape(name)}\(.*\)(\s*->.*)?$", lines[0]):
        lines = lines[1:]
    return "\n".join(lines).strip()


def public_members(cls: type) -> list[str]:
    """The public attributes ``cls`` itself defines, and the export dunders it has."""
    names = [name for name in vars(cls) if not name.startswith("_")]
    names += [name for name in EXPORT_DUNDERS if name in vars(cls)]
    return sorted(names)


def test_every_name_in_all_exists_and_is_documented():
    """Each name in ``stridedview.__all__`` resolves, and each class or function among them has a docstring."""
    assert stridedview.__doc__ and stridedview.__doc__.strip()
    undocumented = []
    for name in stridedview.__all__:
        value = getattr(stridedview, name)
        if name == "__version__":
            continue  # a str: documented in the docs and checked below
        if not own_docstring(value, name):
            undocumented.append(name)
    assert undocumented == []


@pytest.mark.parametrize("cls", [StridedMemoryView, ViewableArgument], ids=lambda c: c.__name__)
def test_public_methods_and_properties_are_documented(cls):
    """Every public method, classmethod, property and field of the class has a docstring of its own."""
    assert own_docstring(cls, cls.__name__), f"{cls.__name__} has no class docstring"
    undocumented = [
        f"{cls.__name__}.{name}"
        for name in public_members(cls)
        if not own_docstring(inspect.getattr_static(cls, name), name)
    ]
    assert undocumented == []


def test_view_members_cover_the_contract():
    """The view's public members include every field of the contract and every convenience."""
    expected = {
        "ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly",
        "exporting_obj", "ready_stream", "ndim", "size", "itemsize", "nbytes",
        "is_c_contiguous", "is_f_contiguous", "from_dlpack", "from_cuda_array_interface",
        "from_any_interface", "from_array_interface", "from_buffer",
        *EXPORT_DUNDERS,
    }
    assert expected <= set(public_members(StridedMemoryView))


def test_typing_names_are_documented():
    """Each protocol in ``stridedview.typing.__all__`` and each of its methods has a docstring."""
    assert stridedview.typing.__doc__ and stridedview.typing.__doc__.strip()
    assert sorted(stridedview.typing.__all__) == [
        "SupportsArrayInterface", "SupportsCudaArrayInterface", "SupportsCudaStream", "SupportsDLPack",
    ]
    undocumented = []
    for name in stridedview.typing.__all__:
        protocol = getattr(stridedview.typing, name)
        if not own_docstring(protocol, name):
            undocumented.append(name)
        for member, value in vars(protocol).items():
            if member.startswith("__") and member not in (
                "__dlpack__", "__dlpack_device__", "__cuda_array_interface__", "__cuda_stream__"
            ):
                continue
            if isinstance(value, property):
                value = value.fget
            if callable(value) and not own_docstring(value, member):
                undocumented.append(f"{name}.{member}")
    assert undocumented == []


def test_version_is_the_one_of_pyproject():
    """``stridedview.__version__`` is the version pyproject.toml declares (read from the installed metadata)."""
    text = (REPO_ROOT / "pyproject.toml").read_text()
    project = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    declared = re.search(r'^version = "([^"]+)"$', project, re.MULTILINE)
    assert declared, "pyproject.toml's [project] has no version"
    assert stridedview.__version__ == declared.group(1)
    assert "__version__" in stridedview.__all__


def test_import_pulls_in_neither_typing_nor_stridedview_typing():
    """A fresh ``import stridedview`` (site disabled, so nothing is preloaded) imports neither typing nor stridedview.typing."""
    package_parent = str(Path(stridedview.__file__).resolve().parent.parent)
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {package_parent!r})\n"
        "before = set(sys.modules)\n"
        "import stridedview\n"
        "stridedview.StridedMemoryView, stridedview.args_viewable_as_strided_memory\n"
        "print(json.dumps({'preloaded': 'typing' in before,\n"
        "                  'new': sorted(set(sys.modules) - before)}))\n"
    )
    # -S: no site, so no .pth file imports typing before the check; -I: no user site or env.
    proc = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["preloaded"] is False
    assert "stridedview" in result["new"]
    assert "typing" not in result["new"]
    assert "stridedview.typing" not in result["new"]


def test_py_typed_ships_with_the_package():
    """The package carries the ``py.typed`` marker and the stub of its compiled module."""
    package_dir = Path(stridedview.__file__).resolve().parent
    assert (package_dir / "py.typed").is_file()
    assert (package_dir / "_view.pyi").is_file()


def stub_class_members(class_name: str) -> set[str]:
    """The names a class of ``stridedview/_view.pyi`` declares."""
    stub = Path(stridedview.__file__).resolve().parent / "_view.pyi"
    tree = ast.parse(stub.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            return names
    raise AssertionError(f"{class_name} is not in _view.pyi")


@pytest.mark.parametrize("cls", [StridedMemoryView, ViewableArgument], ids=lambda c: c.__name__)
def test_stub_declares_every_public_member(cls):
    """``_view.pyi`` declares each public member of the compiled class (stubtest checks the types in CI)."""
    missing = set(public_members(cls)) - stub_class_members(cls.__name__)
    assert missing == set()


def test_api_reference_names_every_public_name():
    """docs/api.md documents each name of ``stridedview.__all__`` and of ``stridedview.typing.__all__``."""
    text = (REPO_ROOT / "docs" / "api.md").read_text()
    names = [f"stridedview.{n}" for n in stridedview.__all__ if n != "__version__"]
    names += [f"stridedview.typing.{n}" for n in stridedview.typing.__all__]
    missing = [name for name in names if name not in text]
    assert missing == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_modules_are_documented_typed_and_in_the_api_reference(module_name):
    """Each public module has a docstring and an ``__all__`` whose names exist, have a docstring
    (their public methods too), are annotated (mypy checks the bodies) and are named in docs/api.md."""
    import importlib

    module = importlib.import_module(module_name)
    assert own_docstring(module, module_name)
    api = (REPO_ROOT / "docs" / "api.md").read_text()
    problems = []
    for name in module.__all__:
        value = getattr(module, name)
        if not own_docstring(value, name):
            problems.append(f"{name}: no docstring")
        if f"{module_name}.{name}" not in api:
            problems.append(f"{name}: not in docs/api.md")
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                if not member.startswith("_") and callable(attribute) and not own_docstring(attribute, member):
                    problems.append(f"{name}.{member}: no docstring")
        elif callable(value):
            signature = inspect.signature(value)
            unannotated = [p for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty]
            if unannotated or signature.return_annotation is inspect.Signature.empty:
                problems.append(f"{name}: not fully annotated")
    assert problems == []


# --- what a newcomer meets first -----------------------------------------------------------


def test_constructor_has_a_signature():
    """``inspect.signature(StridedMemoryView)`` gives ``(obj, stream_ptr=None)`` and binds like the constructor."""
    signature = inspect.signature(StridedMemoryView)
    assert str(signature) == "(obj, stream_ptr=None)"
    assert signature.bind(object()).arguments.keys() == {"obj"}
    assert signature.bind(object(), stream_ptr=-1).arguments["stream_ptr"] == -1
    with pytest.raises(TypeError):
        signature.bind()


def test_neither_protocol_error_says_what_to_do():
    """Viewing an object with neither protocol names the objects that work and the conversion to try."""
    with pytest.raises(BufferError) as caught:
        StridedMemoryView([[1.0, 2.0]])
    message = str(caught.value)
    assert message.startswith("stridedview: 'list' object supports none of DLPack")
    for words in ("numpy", "CuPy", "PyTorch", "JAX", "Numba", "numpy.asarray(obj)"):
        assert words in message


class _NoLibcuda:
    """A driver seam whose every call fails as cuda-bindings does when libcuda cannot be loaded."""

    def __getattr__(self, name):
        def call(*args):
            raise RuntimeError("libcuda.so.1: cannot open shared object file")

        return call


@pytest.fixture
def no_libcuda():
    """The driver seam replaced by _NoLibcuda for the test."""
    from stridedview import _driver

    _driver.use_api(_NoLibcuda())
    yield
    _driver.use_api(None)


def _host_cai_view():
    """A CUDA Array Interface view of host memory made with stream_ptr=-1 (no driver call)."""
    import numpy as np

    array = np.arange(6, dtype=np.float32)

    class HostCAI:
        __cuda_array_interface__ = {
            "version": 3, "shape": (6,), "typestr": "<f4", "data": (array.ctypes.data, False),
        }

    return array, StridedMemoryView(HostCAI(), -1)


@pytest.mark.parametrize(
    "action",
    [lambda view: view.device_id, lambda view: view.__dlpack_device__(), lambda view: view.__dlpack__()],
    ids=["device_id", "__dlpack_device__", "__dlpack__"],
)
def test_cai_view_without_driver_hint_names_what_was_done(no_libcuda, action):
    """Exporting a CAI view (or reading its device_id) with no driver names those actions and what works without it."""
    from stridedview import CUDAError

    _array, view = _host_cai_view()
    assert view.shape == (6,)  # the fields themselves need no driver
    with pytest.raises(CUDAError) as caught:
        action(view)
    message = str(caught.value)
    assert caught.value.name == "CUDA_ERROR_NO_DRIVER"
    assert "device_id is read" in message
    assert "exported through DLPack" in message
    assert "__cuda_array_interface__ work without a driver" in message
    assert view.__cuda_array_interface__["shape"] == (6,)  # and indeed it does


# --- the typing check CI runs against the editable install (tests/typing_check/) ------------


def _typing_check():
    """tests/typing_check/check.py as a module."""
    import importlib.util

    path = REPO_ROOT / "tests" / "typing_check" / "check.py"
    spec = importlib.util.spec_from_file_location("typing_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_typing_check_sample_reveals_every_field():
    """The typing sample reveals ptr, shape, strides, dtype, device_id and readonly, each with a named type that is not Any."""
    check = _typing_check()
    source = check.SAMPLE.read_text()
    expected = check.expected_types(source)
    lines = source.splitlines()
    revealed = {lines[number - 1].split("(", 1)[1].split(")", 1)[0] for number in expected}
    for field in ("ptr", "shape", "strides", "dtype", "device_id", "readonly"):
        assert f"view.{field}" in revealed
    assert "Any" not in {check.normalise(want) for want in expected.values()}


def test_typing_check_flags_any_errors_and_wrong_types():
    """The check fails on import-not-found, on a field revealed as Any, on a wrong type and on a missing reveal."""
    check = _typing_check()
    source = check.SAMPLE.read_text()
    expected = check.expected_types(source)
    good = "\n".join(
        f'uses_stridedview.py:{number}: note: Revealed type is "{want}"' for number, want in expected.items()
    )
    assert check.problems(good, source) == []
    first, second = list(expected)[:2]
    not_found = (
        'uses_stridedview.py:13: error: Cannot find implementation or library stub for module named '
        '"stridedview"  [import-not-found]'
    )
    assert check.problems(good + "\n" + not_found, source) == [not_found]
    anys = good.replace(f'{first}: note: Revealed type is "{expected[first]}"', f'{first}: note: Revealed type is "Any"')
    assert len(check.problems(anys, source)) == 1
    wrong = good.replace(f'"{expected[second]}"', '"builtins.float"', 1)
    assert check.problems(wrong, source) != []
    missing = "\n".join(line for line in good.splitlines() if not line.startswith(f"uses_stridedview.py:{first}:"))
    assert check.problems(missing, source) == [f"line {first}: no type revealed (expected {expected[first]})"]


def test_every_example_file_the_docs_name_exists():
    """Each ``*.py`` file of examples/ named in README.md, docs/*.md or examples/*.py exists (no gpu_cuda_core.py)."""
    texts = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    texts += sorted((REPO_ROOT / "examples").glob("*.py"))
    existing = {path.name for path in (REPO_ROOT / "examples").glob("*.py")}
    named = set()
    for path in texts:
        text = path.read_text()
        named |= set(re.findall(r"examples/(\w+\.py)", text))
        named |= {name for name in re.findall(r"\b(gpu_\w+\.py|quick_start\.py|launcher\.py|bridge_host\.py)", text)}
    assert named, "no example is named anywhere: the pattern is wrong"
    assert sorted(named - existing) == []


@pytest.mark.torch
@pytest.mark.interop
def test_torch_tensor_requiring_grad_is_viewed_and_writes_bypass_autograd():
    """As docs/interop.md says: a tensor requiring grad is viewed (torch's own export refuses it) and a write through the view leaves its version counter unchanged."""
    torch = pytest.importorskip("torch")
    import numpy as np

    x = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        x.__dlpack__()
    view = StridedMemoryView(x)
    assert (view.ptr, view.readonly) == (x.data_ptr(), False)
    version = x._version
    np.from_dlpack(view)[...] = 5
    assert x.detach().tolist() == [5.0, 5.0, 5.0]
    assert x._version == version
    text = (REPO_ROOT / "docs" / "interop.md").read_text()
    assert "### torch tensors that require grad" in text
    assert "aborts the whole Python process" in text


#: The widest code line furo shows whole at 1280 px (a 40em text column, 81.25% monospace).
CODE_WIDTH = 79


def test_quickstart_and_interop_code_fits_at_1280px():
    """Every line of the code and output blocks of quickstart.md and interop.md, and of the host examples they show, is at most 79 characters."""
    too_wide = []
    for page in ("quickstart.md", "interop.md"):
        text = (REPO_ROOT / "docs" / page).read_text()
        for block in re.findall(r"```(?:python|text|bash)\n(.*?)```", text, re.DOTALL):
            too_wide += [f"{page}: {line}" for line in block.splitlines() if len(line) > CODE_WIDTH]
    for name in ("quick_start.py", "launcher.py", "bridge_host.py"):  # shown on those pages
        example = (REPO_ROOT / "examples" / name).read_text()
        too_wide += [f"{name}: {line}" for line in example.splitlines() if len(line) > CODE_WIDTH]
    assert too_wide == []


def test_help_gives_the_signature_once_and_an_example_first():
    """help(StridedMemoryView) prints the real signature once (also on __init__), then says what
    the class is and shows a three-line example, before any member."""
    import pydoc

    from stridedview import StridedMemoryView

    text = pydoc.render_doc(StridedMemoryView, renderer=pydoc.plaintext)
    assert text.count("StridedMemoryView(obj, stream_ptr=None)\n") == 1, text[:600]
    assert "__init__(self, /, obj, stream_ptr=None)" in text
    assert "*args, **kwargs" not in text.split("__init__", 1)[1].splitlines()[0]
    doc = [line.removeprefix(" |  ") for line in text.splitlines()]
    opening = doc[doc.index("StridedMemoryView(obj, stream_ptr=None)") + 2]
    assert opening.startswith("A zero-copy view of an array"), opening
    example = [line.strip() for line in doc[: doc.index("Methods defined here:")]]
    start = next(i for i, line in enumerate(example) if line.startswith(">>>"))
    assert example[start:start + 3] == [
        ">>> view = StridedMemoryView(numpy.zeros((4, 3), numpy.float32)[:, ::2])",
        ">>> view.shape, view.strides, view.dtype, view.device_id",
        "((4, 2), (3, 2), dtype('float32'), -1)",
    ]
    assert str(inspect.signature(StridedMemoryView)) == "(obj, stream_ptr=None)"
    assert str(inspect.signature(StridedMemoryView.__init__)) == "(self, /, obj, stream_ptr=None)"


#: pydoc lists each of the class's members in two lines at least (three with a one-line
#: docstring): the page cannot be much shorter without removing members.  From 3.12 on it
#: also lists the buffer protocol's Python wrappers, __buffer__ and __release_buffer__
#: (three lines each).
HELP_LINES = 203 + (6 if sys.version_info >= (3, 12) else 0)


def test_help_is_a_summary_whose_contract_lives_in_the_docs_and_stubs():
    """help(StridedMemoryView) stays short: a class docstring of at most 20 lines and one line
    per member; the whole contract is in docs/api.md and in the stub's docstrings."""
    import pydoc

    from stridedview import StridedMemoryView

    text = pydoc.render_doc(StridedMemoryView, renderer=pydoc.plaintext)
    # pydoc from 3.13 on writes a long signature one parameter a line: one line here, as
    # older pydocs write it (as_tensor_map's and from_buffer's take 11 and 8 lines there).
    lines, wrapped = [], False
    for line in text.splitlines():
        if wrapped:
            wrapped = not line.strip(" |").startswith(")")
            continue
        wrapped = line.rstrip().endswith("(")
        lines.append(line)
    assert len(lines) <= HELP_LINES, len(lines)
    assert len(inspect.cleandoc(StridedMemoryView.__doc__).splitlines()) <= 20
    long = {}
    for name in dir(StridedMemoryView):
        raw = inspect.getattr_static(StridedMemoryView, name)
        if name.startswith("__pyx") or isinstance(raw, (tuple, str)) or name == "__doc__":
            continue
        if type(raw).__name__ == "PyCapsule":  # the exchange API capsules: no docstring of theirs
            continue
        if type(raw).__name__ == "classmethod_descriptor" or isinstance(raw, classmethod):
            raw = getattr(StridedMemoryView, name)
        doc = inspect.cleandoc(getattr(raw, "__doc__", None) or "").splitlines()
        if len(doc) > 2 and doc[1].strip() == "--":  # an embedded signature
            doc = doc[3:]
        if name in vars(StridedMemoryView) and len(doc) > 1:
            long[name] = len(doc)
    assert long == {}
    stub = (REPO_ROOT / "src" / "stridedview" / "_view.pyi").read_text()
    api = (REPO_ROOT / "docs" / "api.md").read_text()
    for contract in (
        "Streams.  ``stream_ptr`` names the stream",
        "Nothing is ordered on any stream (``ready_stream`` None)",
    ):
        assert contract in stub and contract in api


def test_class_docstring_example_runs():
    """The example at the top of StridedMemoryView's docstring prints what it shows."""
    import doctest

    from stridedview import StridedMemoryView

    test = doctest.DocTestParser().get_doctest(
        StridedMemoryView.__doc__, {"StridedMemoryView": StridedMemoryView, "numpy": __import__("numpy")},
        "StridedMemoryView", None, 0,
    )
    assert len(test.examples) == 2
    result = doctest.DocTestRunner(verbose=False).run(test)
    assert result.failed == 0
