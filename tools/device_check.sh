#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one script, for a session that is lent one (the
# GPU machine gets a copy of the working tree, starts bare and cannot install from an index).
#
#   PYTHON=/path/to/python3.X tools/device_check.sh prepare
#       here: a wheel of this tree for that interpreter (the GPU machine's Python version;
#       it needs numpy, Cython and setuptools) into .device/, which git ignores
#   bash tools/device_check.sh run
#       there, from the tree's root (carrying .device/): the wheel installed into /tmp/site,
#       then, each log written to $OUT (else ./device-check/):
#       1. conformance.txt  the simulator's rules against the real driver (SIMGPU_REAL_DRIVER=1
#                           python -m pytest tests/simgpu): where the two disagree, the
#                           simulator is wrong, and the gpu tests built on it prove less;
#       2. gpu.txt          the gpu and real_gpu tests (CuPy, torch, JAX, numba-cuda, cuda.core);
#       3. check.txt        benchmarks/device.py --check: both libraries agree on every case;
#       4. wall.txt         benchmarks/device.py --wall: microseconds a call on the real driver.
#       Each step has a time limit (T_CONFORMANCE, T_GPU, T_BENCH seconds), so the
#       whole run ends within about six minutes and a step that hangs cannot take the rest.
set -u
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    python="${PYTHON:?set PYTHON to an interpreter of the GPU machine version}"
    rm -rf .device && mkdir -p .device
    "$python" -m pip wheel . --no-deps --no-build-isolation -w .device > .device/build.log 2>&1 \
        || { tail -n 30 .device/build.log; exit 1; }
    ls .device/*.whl
    ;;
run)
    out="${OUT:-device-check}"
    mkdir -p "$out"
    export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
    start=$(date +%s)
    step() { echo "== $1 at $(( $(date +%s) - start )) s"; }
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
      command -v python3; python3 -VV
      python3 -m pip list 2>/dev/null \
          | grep -iE "^(cuda|cupy|numba|torch |jax |jaxlib|numpy |pytest|hypothesis|ml.dtypes)"
    } > "$out/env.txt" 2>&1
    cat "$out/env.txt"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/*.whl \
        || exit 3
    export PYTHONPATH=/tmp/site
    python3 -c "import stridedview; print('stridedview from', stridedview.__file__)" || exit 4
    pytest=(python3 -m pytest -q -p no:cacheprovider -rsfE)
    # A test that hangs is stopped where pytest-timeout is installed (the GPU image has it).
    python3 -c "import pytest_timeout" 2> /dev/null && pytest+=(--timeout 60)
    step conformance
    timeout "${T_CONFORMANCE:-80}" env SIMGPU_REAL_DRIVER=1 "${pytest[@]}" -v tests/simgpu \
        > "$out/conformance.txt" 2>&1
    tail -n 25 "$out/conformance.txt"
    step gpu
    timeout "${T_GPU:-150}" "${pytest[@]}" -m "gpu or real_gpu" tests > "$out/gpu.txt" 2>&1
    tail -n 40 "$out/gpu.txt"
    step check
    timeout "${T_BENCH:-30}" python3 benchmarks/device.py --check > "$out/check.txt" 2>&1
    tail -n 14 "$out/check.txt"
    step wall
    timeout "${T_BENCH:-30}" python3 benchmarks/device.py --wall --calls 2000 > "$out/wall.txt" 2>&1
    tail -n 12 "$out/wall.txt"
    step done
    ;;
*)
    sed -n '2,20p' "$0"
    exit 2
    ;;
esac
