"""``python -m stridedview``: which installed array libraries can hand arrays to which.

For every array library installed here that stridedview knows, on every device
it can reach, the report builds a small array, views it (timing the view), and
hands the view to every installed consumer, checking that the consumer sees the
same memory and the same values.  It imports only libraries that are installed,
and each only when its turn comes.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VALUES = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


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


def _numpy_library():
    def make(device):
        import numpy

        return numpy.asarray(VALUES, dtype=numpy.float32)

    def consume(view):
        import numpy

        return numpy.from_dlpack(view)

    return Library(
        "numpy", "numpy", "numpy", lambda: ["cpu"], make, consume,
        lambda a: a.__array_interface__["data"][0], lambda a: a.tolist(),
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
    )


def _array_api_strict_library():
    def make(device):
        import array_api_strict as xp

        return xp.asarray(VALUES, dtype=xp.float32)

    def consume(view):
        import array_api_strict as xp

        return xp.from_dlpack(view)

    def address(array):
        import numpy

        return numpy.from_dlpack(array).__array_interface__["data"][0]

    def to_list(array):
        import numpy

        return numpy.from_dlpack(array).tolist()

    return Library(
        "array-api-strict", "array_api_strict", "array-api-strict", lambda: ["cpu"], make,
        consume, address, to_list,
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
    )


def _numba_library():
    def devices():
        from numba import cuda

        return ["cuda"] if cuda.is_available() else []

    def make(device):
        import numpy
        from numba import cuda

        return cuda.to_device(numpy.asarray(VALUES, dtype=numpy.float32))

    def consume(view):
        from numba import cuda

        return cuda.as_cuda_array(view)

    return Library(
        "numba-cuda", "numba.cuda", "numba-cuda", devices, make, consume,
        lambda a: a.__cuda_array_interface__["data"][0], lambda a: a.copy_to_host().tolist(),
    )


KNOWN_LIBRARIES = (
    _numpy_library,
    _torch_library,
    _jax_library,
    _array_api_strict_library,
    _cupy_library,
    _numba_library,
)


@dataclass
class Cell:
    """One producer -> consumer hand-over: ok, or the reason it failed."""

    consumer: str
    ok: bool
    reason: str = ""


@dataclass
class Row:
    """One producer on one device: its view, its timing, its hand-overs."""

    producer: str
    device: str
    view: str = ""
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


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 100 else text[:97] + "..."


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


def environment() -> dict:
    """Versions, and whether a CUDA driver and GPUs were found."""
    from stridedview import CUDAError, __version__, _driver

    try:
        gpus = _driver.device_count()
        driver = f"found, {gpus} GPU(s)"
    except CUDAError as exc:
        gpus = 0
        driver = f"not usable ({exc.name})"
    return {
        "python": sys.version.split()[0],
        "stridedview": __version__,
        "numpy": _version("numpy"),
        "cuda-bindings": _version("cuda-bindings"),
        "cuda driver": driver,
        "gpus": gpus,
    }


def build_report(timing: bool = True) -> dict:
    """The report as plain data: the environment and a row per producer and device."""
    from stridedview import StridedMemoryView

    libraries = [factory() for factory in KNOWN_LIBRARIES]
    installed = [lib for lib in libraries if _installed(lib.module.split(".")[0])]
    installed = [lib for lib in installed if _installed(lib.module)]
    consumers = [lib for lib in installed if lib.consume is not None]
    rows = []
    for producer in installed:
        try:
            devices = producer.devices()
        except Exception as exc:  # a library that cannot even list its devices
            rows.append(Row(producer.name, "?", error=_short(exc)))
            continue
        for device in devices:
            row = Row(producer.name, device)
            rows.append(row)
            # Device memory is used on the legacy default stream (1); host needs none.
            stream_ptr = 1 if device == "cuda" else None
            try:
                array = producer.make(device)
                view = StridedMemoryView(array, stream_ptr)
                row.view = repr(view)
                if timing:
                    row.view_us = round(_time_view(array, stream_ptr), 3)
            except Exception as exc:
                row.error = _short(exc)
                continue
            for consumer in consumers:
                row.cells.append(_hand_over(view, consumer))
    return {
        "environment": environment(),
        "libraries": {lib.name: _version(lib.distribution) for lib in installed},
        "rows": [asdict(row) for row in rows],
    }


def _hand_over(view, consumer: Library) -> Cell:
    try:
        received = consumer.consume(view)
        address = consumer.address(received)
        values = consumer.to_list(received)
    except Exception as exc:
        return Cell(consumer.name, False, _short(exc))
    if address != view.ptr:
        return Cell(consumer.name, False, f"copied: address {address:#x} != view {view.ptr:#x}")
    if values != VALUES:
        return Cell(consumer.name, False, f"values differ: {values!r}")
    return Cell(consumer.name, True)


def format_report(report: dict) -> str:
    """The report as text: environment, then the producer x consumer matrix, then reasons."""
    lines = ["stridedview interop report", ""]
    for key, value in report["environment"].items():
        lines.append(f"  {key:<14} {value}")
    lines.append("  libraries      " + ", ".join(
        f"{name} {version}" for name, version in report["libraries"].items()
    ))
    lines.append("")
    consumers = []
    for row in report["rows"]:
        for cell in row["cells"]:
            if cell["consumer"] not in consumers:
                consumers.append(cell["consumer"])
    head = f"  {'producer':<24} {'view µs':>8}  " + "  ".join(f"{c:^16}" for c in consumers)
    lines += ["producer x consumer: 'ok' = same memory and values through the view", head]
    reasons: list[str] = []
    for row in report["rows"]:
        label = f"{row['producer']} ({row['device']})"
        timing = "" if row["view_us"] is None else f"{row['view_us']:.3f}"
        if row["error"]:
            lines.append(f"  {label:<24} {'-':>8}  view failed: {row['error']}")
            continue
        marks = []
        by_consumer = {cell["consumer"]: cell for cell in row["cells"]}
        for name in consumers:
            cell = by_consumer.get(name)
            if cell is None:
                marks.append(f"{'':^16}")
            elif cell["ok"]:
                marks.append(f"{'ok':^16}")
            else:
                reasons.append(f"  [{len(reasons) + 1}] {label} -> {name}: {cell['reason']}")
                marks.append(f"{'FAIL [' + str(len(reasons)) + ']':^16}")
        lines.append(f"  {label:<24} {timing:>8}  " + "  ".join(marks))
    if reasons:
        lines += ["", "failures:"] + reasons
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m stridedview",
        description="Show which installed array libraries can hand arrays to which "
        "through stridedview.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-timing", action="store_true", help="skip the view timings")
    args = parser.parse_args(argv)
    report = build_report(timing=not args.no_timing)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0
