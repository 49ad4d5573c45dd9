#!/usr/bin/env bash
# The free-threaded stress tests under ThreadSanitizer: CPython 3.13t built with
# `--disable-gil --with-thread-sanitizer` (tools/build_freethreaded_python.sh, variant tsan),
# stridedview built with -fsanitize=thread on top of that interpreter's own flags, the tests
# run with the GIL off.  Fails if any report is left that the suppressions do not cover, and
# lists every report with a frame in stridedview's code (there must be none: the
# suppressions name only CPython's and numpy's functions, tools/tsan-suppressions.txt).
#
#   tools/tsan.sh                      # tests/test_free_threading.py, test_threads.py, test_record_stream.py
#   tools/tsan.sh tests/test_launch_reuse.py -k thread   # other tests (pytest arguments)
#   tools/tsan.sh --simgpu             # the hand-over and checker tests on the simulated device (below)
#   tools/tsan.sh --simgpu tests/test_gpu_graphs.py -k thread   # other gpu tests on it
#
# --simgpu runs the driver door (_driver_door.h, _handover.pxi) on the simulated device:
# cuda-bindings (its cp313t wheel) goes into the environment, the simulator (tests/simgpu) is
# built with -fsanitize=thread too (so that ThreadSanitizer sees its locks, and its stream
# threads, which run host functions and the deleters of released holds, report no false race
# with stridedview; a race in the simulator's own code is a simulator defect), and it is made
# the process's libcuda.so.1 (LD_LIBRARY_PATH, SIMGPU_LIB_DIR,
# STRIDEDVIEW_REQUIRE_DEVICE=simulated, SIMGPU_CHECK=1).  Its default tests are the gpu tests of
# hand-overs and ordering from several threads: tests/test_gpu_record_stream.py,
# test_gpu_driver_door.py, test_gpu_hold_rule.py (threads making their first hand-over at
# once among them), test_gpu_ordering.py, test_gpu_stream_ordering.py (events per thread),
# test_gpu_streams.py and the simulator's
# stream-order checker's own tests (tests/simgpu/test_checker.py), less the timed race
# controls (below; their tests took 5 to 7 minutes on two loaded cores, after the build).  The hand-over tests that need
# cuda-core or numba-cuda (not installed here) skip (STRIDEDVIEW_ALLOW_MISSING).
#
# The interpreter and its environment are cached under ~/.cache/stridedview (building the
# interpreter takes 10 to 20 minutes on two cores, once); the package is built in a copy of
# the sources ($STRIDEDVIEW_TSAN_WORK, default a temporary directory), so the working tree's
# own build is left alone.  STRIDEDVIEW_STRESS_ROUNDS / _ITERATIONS (default here 2 and 20)
# size the stress tests: everything runs several times slower under ThreadSanitizer.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
simgpu=0
if [ "${1:-}" = "--simgpu" ]; then
    simgpu=1
    shift
fi
cache="${STRIDEDVIEW_FT_CACHE:-$HOME/.cache/stridedview}"
python="$(STRIDEDVIEW_PY_VARIANT=tsan bash "$repo/tools/build_freethreaded_python.sh" | tail -n 1)"
venv="$cache/venv3.13t-tsan"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --only-binary=numpy,ml_dtypes \
    numpy ml_dtypes pytest "hypothesis>=6,<6.150" "Cython>=3.0,<4" "setuptools>=74"
if [ "$simgpu" = 1 ]; then
    "$venv/bin/python" -m pip install -q --only-binary=:all: "cuda-bindings>=12,<14"
fi

work="${STRIDEDVIEW_TSAN_WORK:-$(mktemp -d)}"
mkdir -p "$work/tree" "$work/reports"
rm -f "$work/reports/"tsan.*
(cd "$repo" && git ls-files -z src tests docs setup.py pyproject.toml README.md | xargs -0 tar -cf - \
    | tar -xf - -C "$work/tree")
cd "$work/tree"
# -fsanitize=thread through CPPFLAGS, which setuptools adds to the interpreter's compile and
# link flags (an environment CFLAGS would replace them: no -O3, no -DNDEBUG).
env -u CFLAGS CPPFLAGS="-fsanitize=thread" "$venv/bin/python" setup.py build_ext --inplace \
    > "$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }
# (A reused $STRIDEDVIEW_TSAN_WORK whose build was up to date compiles nothing: the line
# its last compile wrote is checked.)
line="$(grep -E -- ' -c [^ ]*src/stridedview/_view\.c( |$)' "$work/build.log" || true)"
if [ -n "$line" ]; then
    echo "$line" > "$work/view-compile-line"
else
    line="$(cat "$work/view-compile-line" 2>/dev/null || true)"
fi
for flag in -fsanitize=thread -DNDEBUG -O3; do
    grep -q -- " $flag" <<< "$line" || { echo "tsan: _view.c compiled without $flag:"; echo "$line"; exit 1; }
done
echo "tsan: _view.c compiled with$(grep -oE -- ' -(O[^ ]*|DNDEBUG|fsanitize=[^ ]*)' <<< "$line" | tr -d '\n')"

if [ "$simgpu" = 1 ]; then
    # The simulator with the interpreter's compiler (one ThreadSanitizer runtime in the process).
    CC="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("CC").split()[0])')" \
        CFLAGS="-fsanitize=thread" bash "$work/tree/simgpu/build.sh" "$work/simgpu" \
        > "$work/simgpu.log" 2>&1 || { tail -n 40 "$work/simgpu.log"; exit 1; }
    echo "tsan: the simulator built with -fsanitize=thread in $work/simgpu"
    export LD_LIBRARY_PATH="$work/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export SIMGPU_LIB_DIR="$work/simgpu" STRIDEDVIEW_REQUIRE_DEVICE=simulated
    # cuda-core, numba-cuda and torch are not installed here (no cp313t wheel, or not needed):
    # the tests that need them skip (gpu_import, importorskip) instead of failing.
    export STRIDEDVIEW_ALLOW_MISSING="cuda.core,numba,torch"
    # Left out: the controls that must see a race within 200 unordered runs (a stream reading
    # reused or stale memory), timed against the simulator's delay: under ThreadSanitizer the
    # host is slowed more than the simulated device's delays, and they may see none.
    # The stream-order checker runs too (its state is the simulator's, locked by it).
    export SIMGPU_CHECK=1
    [ $# -gt 0 ] || set -- -m "gpu or simgpu" -k "not reads_reused_memory and not stale_data" \
        tests/test_gpu_record_stream.py tests/test_gpu_driver_door.py tests/test_gpu_hold_rule.py \
        tests/test_gpu_ordering.py tests/test_gpu_stream_ordering.py tests/test_gpu_streams.py \
        tests/simgpu/test_checker.py
fi
[ $# -gt 0 ] || set -- tests/test_free_threading.py tests/test_threads.py tests/test_record_stream.py
export TSAN_OPTIONS="suppressions=$repo/tools/tsan-suppressions.txt halt_on_error=0 history_size=4 second_deadlock_stack=1 log_path=$work/reports/tsan"
status=0
PYTHON_GIL=0 PYTHONPATH="$work/tree/src" STRIDEDVIEW_STRESS_ROUNDS="${STRIDEDVIEW_STRESS_ROUNDS:-2}" \
    STRIDEDVIEW_STRESS_ITERATIONS="${STRIDEDVIEW_STRESS_ITERATIONS:-20}" \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -p no:faulthandler "$@" || status=$?

reports=("$work/reports/"tsan.*)
if [ ! -e "${reports[0]}" ]; then
    echo "tsan: no report (suppressed ones aside); pytest exit status $status"
    exit "$status"
fi
count="$(cat "${reports[@]}" | grep -c '^WARNING: ThreadSanitizer' || true)"
ours="$(cat "${reports[@]}" | awk '/^WARNING: ThreadSanitizer/{r=$0; keep=0} /_view\.c|src\/stridedview\//{keep=1} /^SUMMARY/{if (keep) print r " | " $0}')"
simulator="$(cat "${reports[@]}" | awk '/^WARNING: ThreadSanitizer/{r=$0; keep=0} /simgpu\/src\//{keep=1} /^SUMMARY/{if (keep) print r " | " $0}')"
echo "tsan: $count unsuppressed report(s), in $work/reports"
cat "${reports[@]}" | grep '^SUMMARY' | sort | uniq -c | sort -rn | head -n 40
if [ -n "$ours" ]; then
    echo "tsan: reports with a frame in stridedview's code:"
    echo "$ours"
fi
if [ -n "$simulator" ]; then
    echo "tsan: reports with a frame in the simulator's code (simgpu/src):"
    echo "$simulator"
fi
exit 1
