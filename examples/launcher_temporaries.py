"""Launching on temporaries from a stream-ordered allocator: ``record_stream=True``.

A library computes on its stream P and allocates from a stream-ordered pool (CuPy's and
torch's caching allocators, cuda.core's and jax's pools, ``cuMemAllocAsync`` all work so):
when its array is dropped, the block is freed *on P*, and the next allocation on P gets it
back at once, ordered after P's work only.  Your launch runs on another stream S.  A
temporary passed to it (``launch(a + b, out, stream)``, a slice made on the fly, an array
dropped right after the call) is freed as soon as the launcher returns, while S may not
have read it yet: the kernel then reads whatever P writes into the reused block next.

``record_stream=True`` on the decorator (or ``view.record_stream(S)`` on a view) keeps
every viewed argument until the work enqueued on S so far is done, without blocking the
host; the free, and so the reuse, happens after that.

Each of ROUNDS rounds here makes a temporary on P filled with 0xAA, launches a "kernel"
on S that reads it late (it has other work queued first), drops the temporary, and lets P
allocate again and write 0xBB.  The kernel is a stand-in that copies the temporary into
pinned host memory (``cuMemcpyAsync`` on S), so that the host can check what it read: the
example also runs on the simulated CUDA device, where no kernel executes
(docs/testing-without-a-gpu.md; CI runs it there).  ``--unsafe`` leaves
``record_stream`` out, to show the failure; the exit status is 1 when any round read
reused memory.  Whether a round reads reused memory depends on timing; on the simulated
device with its stream-order checker on (``SIMGPU_CHECK=1``, which
simgpu/with-simulator.sh sets), every free of a temporary before the launch's stream
read it is reported, whatever the timing, and counts as a failure too.

    python examples/launcher_temporaries.py            # needs a CUDA driver and device
    python examples/launcher_temporaries.py --unsafe   # the same without record_stream
    simgpu/with-simulator.sh python examples/launcher_temporaries.py --unsafe
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from stridedview import ViewableArgument, args_viewable_as_strided_memory

ROUNDS = 20
NBYTES = 1 << 16
ORIGINAL, NEW = 0xAA, 0xBB
#: Work queued on S before the kernel's read: a kernel that starts late.
EARLIER_WORK = 3


def missing() -> str | None:
    """What this machine lacks to run the example, or None."""
    try:
        from cuda.bindings import driver
        from cuda.core import Device  # noqa: F401
    except ImportError as exc:
        return f"cuda.core is not installed ({exc}): pip install cuda-core"
    try:
        (status,) = driver.cuInit(0)
        if status == driver.CUresult.CUDA_SUCCESS:
            status, count = driver.cuDeviceGetCount()
    except Exception as exc:  # no libcuda at all: cuda-bindings cannot load it
        return f"no CUDA driver ({type(exc).__name__}: {exc})"
    if status != driver.CUresult.CUDA_SUCCESS:
        return f"the CUDA driver says {status.name}"
    if count < 1:
        return "no CUDA device"
    return None


def checker_reports() -> int | None:
    """How many reports the simulated device's stream-order checker has made so far, or None
    on a real GPU or with the checker off (SIMGPU_CHECK unset)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        mode, counter = lib.simgpu_check_mode, lib.simgpu_counter
    except (OSError, AttributeError):
        return None
    if mode() == 0:
        return None
    counter.restype = ctypes.c_longlong
    counter.argtypes = [ctypes.c_char_p]
    return int(counter(b"check_reports"))


def make_launcher(record_stream: bool, scratch: int):
    """``copy_kernel(src, dst, stream)``: reads ``src`` on ``stream`` into ``dst`` (after
    writes to the 64 device bytes at ``scratch``: other work queued first)."""
    from cuda.bindings import driver

    def check(result) -> None:
        if result[0] != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver call failed: {result[0]!r}")

    @args_viewable_as_strided_memory(("src", "dst"), record_stream=record_stream)
    def copy_kernel(src: ViewableArgument, dst: ViewableArgument, stream) -> None:
        # The views are made on the launch's stream: each producer's pending work is
        # ordered before it, and (record_stream) each argument is kept until it is done.
        source = src.view(stream)
        target = dst.view(stream)
        if source.nbytes != target.nbytes or not source.is_c_contiguous or target.readonly:
            raise ValueError(f"copy_kernel: {source} cannot be copied into {target}")
        handle = int(stream.handle)
        for _ in range(EARLIER_WORK):  # the launch starts late: S is busy
            check(driver.cuMemsetD8Async(scratch, 0, 64, handle))
        check(driver.cuMemcpyAsync(target.ptr, source.ptr, source.nbytes, handle))

    return copy_kernel


def main(argv: list[str]) -> int:
    lacking = missing()
    if lacking is not None:
        print(f"launcher_temporaries.py skipped: it needs a CUDA GPU or the simulated device "
              f"({lacking})")
        return 0
    from cuda.core import Device, LegacyPinnedMemoryResource

    unsafe = "--unsafe" in argv
    device = Device(0)
    device.set_current()
    library_stream = device.create_stream()  # P: the producer's stream and allocator
    launch_stream = device.create_stream()  # S: yours
    pinned = LegacyPinnedMemoryResource().allocate(NBYTES, stream=launch_stream)
    seen = np.ctypeslib.as_array((ctypes.c_uint8 * NBYTES).from_address(int(pinned.handle)))
    scratch = device.allocate(64, stream=launch_stream)

    copy_kernel = make_launcher(record_stream=not unsafe, scratch=int(scratch.handle))
    reused = 0
    for _ in range(ROUNDS):
        temporary = device.allocate(NBYTES, stream=library_stream)
        temporary.fill(ORIGINAL, stream=library_stream)
        # Your stream waits for the library's work, as a library's own stream handling would
        # (a cuda.core Buffer does not order its writers itself).
        launch_stream.wait(library_stream)
        copy_kernel(temporary, pinned, launch_stream)
        del temporary  # freed on P, now: without record_stream, the block is free for P's next
        again = device.allocate(NBYTES, stream=library_stream)
        again.fill(NEW, stream=library_stream)
        launch_stream.sync()
        del again
        if not (seen == ORIGINAL).all():
            reused += 1

    library_stream.sync()
    scratch.close(launch_stream)
    pinned.close(launch_stream)
    launch_stream.sync()
    how = "without record_stream" if unsafe else "with record_stream=True"
    print(f"{how}: {ROUNDS - reused} of {ROUNDS} launches read the temporary they were given, "
          f"{reused} read memory reused after it was freed")
    reports = checker_reports()
    if reports is not None:
        print(f"the simulated device's stream-order checker reported {reports} access(es) "
              "not ordered as CUDA requires (SIMGPU_CHECK; each report is a line on stderr)")
    return 1 if reused or reports else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
