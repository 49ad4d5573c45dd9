#!/usr/bin/env bash
# Runs any command with the simulated CUDA device as its driver:
#
#     simgpu/with-simulator.sh python my_launcher.py
#     simgpu/with-simulator.sh python -m pytest my_tests/ -x
#
# Builds the simulated driver (a libcuda.so.1, with the C compiler) into build/simgpu/ of
# this clone (again only when its sources change; SIMGPU_BUILD_DIR picks another folder),
# puts that folder first on LD_LIBRARY_PATH, so that cuda-bindings, cuda.core and
# numba-cuda load it as the driver, sets SIMGPU_LIB_DIR to it, and runs the command in the
# current directory, with the simulator's stream-order checker on (SIMGPU_CHECK=1 unless set:
# each access of device memory not ordered as CUDA requires is reported on stderr, whatever
# the timing; SIMGPU_CHECK=abort ends the command at the first report, SIMGPU_CHECK=0 turns
# it off).  SIMGPU_DEVICES, SIMGPU_DELAY_US and SIMGPU_TRACE pass through to the simulator
# (docs/testing-without-a-gpu.md, docs/simulated-gpu.md).
set -euo pipefail
if [ "$#" = 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]   (e.g. $0 python -m pytest tests/)" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${SIMGPU_BUILD_DIR:-$root/build/simgpu}"

stamp="$(cat "$here/build.sh" "$here"/src/* | sha256sum | cut -d' ' -f1)"
if [ ! -f "$out/libcuda.so.1" ] || [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
    "$here/build.sh" "$out" >&2
    echo "$stamp" >"$out/.stamp"
fi

export SIMGPU_LIB_DIR="$out"
export SIMGPU_CHECK="${SIMGPU_CHECK:-1}"
export LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
