"""The public surface: every public name documented, typed and importable as promised.

Public means: ``stridedview.__all__``; the public methods and properties of
``StridedMemoryView`` and ``ViewableArgument`` (plus the protocol methods a view
exports, ``__dlpack__``, ``__dlpack_device__`` and ``__cuda_array_interface__``);
and ``stridedview.typing.__all__`` with the protocols' methods.  The docs' API
reference is generated from these docstrings, so a missing one is a hole there.
"""

from __future__ import annotations

import ast
import importlib.metadata
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


def test_version_is_the_installed_metadata():
    """``stridedview.__version__`` equals the version pip recorded for the installed distribution."""
    assert stridedview.__version__ == importlib.metadata.version("stridedview")
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
