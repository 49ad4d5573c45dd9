# Types of the package namespace.  __init__.py finds __version__ through a module
# __getattr__ (read from the installed metadata on first use), which a checker
# cannot see: it is declared here.

from stridedview._decorator import args_viewable_as_strided_memory as args_viewable_as_strided_memory
from stridedview._errors import CUDAError as CUDAError
from stridedview._tensor_map import TensorMap as TensorMap
from stridedview._view import DLPackDType as DLPackDType
from stridedview._view import StridedMemoryView as StridedMemoryView
from stridedview._view import ViewableArgument as ViewableArgument
from stridedview._view import release_pending as release_pending

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

__version__: str

def get_include() -> str: ...
def release_driver_resources() -> None: ...
