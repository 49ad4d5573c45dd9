"""``python -m stridedview``: which installed array libraries can hand arrays to which.

For every array library installed here that stridedview knows, on every device
it can reach, the report builds a small array, views it (timing the view), and
hands the view to every installed consumer, checking that the consumer sees the
same memory and the same values.  It imports only libraries that are installed,
and each only when its turn comes.

Each hand-over gets one of six verdicts: "ok" (same memory, same values),
"writable" (same memory and values, but the view is read-only and the consumer's
array is writable: the consumer ignores DLPack's READ_ONLY flag, as torch does, so
a write through it would change memory its producer holds immutable),
"copies" (the consumer made a copy holding the same values: the hand-over works
but is not zero-copy), "read-only" (the view is read-only and the consumer asks
for a legacy DLPack capsule, which cannot say so: refused on purpose, as it
must be), "n/a" (the consumer takes no memory of that kind: numba-cuda and CuPy
take device memory only, numpy host memory only; nothing is tried) and "fail"
(the consumer raised, or saw other values).
The verdicts do not depend on allocation: host arrays are built in buffers
aligned to 64 bytes, since jax shares a host buffer only when it is so aligned
and copies it otherwise.  ``main`` returns 1 when a view or a hand-over fails.
The report also says what it could not check on this machine (device rows and
stream ordering without a GPU) and which known libraries are not installed.
With a driver that has devices (a GPU, or the simulated device of tests/simgpu,
which the environment names as such), device producers (numba-cuda, cuda-core, CuPy,
torch or jax with CUDA) get a "cuda" row of their own.  cuda-core (installed with the
test extra) is a consumer column on every machine: with numba-cuda's device row it
shows the CUDA Array Interface to DLPack bridge.

A second table, element types, hands host arrays of the types kernels take beyond
the numeric ones (bfloat16, float8, complex32, bcomplex32, sub-byte types padded
and packed, torch's float4_e2m1fn_x2 pairs) from each producer that makes them,
through a view, to each DLPack consumer installed (numpy, torch, jax; tvm-ffi too with
``--tvm-ffi``, whose import takes seconds).
Its verdicts: "ok" (the consumer's array is the same memory, and a view of it
has the same DLPack type), "refuses" (the consumer raised: it does not take the
type; no failure of the view) and "fail" (it took the array but another memory
or type, or the view itself failed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VALUES = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]

#: Host buffers are aligned to this many bytes: jax shares a host buffer only
#: when its address is a multiple of 64, and copies it otherwise.
HOST_ALIGNMENT = 64

#: Text lines are wrapped to this width, so that they read whole in a terminal
#: and in the documentation's code blocks.
WIDTH = 79

#: What a view of each verdict means, for the legend.
VERDICTS = {
    "ok": "same memory, same values",
    "writable": "same memory and values, but writable: the consumer drops the "
    "view's read-only flag (do not write through it)",
    "copies": "same values in a copy (works, but not zero-copy)",
    "read-only": "refused, as it must be: a read-only view, legacy-only consumer",
    "n/a": "not tried: the consumer takes no memory of this kind",
    "fail": "the consumer raised or saw other values",
}

#: How each verdict shows in the text table.
MARKS = {
    "ok": "ok", "writable": "rw!", "copies": "copies", "read-only": "r/o", "n/a": "n/a",
    "fail": "FAIL",
}

#: Verdicts shown without a numbered reason (the legend says it all).
SILENT = ("ok", "n/a")

#: The refusal a read-only view gives a consumer that asks for a legacy capsule.
LEGACY_READ_ONLY = "dlpack: a read-only view cannot be exported as a legacy capsule"

#: Said whenever torch is installed: its from_dlpack refuses a negative stride,
#: torch 2.13's by killing the process, so the report never hands it one.
TORCH_NEGATIVE_STRIDES = (
    "torch.from_dlpack cannot take a view with a negative stride (nor such a numpy "
    "array): torch 2.13 aborts the whole process (it does not raise), torch 2.14 "
    "raises RuntimeError (other releases not tested). Never hand torch such a view "
    "(view.has_negative_stride says whether it has one); make a positive-stride "
    "copy first (numpy.ascontiguousarray)."
)

#: What the "view µs" column measures.
VIEW_US = (
    "view µs = the median time, in microseconds, to make a view of the array and "
    "read its ptr, shape, strides and dtype (on this machine: compare rows, not "
    "machines)"
)

#: What the cost of a build without the C++ guard is, said with the build line.
WITHOUT_CXX_GUARD = (
    "built without the C++ exception guard (no C++ compiler at install): torch "
    "tensors are still read through torch's stable C ABI; only the fallback to "
    "torch's private at::toDLPackNonOwning (for a torch whose stable ABI fails "
    "its calibration) is left out"
)


@dataclass
class Library:
    """How the report builds, consumes and reads arrays of one library."""

    name: str
    module: str  # what must be importable
    distribution: str  # whose version is shown
    devices: Any  # () -> list of device names ("cpu", "cuda")
    make: Any  # (device) -> array holding VALUES as float32
    consume: Any = None  # (view) -> array, or None when not a DLPack/CAI consumer
    address: Any = None  # (array) -> int, the address of element [0, 0]
    to_list: Any = None  # (array) -> nested list of its values
    # (array) -> whether the consumer's array may be written (None: not known)
    writable: Any = None
    # () -> the devices ("cpu", "cuda") whose memory the consumer takes; None: its ``devices``
    takes: Any = None


def _taken(library: Library) -> set:
    """The devices whose memory ``library`` consumes (none if it cannot even list them)."""
    try:
        return set((library.takes or library.devices)())
    except Exception:
        return set()


def _aligned_host_array(dtype=None, zeros=False):
    """VALUES as a float32 numpy array (or zeros of ``dtype`` in VALUES' shape) whose first
    element is HOST_ALIGNMENT-aligned."""
    import numpy

    dtype = numpy.dtype(numpy.float32 if dtype is None else dtype)
    shape = numpy.shape(VALUES)
    nbytes = int(numpy.prod(shape)) * dtype.itemsize
    raw = numpy.zeros(nbytes + HOST_ALIGNMENT, dtype=numpy.uint8)
    start = -raw.ctypes.data % HOST_ALIGNMENT
    array = raw[start:start + nbytes].view(dtype).reshape(shape)
    if not zeros:
        array[...] = numpy.asarray(VALUES, dtype=dtype)
    return array


def _numpy_library():
    def make(device):
        return _aligned_host_array()

    def consume(view):
        import numpy

        return numpy.from_dlpack(view)

    return Library(
        "numpy", "numpy", "numpy", lambda: ["cpu"], make, consume,
        lambda a: a.__array_interface__["data"][0], lambda a: a.tolist(),
        writable=lambda a: bool(a.flags.writeable),
    )


def _torch_library():
    def devices():
        import torch

        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    def make(device):
        import torch

        return torch.tensor(VALUES, dtype=torch.float32, device=device)

    def consume(view):
        import torch

        return torch.from_dlpack(view)

    return Library(
        "torch", "torch", "torch", devices, make, consume,
        lambda t: t.data_ptr(), lambda t: t.cpu().tolist(),
        # A torch tensor has no read-only state: torch.from_dlpack ignores READ_ONLY.
        writable=lambda t: True,
    )


def _jax_library():
    def devices():
        import jax

        return ["cpu"] + (["cuda"] if any(d.platform == "gpu" for d in jax.devices()) else [])

    def make(device):
        import jax
        import jax.numpy as jnp

        platform = "gpu" if device == "cuda" else "cpu"
        return jax.device_put(jnp.asarray(VALUES, dtype=jnp.float32), jax.devices(platform)[0])

    def consume(view):
        import jax.numpy as jnp

        return jnp.from_dlpack(view)

    return Library(
        "jax", "jax", "jax", devices, make, consume,
        lambda x: x.unsafe_buffer_pointer(), lambda x: x.tolist(),
        writable=lambda x: False,  # jax arrays are immutable
    )


def _array_api_strict_library():
    def make(device):
        import array_api_strict as xp

        # asarray wraps the numpy array without copying: the buffer stays aligned.
        return xp.asarray(_aligned_host_array())

    def consume(view):
        import array_api_strict as xp

        return xp.from_dlpack(view)

    def address(array):
        import numpy

        return numpy.from_dlpack(array).__array_interface__["data"][0]

    def to_list(array):
        import numpy

        return numpy.from_dlpack(array).tolist()

    def writable(array):
        import numpy

        # It wraps a numpy array and exports that array's READ_ONLY flag.
        return bool(numpy.from_dlpack(array).flags.writeable)

    return Library(
        "array-api-strict", "array_api_strict", "array-api-strict", lambda: ["cpu"], make,
        consume, address, to_list, writable=writable,
    )


def _cupy_library():
    def devices():
        import cupy

        return ["cuda"] if cupy.cuda.runtime.getDeviceCount() > 0 else []

    def make(device):
        import cupy

        return cupy.asarray(VALUES, dtype=cupy.float32)

    def consume(view):
        import cupy

        return cupy.from_dlpack(view)

    return Library(
        "cupy", "cupy", "cupy", devices, make, consume,
        lambda a: a.data.ptr, lambda a: a.get().tolist(),
        writable=lambda a: True,  # CuPy arrays have no read-only state
    )


def _numba_library():
    def devices():
        from numba import cuda

        return ["cuda"] if cuda.is_available() else []

    def make(device):
        from numba import cuda

        return cuda.to_device(_aligned_host_array())

    def consume(view):
        from numba import cuda

        return cuda.as_cuda_array(view)

    return Library(
        "numba-cuda", "numba.cuda", "numba-cuda", devices, make, consume,
        lambda a: a.__cuda_array_interface__["data"][0], lambda a: a.copy_to_host().tolist(),
        writable=lambda a: True,  # device arrays have no read-only state
    )


def _cuda_core_library():
    """cuda.core: a consumer of host and device views (its ``StridedMemoryView``, through
    DLPack), and a producer of device memory (its view of a device Buffer) where a driver
    with a device answers, the simulated device included."""

    def devices():
        from stridedview import CUDAError, _driver

        try:
            return ["cuda"] if _driver.device_count() > 0 else []
        except CUDAError:  # no driver, or no cuda-bindings: no device row, no failure
            return []

    def make(device):
        import numpy
        from cuda.core import Device
        from cuda.core.utils import StridedMemoryView as CoreView

        from stridedview import _driver

        gpu = Device(0)
        gpu.set_current()
        host = _aligned_host_array()
        buffer = gpu.allocate(host.nbytes, stream=gpu.default_stream)
        api = _driver._driver()
        _driver._call(api, "cuMemcpyHtoD", int(buffer.handle), host.ctypes.data, host.nbytes)
        # cuda.core's view of the Buffer, laid out as VALUES; it keeps the Buffer alive.
        return CoreView.from_buffer(buffer, host.shape, None, dtype=numpy.dtype(numpy.float32))

    def consume(view):
        from cuda.core.utils import StridedMemoryView as CoreView

        # cuda.core refuses stream_ptr=None even for host memory; device rows use the
        # legacy default stream, as the report's own views do.
        return CoreView.from_dlpack(view, stream_ptr=1 if view.is_device_accessible else -1)

    return Library(
        "cuda-core", "cuda.core", "cuda-core", devices, make, consume,
        lambda core: int(core.ptr), _cuda_core_values,
        writable=lambda core: not core.readonly,
        takes=lambda: ["cpu", "cuda"],
    )


def _cuda_core_values(core) -> list:
    """The values a cuda.core view addresses: read through DLPack on the host, copied to
    the host with the driver (cuMemcpyDtoH of the bytes it spans) for device memory."""
    import numpy

    if not core.is_device_accessible:
        return numpy.from_dlpack(core).tolist()
    from stridedview import _driver

    dtype = numpy.dtype(core.dtype)
    shape = tuple(core.shape)
    strides = core.strides
    if strides is None:  # C order
        strides = tuple(int(numpy.prod(shape[i + 1:])) for i in range(len(shape)))
    if 0 in shape:
        return numpy.empty(shape, dtype).tolist()
    # Element offsets from element [0, ..., 0]: the lowest and highest the view reaches.
    low = sum((extent - 1) * stride for extent, stride in zip(shape, strides) if stride < 0)
    high = sum((extent - 1) * stride for extent, stride in zip(shape, strides) if stride > 0)
    raw = numpy.empty((high - low + 1) * dtype.itemsize, dtype=numpy.uint8)
    api = _driver._driver()
    _driver._call(api, "cuMemcpyDtoH", raw.ctypes.data, int(core.ptr) + low * dtype.itemsize, raw.nbytes)
    elements = raw.view(dtype)[-low:]
    return numpy.lib.stride_tricks.as_strided(
        elements, shape, [stride * dtype.itemsize for stride in strides]
    ).tolist()


KNOWN_LIBRARIES = (
    _numpy_library,
    _torch_library,
    _jax_library,
    _array_api_strict_library,
    _cupy_library,
    _numba_library,
    _cuda_core_library,
)


@dataclass
class Cell:
    """One producer -> consumer hand-over: its verdict (a key of VERDICTS) and why."""

    consumer: str
    verdict: str
    reason: str = ""


#: The element-type table's verdicts, and how each shows.
DTYPE_VERDICTS = {
    "ok": "same memory, same DLPack type",
    "copies": "same DLPack type in a copy (works, but not zero-copy)",
    "refuses": "the consumer does not take the type (it raised; the view is fine)",
    "legacy": "refused, as it must be: the consumer asks for a legacy capsule, which "
    "cannot say read-only or padded",
    "fail": "another type, or the view failed",
}
DTYPE_MARKS = {"ok": "ok", "copies": "copies", "refuses": "no", "legacy": "r/o", "fail": "FAIL"}
#: How the view refuses a legacy capsule for a read-only or padded sub-byte view.
LEGACY_REFUSED = "dlpack: a "


def _element_type_arrays(names) -> list:
    """(producer, type label, () -> host array) for each element type each producer of
    ``names`` (the report's installed libraries) makes: ml_dtypes' types as numpy arrays,
    torch's and jax's own, and packed sub-byte types (which only a view of bytes makes,
    DLPack's default layout: the "bytes" rows)."""
    makers = []
    if "numpy" in names and _installed("ml_dtypes"):
        import ml_dtypes

        for name in (
            "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "complex32",
            "bcomplex32", "int4", "uint4", "float4_e2m1fn", "float6_e2m3fn",
        ):
            if not hasattr(ml_dtypes, name):  # complex32, bcomplex32: ml_dtypes 0.6 on
                continue
            def make(name=name):
                import ml_dtypes

                return _aligned_host_array(getattr(ml_dtypes, name), zeros=True)
            makers.append(("numpy", name, make))
    if "torch" in names:
        for name in (
            "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "complex32",
            "float4_e2m1fn_x2",
        ):
            def make(name=name):
                import torch

                import warnings

                dtype = getattr(torch, name)
                if name == "float4_e2m1fn_x2":  # no zeros() of its own
                    return torch.zeros((2, 4), dtype=torch.uint8).view(dtype)
                with warnings.catch_warnings():  # complex32: "support is experimental"
                    warnings.simplefilter("ignore", UserWarning)
                    return torch.zeros((2, 4), dtype=dtype)
            makers.append(("torch", name, make))
    if "jax" in names and _installed("ml_dtypes"):
        for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"):
            def make(name=name):
                import jax
                import ml_dtypes

                # A host array put on jax's CPU device (jnp.zeros would compile a kernel).
                return jax.device_put(
                    _aligned_host_array(getattr(ml_dtypes, name), zeros=True),
                    jax.devices("cpu")[0],
                )
            makers.append(("jax", name, make))
    if "numpy" in names:
        for name, dl_type in (("float4, packed", (17, 4, 1)), ("int4, packed", (0, 4, 1))):
            def make(dl_type=dl_type):
                import numpy

                from stridedview import DLPackDType, StridedMemoryView

                return StridedMemoryView(numpy.zeros((2, 2), numpy.uint8)).view(
                    dtype=DLPackDType(*dl_type)
                )
            makers.append(("bytes", name, make))
    return makers


#: DLPack consumers the element-type table asks beyond the report's libraries, when asked
#: to (``--tvm-ffi``: importing it takes seconds), as (module, name): tvm-ffi takes the
#: packed sub-byte types no other library takes.
EXTRA_DTYPE_CONSUMERS = (("tvm_ffi", "tvm-ffi"),)


def _dtype_consumers(names, extra: bool) -> list:
    """(name, view -> array) for each DLPack consumer of host memory among ``names``, and
    of EXTRA_DTYPE_CONSUMERS that is installed if ``extra``."""
    consumers = []
    if "numpy" in names:
        consumers.append(("numpy", lambda view: __import__("numpy").from_dlpack(view)))
    if "torch" in names:
        consumers.append(("torch", lambda view: __import__("torch").from_dlpack(view)))
    if "jax" in names:
        def to_jax(view):
            import jax.numpy as jnp

            return jnp.from_dlpack(view)
        consumers.append(("jax", to_jax))
    for module, name in EXTRA_DTYPE_CONSUMERS if extra else ():
        if _installed(module):
            def from_dlpack(view, module: str = module):
                return importlib.import_module(module).from_dlpack(view)
            consumers.append((name, from_dlpack))
    return consumers


def build_dtype_matrix(names, extra_consumers: bool = False) -> list:
    """The element-type table as plain data for the report's installed libraries
    ``names``: one dict per (producer, type), with the view's DLPack type and dtype, and
    a cell per consumer (tvm-ffi's too if ``extra_consumers``)."""
    from stridedview import StridedMemoryView

    consumers = _dtype_consumers(names, extra_consumers)
    rows = []
    for producer, label, make in _element_type_arrays(names):
        row = {"producer": producer, "type": label, "dlpack": None, "dtype": None,
               "error": "", "cells": []}
        rows.append(row)
        try:
            view = StridedMemoryView(make())
            dl_type = view.dlpack_dtype
            row["dlpack"] = None if dl_type is None else list(dl_type)
            row["dtype"] = str(view.dtype)
        except Exception as exc:
            row["error"] = _reason(exc)
            continue
        for name, consume in consumers:
            try:
                received = consume(view)
            except BufferError as exc:
                legacy = str(exc).startswith(LEGACY_REFUSED) and "legacy capsule" in str(exc)
                row["cells"].append(asdict(Cell(name, "legacy" if legacy else "refuses", _reason(exc))))
                continue
            except Exception as exc:
                row["cells"].append(asdict(Cell(name, "refuses", _reason(exc))))
                continue
            try:
                again = StridedMemoryView(received)
                if again.dlpack_dtype != view.dlpack_dtype:
                    verdict, reason = "fail", f"{name} gave {again.dlpack_dtype}"
                elif again.ptr != view.ptr:
                    verdict, reason = "copies", "the consumer's array is a copy at another address"
                else:
                    verdict, reason = "ok", ""
            except Exception as exc:
                verdict, reason = "fail", f"its array cannot be viewed: {_reason(exc)}"
            row["cells"].append(asdict(Cell(name, verdict, reason)))
    return rows


@dataclass
class Row:
    """One producer on one device: its view, its timing, its hand-overs."""

    producer: str
    device: str
    view: str = ""  # the view's repr without its ptr, so that runs compare equal
    view_us: float | None = None
    error: str = ""
    cells: list[Cell] = field(default_factory=list)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _reason(exc: BaseException) -> str:
    """``Type: message``, whole: only what follows the message's first line (a C++
    traceback some libraries append) is left out."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _time_view(array, stream_ptr, rounds: int = 7, number: int = 200) -> float:
    from stridedview import StridedMemoryView

    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            view = StridedMemoryView(array, stream_ptr)
            view.ptr, view.shape, view.strides, view.dtype
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def _describe(view) -> str:
    """``repr(view)`` without ``ptr=0x...``: the same text on every run."""
    text = repr(view)
    head, sep, rest = text.partition("ptr=")
    if not sep:
        return text
    return head + rest.partition(", ")[2]


def _driver_fact(exc) -> str:
    """What a CUDAError from the first driver call means on this machine."""
    if exc.name != "CUDA_ERROR_NO_DRIVER":
        return f"not usable ({exc.name}: {exc})"
    if str(exc).startswith("cuda-bindings is not installed"):
        return (
            "cuda-bindings is not installed: host memory is viewed as usual; device "
            "memory needs it (pip install cuda-bindings)"
        )
    return (
        "no CUDA driver on this machine: host memory is viewed as usual; device "
        "memory (and stream ordering) needs a driver and a GPU"
    )


def build_facts() -> dict:
    """How this install was built, and which torch reader is in use (after a torch view)."""
    from stridedview import _view

    facts = {
        "build": "with the C++ exception guard" if _view._built_with_cxx_guard
        else WITHOUT_CXX_GUARD,
        "fast paths": f"yes (their state per {_view.fast_paths_state})" if _view.fast_paths
        else "no (built with -DSV_NO_GIL_FAST_PATHS: every view takes the general path)",
    }
    if "torch" in sys.modules:
        reader = _view._torch_layout_reader()
        facts["torch reader"] = "no torch tensor viewed" if reader == "uncalibrated" else reader
    else:
        facts["torch reader"] = "torch not loaded"
    return facts


def environment() -> dict:
    """Versions, whether a CUDA driver and GPUs were found, and how the install was built."""
    from stridedview import CUDAError, __version__, _driver

    try:
        gpus = _driver.device_count()
        if _simulated():
            driver = f"the simulated device of tests/simgpu (no GPU), {gpus} device(s)"
        else:
            driver = f"found, {gpus} GPU(s)"
    except CUDAError as exc:
        gpus = 0
        driver = _driver_fact(exc)
    return {
        "python": sys.version.split()[0],
        "stridedview": __version__,
        "numpy": _version("numpy"),
        "cuda-bindings": _version("cuda-bindings"),
        "cuda driver": driver,
        "gpus": gpus,
        **build_facts(),
    }


def _simulated() -> bool:
    """Whether the loaded CUDA driver is the simulated device (tests/simgpu), which alone
    exports ``simgpu_is_simulator``; called only once the driver answered."""
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libcuda.so.1"), "simgpu_is_simulator")
    except (OSError, AttributeError):
        return False


#: Said when the driver is the simulated device.
SIMULATED = (
    "the device is simulated (tests/simgpu): its memory, copies and streams are the "
    "driver's, but no kernel runs and the CUDA runtime (CuPy, torch's and jax's CUDA "
    "builds) does not work on it; a real GPU is needed for those."
)


def _not_checked(gpus: int, installed_names: list[str], simulated: bool = False) -> list[str]:
    """What the report could not check on this machine, in plain sentences."""
    if gpus == 0:
        return [
            "device memory: no CUDA GPU and driver here, so no device (cuda) row was "
            "built; the CUDA Array Interface path, the ordering of a producer's "
            "stream before a consumer's and the hand-over of memory to a stream "
            "(record_stream) were not exercised. Without a GPU, your own tests run "
            "them on the simulated CUDA device, its stream-order checker on: pip "
            "install stridedview-simgpu, then pytest --simgpu (a clone runs these: "
            "tests/simgpu/run.sh tests -m gpu)."
        ]
    missing = []
    if "numba-cuda" not in installed_names:
        missing.append(
            "the CUDA Array Interface path: numba-cuda, its one producer and consumer "
            "here, is not installed."
        )
    missing.append(
        "stream ordering across two streams and the hand-over of memory to a stream "
        "(record_stream): every device row uses the legacy default stream; the gpu tests "
        "check both (from a clone: python -m pytest -m gpu on a GPU, "
        "tests/simgpu/run.sh tests -m gpu on the simulated device)."
    )
    if simulated:
        missing.append(SIMULATED)
    return missing


def build_report(timing: bool = True, extra_consumers: bool = False) -> dict:
    """The report as plain data: environment, libraries, rows, and what was not checked."""
    from stridedview import StridedMemoryView

    libraries = [factory() for factory in KNOWN_LIBRARIES]
    installed = [lib for lib in libraries if _installed(lib.module.split(".")[0])]
    installed = [lib for lib in installed if _installed(lib.module)]
    consumers = [lib for lib in installed if lib.consume is not None]
    taken = {consumer.name: _taken(consumer) for consumer in consumers}
    rows = []
    for producer in installed:
        try:
            devices = producer.devices()
        except Exception as exc:  # a library that cannot even list its devices
            rows.append(Row(producer.name, "?", error=_reason(exc)))
            continue
        for device in devices:
            row = Row(producer.name, device)
            rows.append(row)
            # Device memory is used on the legacy default stream (1); host needs none.
            stream_ptr = 1 if device == "cuda" else None
            try:
                array = producer.make(device)
                view = StridedMemoryView(array, stream_ptr)
                row.view = _describe(view)
                if timing:
                    row.view_us = round(_time_view(array, stream_ptr), 3)
            except Exception as exc:
                row.error = _reason(exc)
                continue
            for consumer in consumers:
                if device in taken[consumer.name]:
                    row.cells.append(_hand_over(view, consumer))
                else:
                    row.cells.append(Cell(consumer.name, "n/a", _not_taken(consumer.name, device)))
    env = environment()
    names = [lib.name for lib in installed]
    return {
        "environment": env,
        "libraries": {lib.name: _version(lib.distribution) for lib in installed},
        "not_installed": [lib.name for lib in libraries if lib not in installed],
        "not_checked": _not_checked(
            env["gpus"], names, env["cuda driver"].startswith("the simulated device")
        ),
        "notes": [TORCH_NEGATIVE_STRIDES] if "torch" in names else [],
        "rows": [asdict(row) for row in rows],
        "dtypes": build_dtype_matrix(names, extra_consumers),
    }


def _not_taken(consumer: str, device: str) -> str:
    memory = "host" if device == "cpu" else "device"
    return f"{consumer} takes no {memory} memory here"


def _hand_over(view, consumer: Library) -> Cell:
    try:
        received = consumer.consume(view)
        address = consumer.address(received)
        values = consumer.to_list(received)
    except BufferError as exc:
        if view.readonly and str(exc).startswith(LEGACY_READ_ONLY):
            return Cell(consumer.name, "read-only", _reason(exc))
        return Cell(consumer.name, "fail", _reason(exc))
    except Exception as exc:
        return Cell(consumer.name, "fail", _reason(exc))
    if values != VALUES:
        return Cell(consumer.name, "fail", f"values differ: {values!r}")
    if address != view.ptr:
        # No addresses in the reason: a report must read the same from run to run.
        return Cell(consumer.name, "copies", "the consumer's array is a copy at another address")
    if view.readonly and consumer.writable is not None and consumer.writable(received):
        return Cell(
            consumer.name, "writable",
            f"the view is read-only, but {consumer.name} ignores DLPack's READ_ONLY flag: its "
            "array over the same memory is writable, and a write through it would change "
            "memory the producer holds read-only",
        )
    return Cell(consumer.name, "ok")


def failed(report: dict) -> bool:
    """Whether a view or a hand-over of the report failed ("writable", "copies" and
    "read-only" are not failures)."""
    return any(
        row["error"] or any(cell["verdict"] == "fail" for cell in row["cells"])
        for row in [*report["rows"], *report.get("dtypes", ())]
    )


def _wrap(text: str, indent: str = "  ", hanging: str = "    ") -> list[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent, subsequent_indent=hanging,
        break_long_words=False, break_on_hyphens=False,
    )


def _wrap_items(items: list[str], indent: str, hanging: str) -> list[str]:
    """``items`` joined by ", ", wrapped between items only."""
    lines = [indent + items[0]]
    for item in items[1:]:
        if len(lines[-1]) + 2 + len(item) + 1 > WIDTH:
            lines[-1] += ","
            lines.append(hanging + item)
        else:
            lines[-1] += ", " + item
    return lines


def _table(lines: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned text: columns two spaces apart, no trailing spaces."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return [
        ("  " + "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths))
        )).rstrip()
        for line in lines
    ]


def _tables(table: list[list[str]], leading: int = 2) -> list[str]:
    """``table`` (header first; the producer and, with ``leading`` 2, its timing, then one
    column per consumer) as aligned text, split into several tables, each repeating the
    ``leading`` columns, where one would be wider than WIDTH."""
    width = max(len(line) for line in table)
    table = [line + [""] * (width - len(line)) for line in table]
    right = {1} if leading == 2 else set()
    out: list[str] = []
    start = leading
    while start < width or not out:
        end = start + 1
        while end < width and max(len(line) for line in _table(
            [line[:leading] + line[start:end + 1] for line in table], right=right
        )) <= WIDTH:
            end += 1
        if out:
            out.append("")
        out += _table([line[:leading] + line[start:end] for line in table], right=right)
        start = end
    return out


#: The environment lines about how the install was built, with their usual values: shown
#: in the text only with ``--build`` (for maintainers) or where a value is not the usual
#: one (a build without a C++ compiler, or without the fast paths), which a user may need
#: to know.  The JSON has them always.
BUILD_LINES = {
    "build": "with the C++ exception guard",
    "fast paths": "yes",
}


def _shown(key: str, value, build: bool) -> bool:
    usual = BUILD_LINES.get(key)
    return build or usual is None or not str(value).startswith(usual)


def format_report(report: dict, build: bool = False) -> str:
    """The report as text: environment, the producer x consumer matrix, reasons, then caveats.
    ``build``: also the lines of BUILD_LINES where their values are the usual ones."""
    lines = ["stridedview interop report", ""]
    for key, value in report["environment"].items():
        if _shown(key, value, build):
            lines += _wrap(f"{key:<14} {value}", "  ", " " * 17)
    for key, names in (
        ("libraries", [f"{name} {version}" for name, version in report["libraries"].items()]),
        ("not installed", report["not_installed"]),
    ):
        if names:
            lines += _wrap_items(names, f"  {key:<14} ", " " * 17)
    lines.append("")
    consumers = _consumers(report["rows"])
    lines.append("producer -> consumer through a view:")
    lines += _legend(MARKS, VERDICTS)
    # The "view µs" column only where something was timed (not under --no-timing).
    timed = any(row["view_us"] is not None for row in report["rows"])
    if timed:
        lines += _wrap(VIEW_US, "  ", "    ")
    lines.append("")
    table = [["producer", *(["view µs"] if timed else []), *consumers]]
    reasons: list[str] = []
    for row in report["rows"]:
        label = f"{row['producer']} ({row['device']})"
        if row["error"]:
            number = _footnote(reasons, f"{label}: view failed: {row['error']}")
            table.append([label, *(["-"] if timed else []), f"view FAILED [{number}]"])
            continue
        timing = "" if row["view_us"] is None else f"{row['view_us']:.3f}"
        marks = _marks(row, consumers, MARKS, SILENT, reasons, f"{label} -> ")
        table.append([label, *([timing] if timed else []), *marks])
    lines += _tables(table, leading=2 if timed else 1)
    lines += _footnotes(reasons)
    lines += _format_dtypes(report.get("dtypes", []))
    for title, texts in (("not checked here:", report["not_checked"]), ("note:", report["notes"])):
        if texts:
            lines += ["", title]
            for text in texts:
                lines += _wrap(text, "  - ", "    ")
    return "\n".join(lines)


def _consumers(rows: list) -> list[str]:
    """The consumers of a table's cells, in the order they first appear."""
    consumers: list[str] = []
    for row in rows:
        for cell in row["cells"]:
            if cell["consumer"] not in consumers:
                consumers.append(cell["consumer"])
    return consumers


def _legend(marks: dict, verdicts: dict) -> list[str]:
    """One line per verdict: its mark and what it means."""
    width = max(len(mark) for mark in marks.values())
    lines: list[str] = []
    for verdict, meaning in verdicts.items():
        lines += _wrap(f"{marks[verdict]:<{width}} = {meaning}", "  ", " " * (width + 5))
    return lines


def _footnote(reasons: list[str], text: str) -> int:
    """The number of the footnote ``text`` in ``reasons``: its first, else a new one."""
    if text not in reasons:
        reasons.append(text)
    return reasons.index(text) + 1


def _footnotes(reasons: list[str]) -> list[str]:
    """The numbered footnotes under a table (none without reasons)."""
    lines = [""] if reasons else []
    for number, reason in enumerate(reasons, 1):
        lines += _wrap(f"[{number}] {reason}")
    return lines


def _marks(row: dict, consumers: list[str], marks: dict, silent, reasons: list[str],
           prefix: str) -> list[str]:
    """A row's mark for each consumer ("" where it has no cell); a verdict not in ``silent``
    carries the number of its reason's footnote (``prefix`` + consumer + reason, each
    distinct text numbered once)."""
    by_consumer = {cell["consumer"]: cell for cell in row["cells"]}
    row_marks = []
    for name in consumers:
        cell = by_consumer.get(name)
        if cell is None:
            row_marks.append("")
        elif cell["verdict"] in silent:
            row_marks.append(marks[cell["verdict"]])
        else:
            number = _footnote(reasons, f"{prefix}{name}: {cell['reason']}")
            row_marks.append(f"{marks[cell['verdict']]} [{number}]")
    return row_marks


def _format_dtypes(rows: list) -> list[str]:
    """The element-type table as text lines (none when no producer makes such types).  A
    reason shared by many types (numpy refuses every such type alike) is one footnote."""
    if not rows:
        return []
    consumers = _consumers(rows)
    lines = ["", "element types, host memory: producer -> view -> consumer:"]
    lines += _legend(DTYPE_MARKS, DTYPE_VERDICTS)
    lines.append("")
    table = [["source, type", "DLPack", *consumers]]
    reasons: list[str] = []
    for row in rows:
        label = f"{row['producer']} {row['type']}"
        if row["error"]:
            number = _footnote(reasons, f"{label}: view failed: {row['error']}")
            table.append([label, f"view FAILED [{number}]"])
            continue
        marks = _marks(row, consumers, DTYPE_MARKS, ("ok", "copies"), reasons, "-> ")
        table.append([label, str(tuple(row["dlpack"] or ())), *marks])
    width = len(table[0])
    lines += _table([line + [""] * (width - len(line)) for line in table], right=set())
    lines += _wrap("DLPack = the view's (code, bits, lanes), as the producer gave it", "  ", "    ")
    lines += _footnotes(reasons)
    return lines


def main(argv=None) -> int:
    """Print the report; return 1 when a view or a hand-over failed, else 0."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m stridedview",
        description="Show which installed array libraries can hand arrays to which "
        "through stridedview.  Exits with 1 when a view or a hand-over fails "
        "(a consumer that copies is not a failure).",
    )
    from stridedview import __version__

    parser.add_argument("--version", action="version", version=f"stridedview {__version__}")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--tvm-ffi", action="store_true",
        help="also hand the element types to tvm-ffi, where installed (importing it takes "
        "seconds): the one consumer of packed sub-byte types",
    )
    parser.add_argument(
        "--no-timing", action="store_true",
        help="skip the view timings (the output is then the same on every run)",
    )
    parser.add_argument(
        "--build", action="store_true",
        help="also say how this install was built (the C++ exception guard, the fast "
        "paths), which the text shows otherwise only where it is not the usual build",
    )
    args = parser.parse_args(argv)
    report = build_report(timing=not args.no_timing, extra_consumers=args.tvm_ffi)
    text = json.dumps(report, indent=2) if args.json else format_report(report, build=args.build)
    status = 1 if failed(report) else 0
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (python -m stridedview | head): not an error.
        # Point stdout at devnull so that the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return status
