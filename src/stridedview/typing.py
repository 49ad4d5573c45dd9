"""Structural types for what stridedview accepts, for type checkers.

Each class here is a ``typing.Protocol``: an array or stream type matches it by
having the right methods, with no need to inherit from it or to register.  They
describe what stridedview itself calls, nothing more, so that every producer it
can view also type-checks.

Nothing in ``import stridedview`` imports this module (nor ``typing``); import
it yourself where you annotate::

    from stridedview.typing import SupportsDLPack

The protocols are for static checking only: they are not ``runtime_checkable``,
because stridedview's own dispatch (DLPack first, then the CUDA Array Interface,
numpy's array interface and the buffer protocol, see
:class:`stridedview.StridedMemoryView`) is the test that counts at run time.
Buffer-protocol objects are ``collections.abc.Buffer`` (``typing_extensions.Buffer``
before Python 3.12).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "SupportsArrayInterface",
    "SupportsCudaArrayInterface",
    "SupportsCudaStream",
    "SupportsDLPack",
]


class SupportsDLPack(Protocol):
    """An object that exports its memory through DLPack's Python protocol.

    stridedview asks ``__dlpack_device__()`` for the memory's
    ``(device_type, device_id)``, then calls ``__dlpack__`` with the ``stream``
    keyword (and ``max_version``, retried without it for producers older than
    DLPack 1.0), and receives a PyCapsule.  Only ``stream`` is required here, so
    pre-1.0 producers match too; its type is left open because producers annotate
    it in different ways.
    """

    def __dlpack__(self, *, stream: Any = None) -> object:
        """A PyCapsule holding a DLPack managed tensor, ordered on ``stream``."""
        ...

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(device_type, device_id)`` as DLPack numbers them (1 CPU, 2 CUDA, ...)."""
        ...


class SupportsCudaArrayInterface(Protocol):
    """An object that describes its device memory with the CUDA Array Interface.

    ``__cuda_array_interface__`` is a dict with at least ``shape``, ``typestr``,
    ``data`` and ``version`` (strides in bytes, an optional ``stream`` from
    version 3); a property or a plain attribute both match.
    """

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The interface dict: shape, typestr, data, version, and optionally strides, descr, mask, stream."""
        ...


class SupportsArrayInterface(Protocol):
    """An object that describes its host memory with numpy's array interface (version 3).

    ``__array_interface__`` is a dict with ``shape``, ``typestr``, ``version`` 3 and
    ``data`` (a ``(ptr, readonly)`` tuple, or a buffer object with an ``offset``;
    strides in bytes); a property or a plain attribute both match.
    """

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """The interface dict: shape, typestr, data, version, and optionally strides, descr, offset, mask."""
        ...


class SupportsCudaStream(Protocol):
    """A stream object that says which CUDA stream it is (``__cuda_stream__``).

    Accepted wherever stridedview takes a ``stream_ptr``, in place of the raw
    handle.
    """

    def __cuda_stream__(self) -> tuple[int, int]:
        """``(version, handle)``: the protocol's version and the ``CUstream`` address as an int."""
        ...
