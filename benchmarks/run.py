"""stridedview's benchmark suite: view costs as ratios against peers, measured in one run.

    python benchmarks/run.py [--rounds N] [--plot FILE.png] [--quick]

A view case is "construct a view and read ptr, shape, strides, dtype"; a peer's
import case (``numpy.from_dlpack``, ``tvm_ffi.from_dlpack``) is the bare call; a
launch case calls a launcher decorated for three array arguments whose body views
all three, against apache-tvm-ffi converting the same three arguments for one call
of its ``testing.nop`` and against cuda-core's decorator.  Cases run in this one
process in interleaved rounds (A B C ..., A B C ..., ...) with timeit, and each
figure is the median over rounds of the per-call time.  Why timeit rather than
pyperf: pyperf spawns a process per benchmark, which would compare cases measured
minutes apart on a shared 2-core machine whose speed drifts by 2x; interleaving in
one process makes every ratio compare like with like.  Only the ratios are
meaningful.  Peers that are not installed are left out, and so are the targets
that need them.  Each target is printed as met or NOT MET (the exit status is 0
either way: a benchmark is a measurement, not a test).

`import stridedview` against `import numpy` is timed in fresh interpreters,
alternating, with `-X importtime`-free wall-clock timing of the whole import.

benchmarks/callgrind.py counts the instructions of the same cases under valgrind.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit


def build_cases() -> dict[str, object]:
    """name -> callable; each call constructs one view (or the peer's object) and reads it.

    A view case constructs a view and reads ``ptr``, ``shape``, ``strides`` and
    ``dtype``; a peer's import case (``numpy.from_dlpack``, ``tvm_ffi.from_dlpack``)
    is the bare call.  A launch case calls a launcher decorated for three array
    arguments whose body views all three (``arg.view(-1)``), against apache-tvm-ffi
    converting the same three arguments for one call of its ``testing.nop``.
    """
    import numpy as np

    from stridedview import StridedMemoryView, args_viewable_as_strided_memory

    cases: dict[str, object] = {}
    matrix = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    sliced = matrix[1:, ::2]
    scalar = np.array(1.5)

    class HostCAI:
        """A CUDA Array Interface producer over host memory (the dict built once)."""

        def __init__(self, array):
            self.array = array
            self.__cuda_array_interface__ = {
                "shape": array.shape,
                "typestr": array.dtype.str,
                "data": (array.__array_interface__["data"][0], False),
                "strides": None,
                "version": 3,
                "stream": None,
            }

    class HostDLPack:
        """A DLPack producer over the same host memory: the array's own bound methods
        as instance attributes, so no Python frame runs (like HostCAI's ready dict)."""

        def __init__(self, array):
            self.__dlpack__ = array.__dlpack__
            self.__dlpack_device__ = array.__dlpack_device__

    def ours(array, stream_ptr=None):
        def case():
            view = StridedMemoryView(array, stream_ptr)
            view.ptr
            view.shape
            view.strides
            view.dtype

        return case

    def ours_keyword(array):
        """The form users write: the stream by keyword (-1: a host array, no stream)."""

        def case():
            view = StridedMemoryView(array, stream_ptr=-1)
            view.ptr
            view.shape
            view.strides
            view.dtype

        return case

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        a.view(-1)
        b.view(-1)
        c.view(-1)

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch_reading(a, b, c):
        """A launch body as users write it: each view by keyword, its four fields read."""
        for arg in (a, b, c):
            view = arg.view(stream_ptr=-1)
            view.ptr
            view.shape
            view.strides
            view.dtype

    cases["stridedview numpy 2-D"] = ours(matrix)
    cases["stridedview numpy slice"] = ours(sliced)
    cases["stridedview numpy 0-d"] = ours(scalar)
    cases["numpy.from_dlpack 2-D"] = lambda: np.from_dlpack(matrix)
    cases["stridedview CAI host (-1)"] = ours(HostCAI(matrix), -1)
    cases["stridedview DLPack host (-1)"] = ours(HostDLPack(matrix), -1)
    view_of_matrix = StridedMemoryView(matrix)
    cases["numpy.from_dlpack(view) export"] = lambda: np.from_dlpack(view_of_matrix)
    cases["stridedview launch x3 numpy"] = lambda: launch(matrix, sliced, scalar)
    cases["stridedview numpy 2-D (keyword)"] = ours_keyword(matrix)
    cases["stridedview launch x3 numpy (fields)"] = lambda: launch_reading(matrix, sliced, scalar)

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tensor = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
        tensor_slice = tensor[1:, ::2]
        tensor_scalar = torch.tensor(1.5)
        cases["stridedview torch CPU"] = ours(tensor)
        cases["stridedview launch x3 torch"] = lambda: launch(tensor, tensor_slice, tensor_scalar)
        cases["stridedview torch CPU (keyword)"] = ours_keyword(tensor)
        cases["stridedview launch x3 torch (fields)"] = lambda: launch_reading(
            tensor, tensor_slice, tensor_scalar
        )

    try:
        import tvm_ffi
    except ImportError:
        tvm_ffi = None
    if tvm_ffi is not None:
        nop = tvm_ffi.get_global_func("testing.nop")
        cases["tvm_ffi nop(a, b, c) numpy"] = lambda: nop(matrix, sliced, scalar)
        if torch is not None:
            cases["tvm_ffi.from_dlpack torch"] = lambda: tvm_ffi.from_dlpack(tensor)
            cases["tvm_ffi nop(a, b, c) torch"] = lambda: nop(tensor, tensor_slice, tensor_scalar)

    try:
        import jax.numpy as jnp
    except ImportError:
        jnp = None
    if jnp is not None:
        jax_array = jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64)
        cases["stridedview jax CPU"] = ours(jax_array)

    try:
        from cuda.core.utils import StridedMemoryView as PeerView
        from cuda.core.utils import args_viewable_as_strided_memory as peer_decorator
    except ImportError:
        PeerView = None
    if PeerView is not None:

        def peer(array):
            def case():
                view = PeerView.from_dlpack(array, stream_ptr=-1)
                view.ptr
                view.shape
                view.strides
                view.dtype

            return case

        cases["cuda.core numpy 2-D"] = peer(matrix)
        cases["cuda.core numpy slice"] = peer(sliced)
        cases["cuda.core numpy 0-d"] = peer(scalar)
        if torch is not None:
            cases["cuda.core torch CPU"] = peer(tensor)

        @peer_decorator((0, 1, 2))
        def peer_launch(a, b, c):
            a.view(-1)
            b.view(-1)
            c.view(-1)

        cases["cuda.core launch x3 numpy"] = lambda: peer_launch(matrix, sliced, scalar)
    return cases


# (what, numerator case, denominator case, bar, "<=" or ">=")
TARGETS = [
    ("numpy view vs numpy.from_dlpack", "stridedview numpy 2-D", "numpy.from_dlpack 2-D", 0.6, "<="),
    ("torch view vs tvm_ffi.from_dlpack", "stridedview torch CPU", "tvm_ffi.from_dlpack torch", 1.0, "<="),
    ("launch x3 numpy vs tvm-ffi nop(a, b, c)", "stridedview launch x3 numpy", "tvm_ffi nop(a, b, c) numpy", 1.0, "<="),
    ("launch x3 torch vs tvm-ffi nop(a, b, c)", "stridedview launch x3 torch", "tvm_ffi nop(a, b, c) torch", 1.0, "<="),
    ("cuda.core / stridedview, numpy 2-D", "cuda.core numpy 2-D", "stridedview numpy 2-D", 4.0, ">="),
    ("cuda.core / stridedview, numpy slice", "cuda.core numpy slice", "stridedview numpy slice", 4.0, ">="),
    ("cuda.core / stridedview, numpy 0-d", "cuda.core numpy 0-d", "stridedview numpy 0-d", 4.0, ">="),
    ("cuda.core / stridedview, torch CPU", "cuda.core torch CPU", "stridedview torch CPU", 15.0, ">="),
    ("cuda.core / stridedview, launch x3 numpy", "cuda.core launch x3 numpy", "stridedview launch x3 numpy", 6.0, ">="),
    ("CAI view vs DLPack view, same array", "stridedview CAI host (-1)", "stridedview DLPack host (-1)", 1.5, "<="),
    # The forms users write: the stream by keyword, launch bodies reading the fields.
    ("numpy view (keyword) vs numpy.from_dlpack", "stridedview numpy 2-D (keyword)", "numpy.from_dlpack 2-D", 0.6, "<="),
    ("torch view (keyword) vs tvm_ffi.from_dlpack", "stridedview torch CPU (keyword)", "tvm_ffi.from_dlpack torch", 1.0, "<="),
    ("launch x3 numpy, bodies reading the fields, vs tvm-ffi nop", "stridedview launch x3 numpy (fields)", "tvm_ffi nop(a, b, c) numpy", 1.0, "<="),
    ("launch x3 torch, bodies reading the fields, vs tvm-ffi nop", "stridedview launch x3 torch (fields)", "tvm_ffi nop(a, b, c) torch", 1.0, "<="),
]


def measure(cases: dict, rounds: int, seconds_per_sample: float) -> dict[str, float]:
    """Median seconds per call of each case over interleaved rounds."""
    numbers = {}
    for name, func in cases.items():
        for _ in range(200):  # warm up caches, lazy imports and the interpreter's specialisation
            func()
        per_call = timeit.timeit(func, number=200) / 200
        numbers[name] = max(50, int(seconds_per_sample / max(per_call, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, func in cases.items():
            samples[name].append(timeit.timeit(func, number=numbers[name]) / numbers[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def measure_imports(rounds: int) -> dict[str, float]:
    """Median wall time of `import stridedview` and of `import numpy` in fresh interpreters."""
    code = (
        "import time; t = time.perf_counter(); import {module}; "
        "print(time.perf_counter() - t)"
    )
    samples: dict[str, list[float]] = {"import stridedview": [], "import numpy": []}
    for _ in range(rounds):
        for module in ("stridedview", "numpy"):
            out = subprocess.run(
                [sys.executable, "-c", code.format(module=module)],
                check=True, capture_output=True, text=True,
            ).stdout
            samples[f"import {module}"].append(float(out))
    return {name: statistics.median(values) for name, values in samples.items()}


def plot(medians: dict[str, float], path: str) -> None:
    """Draw the medians as a horizontal bar chart (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name in medians if not name.startswith("import ")]
    values = [medians[name] * 1e6 for name in names]
    colors = ["tab:green" if n.startswith("stridedview") else "tab:gray" for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1))
    ax.barh(names[::-1], values[::-1], color=colors[::-1])
    ax.set_xlabel("median µs per call (a view case: construct + read ptr, shape, strides, dtype)")
    ax.set_title("stridedview vs peers, one run, interleaved rounds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sample-ms", type=float, default=20.0, help="time per sample")
    parser.add_argument("--import-rounds", type=int, default=15)
    parser.add_argument("--plot", metavar="FILE.png")
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.sample_ms, args.import_rounds = 3, 2.0, 3

    medians = measure(build_cases(), args.rounds, args.sample_ms / 1000)
    medians.update(measure_imports(args.import_rounds))

    width = max(map(len, medians))
    print(f"{'case':<{width}}  median µs")
    for name, seconds in medians.items():
        print(f"{name:<{width}}  {seconds * 1e6:9.3f}")
    print()
    targets = TARGETS + [
        ("import stridedview vs import numpy", "import stridedview", "import numpy", 1.3, "<="),
    ]
    missed = 0
    for what, top, bottom, bar, sense in targets:
        if top not in medians or bottom not in medians:
            print(f"  {what}: skipped ({top if top not in medians else bottom} not measured)")
            continue
        ratio = medians[top] / medians[bottom]
        ok = ratio <= bar if sense == "<=" else ratio >= bar
        missed += not ok
        print(f"  {'met    ' if ok else 'NOT MET'} {what}: {ratio:.2f}x (target {sense} {bar}x)")
    print(f"\n{'every target met' if not missed else f'{missed} target(s) not met'}")
    if args.plot:
        plot(medians, args.plot)
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
