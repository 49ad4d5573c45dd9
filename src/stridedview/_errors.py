"""Exceptions of stridedview beyond the built-in ones.

Protocol problems are ``BufferError`` and wrong argument types ``TypeError``, as
the Python buffer and DLPack protocols do; only the driver gets a class of its own.
"""


class CUDAError(RuntimeError):
    """A CUDA driver call failed, or the driver is not there when it is needed.

    ``name`` is the ``CUresult`` name (``"CUDA_ERROR_INVALID_HANDLE"``, ...), or
    ``"CUDA_ERROR_NO_DRIVER"`` when the driver or cuda-bindings cannot be loaded.
    """

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name
