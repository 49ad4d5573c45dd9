"""Views across processes on one node (CUDA IPC): what pickling a device view makes.

A device view pickles (``pickle``; ``multiprocessing`` with spawn or forkserver) into a
record of its layout, its device by UUID, its memory's IPC handle and an IPC event recorded
on its ``ready_stream``; unpickled in another process it is a :class:`ReceivedView`, which
``StridedMemoryView(received, stream_ptr=s)`` views with ``s`` waiting on that event.  The
exporter keeps the view until the importer has let go (:func:`shares_held` counts what it
holds); ``view.allocation`` (an :class:`Allocation`) says whether memory can be shared.
``docs/interop.md`` ("Views across processes") states the rules.
"""

from stridedview._allocation import Allocation
from stridedview._ipc import ReceivedView, shares_held

__all__ = ["Allocation", "ReceivedView", "shares_held"]
