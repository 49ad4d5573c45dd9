"""Code that uses stridedview as a user's would, for mypy to check against the installed package.

Not run, not collected by pytest: ``check.py`` copies it to a directory of its own and
runs mypy there, so that mypy can find stridedview only where the installation put it
(with an editable install, the ``.pth`` entry pointing at ``src/``).  Each
``reveal_type`` line ends with the type mypy must reveal.
"""

from __future__ import annotations

import numpy as np

import stridedview
from stridedview import StridedMemoryView, ViewableArgument, args_viewable_as_strided_memory
from stridedview.typing import SupportsCudaStream, SupportsDLPack

array = np.arange(12, dtype=np.float32).reshape(3, 4)
view = StridedMemoryView(array, stream_ptr=-1)

reveal_type(view)  # stridedview._view.StridedMemoryView
reveal_type(view.ptr)  # builtins.int
reveal_type(view.shape)  # builtins.tuple[builtins.int, ...]
reveal_type(view.strides)  # builtins.tuple[builtins.int, ...]
reveal_type(view.dtype)  # numpy.dtype[Any] | None
reveal_type(view.device_id)  # builtins.int
reveal_type(view.is_device_accessible)  # builtins.bool
reveal_type(view.readonly)  # builtins.bool
reveal_type(view.ready_stream)  # builtins.int | None
reveal_type(view.size)  # builtins.int
reveal_type(view.nbytes)  # builtins.int
reveal_type(view.__dlpack_device__())  # tuple[builtins.int, builtins.int]
reveal_type(StridedMemoryView.from_dlpack(array))  # stridedview._view.StridedMemoryView
reveal_type(stridedview.__version__)  # builtins.str
reveal_type(stridedview.CUDAError("cuInit failed", "CUDA_ERROR_NO_DEVICE").name)  # builtins.str


@args_viewable_as_strided_memory((0,))
def launch(x: ViewableArgument, stream: SupportsCudaStream | int = -1) -> int:
    return x.view(stream).ptr


reveal_type(launch(array))  # builtins.int


def takes_dlpack(x: SupportsDLPack) -> None: ...


takes_dlpack(array)
takes_dlpack(view)
