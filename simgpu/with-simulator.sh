#!/usr/bin/env bash
# Runs any command with the simulated CUDA device as its driver, from a clone:
#
#     simgpu/with-simulator.sh python my_launcher.py
#     simgpu/with-simulator.sh python -m pytest my_tests/ -x
#
# The clone's form of `simgpu-run` (stridedview_simgpu's runner, taken from this folder): it
# builds the simulated driver (a libcuda.so.1, with the C compiler) into build/simgpu/ of this
# clone (again only when its sources change; SIMGPU_BUILD_DIR picks another folder), puts
# that folder first on LD_LIBRARY_PATH, so that cuda-bindings, cuda.core and numba-cuda load
# it as the driver, sets SIMGPU_LIB_DIR to it, says on stderr that the driver is simulated,
# and runs the command in the current directory, with the simulator's stream-order checker
# on (SIMGPU_CHECK=1 unless set: each access of device memory not ordered as CUDA requires is
# reported on stderr, whatever the timing; SIMGPU_CHECK=abort ends the command at the first
# report, SIMGPU_CHECK=0 turns it off).  SIMGPU_DEVICES, SIMGPU_DELAY_US and SIMGPU_TRACE
# pass through to the simulator (docs/testing-without-a-gpu.md, docs/simulated-gpu.md).
# PYTHON picks the interpreter that runs the runner (default python3).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m stridedview_simgpu "$@"
