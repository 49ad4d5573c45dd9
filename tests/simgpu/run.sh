#!/usr/bin/env bash
# Runs the simulated-GPU tests: tests/simgpu/run.sh [pytest args]
#
# Runs pytest, from the clone's root, on tests/simgpu/ (or on the paths given) with the
# simulated driver as this run's libcuda.so.1 (for cuda-bindings, cuda.core and numba-cuda
# alike): with-simulator.sh builds it into build/simgpu/ (again only when its sources
# change) and puts it first on LD_LIBRARY_PATH.  SIMGPU_BUILD_DIR picks another build
# folder, PYTHON another interpreter; SIMGPU_DEVICES, SIMGPU_DELAY_US, SIMGPU_TRACE and
# SIMGPU_CHECK pass through to the simulator.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
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
    exec "$root/simgpu/with-simulator.sh" "${PYTHON:-python}" -m pytest "$@"
fi
exec "$root/simgpu/with-simulator.sh" "${PYTHON:-python}" -m pytest tests/simgpu "$@"
