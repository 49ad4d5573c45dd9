"""Views across processes: run with ``mpiexec -n 2 python examples/mpi_views.py``.

Each rank views its own numpy array and hands the view straight to mpi4py, which reads it
through DLPack or the buffer protocol (device views need a GPU-aware MPI).  A strided view
(here every other column, rows reversed) goes through stridedview.mpi.as_mpi_message: sent
and received in place, with no packed copy on either side.
Device views: MPI calls take no stream, so synchronise the stream that produced the data
before the call (see docs/mpi.md).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from stridedview import StridedMemoryView
from stridedview.mpi import as_mpi_message


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    mine = StridedMemoryView(np.full(4, float(rank + 1)))
    total = np.zeros(4)
    comm.Allreduce(mine, StridedMemoryView(total), op=MPI.SUM)
    if rank == 0:
        grid = np.arange(12.0).reshape(3, 4)
        comm.Send(StridedMemoryView(grid), dest=1 % comm.Get_size())
        comm.Send(as_mpi_message(grid[::-1, ::2]), dest=1 % comm.Get_size(), tag=1)
    if rank == 1 % comm.Get_size():
        received = np.empty((3, 4))
        comm.Recv(StridedMemoryView(received), source=0)
        print(f"rank {rank}: received rows summing to {received.sum(axis=1).tolist()}")
        # Into every other column of a wider array: its other columns stay as they are.
        wide = np.full((3, 4), -1.0)
        comm.Recv(as_mpi_message(wide[:, 1::2], receive=True), source=0, tag=1)
        assert (wide[:, 1::2] == np.arange(12.0).reshape(3, 4)[::-1, ::2]).all()
        assert (wide[:, ::2] == -1.0).all()
        print(f"rank {rank}: received a strided slice in place: {wide[:, 1::2].tolist()}")
    print(f"rank {rank}: allreduce gives {total.tolist()}")


if __name__ == "__main__":
    main()
