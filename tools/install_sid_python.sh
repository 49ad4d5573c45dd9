#!/usr/bin/env bash
# Unpack Debian sid's binary CPython packages (python3.14, python3.15: GIL builds) into a
# private root per version, or reuse the root an earlier run unpacked on this machine.
# CI and developers run this same script.  On stdout it prints one line per requested
# version, in the order asked, each the interpreter's path; everything else goes to stderr.
#
#   tools/install_sid_python.sh 3.14            # -> .../sid-python3.14_3.14.10-1/usr/bin/python3.14
#   tools/install_sid_python.sh 3.14 3.15       # two lines, 3.14's then 3.15's
#   python="$(tools/install_sid_python.sh 3.15 | tail -n 1)"
#   STRIDEDVIEW_SID_CACHE=DIR tools/install_sid_python.sh 3.14
#   STRIDEDVIEW_SID_REFRESH=1 tools/install_sid_python.sh 3.14   # unpack sid's current build anew
#
# Why a private root: Debian serves no source package for 3.14 or 3.15 (every .dsc and
# .orig.tar.xz answers 404), but sid's binary packages are served (tested: 3.14.10-1 and
# 3.15.2-1).  They need a newer glibc than this machine's (bookworm, 2.36), so each root
# holds the interpreter's whole dependency closure, sid's glibc and dynamic loader included,
# and the interpreter is patched (patchelf) to start through that loader and to find its
# libraries in that root.  Nothing is installed on the system: apt runs with a private
# configuration (APT_CONFIG: its own sources list naming sid, its own lists, status and
# cache directories, none of /etc/apt's configuration fragments), and the packages are
# unpacked with `dpkg-deb -x`, never installed.  Only patchelf, if missing, is installed
# from the system's own apt sources (needs root).
#
# A root is cached under $STRIDEDVIEW_SID_CACHE (default ~/.cache/stridedview) as
# sid-python3.1x_<Debian version>, and reused only if its interpreter imports what the
# test suite and pip need (ssl, ctypes, sqlite3, venv, ...).  A root that fails that check
# (moved, half-written, damaged) is unpacked again.  Unpacking takes about half a minute
# per version (some 40 packages, 30 MB of downloads); a reused root costs a second.
#
# pip: Debian's ensurepip looks for its wheels in the system's /usr/share/python-wheels, and
# the host's pip (23) fails on 3.14, so make a venv without pip and install pip from the
# root's own wheel:
#   "$python" -m venv --without-pip V
#   wheel="$(ls "${python%/bin/*}"/share/python-wheels/pip-*.whl)"
#   V/bin/python "$wheel/pip" install -q "$wheel"
# (The built interpreter is checked that way here before it is reported.)
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 MINOR [MINOR...]   (for example: $0 3.14 3.15)" >&2
    exit 2
fi
for minor in "$@"; do
    case "$minor" in
        3.1[4-9]) ;;
        *) echo "install_sid_python: $minor: only 3.14 and later come from sid here" >&2; exit 2 ;;
    esac
done

cache="${STRIDEDVIEW_SID_CACHE:-$HOME/.cache/stridedview}"
mkdir -p "$cache"
arch=x86_64-linux-gnu
[ "$(uname -m)" = x86_64 ] || { echo "install_sid_python: only x86_64 is handled" >&2; exit 1; }

# The stdlib pieces the test suite and pip rely on (ssl: pip's downloads; ctypes, sqlite3,
# decimal, lzma, ...: the suite and its producers), the headers an extension build needs,
# and the root's pip wheel.  Run by the root's interpreter; exit status 0 when all is there.
# shellcheck disable=SC2016
check='
import sys, os, sysconfig
import ssl, ctypes, sqlite3, venv, zlib, bz2, lzma, decimal, hashlib, uuid, json, pyexpat, readline
ssl.create_default_context()
include = sysconfig.get_paths()["include"]
with open(os.path.join(include, "pyconfig.h")) as f:
    if "SIZEOF_VOID_P" not in f.read():
        sys.exit("pyconfig.h is the multiarch wrapper, not the configuration")
if not os.path.exists(os.path.join(include, "Python.h")):
    sys.exit("no Python.h")
wheels = os.path.join(sys.base_prefix, "share", "python-wheels")
if not any(n.startswith("pip-") for n in os.listdir(wheels)):
    sys.exit("no pip wheel in " + wheels)
'

find_cached() {  # $1 = minor: the newest cached root whose interpreter passes the check
    local python
    for python in $(ls -d "$cache"/sid-python"$1"_*/usr/bin/python"$1" 2>/dev/null | sort -rV); do
        if [ -e "${python%/usr/bin/*}/.complete" ] && "$python" -c "$check" 2>/dev/null; then
            echo "$python"
            return 0
        fi
    done
    return 1
}

# Reuse what is cached; the rest is unpacked below.
declare -A found=()
missing=()
for minor in "$@"; do
    if [ "${STRIDEDVIEW_SID_REFRESH:-0}" != 1 ] && python=$(find_cached "$minor"); then
        echo "sid CPython $minor: reusing $python" >&2
        found[$minor]="$python"
    else
        missing+=("$minor")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    chmod 755 "$work"  # apt downloads as the unprivileged _apt user: it must reach this directory

    if ! command -v patchelf > /dev/null; then
        echo "install_sid_python: installing Debian's patchelf" >&2
        apt-get install -y -qq patchelf >&2 || { apt-get update -qq >&2 && apt-get install -y -qq patchelf >&2; }
    fi

    # The private apt configuration.  Dir::Etc::Parts points at an empty directory, so that
    # none of the system's apt.conf.d fragments (hooks, proxies of other sources) apply.
    # The mirror here serves a frozen snapshot of sid whose Release file is past its
    # Valid-Until date, hence Check-Valid-Until "false"; the signature is still checked
    # against Debian's archive keyring.
    apt_dir="$work/apt"
    mkdir -p "$apt_dir"/{parts,sources.list.d,preferences.d,lists/partial,state,cache/archives/partial}
    touch "$apt_dir/status"  # nothing "installed": the closure below is complete
    cat > "$apt_dir/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
EOF
    cat > "$apt_dir/apt.conf" <<EOF
Dir::Etc::SourceList "$apt_dir/sources.list";
Dir::Etc::SourceParts "$apt_dir/sources.list.d";
Dir::Etc::Parts "$apt_dir/parts";
Dir::Etc::Preferences "$apt_dir/preferences";
Dir::Etc::PreferencesParts "$apt_dir/preferences.d";
Dir::State "$apt_dir/state";
Dir::State::Lists "$apt_dir/lists";
Dir::State::status "$apt_dir/status";
Dir::Cache "$apt_dir/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
EOF
    export APT_CONFIG="$apt_dir/apt.conf"
    echo "install_sid_python: reading Debian sid's package lists" >&2
    apt-get update -qq >&2

    for minor in "${missing[@]}"; do
        version="$(apt-cache show --no-all-versions "python$minor" 2>/dev/null \
            | sed -n 's/^Version: //p' | head -n 1)"
        if [ -z "$version" ]; then
            echo "install_sid_python: Debian sid has no python$minor package" >&2
            exit 1
        fi
        root="$cache/sid-python${minor}_$version"
        echo "sid CPython $minor: unpacking python$minor $version into $root" >&2

        # The dependency closure (Depends and Pre-Depends only), less what an unpacked root
        # does not need: debconf and its alternative cdebconf with the installer libraries
        # that only cdebconf pulls in, and the CA certificates and openssl tool (the system's
        # own /etc/ssl serves the root's libssl; pip brings its own certificates).
        mapfile -t packages < <(apt-cache depends --recurse --no-recommends --no-suggests \
                --no-conflicts --no-breaks --no-replaces --no-enhances \
                "python$minor" "python$minor-venv" "libpython$minor" "libpython$minor-dev" libmpdec4 \
            | grep -v -e '^ ' -e '^<' | sort -u \
            | grep -v -x -E 'debconf|cdebconf|ca-certificates|openssl|libdebian-installer[0-9]*|libnewt[0-9.]*|libslang[0-9]*|libtextwrap[0-9]*')
        debs="$work/debs-$minor"
        mkdir -p "$debs"
        # apt downloads as its unprivileged _apt user where it can: let it write here.
        if [ "$(id -u)" = 0 ] && id _apt > /dev/null 2>&1; then chown _apt "$debs"; fi
        (cd "$debs" && apt-get download -qq "${packages[@]}" >&2)

        rm -rf "$root"
        mkdir -p "$root"
        for deb in "$debs"/*.deb; do
            dpkg-deb -x "$deb" "$root"
        done
        # usr/include/python3.1x/pyconfig.h is Debian's multiarch wrapper, which includes
        # <x86_64-linux-gnu/python3.1x/pyconfig.h> from the system's include path (absent
        # there): put the real configuration in its place.
        cp "$root/usr/include/$arch/python$minor/pyconfig.h" "$root/usr/include/python$minor/pyconfig.h"
        # Start through sid's own loader, and find the root's libraries first.  DT_RPATH
        # (--force-rpath), unlike DT_RUNPATH, also serves the libraries the stdlib's
        # extension modules load (libssl, libffi, libsqlite3, libmpdec, ...).
        python="$root/usr/bin/python$minor"
        patchelf --set-interpreter "$root/usr/lib/$arch/ld-linux-x86-64.so.2" \
            --force-rpath --set-rpath "$root/usr/lib/$arch" "$python"

        if ! "$python" -c "$check"; then
            echo "install_sid_python: $python fails the stdlib check" >&2
            exit 1
        fi
        # A venv without pip, then pip from the root's own wheel, as users of this script do.
        "$python" -m venv --without-pip "$work/venv-$minor"
        wheel="$(ls "$root"/usr/share/python-wheels/pip-*.whl | sort -V | tail -n 1)"
        "$work/venv-$minor/bin/python" "$wheel/pip" install -q --no-index "$wheel" >&2
        "$work/venv-$minor/bin/python" -m pip --version >&2
        touch "$root/.complete"
        rm -rf "$debs" "$work/venv-$minor"
        found[$minor]="$python"
    done
fi

for minor in "$@"; do
    echo "${found[$minor]}"
done
