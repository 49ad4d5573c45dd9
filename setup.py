"""Build the Cython core. Everything else lives in pyproject.toml.

One build switch, read from the environment:

STRIDEDVIEW_NO_GIL_FAST_PATHS=1
    Compile the extension with SV_NO_GIL_FAST_PATHS defined: the fast paths that keep
    objects between calls (their state per process with the GIL, per thread without) are
    left out (docs/internals.md, "How to switch each off"; ``stridedview._view.fast_paths``
    is then False).  A build to compare against: CI builds CPython 3.12 so, and 3.13t for
    the fast paths' and threads' test files.  Every other
    compile flag stays the interpreter's, as in any ``pip install``.  Remove ``build/``
    first when switching: setuptools does not recompile an extension newer than its sources.

The define is passed here, as a define macro, rather than through CFLAGS: setuptools 84
and later let an environment CFLAGS *replace* the interpreter's compile flags (no -O, no
-DNDEBUG) instead of adding to them.
"""

import os
import platform
import re
import shutil
import sys
import tempfile

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CXX_GUARD = "src/stridedview/_cxx_guard.cpp"
NO_GIL_FAST_PATHS = ("SV_NO_GIL_FAST_PATHS", "1")


class BuildExt(build_ext):
    """Build without _cxx_guard.cpp where there is no C++ compiler: the extension then
    defines SV_WITHOUT_CXX_GUARD and never calls torch's C++ functions that can throw
    (torch tensors' layouts come from torch's exchange API instead).  Say so, too, when
    STRIDEDVIEW_NO_GIL_FAST_PATHS=1 compiles the GIL fast paths out."""

    def build_extensions(self):
        no_fast_paths = any(NO_GIL_FAST_PATHS in e.define_macros for e in self.extensions)
        if self.compiler.compiler_type == "unix":
            # The hot path is a chain of small C functions that only -O3 inlines
            # into each other; interpreters disagree on the level they pass
            # (python.org, pyenv and uv builds -O3; Debian's and Ubuntu's -O2,
            # which costs a launch of three arrays about 30% more instructions),
            # so the extension asks for -O3 itself (after the interpreter's flags,
            # so it wins).  MSVC's /O2 is already its highest level.
            for extension in self.extensions:
                extension.extra_compile_args.append("-O3")
            if _x86_64() and self._compiler_accepts("-mtls-dialect=gnu2"):
                # Thread-local variables are read on every view: the torch mode
                # check's cached state (_torch_bits.pxi) and, on a free-threaded
                # build, the fast paths' per-thread state (_thread_state.pxi),
                # several times.  x86-64's default TLS model for a shared object
                # calls __tls_get_addr on every access (about 18 instructions); TLS
                # descriptors resolve once to a static offset where glibc has room,
                # and fall back to the same dynamic lookup where it has none: a
                # launch of three arrays 300 instructions fewer on 3.13t.
                for extension in self.extensions:
                    extension.extra_compile_args.append("-mtls-dialect=gnu2")
        if no_fast_paths:
            # One line (pip shows it with -v): a build that is not what users get.
            print(
                "stridedview: STRIDEDVIEW_NO_GIL_FAST_PATHS=1: built with -DSV_NO_GIL_FAST_PATHS "
                "(the GIL fast paths compiled out)",
                file=sys.stderr,
            )
        compiler_cxx = getattr(self.compiler, "compiler_cxx", None)
        if compiler_cxx and shutil.which(compiler_cxx[0]) is None:
            for extension in self.extensions:
                if CXX_GUARD in extension.sources:
                    extension.sources.remove(CXX_GUARD)
                    extension.define_macros.append(("SV_WITHOUT_CXX_GUARD", "1"))
            # One line, what it costs (pip shows it with -v; `python -m stridedview`
            # says it on every run, on its "build" line).
            print(
                f"stridedview: no C++ compiler ({compiler_cxx[0]!r} not found): built "
                "without the C++ exception guard: torch tensors are still read through "
                "torch's stable C ABI; only the fallback to torch's private "
                "at::toDLPackNonOwning (for a torch whose stable ABI fails its "
                "calibration) is left out",
                file=sys.stderr,
            )
        super().build_extensions()

    def _compiler_accepts(self, flag):
        """Whether the C compiler compiles an empty file with ``flag`` (no warning asked)."""
        with tempfile.TemporaryDirectory() as scratch:
            source = os.path.join(scratch, "probe.c")
            with open(source, "w") as probe:
                probe.write("int sv_probe;\n")
            try:
                self.compiler.compile([source], output_dir=scratch, extra_postargs=[flag])
            except Exception:  # noqa: BLE001 - any failure: the flag is left out
                return False
        return True


def _x86_64():
    """Whether this is x86-64, where the TLS dialect matters."""
    return platform.machine().lower() in ("x86_64", "amd64")


def _define_macros():
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
    switch = os.environ.get("STRIDEDVIEW_NO_GIL_FAST_PATHS", "")
    if switch not in ("", "0", "1"):
        sys.exit(f"STRIDEDVIEW_NO_GIL_FAST_PATHS={switch!r}: set it to 1 (or 0, or leave it unset)")
    if switch == "1":
        macros.append(NO_GIL_FAST_PATHS)
    return macros


extensions = [
    # include/: stridedview.h, the C API header shipped for extensions (get_include()).
    Extension(
        "stridedview._view",
        # _cxx_guard.cpp: the one C++ file, catching what torch's C++ functions
        # throw (_torch_bits.pxi); the extension is linked as C++ for its runtime.
        ["src/stridedview/_view.pyx", CXX_GUARD],
        # The driver door's C (_driver_door.pxi includes it): a change rebuilds the extension.
        depends=["src/stridedview/_driver_door.h"],
        # numpy's headers give the array struct's layout to the numpy adapter
        # (_from_numpy.pxi); numpy's C API table is never imported, so the
        # extension links nothing of numpy's and loads no numpy at import.  Built
        # against numpy 2's headers, it runs with numpy 1.x and 2.x alike.
        include_dirs=["src/stridedview/include", numpy.get_include()],
        define_macros=_define_macros(),
        # The C driver door (_driver_door.pxi): dlopen and pthread keys, in libc from
        # glibc 2.34, in libdl and libpthread before it.
        libraries=["dl", "pthread"] if sys.platform.startswith("linux") else [],
    ),
]

# The hot path's small helpers (each a `cdef inline` of _view.pyx and its .pxi):
# compilers size a function up before inlining it, and from CPython 3.12 every
# reference count change is larger (the immortal-object check), so gcc -O3 leaves
# several of these out of line there (Debian's 3.15: a launch of three numpy arrays
# 7% more instructions, a view 6%).  Cython has no syntax for a function attribute:
# their prototypes in the generated C are marked SV_ALWAYS_INLINE (_view.pyx:
# gcc's and clang's always_inline, nothing elsewhere), after Cython writes the file.
ALWAYS_INLINE = (
    "_address_int", "_byte_offsets_fit", "_c_dims_storage", "_describes",
    "_drop_proxy", "_dtype_and_itemsize", "_dtype_from_dlpack", "_instance_overrides_dlpack",
    "_int64_tuple",
    "_launch_with", "_new_proxy", "_new_view", "_numpy_dtype", "_park_proxy",
    "_producer_type", "_proxy_view", "_tuple_slot_holds", "_view_from_any",
    "_view_from_dlpack", "_view_from_normalized", "_viewable",
    # the lean torch path's reader and fill, inside _view_from_plain_torch (itself
    # out of line: the numpy adapter's caller stays as it was)
    "_fill_by_torch_fields", "_view_from_lent_torch_layout",
)
ALWAYS_INLINE_MISSING = "stridedview: not marked always-inline (Cython's output changed?):"
# Cold helpers of a hot function, kept out of line (SV_NEVER_INLINE, _view.pyx): gcc
# inlines a static function called once, and a cold one's Python-object work then
# costs the hot function registers and stack on every call (_ml_dtype in the numpy
# adapter: a view 2.5% more instructions).
NEVER_INLINE = ("_ml_dtype",)


def _mark_always_inline(c_file):
    """Put SV_ALWAYS_INLINE on the prototypes of ALWAYS_INLINE's functions in ``c_file``
    (and SV_NEVER_INLINE on NEVER_INLINE's).

    A file marked before is left as it is.  A name not found is said in one line
    (CI fails on it): the build goes on, only slower.
    """
    with open(c_file, encoding="utf-8") as f:
        text = f.read()
    if "static CYTHON_INLINE SV_ALWAYS_INLINE " in text:
        return
    missing = []
    for names, start, marked in (
        (ALWAYS_INLINE, "static CYTHON_INLINE ", "static CYTHON_INLINE SV_ALWAYS_INLINE "),
        (NEVER_INLINE, "static ", "static SV_NEVER_INLINE "),
    ):
        for name in names:
            # Cython's name for a module-level cdef function: __pyx_f_<module path>_<name>.
            prototype = re.compile(
                "^" + re.escape(start)
                + r"(?=[^;{(]*\b__pyx_f_11stridedview_5_view_" + re.escape(name) + r"\()",
                re.MULTILINE,
            )
            text, count = prototype.subn(marked, text)
            if count == 0:
                missing.append(name)
    if missing:
        print(ALWAYS_INLINE_MISSING, " ".join(missing), file=sys.stderr)
    with open(c_file, "w", encoding="utf-8") as f:
        f.write(text)


ext_modules = cythonize(
    extensions,
    compiler_directives={
        "language_level": 3,
        "embedsignature": True,
        "binding": True,
        "autotestdict": False,
        # Safe without the GIL (docs/internals.md): a free-threaded interpreter
        # keeps the GIL off when it imports the module.
        "freethreading_compatible": True,
    },
)
for extension in ext_modules:
    for source in extension.sources:
        if source.endswith("_view.c"):
            _mark_always_inline(source)

setup(cmdclass={"build_ext": BuildExt}, ext_modules=ext_modules)
