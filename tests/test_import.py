"""``import stridedview`` pulls in no array library and no CUDA driver bindings (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Top-level names (a module counts when it or any submodule of it is in sys.modules).
ARRAY_LIBRARIES = [
    "numpy",
    "torch",
    "jax",
    "jaxlib",
    "cupy",
    "numba",
    "ml_dtypes",
    "array_api_strict",
    "cuda.core",
]
CUDA_BINDINGS = "cuda.bindings"

PRELUDE = """
import json, sys

def loaded(name):
    return sorted(m for m in sys.modules if m == name or m.startswith(name + "."))
"""


def run_fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter started in the repository root and return the JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(code)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_loads_no_array_library():
    """A fresh ``import stridedview`` leaves numpy, torch, jax, cupy, numba, ml_dtypes, array_api_strict and cuda.core unimported."""
    names = ARRAY_LIBRARIES + [CUDA_BINDINGS]
    result = run_fresh(
        f"""
        names = {names!r}
        before = {{n: loaded(n) for n in names}}
        import stridedview
        stridedview.StridedMemoryView
        after = {{n: loaded(n) for n in names}}
        print(json.dumps({{"before": before, "after": after}}))
        """
    )
    # Nothing may be preloaded by the interpreter itself, or the check below proves nothing.
    assert not any(result["before"].values()), result["before"]
    offenders = {name: mods for name, mods in result["after"].items() if mods}
    assert offenders == {}


def test_import_does_not_load_cuda_bindings():
    """A fresh ``import stridedview`` does not import cuda.bindings (no CUDA driver access at import)."""
    result = run_fresh(
        f"""
        import stridedview
        print(json.dumps(loaded({CUDA_BINDINGS!r})))
        """
    )
    assert result == []


def test_viewing_a_numpy_array_needs_no_cuda_driver():
    """Viewing a host numpy array, reading every field, imports neither cuda.bindings nor cuda.core nor other array libraries."""
    result = run_fresh(
        """
        import stridedview
        import numpy as np

        a = np.arange(12.0).reshape(3, 4)[:, ::-2]
        views = [
            stridedview.StridedMemoryView(a),
            stridedview.StridedMemoryView(a, stream_ptr=-1),
            stridedview.StridedMemoryView.from_dlpack(a),
        ]
        fields = [
            (v.ptr, list(v.shape), list(v.strides), str(v.dtype), v.device_id,
             v.is_device_accessible, v.readonly, v.exporting_obj is a, repr(v))
            for v in views
        ]
        truth = (a.ctypes.data, list(a.shape), [s // a.itemsize for s in a.strides],
                 str(a.dtype), -1, False, False, True)
        print(json.dumps({
            "fields": [list(f[:8]) for f in fields],
            "truth": list(truth),
            "cuda_bindings": loaded("cuda.bindings"),
            "cuda_core": loaded("cuda.core"),
            "others": {n: loaded(n) for n in ["torch", "jax", "cupy", "numba", "array_api_strict"]},
        }))
        """
    )
    for fields in result["fields"]:
        assert fields == result["truth"]
    assert result["cuda_bindings"] == []
    assert result["cuda_core"] == []
    assert not any(result["others"].values()), result["others"]


def test_clone_root_holds_no_importable_stridedview():
    """From the clone's root (the README's working directory) `stridedview` resolves only to an installed copy: the root holds none (src layout)."""
    import importlib.machinery

    assert importlib.machinery.PathFinder.find_spec("stridedview", [str(REPO_ROOT)]) is None
    assert importlib.machinery.PathFinder.find_spec("stridedview", [str(REPO_ROOT / "src")]) is not None

