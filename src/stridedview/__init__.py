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
    "release_driver_resources",
    "release_pending",
]


def release_driver_resources() -> None:
    """Give back every CUDA resource stridedview holds; call it before a context reset.

    Waits on the host for the streams of every pending hold and releases them
    (``release_pending(wait=True)``), destroys every event stridedview keeps (every
    thread's), releases the primary contexts it retained and forgets every context it
    looked up; the next ordering or hand-over starts afresh.  Loads no driver when none
    was used.

    Call it before ``cudaDeviceReset`` / ``cuDevicePrimaryCtxReset`` (or releasing a
    primary context to nothing), with no other thread ordering streams meanwhile, as the
    reset itself requires.  A reset destroys the context's events and streams while their
    handles still look valid (the context keeps its handle); naming one afterwards is
    undefined in CUDA and a real driver crashes (driver 580: SIGSEGV), so stridedview
    cannot find out afterwards.  Holds owned by CUDA graphs stay the graphs' (their graphs
    decide when they are released), but the streams they were also handed to are waited for
    now and their events destroyed, so that nothing of the released state is named when the
    graphs give them back.
    """
    from stridedview import _driver

    _driver.release_driver_resources()


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
