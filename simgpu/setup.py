"""Builds stridedview-simgpu: the package, and ``stridedview_simgpu/lib/libcuda.so.1``
compiled from ``src/`` by ``build.sh`` (the C compiler, C11 and pthreads; ``CC`` and
``CFLAGS`` are honoured) into the wheel, which is therefore platform-specific."""

import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithDriver(build_py):
    """build_py, then the simulated driver into the built package's lib/ folder."""

    def run(self):
        super().run()
        out = Path(self.build_lib) / "stridedview_simgpu" / "lib"
        subprocess.run(["bash", str(HERE / "build.sh"), str(out)], check=True)
        (out / "libcuda.so").unlink(missing_ok=True)  # a wheel holds no links: made at first use


class BinaryDistribution(Distribution):
    """A wheel tagged for this platform: it holds a compiled library."""

    def has_ext_modules(self):
        return True


class WheelForAnyPython(bdist_wheel):
    """py3-none-<platform>: the library is C, loaded by no particular Python."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": BuildWithDriver, "bdist_wheel": WheelForAnyPython}, distclass=BinaryDistribution)
