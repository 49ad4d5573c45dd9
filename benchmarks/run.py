"""stridedview's benchmark suite: view costs as ratios against peers, measured in one run.

    python benchmarks/run.py [--rounds N] [--plot FILE.png] [--quick]

Each case is "construct a view and read ptr, shape, strides, dtype" (or the peer's
nearest equivalent).  Cases run in this one process in interleaved rounds
(A B C ..., A B C ..., ...) with timeit, and each figure is the median over rounds
of the per-call time.  Why timeit rather than pyperf: pyperf spawns a process per
benchmark, which would compare cases measured minutes apart on a shared 2-core
machine whose speed drifts by 2x; interleaving in one process makes every ratio
compare like with like.  Only the ratios are meaningful.  Peers that are not
installed are left out, and so are the targets that need them.

`import stridedview` against `import numpy` is timed in fresh interpreters,
alternating, with `-X importtime`-free wall-clock timing of the whole import.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit


def _read(view):
    view.ptr
    view.shape
    view.strides
    view.dtype


def build_cases() -> dict[str, object]:
    """name -> callable; each call constructs one view (or array) and reads its fields."""
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

    cai = HostCAI(matrix)

    def ours(array, stream_ptr=None):
        def case():
            view = StridedMemoryView(array, stream_ptr)
            view.ptr
            view.shape
            view.strides
            view.dtype

        return case

    cases["stridedview numpy 2-D"] = ours(matrix)
    cases["stridedview numpy slice"] = ours(sliced)
    cases["stridedview numpy 0-d"] = ours(scalar)
    cases["stridedview CAI (-1)"] = ours(cai, -1)
    cases["numpy.from_dlpack 2-D"] = lambda: np.from_dlpack(matrix)
    view_of_matrix = StridedMemoryView(matrix)
    cases["numpy.from_dlpack(view) export"] = lambda: np.from_dlpack(view_of_matrix)

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c):
        _read(a.view(-1))
        _read(b.view(-1))
        _read(c.view(-1))

    cases["stridedview decorator x3"] = lambda: launch(matrix, sliced, scalar)

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tensor = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
        cases["stridedview torch CPU"] = ours(tensor)
        cases["torch.from_dlpack numpy 2-D"] = lambda: torch.from_dlpack(matrix)

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
            _read(a.view(-1))
            _read(b.view(-1))
            _read(c.view(-1))

        cases["cuda.core decorator x3"] = lambda: peer_launch(matrix, sliced, scalar)
    return cases


# (what, numerator case, denominator case, bar, "<=" or ">=")
TARGETS = [
    ("numpy 2-D view vs numpy.from_dlpack", "stridedview numpy 2-D", "numpy.from_dlpack 2-D", 1.25, "<="),
    ("cuda.core / stridedview, numpy 2-D", "cuda.core numpy 2-D", "stridedview numpy 2-D", 3.0, ">="),
    ("cuda.core / stridedview, numpy slice", "cuda.core numpy slice", "stridedview numpy slice", 3.0, ">="),
    ("cuda.core / stridedview, numpy 0-d", "cuda.core numpy 0-d", "stridedview numpy 0-d", 3.0, ">="),
    ("torch CPU view vs our numpy 2-D view", "stridedview torch CPU", "stridedview numpy 2-D", 1.5, "<="),
    ("cuda.core / stridedview, torch CPU", "cuda.core torch CPU", "stridedview torch CPU", 10.0, ">="),
    ("cuda.core / stridedview, decorator x3", "cuda.core decorator x3", "stridedview decorator x3", 2.5, ">="),
    ("CAI view vs DLPack view, same array", "stridedview CAI (-1)", "stridedview numpy 2-D", 1.5, "<="),
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
    ax.set_xlabel("median µs per call (construct + read ptr, shape, strides, dtype)")
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
    failed = 0
    for what, top, bottom, bar, sense in targets:
        if top not in medians or bottom not in medians:
            print(f"  {what}: skipped ({top if top not in medians else bottom} not measured)")
            continue
        ratio = medians[top] / medians[bottom]
        ok = ratio <= bar if sense == "<=" else ratio >= bar
        failed += not ok
        print(f"  {'ok  ' if ok else 'MISS'} {what}: {ratio:.2f}x (target {sense} {bar}x)")
    if args.plot:
        plot(medians, args.plot)
        print(f"\nplot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
