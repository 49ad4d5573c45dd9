"""Instruction counts of the benchmark cases under valgrind's callgrind.

    python benchmarks/callgrind.py [--calls N] [--cases SUBSTRING ...] [--json FILE]
                                   [--module handover|device] [--separate-threads]

Wall-clock ratios on a shared machine move by tens of percent between runs; the
number of instructions one call executes does not (to within a few tenths of a
percent), so a regression shows as a number.  The cases are run.py's, built in the
same way.  Each is called ``--calls`` times between two calls of ``os.getppid()``
(which nothing else in the process calls), and callgrind is told to dump its
counters just before each of them (``--dump-before=getppid``): the dump between
the two holds exactly those calls.  The same loop over a function that does
nothing is measured too and taken off, so a figure is the instructions of one
call's body, the Python-level call of the case itself excluded.  Before each
segment the garbage collector is run and every object frozen, so that collections
inside a segment cost the same whichever cases ran before it.

Needs valgrind on PATH; runs about a minute and a half (importing torch and jax
under valgrind is most of it).  ``--module handover`` counts benchmarks/handover.py's
cases instead (hand-overs: they need a CUDA driver, such as the simulated device);
benchmarks/device.py measures its own cases through ``measure`` here.

``--separate-threads`` counts the calling thread only (valgrind's
``--separate-threads=yes``, the main thread's dumps): on the simulated device each stream
is a worker thread of the driver, whose work a GPU would do.

A case may carry two attributes, ``setup`` and ``teardown`` (functions of no argument):
such a case is warmed up after its ``setup``, which runs before the segment (and is not
counted), and ``teardown`` runs after it (counted in no case either).
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _nothing():
    pass


def child(calls: int, patterns: list[str], module: str = "run") -> None:
    """Inside valgrind: warm every case up, then one dump-delimited segment per case."""
    import importlib

    sys.path.insert(0, HERE)
    build_cases = importlib.import_module(module).build_cases

    cases = {"(empty loop)": _nothing}
    cases.update(
        (name, func)
        for name, func in build_cases().items()
        if not patterns or any(p in name for p in patterns)
    )
    for func in cases.values():
        if getattr(func, "setup", None) is None:
            for _ in range(200):
                func()
    order = list(cases)
    print(json.dumps(order), flush=True)
    for name in order:
        func = cases[name]
        setup = getattr(func, "setup", None)
        if setup is not None:
            setup()
            for _ in range(200):
                func()
        # Each case starts alike whatever ran before: no garbage pending and every
        # older object frozen, so a collection inside the segment walks only what
        # the calls made (else a full collection over the cases built before it
        # lands in one segment or another, hundreds of instructions per call).
        gc.collect()
        gc.freeze()
        os.getppid()  # dump: the segment before (setup, the previous case's epilogue)
        for _ in range(calls):
            func()
        os.getppid()  # dump: this segment holds the `calls` calls
        teardown = getattr(func, "teardown", None)
        if teardown is not None:
            teardown()


def _totals(path: str) -> int:
    with open(path) as handle:
        for line in handle:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


def measure(
    calls: int, patterns: list[str], module: str = "run", *, separate_threads: bool = False,
) -> dict[str, float]:
    """Instructions per call of each case (the empty loop's taken off); with
    ``separate_threads``, of the calling (main) thread only."""
    if shutil.which("valgrind") is None:
        raise SystemExit("callgrind.py: valgrind is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        command = [
            "valgrind", "--tool=callgrind", "--dump-before=getppid",
            f"--callgrind-out-file={out}",
        ] + (["--separate-threads=yes"] if separate_threads else []) + [
            sys.executable, os.path.abspath(__file__), "--child", "--calls", str(calls),
            "--module", module,
        ] + [arg for p in patterns for arg in ("--cases", p)]
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stderr[-4000:])
            raise SystemExit(f"callgrind.py: the run under valgrind failed ({result.returncode})")
        order = json.loads(result.stdout.strip().splitlines()[-1])
        if separate_threads:
            # One file per thread and dump, OUT.<dump>-<thread>: the main thread's are -01.
            dumps = sorted(
                glob.glob(out + ".*-01"), key=lambda p: int(p.rsplit(".", 1)[1].split("-")[0])
            )
        else:
            dumps = sorted(
                glob.glob(out + ".*"), key=lambda p: int(p.rsplit(".", 1)[1])
            )
        # Dump k (1-based) ends right before the k-th getppid: the case segments are
        # the even-numbered dumps, in order.
        segments = [_totals(p) for p in dumps[1::2]]
    if len(segments) != len(order):
        raise SystemExit(f"callgrind.py: {len(segments)} segments for {len(order)} cases")
    counts = dict(zip(order, segments))
    empty = counts.pop("(empty loop)")
    return {name: (total - empty) / calls for name, total in counts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per case")
    parser.add_argument(
        "--cases", action="append", default=[], metavar="SUBSTRING",
        help="only the cases whose name holds SUBSTRING (repeatable)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument(
        "--module", default="run", choices=("run", "handover", "device"),
        help="the benchmark module whose cases are counted (default: run)",
    )
    parser.add_argument(
        "--separate-threads", action="store_true",
        help="count the calling thread only (valgrind's --separate-threads=yes)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.calls, args.cases, args.module)
        return 0

    counts = measure(args.calls, args.cases, args.module, separate_threads=args.separate_threads)
    width = max(map(len, counts))
    print(f"{'case':<{width}}  instructions per call")
    for name, count in counts.items():
        print(f"{name:<{width}}  {count:10.0f}")
    sys.path.insert(0, HERE)
    from run import TARGETS

    print()
    for what, top, bottom, bar, sense in TARGETS:
        if top in counts and bottom in counts and counts[bottom] > 0:
            print(f"  {what}: {counts[top] / counts[bottom]:.2f}x in instructions")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(counts, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
