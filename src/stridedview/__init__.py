"""stridedview: one zero-copy, stream-safe strided view of any GPU or host array.

Importing this package imports no array library and not the CUDA driver bindings;
they are imported on first need.
"""

from stridedview._decorator import args_viewable_as_strided_memory
from stridedview._errors import CUDAError
from stridedview._view import DLPackDType, StridedMemoryView, ViewableArgument, release_pending

__all__ = [
    "CUDAError",
    "DLPackDType",
    "StridedMemoryView",
    "TensorMap",
    "ViewableArgument",
    "__version__",
    "args_viewable_as_strided_memory",
    "get_include",
    "release_pending",
]


def get_include():
    """The directory holding ``stridedview.h``, the C API header, for a C/C++ build's ``-I``.

    Cython extensions need no header: ``from stridedview cimport StridedMemoryView``
    finds the package's ``.pxd`` files on the Python path.
    """
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def __getattr__(name):
    # __version__ is read from the installed metadata on first use: importing
    # importlib.metadata up front would double the cost of `import stridedview`.
    if name == "__version__":
        from importlib.metadata import version

        value = version("stridedview")
        globals()["__version__"] = value
        return value
    if name == "TensorMap":  # imported on first use: it brings the driver module
        from stridedview._tensor_map import TensorMap

        globals()["TensorMap"] = TensorMap
        return TensorMap
    raise AttributeError(f"module 'stridedview' has no attribute {name!r}")
