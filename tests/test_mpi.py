"""Views across processes: tests/mpi/*.py run under ``mpiexec -n 2``, and stridedview.mpi's
messages checked in one process (MPI initialised by importing mpi4py.MPI, no mpiexec).

mpi4py and an MPI (mpich, from PyPI) are in the test extra, so CI runs this; the tests
skip only when mpi4py is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stridedview import StridedMemoryView

SCRIPT = Path(__file__).parent / "mpi" / "views_across_ranks.py"
STRIDED_SCRIPT = Path(__file__).parent / "mpi" / "strided_messages.py"


def _mpiexec() -> str:
    """The mpiexec beside this Python (mpich's wheel installs it there), else on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpi4py is installed but no mpiexec was found (install mpich: pip install mpich)")
    return found


def _run_on_two_ranks(script: Path) -> dict[str, int]:
    """Run ``script`` under ``mpiexec -n 2``; the checks each rank reported passing."""
    pytest.importorskip("mpi4py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run(
        [_mpiexec(), "-n", "2", sys.executable, str(script)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The ranks' lines may interleave in the shared stdout: found anywhere in it.
    reports = dict(re.findall(r"OK (\d) (\d+)", result.stdout))
    assert sorted(reports) == ["0", "1"], result.stdout
    return {rank: int(count) for rank, count in reports.items()}


@pytest.mark.slow
def test_views_sent_received_and_reduced_by_two_ranks():
    """Two ranks Send/Recv, Allreduce and refuse read-only views as MPI buffers, each check passing."""
    assert _run_on_two_ranks(SCRIPT) == {"0": 4, "1": 7}


@pytest.mark.slow
def test_strided_messages_sent_received_and_broadcast_by_two_ranks():
    """Two ranks Send/Recv, Sendrecv and Bcast strided views (slices, negative strides,
    transposes, 2-d and 3-d) as as_mpi_message's messages, received into strided slices
    whose surroundings stay untouched, and refuse read-only and broadcast receive buffers."""
    assert _run_on_two_ranks(STRIDED_SCRIPT) == {"0": 11, "1": 40}


@pytest.mark.parametrize("dtype", ["u1", "i4", "f8", "c16"])
def test_an_empty_view_is_a_contiguous_mpi_buffer_through_memoryview(dtype):
    """mpi4py takes an empty 1-d view, and a memoryview of it, as a contiguous buffer of no
    bytes, as it takes numpy's (an exported stride of 0 made memoryview call it
    non-contiguous, and mpi4py's buffer tests failed so)."""
    MPI = pytest.importorskip("mpi4py.MPI")
    empty = np.zeros(0, dtype)
    for obj in (StridedMemoryView(empty), memoryview(StridedMemoryView(empty))):
        assert len(MPI.buffer(obj)) == 0
        received = bytearray()
        MPI.COMM_SELF.Sendrecv(obj, 0, 0, recvbuf=received, source=0)


# --- stridedview.mpi in one process ---------------------------------------------------------

#: Layouts of a (4, 5, 6) float64 array, each a function of it.
LAYOUTS = {
    "contiguous": lambda a: a,
    "2-d row": lambda a: a[2],
    "2-d slice": lambda a: a[1, 1:4, ::2],
    "3-d slice": lambda a: a[1:, ::2, 2:5],
    "negative strides": lambda a: a[::-1, :, ::-2],
    "all negative": lambda a: a[::-2, ::-1, ::-3],
    "transpose": lambda a: a.T,
    "fortran-ordered slice": lambda a: a.T[:, 1:4],  # a.T is the Fortran-ordered (6, 5, 4)
    "axes swapped": lambda a: a.transpose(1, 2, 0)[:, ::-1],
    "one element": lambda a: a[1:2, 3:4, 5:6],
    "zero-d": lambda a: a[1, 2, 3, ...],
    "empty": lambda a: a[:, 2:2],
    "column": lambda a: a[:, 2, 3],
}


def _base():
    return np.arange(120, dtype=np.float64).reshape(4, 5, 6)


@pytest.fixture(scope="module")
def MPI():
    """mpi4py.MPI, initialised in this process (a single-process MPI: no mpiexec needed)."""
    return pytest.importorskip("mpi4py.MPI")


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_message_datatype_matches_the_view(MPI, layout):
    """The message is [span, 1, datatype]: the datatype holds the view's bytes (size), spans
    exactly its byte_bounds from the buffer's start (extent and true extent, lower bounds 0),
    and the buffer is the span itself, sharing memory with the array: no copy."""
    from stridedview.mpi import MPIMessage, as_mpi_message

    array = _base()
    strided = LAYOUTS[layout](array)
    message = as_mpi_message(strided)
    buffer, count, datatype = message
    view = message.view
    low, high = view.byte_bounds
    assert isinstance(message, MPIMessage) and isinstance(message, list) and count == 1
    assert datatype.Get_size() == strided.nbytes == view.size * view.itemsize
    assert datatype.Get_extent() == (0, high - low)
    assert datatype.Get_true_extent() == (0, high - low)
    assert isinstance(buffer, np.ndarray) and buffer.dtype == np.uint8 and buffer.size == high - low
    assert buffer.ctypes.data == low == min(view.ptr, low)
    assert MPI.Get_address(buffer) == low
    assert strided.size == 0 or (np.shares_memory(buffer, array) and np.shares_memory(buffer, strided))
    assert buffer.flags.writeable


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_message_carries_the_elements_in_c_order(MPI, layout):
    """Sent to this process (COMM_SELF), a message arrives as the packed copy
    np.ascontiguousarray(view) would be; received into the same layout of a bigger array,
    only the view's elements change."""
    from stridedview.mpi import as_mpi_message

    strided = LAYOUTS[layout](_base())
    packed = np.empty(strided.shape)
    MPI.COMM_SELF.Sendrecv(as_mpi_message(strided), 0, 0, recvbuf=packed, source=0)
    assert np.array_equal(packed, np.ascontiguousarray(strided).reshape(strided.shape))
    target_base = np.full((4, 5, 6), -1.0)
    target = LAYOUTS[layout](target_base)
    untouched = np.ones(target_base.shape, dtype=bool)
    LAYOUTS[layout](untouched)[...] = False
    MPI.COMM_SELF.Sendrecv(-packed - 1, 0, 0, recvbuf=as_mpi_message(target, receive=True), source=0)
    assert np.array_equal(target, -packed - 1)
    assert (target_base[untouched] == -1.0).all()


def test_contiguous_view_gets_a_contiguous_datatype(MPI):
    """A C-contiguous view's datatype is one contiguous block of its elements (no vector)."""
    from stridedview.mpi import as_mpi_message

    with as_mpi_message(np.zeros((3, 4), np.int32)) as message:
        base, combiner, parameters = message[2].decode()
        assert message[2].combiner == MPI.COMBINER_CONTIGUOUS and combiner == "CONTIGUOUS"
        assert parameters == {"count": 12}
        assert base.Get_size() == 4
        base.free()  # decode() hands out a handle of its own to a derived base


def test_negative_strides_place_element_zero_at_ptr(MPI):
    """With negative strides the span starts below view.ptr, and the datatype's first
    entry in C order (element [0, 0]) sits at ptr - low in it."""
    from stridedview.mpi import as_mpi_message

    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    flipped = array[::-1, ::-2]  # [[11, 9], [7, 5], [3, 1]]: element 1 lies lowest
    message = as_mpi_message(flipped)
    low, _ = message.view.byte_bounds
    assert low == array.ctypes.data + 8 and message.view.ptr - low == (11 - 1) * 8
    assert message[2].Get_true_extent() == (0, 88)
    everything = np.empty(flipped.size, np.int64)
    MPI.COMM_SELF.Sendrecv(message, 0, 0, recvbuf=everything, source=0)
    assert everything.tolist() == [11, 9, 7, 5, 3, 1]


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda: _readonly(), r"^stridedview\.mpi: a read-only view cannot be an MPI receive buffer \(shape \(2, 2\), dtype float64\)$"),
        (lambda: np.lib.stride_tricks.as_strided(np.zeros(3), shape=(4, 3), strides=(0, 8)),
         r"^stridedview\.mpi: a view whose elements overlap cannot be an MPI receive buffer \(shape \(4, 3\), strides \(0, 1\)\)"),
        (lambda: np.lib.stride_tricks.as_strided(np.zeros(6), shape=(3, 3), strides=(16, 8)),
         r"elements overlap cannot be an MPI receive buffer \(shape \(3, 3\), strides \(2, 1\)\)"),
    ],
    ids=["read-only", "broadcast", "overlapping rows"],
)
def test_receive_refuses_views_mpi_cannot_write(MPI, make, pattern):
    """A read-only view or one whose elements overlap is refused as a receive buffer
    (BufferError, naming MPI and quoting the view), and accepted as a send buffer."""
    from stridedview.mpi import as_mpi_message

    with pytest.raises(BufferError, match=pattern):
        as_mpi_message(make(), receive=True)
    as_mpi_message(make()).free()


def _readonly():
    array = np.zeros((2, 3))[:, ::2]
    array.setflags(write=False)
    return array


@pytest.mark.parametrize(
    ("dtype", "pattern"),
    [
        ("bfloat16", r"^stridedview\.mpi: MPI has no datatype for element type 'bfloat16' \(cannot map"),
        ("float8_e4m3fn", r"^stridedview\.mpi: MPI has no datatype for element type 'float8_e4m3fn' \("),
    ],
)
def test_element_types_mpi_cannot_express_are_refused(MPI, dtype, pattern):
    """An element type stridedview views but MPI has no datatype for (ml_dtypes' bfloat16 and
    float8) raises BufferError naming it, for a send and a receive alike."""
    import ml_dtypes

    from stridedview.mpi import as_mpi_message

    array = np.zeros((4, 4), dtype=getattr(ml_dtypes, dtype))[:, ::2]
    for receive in (False, True):
        with pytest.raises(BufferError, match=pattern):
            as_mpi_message(array, receive=receive)


def test_an_mpi_datatype_of_another_size_is_refused(MPI, monkeypatch):
    """Where mpi4py's conversion gives a datatype whose size is not the element's (it maps
    numpy's 'S2' to one char), the element type is refused, the datatype freed."""
    from mpi4py import MPI as mpi
    from mpi4py.util import dtlib

    from stridedview.mpi import _live_datatypes, as_mpi_message

    made = []

    def one_byte(dtype):
        made.append(mpi.BYTE.Dup())
        return made[-1]

    monkeypatch.setattr(dtlib, "from_numpy_dtype", one_byte)
    pattern = r"^stridedview\.mpi: MPI's datatype for element type 'float64' holds 1 bytes \(lb 0, extent 1\), the element 8$"
    with pytest.raises(BufferError, match=pattern):
        as_mpi_message(np.zeros(3))
    assert made[0] == mpi.DATATYPE_NULL and _live_datatypes() == 0


def test_wrong_argument_types_raise_type_error(MPI):
    """``receive`` must be a bool: anything else is a TypeError quoting it."""
    from stridedview.mpi import as_mpi_message

    with pytest.raises(TypeError, match=r"^stridedview\.mpi: 'receive' must be a bool \(got 1\)$"):
        as_mpi_message(np.zeros(3), receive=1)


def test_ten_thousand_dropped_messages_leave_no_datatype(MPI):
    """10,000 messages made and dropped free their datatypes: none is left live, and MPI
    hands out the same few handles again (a leaked handle would never be reused)."""
    import gc

    from stridedview.mpi import _live_datatypes, as_mpi_message

    gc.collect()
    before = _live_datatypes()
    array = np.zeros((8, 8))
    handles = set()
    for index in range(10_000):
        message = as_mpi_message(array[::2, ::-3] if index % 2 else array.T)
        handles.add(message[2].handle)
        del message
    gc.collect()
    assert _live_datatypes() == before
    assert len(handles) <= 4, len(handles)


def test_free_and_with_block_free_once(MPI):
    """free() frees the datatype (a second call does nothing); a with block frees on exit;
    a message cannot be copied (it would be a second owner)."""
    import copy

    from stridedview.mpi import _live_datatypes, as_mpi_message

    before = _live_datatypes()
    message = as_mpi_message(np.zeros((4, 4))[:, ::2])
    datatype = message[2]
    assert _live_datatypes() == before + 1
    message.free()
    message.free()
    assert _live_datatypes() == before and datatype == MPI.DATATYPE_NULL
    with as_mpi_message(np.zeros(3)) as inside:
        assert _live_datatypes() == before + 1
    assert inside[2] == MPI.DATATYPE_NULL and _live_datatypes() == before
    with pytest.raises(TypeError, match="owns its MPI datatype"):
        copy.copy(as_mpi_message(np.zeros(3)))


def test_message_keeps_the_array_alive(MPI):
    """The buffer holds the view, and the view the array: dropping every other reference
    leaves the span readable through the message."""
    import gc

    from stridedview.mpi import as_mpi_message

    message = as_mpi_message(np.arange(10.0)[::-2])
    gc.collect()
    received = np.empty(5)
    MPI.COMM_SELF.Sendrecv(message, 0, 0, recvbuf=received, source=0)
    assert received.tolist() == [9.0, 7.0, 5.0, 3.0, 1.0]


def test_device_view_span_is_offered_by_the_cuda_array_interface(MPI):
    """A device view's buffer is its span's address through __cuda_array_interface__ (as a
    GPU-aware MPI reads it); here a CAI producer over host memory stands in for the device,
    so that MPICH (not GPU-aware) can move it and the elements are checked."""
    from stridedview import StridedMemoryView
    from stridedview.mpi import as_mpi_message

    array = np.arange(12, dtype=np.float32)

    class HostCAI:
        __cuda_array_interface__ = {
            "version": 3, "shape": (3, 2), "strides": (8, -4), "typestr": "<f4",
            "data": (array.ctypes.data + 4, False),
        }

    view = StridedMemoryView(HostCAI(), -1)
    assert view.is_device_accessible
    message = as_mpi_message(view, receive=True)
    interface = message[0].__cuda_array_interface__
    assert interface["data"] == (array.ctypes.data, False) and interface["shape"] == (24,)
    assert not hasattr(message[0], "__dlpack__")  # mpi4py tries DLPack first: the CAI it is
    received = np.empty((3, 2), np.float32)
    MPI.COMM_SELF.Sendrecv(message, 0, 0, recvbuf=received, source=0)
    assert received.tolist() == [[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]]


@pytest.mark.torch
def test_torch_cpu_tensor_view_is_sent_in_place(MPI):
    """A strided view of a torch CPU tensor (a transposed, sliced one) is sent with no copy."""
    torch = pytest.importorskip("torch")
    from stridedview.mpi import as_mpi_message

    tensor = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    strided = tensor.t()[1::2]
    message = as_mpi_message(strided)
    assert message[0].ctypes.data == message.view.byte_bounds[0]
    assert message.view.ptr == strided.data_ptr()
    received = np.empty((3, 4), np.float32)
    MPI.COMM_SELF.Sendrecv(message, 0, 0, recvbuf=received, source=0)
    assert np.array_equal(received, strided.contiguous().numpy())


def test_importing_stridedview_mpi_imports_no_mpi4py():
    """``import stridedview`` and ``import stridedview.mpi`` import neither mpi4py nor numpy's
    MPI bridge: mpi4py comes with the first as_mpi_message call."""
    import stridedview

    package_parent = str(Path(stridedview.__file__).resolve().parent.parent)
    code = (
        "import sys\n"
        f"sys.path.insert(0, {package_parent!r})\n"
        "import stridedview, stridedview.mpi\n"
        "print(sorted(name for name in sys.modules if name.startswith('mpi4py')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
