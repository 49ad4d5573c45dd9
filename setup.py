"""Build the Cython core. Everything else lives in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension("stridedview._view", ["src/stridedview/_view.pyx"]),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "binding": True,
            "autotestdict": False,
        },
    ),
)
