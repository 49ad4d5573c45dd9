"""Build the Cython core. Everything else lives in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    # include/: stridedview.h, the C API header shipped for extensions (get_include()).
    Extension(
        "stridedview._view",
        ["src/stridedview/_view.pyx"],
        include_dirs=["src/stridedview/include"],
    ),
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
