"""``simgpu-run COMMAND [ARGS...]`` (or ``python -m stridedview_simgpu COMMAND ...``): runs
any program or test suite, in the current folder, with the simulated CUDA driver as its
``libcuda.so.1`` and the stream-order checker on; its exit status is the command's."""

from __future__ import annotations

import os
import shlex
import sys

from ._library import SimulatorNotBuilt, environment

USAGE = (
    "usage: simgpu-run COMMAND [ARGS...]   (e.g. simgpu-run python -m pytest tests/)\n"
    "Runs COMMAND with the simulated CUDA driver (no GPU) as its libcuda.so.1 and the\n"
    "stream-order checker on (SIMGPU_CHECK=1 unless set; 0 turns it off, abort ends the\n"
    "command at the first report).  SIMGPU_DEVICES, SIMGPU_DELAY_US and SIMGPU_TRACE pass through."
)


def banner(folder: str, what: str) -> str:
    """The line every simulated run starts with, on stderr."""
    return f"simgpu: {what} on the SIMULATED CUDA driver ({folder}/libcuda.so.1): no GPU is used"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    try:
        env = environment()
    except SimulatorNotBuilt as exc:
        print(exc, file=sys.stderr)
        return 3
    print(banner(env["SIMGPU_LIB_DIR"], f"running `{shlex.join(args)}`"), file=sys.stderr, flush=True)
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"simgpu-run: cannot run {args[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
