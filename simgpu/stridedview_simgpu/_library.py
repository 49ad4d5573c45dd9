"""Where the simulated driver's ``libcuda.so.1`` is, and the environment that makes it a
process's driver.

A CUDA driver is chosen by the dynamic loader when a process first loads ``libcuda.so.1``,
and ``LD_LIBRARY_PATH`` is read once, when the process starts: so the simulator becomes a
driver only for a process started with :func:`environment` (``simgpu-run``, ``pytest
--simgpu``), never for the one that imports this package.  Nothing here loads a driver.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_INSTALLED = _PACKAGE / "lib"  # where the distribution's build puts it
_TREE = _PACKAGE.parent         # simgpu/ of a clone: build.sh and src/ beside the package


class SimulatorNotBuilt(RuntimeError):
    """No simulated driver here, and none can be built (no C compiler, or no sources)."""


def _tree_stamp() -> str:
    digest = hashlib.sha256((_TREE / "build.sh").read_bytes())
    for source in sorted((_TREE / "src").iterdir()):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _built_from_tree() -> Path:
    """A clone's simulator, built into its build/simgpu (again only when its sources change;
    SIMGPU_BUILD_DIR picks another folder): what simgpu/with-simulator.sh runs on."""
    out = Path(os.environ.get("SIMGPU_BUILD_DIR") or _TREE.parent / "build" / "simgpu")
    stamp = _tree_stamp()
    stamp_file = out / ".stamp"
    if not (out / "libcuda.so.1").is_file() or not stamp_file.is_file() or stamp_file.read_text().strip() != stamp:
        result = subprocess.run(["bash", str(_TREE / "build.sh"), str(out)], capture_output=True, text=True)
        if result.returncode != 0:
            raise SimulatorNotBuilt(f"simgpu: building the simulated driver failed:\n{result.stderr}")
        stamp_file.write_text(stamp + "\n")
    return out


def library_dir() -> Path:
    """The folder holding the simulated ``libcuda.so.1`` (and ``libcuda.so``, a link to it,
    the name numba-cuda asks for first).

    The installed distribution's own build; else, in a clone, the tree's build (made here
    with the C compiler if its sources changed).  Raises :class:`SimulatorNotBuilt` where
    there is neither."""
    if (_INSTALLED / "libcuda.so.1").is_file():
        _ensure_link(_INSTALLED)
        return _INSTALLED
    if (_TREE / "build.sh").is_file() and (_TREE / "src").is_dir():
        return _built_from_tree()
    raise SimulatorNotBuilt(
        f"simgpu: no simulated driver in {_INSTALLED}: reinstall stridedview-simgpu (its build "
        "compiles libcuda.so.1 with the C compiler)"
    )


def _ensure_link(folder: Path) -> None:
    """``libcuda.so`` as a link to ``libcuda.so.1``: one file, so that a process asking for
    both names loads one driver (two copies would be two devices' worth of state)."""
    link = folder / "libcuda.so"
    if link.is_symlink() or link.exists():
        return
    try:
        link.symlink_to("libcuda.so.1")
    except OSError:
        pass  # a read-only install: libcuda.so.1, the name cuda-bindings loads, is there


def environment(base: dict | None = None, check: str = "1") -> dict:
    """``base`` (default ``os.environ``) with the simulated driver first on
    ``LD_LIBRARY_PATH``, ``SIMGPU_LIB_DIR`` naming its folder, and the stream-order checker
    on (``SIMGPU_CHECK``, ``check`` unless ``base`` sets it): the environment of a process
    whose driver is the simulator."""
    env = dict(os.environ if base is None else base)
    folder = str(library_dir())
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != folder]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([folder, *paths])
    env["SIMGPU_LIB_DIR"] = folder
    env.setdefault("SIMGPU_CHECK", check)
    return env


def runs_on_simulator() -> bool:
    """Whether this process was started with the simulated driver first on its path
    (:func:`environment`); loads no driver."""
    folder = os.environ.get("SIMGPU_LIB_DIR")
    if not folder or not (Path(folder) / "libcuda.so.1").is_file():
        return False
    first = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)[0]
    return bool(first) and os.path.realpath(first) == os.path.realpath(folder)
