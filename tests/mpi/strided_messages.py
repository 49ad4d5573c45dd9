"""Run under ``mpiexec -n 2``: strided views sent and received in place by as_mpi_message.

Each layout (2-d and 3-d slices, negative strides, transposes, Fortran order) goes through
Send/Recv, Sendrecv and Bcast with no packing on either side, and each result is compared
element by element with a packed copy (``np.ascontiguousarray``) of what was sent.  A
receive into a strided slice of a bigger array leaves every element outside the slice as
it was.  Read-only and broadcast (overlapping) views are refused as receive buffers before
anything is sent.  Prints ``OK <rank> <checks>`` on success; exits non-zero on a failure.
"""

import sys

import numpy as np
from mpi4py import MPI

from stridedview import StridedMemoryView
from stridedview.mpi import _live_datatypes, as_mpi_message

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
peer = 1 - rank
checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAIL rank {rank}: {what}", flush=True)
        comm.Abort(1)
    checks += 1


def source(shape, dtype, seed):
    """The same array on both ranks: distinct values, so that a misplaced element shows."""
    return (np.arange(int(np.prod(shape))) * 7 + seed).astype(dtype).reshape(shape)


# Each layout: a function of the base array giving the view sent, and the same for the
# receiving side (another layout of the same shape, in a bigger array left around it).
grid = source((6, 8), np.float64, 1)
cube = source((4, 5, 6), np.int32, 2)
LAYOUTS = {
    "2-d slice": lambda a: a[1:5, ::3],
    "2-d negative strides": lambda a: a[::-2, ::-1],
    "2-d transpose": lambda a: a.T,
    "2-d fortran order": lambda a: np.asfortranarray(a)[:, 1:],
    "3-d slice": lambda a: a[1:, ::2, 2:5],
    "3-d negative and transposed": lambda a: a[::-1, :, ::-3].transpose(2, 0, 1),
    "complex column": lambda a: (a[:, 2] * (1 + 2j)).astype(np.complex128)[::-1],
}
BASES = {name: (cube if name.startswith("3-d") else grid) for name in LAYOUTS}


def strided_slice(shape, dtype):
    """A receive target of ``shape``: every other element of a bigger Fortran-ordered array
    full of -9, reversed along the last axis.  Returns (bigger, the slice's index, target)."""
    bigger = np.full([2 * n + 1 for n in shape], -9, dtype=dtype, order="F")
    inside = tuple(slice(1, None, 2) for _ in shape)
    return bigger, inside, bigger[inside][..., ::-1]


for tag, name in enumerate(LAYOUTS):
    sent = LAYOUTS[name](BASES[name])
    expected = np.ascontiguousarray(sent)
    # Send/Recv: rank 0 sends the strided view in place, rank 1 receives into a strided slice.
    if rank == 0:
        comm.Send(as_mpi_message(sent), dest=1, tag=tag)
    else:
        bigger, inside, target = strided_slice(sent.shape, sent.dtype)
        comm.Recv(as_mpi_message(target, receive=True), source=0, tag=tag)
        check(np.array_equal(np.ascontiguousarray(target), expected), f"Send/Recv {name}")
        outside = np.ones(bigger.shape, dtype=bool)
        outside[inside] = False
        check(bool((bigger[outside] == -9).all()), f"Send/Recv {name}: elements outside the slice untouched")

    # The same layout received packed (np.empty): the message and a contiguous buffer agree.
    if rank == 0:
        comm.Send(as_mpi_message(sent), dest=1, tag=100 + tag)
    else:
        packed = np.empty(sent.shape, sent.dtype)
        comm.Recv(packed, source=0, tag=100 + tag)
        check(np.array_equal(packed, expected), f"strided send, packed receive {name}")

    # Sendrecv: both ranks send the strided view and receive into a transposed one.
    out = np.zeros(sent.shape[::-1], sent.dtype).T
    comm.Sendrecv(as_mpi_message(sent), dest=peer, sendtag=200 + tag,
                  recvbuf=as_mpi_message(out, receive=True), source=peer, recvtag=200 + tag)
    check(np.array_equal(out, expected), f"Sendrecv {name}")

    # Bcast from rank 0 (its strided view) into rank 1's view of negative strides.
    if rank == 0:
        comm.Bcast(as_mpi_message(sent), root=0)
    else:
        store = np.zeros(sent.shape, sent.dtype)
        flipped = store[tuple(slice(None, None, -1) for _ in sent.shape)]
        comm.Bcast(as_mpi_message(flipped, receive=True), root=0)
        check(np.array_equal(flipped, expected), f"Bcast {name}")

# Refusals, on every rank, before anything is sent: a read-only view and a broadcast view
# (writable, zero strides: its elements overlap) as receive buffers.
readonly = np.zeros((3, 4))[:, ::2]
readonly.setflags(write=False)
try:
    as_mpi_message(readonly, receive=True)
except BufferError as error:
    check("read-only" in str(error) and "MPI" in str(error), f"read-only refusal says why: {error}")
else:
    check(False, "a read-only view refused as a receive buffer")
overlapping = np.lib.stride_tricks.as_strided(np.zeros(4), shape=(3, 4), strides=(0, 8))
try:
    as_mpi_message(overlapping, receive=True)
except BufferError as error:
    check("overlap" in str(error) and "(0, 1)" in str(error), f"overlap refusal says why: {error}")
else:
    check(False, "a broadcast view refused as a receive buffer")
# Sent, a broadcast view is fine: MPI reads the same element several times.
if rank == 0:
    comm.Send(as_mpi_message(np.broadcast_to(np.arange(4.0), (3, 4))), dest=1, tag=300)
else:
    rows = np.zeros((3, 4))
    comm.Recv(as_mpi_message(rows, receive=True), source=0, tag=300)
    check(np.array_equal(rows, np.broadcast_to(np.arange(4.0), (3, 4))), "a broadcast view sent")

# A view made by the caller is taken as it is.
view = StridedMemoryView(grid[::2, ::-3], -1)
mirror = np.zeros(view.shape)
comm.Sendrecv(as_mpi_message(view), dest=peer, sendtag=400,
              recvbuf=as_mpi_message(mirror, receive=True), source=peer, recvtag=400)
check(np.array_equal(mirror, grid[::2, ::-3]), "a StridedMemoryView sent as it is")

import gc  # noqa: E402

gc.collect()
check(_live_datatypes() == 0, f"every message's datatype freed ({_live_datatypes()} left)")
comm.Barrier()
print(f"OK {rank} {checks}", flush=True)
sys.exit(0)
