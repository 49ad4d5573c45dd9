#!/usr/bin/env bash
# Runs the simulated-GPU tests: tests/simgpu/run.sh [pytest args]
#
# Builds the simulated driver into build/simgpu/ (again only when its sources change),
# puts that folder first on LD_LIBRARY_PATH so that it is this run's libcuda.so.1 (for
# cuda-bindings, cuda.core and numba-cuda alike), and runs pytest on tests/simgpu/ (or on
# the paths given).  SIMGPU_BUILD_DIR picks another build folder, PYTHON another
# interpreter; SIMGPU_DEVICES, SIMGPU_DELAY_US and SIMGPU_TRACE pass through to the
# simulator.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${SIMGPU_BUILD_DIR:-$root/build/simgpu}"

stamp="$(cat "$here/build.sh" "$here"/src/* | sha256sum | cut -d' ' -f1)"
if [ ! -f "$out/libcuda.so.1" ] || [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
    "$here/build.sh" "$out"
    echo "$stamp" >"$out/.stamp"
fi

export SIMGPU_LIB_DIR="$out"
export LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$root"

# Any argument naming a path selects the tests; otherwise the whole folder runs.
has_path=0
for arg in "$@"; do
    case "$arg" in
        -*) ;;
        *) if [ -e "${arg%%::*}" ]; then has_path=1; fi ;;
    esac
done
if [ "$has_path" = 1 ]; then
    exec "${PYTHON:-python}" -m pytest "$@"
fi
exec "${PYTHON:-python}" -m pytest tests/simgpu "$@"
