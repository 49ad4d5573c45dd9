"""Time "construct a view and read ptr, shape, strides, dtype" against the peers.

Usage: python benchmarks/bench_view.py [--rounds N] [--number N]

Every case runs in this one process, in interleaved rounds (A B C, A B C, ...), so
that a slow spell of the machine hits all of them alike; each case's figure is the
median over rounds of the per-call time.  Only ratios measured in one run mean
anything: absolute times on a shared 2-core machine drift by 2x from run to run.
Peers that are not installed are left out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit


def build_cases():
    """(name, callable) pairs: each constructs one view (or array) and reads its fields."""
    import numpy as np

    from stridedview import StridedMemoryView

    array = np.arange(12 * 16, dtype=np.float32).reshape(12, 16)

    def stridedview_numpy_2d():
        view = StridedMemoryView(array)
        view.ptr
        view.shape
        view.strides
        view.dtype

    def numpy_from_dlpack():
        np.from_dlpack(array)

    cases = [
        ("stridedview StridedMemoryView(a) + reads", stridedview_numpy_2d),
        ("numpy.from_dlpack(a)", numpy_from_dlpack),
    ]
    try:
        from cuda.core.utils import StridedMemoryView as PeerView
    except ImportError:
        print("cuda-core not installed: its rows are left out", file=sys.stderr)
    else:

        def cuda_core_from_dlpack():
            view = PeerView.from_dlpack(array, stream_ptr=-1)
            view.ptr
            view.shape
            view.strides
            view.dtype

        cases.append(("cuda.core from_dlpack(a, -1) + reads", cuda_core_from_dlpack))
    return cases


def measure(cases, rounds: int, number: int) -> dict[str, float]:
    """Median seconds per call of each case, over interleaved rounds."""
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(rounds):
        for name, func in cases:
            samples[name].append(timeit.timeit(func, number=number) / number)
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args(argv)

    cases = build_cases()
    for _, func in cases:  # warm up: caches, lazy imports, the interpreter's specialisation
        for _ in range(1000):
            func()
    medians = measure(cases, args.rounds, args.number)

    ours = medians["stridedview StridedMemoryView(a) + reads"]
    width = max(len(name) for name in medians)
    print(f"{'case':<{width}}  median µs  vs stridedview")
    for name, seconds in medians.items():
        print(f"{name:<{width}}  {seconds * 1e6:9.3f}  {seconds / ours:6.2f}x")
    print()
    numpy_ratio = ours / medians["numpy.from_dlpack(a)"]
    print(f"stridedview / numpy.from_dlpack: {numpy_ratio:.2f}x (bar: <= 1.5x)")
    peer = medians.get("cuda.core from_dlpack(a, -1) + reads")
    if peer is not None:
        print(f"cuda.core / stridedview: {peer / ours:.2f}x faster (bar: >= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
