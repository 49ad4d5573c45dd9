"""A strided 2-d view sent from rank 0 to rank 1: in place (as_mpi_message) and packed.

    mpiexec -n 2 python benchmarks/mpi_strided.py [--rows 2048] [--cols 4096] [--repeats 20]

Two layouts of a ``rows x cols`` float64 array: every other column (``[:, ::2]``, blocks of
one element, the worst case for a derived datatype) and the left half of each row
(``[:, :cols // 2]``, blocks of ``cols // 2`` elements, a subarray as in a halo exchange).
Rank 0 sends the view; rank 1 receives it into the same layout of an array of its own
(shifted by one column, so that nothing lines up by chance).  Two ways, each timed over
``--repeats`` rounds (the best and the median round, both ranks done, after a Barrier):

- ``as_mpi_message``: the views themselves, ``Send(as_mpi_message(view))`` and
  ``Recv(as_mpi_message(target, receive=True))``; the message (its datatype) is made anew
  each round, and that cost is in the figure.
- ``packed``: ``np.ascontiguousarray(view)`` on rank 0, sent contiguous, received into a
  contiguous array on rank 1 and copied into the target view: what a caller does without
  the helper.

"bytes moved" is the view's payload (its elements' bytes, what MPI delivers); "intermediate
buffer" is the largest memory numpy allocated during a round on either rank (tracemalloc
sees numpy's allocations): a packed copy shows as the payload's size, the helper as none
(a few KiB of Python objects; about 47 KB in its first round, which imports mpi4py's dtlib).
The two ranks share this machine's memory, so both ways are memory copies in the end (MPI
packs or unpacks a derived datatype itself, in its own buffers, which tracemalloc does not
see): the figures compare what the caller allocates and waits for, not a network.  Each
round's result is checked against the sent view.  Prints one line per way on rank 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc

import numpy as np
from mpi4py import MPI

from stridedview.mpi import as_mpi_message


def helper_round(comm, rank, source, target):
    if rank == 0:
        comm.Send(as_mpi_message(source), dest=1, tag=1)
    else:
        comm.Recv(as_mpi_message(target, receive=True), source=0, tag=1)


def packed_round(comm, rank, source, target):
    if rank == 0:
        comm.Send(np.ascontiguousarray(source), dest=1, tag=2)
    else:
        landing = np.empty(target.shape, target.dtype)
        comm.Recv(landing, source=0, tag=2)
        target[...] = landing


def measure(comm, rank, way, source, target, repeats):
    """Best and median seconds per round, and the largest numpy allocation of any round."""
    times, peak = [], 0
    for _ in range(repeats):
        if rank == 1:
            target[...] = -1.0
        comm.Barrier()
        tracemalloc.start()
        started = time.perf_counter()
        way(comm, rank, source, target)
        comm.Barrier()
        times.append(time.perf_counter() - started)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        if rank == 1 and not np.array_equal(target, source):
            print(f"FAIL: {way.__name__} delivered wrong elements", flush=True)
            comm.Abort(1)
    peak = comm.allreduce(peak, op=MPI.MAX)
    return min(times), statistics.median(times), peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        if rank == 0:
            print("run it on two ranks: mpiexec -n 2 python benchmarks/mpi_strided.py", file=sys.stderr)
        return 2
    # The same source on both ranks: rank 1 checks what it received against it.
    base = np.arange(args.rows * args.cols, dtype=np.float64).reshape(args.rows, args.cols)
    landing = np.zeros((args.rows, args.cols + 1))
    half = args.cols // 2
    layouts = {
        "every other column": (base[:, ::2], landing[:, 1::2]),
        "left half of each row": (base[:, :half], landing[:, 1:half + 1]),
    }
    if rank == 0:
        print(f"{args.rows} x {args.cols} float64, {args.repeats} rounds, MPI: "
              f"{MPI.Get_library_version().splitlines()[0].strip()}")
    for name, (source, target) in layouts.items():
        payload = source.size * source.itemsize
        if rank == 0:
            print(f"{name} ({source.shape[0]} x {source.shape[1]}, strides {source.strides} bytes): "
                  f"bytes moved {payload} ({payload / 2**20:.1f} MiB)")
        for label, way in (("as_mpi_message", helper_round), ("packed", packed_round)):
            best, median, peak = measure(comm, rank, way, source, target, args.repeats)
            if rank == 0:
                made = f"yes, {peak / 2**20:.1f} MiB" if peak >= payload // 2 else f"none ({peak} B traced)"
                print(f"  {label:>14}: intermediate buffer: {made}, best {best * 1e3:.2f} ms, "
                      f"median {median * 1e3:.2f} ms ({payload / best / 2**30:.2f} GiB/s at best)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
