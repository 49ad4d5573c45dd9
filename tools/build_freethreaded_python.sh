#!/usr/bin/env bash
# Build a free-threaded CPython (PEP 703, `--disable-gil`) from a Debian source package,
# by default trixie's python3.13, or reuse the one an earlier run built on this machine.
# CI and developers run this same script; its last line on stdout is the interpreter's path.
#
#   tools/build_freethreaded_python.sh            # -> .../python3.13t-*/bin/python3.13t
#   tools/build_freethreaded_python.sh 3.14 SUITE # python3.14 from SUITE's deb-src, once
#                                                 # Debian serves its source (it does not yet:
#                                                 # every python3.14/3.15 .dsc answers 404)
#   STRIDEDVIEW_FT_CACHE=DIR tools/build_freethreaded_python.sh
#   STRIDEDVIEW_PY_VARIANT=gil tools/build_freethreaded_python.sh   # -> .../python3.13-*/bin/python3.13
#   STRIDEDVIEW_PY_VARIANT=tsan tools/build_freethreaded_python.sh  # -> .../python3.13t-tsan-*/bin/python3.13t
#
# STRIDEDVIEW_PY_VARIANT picks what is built from the same source: `ft` (the default, free-
# threaded), `gil` (the ordinary GIL build: the baseline free-threaded figures are
# measured against) or `tsan` (free-threaded, `--with-thread-sanitizer`,
# for a ThreadSanitizer run of the thread tests; several times slower to run).
#
# The build is cached under $STRIDEDVIEW_FT_CACHE (default ~/.cache/stridedview), keyed by
# the source package's version and the variant, and reused only if that interpreter runs as
# built (the GIL off, or on for `gil`).
# Needs root for apt (a deb-src entry for trixie is added for the download and removed
# again), a C compiler, make, and the -dev packages of OpenSSL, zlib, libffi, bz2, lzma,
# sqlite3 and readline (all on this project's machines).  About five minutes on two cores.
set -euo pipefail

minor="${1:-3.13}"
suite="${2:-trixie}"
case "$minor" in 3.1[3-9]) ;; *) echo "CPython: $minor: 3.13 or later" >&2; exit 2 ;; esac
variant="${STRIDEDVIEW_PY_VARIANT:-ft}"
case "$variant" in
    ft)   tag="${minor}t";      exe="python${minor}t"; flags=(--disable-gil) ;;
    gil)  tag="${minor}";       exe="python${minor}";  flags=() ;;
    tsan) tag="${minor}t-tsan"; exe="python${minor}t"; flags=(--disable-gil --with-thread-sanitizer) ;;
    *) echo "CPython: STRIDEDVIEW_PY_VARIANT=$variant: ft, gil or tsan" >&2; exit 2 ;;
esac
cache="${STRIDEDVIEW_FT_CACHE:-$HOME/.cache/stridedview}"
mkdir -p "$cache"

runs_as_built() {  # the interpreter starts, has what venv and pip need (a half-built one
    # lacks _posixsubprocess or ssl), and has the GIL exactly when the variant has it
    local check='import sys; sys.exit(sys._is_gil_enabled())'
    [ "$variant" = gil ] && check='import sys, sysconfig; sys.exit(bool(sysconfig.get_config_var("Py_GIL_DISABLED")))'
    "$1" -c "import ctypes, ensurepip, ssl, subprocess, venv, zlib; $check" 2>/dev/null
}

find_cached() {  # the newest cached interpreter of this variant that runs as built, if any
    local python
    for python in $(ls -d "$cache"/python"$tag"-[0-9]*/bin/"$exe" 2>/dev/null | sort -r); do
        if runs_as_built "$python"; then
            echo "$python"
            return 0
        fi
    done
    return 1
}

if [ "${STRIDEDVIEW_FT_REBUILD:-0}" != 1 ] && python=$(find_cached); then
    echo "CPython ($variant): reusing $python" >&2
    echo "$python"
    exit 0
fi

work="$(mktemp -d)"
sources=/etc/apt/sources.list.d/stridedview-$suite-src.sources
cleanup() {
    rm -f "$sources"
    rm -rf "$work"
}
trap cleanup EXIT

echo "CPython ($variant): fetching Debian $suite's python$minor source package" >&2
cat > "$sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt-get update -qq >&2
(cd "$work" && apt-get source --download-only -qq "python$minor" >&2)
rm -f "$sources"

orig="$(ls "$work"/python"$minor"_*.orig.tar.xz | head -n 1)"
version="$(basename "$orig" | sed -E "s/^python${minor//./\\.}_([^.]+\.[^.]+\.[^.]+)\.orig\.tar\.xz\$/\1/")"
prefix="$cache/python${tag}-$version"
tar -xJf "$orig" -C "$work"
source_dir="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'Python-*' | head -n 1)"

echo "CPython ($variant): building $version into $prefix" >&2
rm -rf "$prefix"
(
    cd "$source_dir"
    ./configure "${flags[@]}" --prefix="$prefix" --with-ensurepip=install \
        > "$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" >&2; exit 1; }
    make -j"$(nproc)" > "$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
    make install > "$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
)
python="$prefix/bin/$exe"
if ! runs_as_built "$python" || ! "$python" -c 'import ssl'; then
    echo "CPython ($variant): $python does not run as built" >&2
    exit 1
fi
echo "$python"
