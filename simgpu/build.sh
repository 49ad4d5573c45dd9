#!/usr/bin/env bash
# Builds the simulated CUDA driver: simgpu/build.sh OUTDIR makes OUTDIR/libcuda.so.1
# (and OUTDIR/libcuda.so, a link to it).  C11 and pthreads only; CC and CFLAGS are honoured.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
mkdir -p "$out"
cc="${CC:-cc}"
# Build to a temporary name, then rename: a process that has the old library loaded
# keeps its mapping, and a concurrent build never leaves a half-written file.
tmp="$(mktemp "$out/.libcuda.so.1.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086
"$cc" -std=c11 -O2 -g -fPIC -shared -pthread -fvisibility=hidden \
    -Wall -Wextra -Wno-unused-parameter -Werror=implicit-function-declaration \
    ${CFLAGS:-} \
    -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
    -o "$tmp" "$here"/src/*.c -lpthread
mv -f "$tmp" "$out/libcuda.so.1"
trap - EXIT
ln -sf libcuda.so.1 "$out/libcuda.so"
