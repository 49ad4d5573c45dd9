"""Build the Cython core. Everything else lives in pyproject.toml."""

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    # include/: stridedview.h, the C API header shipped for extensions (get_include()).
    Extension(
        "stridedview._view",
        # _cxx_guard.cpp: the one C++ file, catching what torch's C++ functions
        # throw (_torch_bits.pxi); the extension is linked as C++ for its runtime.
        ["src/stridedview/_view.pyx", "src/stridedview/_cxx_guard.cpp"],
        # numpy's headers give the array struct's layout to the numpy adapter
        # (_from_numpy.pxi); numpy's C API table is never imported, so the
        # extension links nothing of numpy's and loads no numpy at import.  Built
        # against numpy 2's headers, it runs with numpy 1.x and 2.x alike.
        include_dirs=["src/stridedview/include", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
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
