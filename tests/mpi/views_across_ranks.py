"""Run under ``mpiexec -n 2``: rank 0 and rank 1 exchange and reduce StridedMemoryViews.

Checks, on host views: Send/Recv of a strided view taken as a buffer (mpi4py reads the
view's buffer and derives its datatype from the format), Allreduce into a view, a
read-only view refused as a receive buffer, and the address MPI is handed equal to the
view's pointer.  Prints ``OK <rank> <checks>`` on success; exits non-zero on a failure.
"""

import sys

import numpy as np
from mpi4py import MPI

from stridedview import StridedMemoryView

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAIL rank {rank}: {what}", flush=True)
        comm.Abort(1)
    checks += 1


# Send/Recv: contiguous float64 rows, and a view of every other element (MPI takes
# the contiguous view; a strided one is copied to a contiguous view first).
data = np.arange(24, dtype=np.float64).reshape(4, 6)
if rank == 0:
    comm.Send(StridedMemoryView(data), dest=1, tag=1)
    strided = StridedMemoryView(data[:, ::2])
    packed = StridedMemoryView(np.empty(strided.shape))
    packed.copy_from(strided, None)
    comm.Send(packed, dest=1, tag=2)
else:
    received = np.zeros((4, 6))
    view = StridedMemoryView(received)
    check(MPI.Get_address(view) == view.ptr, "MPI sees the view's pointer")
    comm.Recv(view, source=0, tag=1)
    check(np.array_equal(received, data), "contiguous Send/Recv")
    target = np.zeros((4, 9))[:, ::3]
    landing = StridedMemoryView(np.empty((4, 3)))
    comm.Recv(landing, source=0, tag=2)
    StridedMemoryView(target).copy_from(landing, None)
    check(np.array_equal(target, data[:, ::2]), "strided data via a packed view")

# Allreduce into a view, with the datatype taken from the view's format (int32).
mine = StridedMemoryView(np.full(5, rank + 1, dtype=np.int32))
total = np.zeros(5, dtype=np.int32)
comm.Allreduce(mine, StridedMemoryView(total), op=MPI.SUM)
check(total.tolist() == [3] * 5, "Allreduce of int32 views")

# Explicit buffer specs: [view, MPI.FLOAT] for float32.
floats = np.arange(8, dtype=np.float32) * (rank + 1)
out = np.zeros(8, dtype=np.float32)
comm.Allreduce([StridedMemoryView(floats), MPI.FLOAT], [StridedMemoryView(out), MPI.FLOAT], op=MPI.MAX)
check(np.array_equal(out, np.arange(8, dtype=np.float32) * 2), "Allreduce MAX of float32 views")

# A read-only view is refused as a receive buffer (a writable buffer is requested).
readonly = np.zeros(3)
readonly.setflags(write=False)
try:
    comm.Allreduce(StridedMemoryView(np.ones(3)), StridedMemoryView(readonly), op=MPI.SUM)
except (BufferError, TypeError, ValueError):
    check(True, "read-only receive buffer refused")
else:
    check(False, "read-only receive buffer refused")
check(not readonly.any(), "read-only buffer untouched")

comm.Barrier()
print(f"OK {rank} {checks}", flush=True)
sys.exit(0)
