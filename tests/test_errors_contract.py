"""Errors as a contract: docs/errors.md lists every exception the package raises.

(a) The tables of docs/errors.md are parsed (``| type | message prefix | when |``).
(b) Every ``raise <Name>(...)`` in stridedview/*.py, *.pyx and *.pxi is found with the
    tokenizer, its message prefix read with ``ast`` (f-strings cut at the first
    placeholder; a message held in a module constant is looked up), and must have a row.
(c) Every row must still be a raise site: rows and sites match one to one.
(d) A table of triggers raises as many rows as practical through the public API and checks
    the type and the prefix (and a longer expected start where the prefix is short).
Also: no ``assert`` statement anywhere in the package (validation must survive ``-O``).
"""

from __future__ import annotations

import ast
import collections
import io
import re
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest

import stridedview
from fake_driver import CUresult, FakeDriver
from producers import make_producer
from test_buffer_export import (
    PyBUF_ANY_CONTIGUOUS,
    PyBUF_C_CONTIGUOUS,
    PyBUF_F_CONTIGUOUS,
    PyBUF_WRITABLE,
    get_buffer,
)
from test_host import DuckBuffer, _misaligned, _testbuffer_ndarray, _testbuffer_pil
from stridedview import CUDAError, StridedMemoryView, args_viewable_as_strided_memory
from stridedview import _driver

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "stridedview"
ERRORS_MD = ROOT / "docs" / "errors.md"

Row = collections.namedtuple("Row", "group type prefix when line")
Site = collections.namedtuple("Site", "type prefix file line")

# The cell of a row whose message has no fixed start.
_NO_PREFIX_CELLS = ("(placeholder)", "(none)")


# --- (a) the table ---------------------------------------------------------------------------

def _split_row(line: str) -> list[str]:
    """The cells of a Markdown table row; ``\\|`` is a literal pipe."""
    cells, cell, i = [], [], 1
    body = line.strip()
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell.append("|")
            i += 2
            continue
        if ch == "|":
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(ch)
        i += 1
    return cells


def parse_errors_table(path: Path = ERRORS_MD) -> list[Row]:
    """Every row of every ``| type | message prefix | when |`` table, with its ``##`` group."""
    rows, group, in_table = [], None, False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("## "):
            group, in_table = line[3:].strip(), False
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = _split_row(line)
        if [c.lower() for c in cells] == ["type", "message prefix", "when"]:
            in_table = True
            continue
        if not in_table or set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != 3:
            raise ValueError(f"{path.name}:{number}: a row needs 3 cells: {line!r}")
        kind, prefix_cell, when = cells
        if prefix_cell in _NO_PREFIX_CELLS:
            prefix = ""
        else:
            match = re.fullmatch(r"`([^`]*)`", prefix_cell)
            if match is None:
                raise ValueError(f"{path.name}:{number}: the prefix must be in backticks: {prefix_cell!r}")
            prefix = match.group(1)
        rows.append(Row(group, kind, prefix, when, number))
    return rows


def documented_prefixes() -> dict[str, tuple[str, ...]]:
    """Exception type name -> the documented message prefixes (for the fuzz tests)."""
    out = collections.defaultdict(set)
    for row in parse_errors_table():
        out[row.type].add(row.prefix)
    return {kind: tuple(sorted(prefixes)) for kind, prefixes in out.items()}


# --- (b) the sources -------------------------------------------------------------------------

def package_sources() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.suffix in (".py", ".pyx", ".pxi"))


def _tokens(text: str):
    return list(tokenize.generate_tokens(io.StringIO(text).readline))


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _string_constants(text: str) -> dict[str, str]:
    """Module-level ``NAME = "..."`` (or ``cdef object NAME = (...)``) string constants."""
    constants = {}
    for match in re.finditer(r"^(?:cdef\s+(?:object|str)\s+)?([A-Za-z_]\w*)\s*=\s*", text, re.M):
        rest = text[match.end():]
        depth, end = 0, None
        for tok in tokenize.generate_tokens(io.StringIO(rest).readline):
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            elif tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER) and depth == 0:
                end = tok.start
                break
        if end is None:
            continue
        lines = rest.splitlines(keepends=True)
        expression = "".join(lines[: end[0] - 1]) + (lines[end[0] - 1][: end[1]] if lines else "")
        try:
            node = ast.parse(expression.strip(), mode="eval").body
        except SyntaxError:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            constants[match.group(1)] = node.value
    return constants


def _message_prefix(node, constants):
    """The fixed start of a message expression, or None when it is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if not isinstance(part, ast.Constant):
                break
            parts.append(part.value)
        return "".join(parts)
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id].split("{")[0]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in constants
    ):
        return constants[node.func.value.id].split("{")[0]
    return None


def raise_sites(path: Path) -> list[Site]:
    """Every ``raise Name(...)`` in ``path`` (comments and strings are not code to the tokenizer)."""
    text = path.read_text()
    tokens = _tokens(text)
    offsets = _line_offsets(text)
    constants = _string_constants(text)
    sites = []
    for i, tok in enumerate(tokens[:-2]):
        if not (tok.type == tokenize.NAME and tok.string == "raise"):
            continue
        name, paren = tokens[i + 1], tokens[i + 2]
        if name.type != tokenize.NAME or not (paren.type == tokenize.OP and paren.string == "("):
            continue
        depth = 0
        for j in range(i + 2, len(tokens)):
            if tokens[j].type == tokenize.OP and tokens[j].string in "([{":
                depth += 1
            elif tokens[j].type == tokenize.OP and tokens[j].string in ")]}":
                depth -= 1
                if depth == 0:
                    break
        start = offsets[paren.start[0] - 1] + paren.start[1]
        end = offsets[tokens[j].start[0] - 1] + tokens[j].start[1] + 1
        try:
            call = ast.parse(name.string + text[start:end], mode="eval").body
        except SyntaxError:
            # Cython inside an f-string placeholder (a cast: {<uintptr_t>x:#x}) is no Python:
            # read the leading string literals token by token instead.
            prefix = _prefix_from_tokens(tokens[i + 3 : j])
        else:
            prefix = _message_prefix(call.args[0], constants) if call.args else ""
        sites.append(Site(name.string, prefix, path.name, tok.start[0]))
    return sites


def _prefix_from_tokens(tokens) -> str | None:
    """The fixed start of a message given as adjacent string literals, from its tokens.

    Python 3.11 tokenizes an f-string as one STRING token; 3.12 splits it into
    FSTRING_START, FSTRING_MIDDLE (the literal text) and the placeholders' tokens.
    """
    parts = []
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_middle = getattr(tokenize, "FSTRING_MIDDLE", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    in_fstring = False
    for tok in tokens:
        if tok.type in (tokenize.NL, tokenize.COMMENT):
            continue
        if tok.type == tokenize.STRING:
            quote_at = min(i for i in (tok.string.find("'"), tok.string.find('"')) if i >= 0)
            letters = tok.string[:quote_at].lower()
            if "f" not in letters:
                parts.append(ast.literal_eval(tok.string))
                continue
            literal = tok.string[quote_at:]
            quote = literal[:3] if literal[:3] in ('"""', "'''") else literal[0]
            body = literal[len(quote): -len(quote)]
            cut = re.search(r"(?<!\{)\{(?!\{)", body)
            text = body if cut is None else body[: cut.start()]
            parts.append(ast.literal_eval(letters.replace("f", "") + quote + text + quote).replace("{{", "{").replace("}}", "}"))
            if cut is not None:
                return "".join(parts)
        elif fstring_start is not None and tok.type == fstring_start:
            in_fstring = True
        elif fstring_middle is not None and tok.type == fstring_middle:
            parts.append(tok.string)
        elif fstring_end is not None and tok.type == fstring_end:
            in_fstring = False
        elif in_fstring and tok.type == tokenize.OP and tok.string == "{":
            return "".join(parts)
        else:
            break
    return "".join(parts) if parts else None


def all_raise_sites() -> list[Site]:
    return [site for path in package_sources() for site in raise_sites(path)]


def test_table_parses_into_groups():
    """docs/errors.md has the protocol and entry-point groups (and a general one), each with rows."""
    groups = collections.Counter(row.group for row in parse_errors_table())
    expected = (
        "Stream", "DLPack", "CUDA Array Interface", "Array interface", "Buffer protocol",
        "from_buffer", "Export", "Layouts", "DLPack C exchange API", "Decorator", "Hand-overs",
        "Driver", "General",
        "Handing a host view on (buffer protocol, array interface)", "Copies", "MPI messages", "Views across processes", "Tensor maps",
    )
    for group in expected:
        assert groups[group] > 0, f"no rows under '## {group}'"
    assert set(groups) <= set(expected)


def test_scanner_finds_the_raises():
    """The scanner is not vacuous: it finds many raises, all with a readable literal message."""
    sites = all_raise_sites()
    assert len(sites) >= 80
    unreadable = [s for s in sites if s.prefix is None]
    assert not unreadable, f"raise sites whose message is not a literal: {unreadable}"
    files = {s.file for s in sites}
    assert {
        "_from_cai.pxi", "_from_dlpack.pxi", "_export.pxi", "_streams.pxi", "_driver.py",
        "_from_host.pxi", "_exchange_export.pxi",
    } <= files


@pytest.mark.slow
def test_every_raise_is_listed():
    """Each raise site in the sources has its own row (type and exact prefix) in docs/errors.md."""
    rows = collections.Counter((r.type, r.prefix) for r in parse_errors_table())
    sites = collections.Counter((s.type, s.prefix) for s in all_raise_sites())
    missing = sites - rows
    where = [s for s in all_raise_sites() if (s.type, s.prefix) in missing]
    assert not missing, "raises without a row in docs/errors.md:\n" + "\n".join(
        f"  {s.file}:{s.line}: {s.type} {s.prefix!r}" for s in where
    )


def test_no_stale_rows():
    """Each row of docs/errors.md is still a raise site in the sources (one row per site)."""
    rows = collections.Counter((r.type, r.prefix) for r in parse_errors_table())
    sites = collections.Counter((s.type, s.prefix) for s in all_raise_sites())
    stale = rows - sites
    lines = [r for r in parse_errors_table() if (r.type, r.prefix) in stale]
    assert not stale, "rows of docs/errors.md with no raise left in the sources:\n" + "\n".join(
        f"  errors.md:{r.line}: {r.type} {r.prefix!r}" for r in lines
    )


@pytest.mark.slow
def test_no_assert_statements_in_package():
    """No validation rests on ``assert`` (stripped under python -O): none in any package source."""
    found = []
    for path in sorted(PACKAGE.iterdir()):
        if path.suffix not in (".py", ".pyx", ".pxi", ".pxd"):
            continue
        for tok in _tokens(path.read_text()):
            if tok.type == tokenize.NAME and tok.string == "assert":
                found.append(f"{path.name}:{tok.start[0]}")
    assert not found, f"assert statements in the package: {found}"


def test_scanner_reads_fstrings_constants_and_concatenation(tmp_path):
    """The scanner's own rules, on a small sample: f-strings cut at '{', constants, no comments."""
    sample = tmp_path / "sample.pxi"
    sample.write_text(
        'cdef object _MSG = (\n    "stream: bad {!r}"\n)\n'
        "def f(x):\n"
        "    # raise KeyError('not code')\n"
        "    s = 'raise IndexError(\"in a string\")'\n"
        '    raise BufferError(\n        f"dlpack: a {x} b "\n        "c"\n    )\n'
        "    raise TypeError(_MSG.format(x))\n"
        "    raise MemoryError()\n"
        '    raise CUDAError(f"{x} failed", "NAME")\n'
        '    raise BufferError(\n        f"dlpack: end "\n        f"(data {<uintptr_t>x:#x})"\n    )\n'
    )
    assert [(s.type, s.prefix) for s in raise_sites(sample)] == [
        ("BufferError", "dlpack: a "),
        ("TypeError", "stream: bad "),
        ("MemoryError", ""),
        ("CUDAError", ""),
        ("BufferError", "dlpack: end (data "),
    ]


# --- (d) triggering the rows ---------------------------------------------------------------

class CAI:
    """An object exporting ``interface`` as its CUDA Array Interface."""

    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


def interface_dict(**changes):
    """A valid v3 interface dict (2x3 float32 at a never-read address) with ``changes`` applied
    (``...`` removes a key); the CUDA Array Interface's and numpy's alike."""
    interface = {"version": 3, "shape": (2, 3), "typestr": "<f4", "data": (0x10000, False), "strides": None}
    for key, value in changes.items():
        if value is ...:
            interface.pop(key, None)
        else:
            interface[key] = value
    return interface


def cai(**changes):
    """A valid v3 CAI object with ``changes`` applied."""
    return CAI(**interface_dict(**changes))


def view_cai(**changes):
    return StridedMemoryView(cai(**changes), stream_ptr=-1)


def view_dlpack(_stream=-1, **fields):
    producer = make_producer("versioned", **fields)
    try:
        return StridedMemoryView(producer, stream_ptr=_stream)
    finally:
        producer.release_capsules()


class CudaStream:
    def __init__(self, answer):
        self.answer = answer

    def __cuda_stream__(self):
        return self.answer


class NotCapsule:
    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return 42


class BadDevice(NotCapsule):
    def __dlpack_device__(self):
        return "cpu"


class Device(NotCapsule):
    def __init__(self, device):
        self.device = device

    def __dlpack_device__(self):
        return self.device


def host_view():
    return StridedMemoryView(np.arange(6, dtype=np.float32).reshape(2, 3))


def device_view(**changes):
    """A CAI (device) view with device_id known to the installed fake."""
    return view_cai(**changes)


def structured_view():
    return view_cai(typestr="|V8", descr=[("x", "<f4"), ("y", "<i4")])


def _decorate(indices, func=None):
    def f(x, y=None):
        return x

    return args_viewable_as_strided_memory(indices)(func or f)


def _launch_with_list():
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x

    return launch([1, 2])


def _launch_device_without_stream():
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x.view()

    producer = make_producer("versioned", device=(2, 0))
    try:
        return launch(producer)
    finally:
        producer.release_capsules()


def _launch_viewing_with(**keywords):
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x.view(**keywords)

    return launch(np.zeros(2))


def _call_uninitialised_launcher():
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x

    return type(launch).__new__(type(launch))(np.zeros(2))


def _driver_failure(fake):
    # A CAI view's device asked of the driver, for a pointer it does not know.
    return StridedMemoryView(cai(stream=None, data=(0xDEAD0000, False)), stream_ptr=-1).device_id


def _padded_int4_view():
    import ml_dtypes

    return StridedMemoryView(np.zeros(4, ml_dtypes.int4))


def _driver_call_failure(fake):
    # An empty CAI view's pointer 0 asks the current context's device: there is none.
    fake.set_current_device(None)
    return StridedMemoryView(cai(stream=None, shape=(0,), data=(0, False)), stream_ptr=-1).device_id


def _ordering_with_a_fake(fake):
    # Orderings and hand-overs are the driver door's, on cuda-bindings' driver alone.
    return StridedMemoryView(cai(stream=fake.new_stream()), stream_ptr=fake.new_stream())


def _driver_init_failure(fake):
    fake.fail("cuInit", CUresult.CUDA_ERROR_NO_DEVICE)
    return StridedMemoryView(cai(stream=fake.new_stream()), stream_ptr=fake.new_stream())


class _UnloadableDriver:
    """Bindings whose library cannot be loaded: every call raises like cuda-bindings does."""

    def cuInit(self, flags):
        raise RuntimeError("Failed to dlopen libcuda.so.1")


def _no_bindings(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    _driver.use_api(None)
    return host_view_then_device_id()


def _launch_argument_field():
    """A decorated launcher's body reading ``ptr`` from its argument instead of its view."""
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x.ptr

    return launch(np.zeros(2))


def _c_api_device_id_of(obj):
    """The C API table's device_id function called through ctypes on ``obj`` (docs/api.md)."""
    import ctypes

    import stridedview._view

    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = get_pointer(stridedview._view._C_API, b"stridedview._view._C_API")
    offsets = 8  # ptr, ndim, dims, itemsize, size, device_type, readonly, dtype
    function = ctypes.c_void_p.from_address(table + 16 + 8 * offsets).value
    call = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_int32))(function)
    out = ctypes.c_int32()
    call(obj, ctypes.byref(out))
    return out.value


def host_view_then_device_id():
    return view_cai().device_id


def _no_driver_library():
    _driver.use_api(_UnloadableDriver())
    return view_cai().device_id


def _again():
    view = host_view()
    view.__init__(np.zeros(3))


def _init_parked_view():
    import gc

    from stridedview import ViewableArgument

    @args_viewable_as_strided_memory([0])
    def launch(x):
        x.view(-1)

    launch(np.zeros(2))
    gc.collect()
    parked = [
        r for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None
        for r in gc.get_referents(o) if type(r) is StridedMemoryView
    ]
    parked[0].__init__(np.zeros(3))


def _init_proxy_again():
    from stridedview import ViewableArgument

    ViewableArgument(np.zeros(2)).__init__(np.zeros(3))


def _init_launcher_again():
    @args_viewable_as_strided_memory([0])
    def launch(x):
        return x

    launch.__init__(launch.__wrapped__, ((0, "x"),), ())


def _torch_neg():
    torch = pytest.importorskip("torch")
    return StridedMemoryView(torch._neg_view(torch.arange(3.0)))


def _torch_fields_read_of_a_list():
    pytest.importorskip("torch")  # the hook reads torch's own types
    return stridedview._view._torch_fields_read([1.0])


def _torch_conj():
    torch = pytest.importorskip("torch")
    return StridedMemoryView(torch.arange(3.0).to(torch.complex64).conj())


def _exchange_without_work_stream():
    from test_fuzz import ExchangeProducerNoWorkStream

    spec = {"device": (2, 0), "dtype": (2, 32, 1), "shape": [2], "ndim": 1, "strides": None,
            "byte_offset": 0, "data": 0x10000, "work_stream": None}
    obj = ExchangeProducerNoWorkStream(spec)
    try:
        return StridedMemoryView(obj, stream_ptr=7)
    finally:
        obj.close()


def _unknown_attribute():
    return stridedview.no_such_name


class _DLPackOnly:
    """A producer with __dlpack__ but no __dlpack_device__."""

    def __dlpack__(self, **kwargs):
        return np.zeros(2).__dlpack__(**kwargs)


class _DLPackDeviceOnly:
    """A producer with __dlpack_device__ but no __dlpack__."""

    def __dlpack_device__(self):
        return (1, 0)


def _torch_sparse():
    import warnings

    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's own note on sparse invariants
        tensor = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,))
    return StridedMemoryView(tensor)


#: (id, callable(fake, monkeypatch), type, message start).  The message start is the row's
#: prefix or longer; the row is the one whose prefix it starts with.
TRIGGERS = [
    # stream
    ("stream-bool", lambda f, m: host_view_with(True), TypeError, "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got True)"),
    ("stream-float", lambda f, m: host_view_with(1.5), TypeError, "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got 1.5)"),
    ("stream-negative", lambda f, m: host_view_with(-2), ValueError, "stream: stream_ptr must be -1 or a stream handle >= 0 (got -2)"),
    ("stream-2**64", lambda f, m: host_view_with(2**64), ValueError, "stream: stream_ptr must be -1 or a stream handle >= 0 (got "),
    ("cuda-stream-bad", lambda f, m: host_view_with(CudaStream((0,))), TypeError, "stream: __cuda_stream__() must return (version, handle) (got "),
    ("cuda-none-ambiguous", lambda f, m: view_dlpack(device=(2, 0), _stream=None), BufferError, "dlpack: stream_ptr=None is ambiguous for CUDA memory"),
    ("managed-none-ambiguous", lambda f, m: view_dlpack(device=(13, 0), _stream=None), BufferError, "dlpack: stream_ptr=None is ambiguous for CUDAManaged memory"),
    # dlpack
    ("from-dlpack-list", lambda f, m: StridedMemoryView.from_dlpack([1]), BufferError, "dlpack: 'list' object has no __dlpack__ and __dlpack_device__ methods: StridedMemoryView(obj) takes the other protocols too"),
    ("dlpack-without-device", lambda f, m: StridedMemoryView(_DLPackOnly()), BufferError, "dlpack: '_DLPackOnly' object has __dlpack__ but no __dlpack_device__: a DLPack producer needs both"),
    ("from-dlpack-without-dlpack", lambda f, m: StridedMemoryView.from_dlpack(_DLPackDeviceOnly()), BufferError, "dlpack: '_DLPackDeviceOnly' object has __dlpack_device__ but no __dlpack__: "),
    ("numpy-object-array", lambda f, m: StridedMemoryView(np.zeros(2, dtype=object)), BufferError, "dlpack: numpy cannot export an object array through DLPack ("),
    ("torch-sparse", lambda f, m: _torch_sparse(), BufferError, "dlpack: the producer refused to export a 'Tensor' object (Cannot access data pointer of Tensor that doesn't have storage): a torch.sparse_coo tensor has no strides; view a dense copy (tensor.to_dense())"),
    ("assign-field", lambda f, m: setattr(StridedMemoryView(np.zeros(2)), "ptr", 0), AttributeError, "StridedMemoryView.ptr is read-only and cannot be assigned (got 'int'): a view describes the memory it was made from; make another view instead"),
    ("delete-property", lambda f, m: delattr(StridedMemoryView(np.zeros(2)), "ndim"), AttributeError, "StridedMemoryView.ndim is read-only and cannot be deleted: "),
    ("torch-neg", lambda f, m: _torch_neg(), BufferError, "dlpack: the torch tensor has its negative bit set, so its memory does not hold its values (call .resolve_neg() first)"),
    ("torch-conj", lambda f, m: _torch_conj(), BufferError, "dlpack: the torch tensor has its conjugate bit set, so its memory does not hold its values (call .resolve_conj() first)"),
    ("device-not-pair", lambda f, m: StridedMemoryView(BadDevice()), BufferError, "dlpack: __dlpack_device__() must return (device_type, device_id) (got 'cpu')"),
    ("device-opencl", lambda f, m: StridedMemoryView(Device((4, 0))), BufferError, "dlpack: unsupported device type 4 (OpenCL)"),
    ("device-unknown", lambda f, m: StridedMemoryView(Device((99, 0))), BufferError, "dlpack: unsupported device type 99 (unknown)"),
    ("exchange-no-work-stream", lambda f, m: _exchange_without_work_stream(), BufferError, "dlpack: the exchange API of "),
    ("not-capsule", lambda f, m: StridedMemoryView(NotCapsule()), BufferError, "dlpack: __dlpack__() must return a PyCapsule (got an object of type 'int')"),
    ("used-capsule", lambda f, m: view_dlpack(capsule_name="used_dltensor"), BufferError, "dlpack: capsule was already consumed (name 'used_dltensor')"),
    ("foreign-name", lambda f, m: view_dlpack(capsule_name="foo"), BufferError, "dlpack: capsule name must be 'dltensor_versioned' or 'dltensor' (got 'foo')"),
    ("version-2", lambda f, m: view_dlpack(version=(2, 0)), BufferError, "dlpack: unsupported DLPack version 2.0 (major version must be 1)"),
    ("is-copied", lambda f, m: view_dlpack(flags=2), BufferError, "dlpack: the producer copied the data (IS_COPIED flag set): a view of a copy would not see the original"),
    ("byte-offsets", lambda f, m: view_dlpack(shape=(2,), strides=(2**62,), data=0x10000), BufferError, "dlpack: byte offsets from element 0 must fit in int64 (got shape (2,), strides (4611686018427387904,) in elements, itemsize 4)"),
    ("device-differs", lambda f, m: view_dlpack(device=(2, 0), reported_device=(1, 0)), BufferError, "dlpack: capsule device (2, 0) differs from __dlpack_device__() (1, 0)"),
    ("ndim-negative", lambda f, m: view_dlpack(ndim=-1), BufferError, "dlpack: ndim must be >= 0 (got -1)"),
    ("shape-null", lambda f, m: view_dlpack(shape=None, ndim=2, strides=None, data=0x10000), BufferError, "dlpack: shape is NULL with ndim 2"),
    ("extent-negative", lambda f, m: view_dlpack(shape=(2, -3), strides=(1, 1), data=0x10000), BufferError, "dlpack: shape[1] must be >= 0 (got -3)"),
    ("count-overflow", lambda f, m: view_dlpack(shape=(2**32, 2**31), strides=(1, 1), data=0x10000), BufferError, "dlpack: element count overflows int64 (shape "),
    ("data-null", lambda f, m: view_dlpack(data=0), BufferError, "dlpack: data is NULL for a tensor of 6 elements"),
    ("past-address-space", lambda f, m: view_dlpack(data=2**64 - 8, byte_offset=16), BufferError, "dlpack: data + byte_offset passes the end of the address space (data 0xfffffffffffffff8, byte_offset 16)"),
    ("device-id-negative", lambda f, m: view_dlpack(device=(2, -2)), BufferError, "dlpack: device_id must be >= 0 (got -2)"),
    ("lanes", lambda f, m: view_dlpack(dtype=(2, 32, 0)), BufferError, "dlpack: dtype lanes must be >= 1 (got 0)"),
    ("padded-vector", lambda f, m: view_dlpack(dtype=(17, 4, 2), flags=4), BufferError, "dlpack: IS_SUBBYTE_TYPE_PADDED is set on dtype Float4_e2m1fn with 4 bits and 2 lanes (DLPack pads only one-lane elements of fewer than 8 bits)"),
    ("code-unknown", lambda f, m: view_dlpack(dtype=(99, 8, 1)), BufferError, "dlpack: unsupported dtype code 99 (unknown)"),
    ("code-opaque", lambda f, m: view_dlpack(dtype=(3, 64, 1)), BufferError, "dlpack: unsupported dtype code 3 (OpaqueHandle)"),
    ("bfloat-32", lambda f, m: view_dlpack(dtype=(4, 32, 1)), BufferError, "dlpack: dtype Bfloat must have 16 bits (got 32)"),
    ("int-12", lambda f, m: view_dlpack(dtype=(0, 12, 1)), BufferError, "dlpack: dtype Int must have 1, 2, 4, 8, 16, 32 or 64 bits (got 12)"),
    ("float4-packed-strided", lambda f, m: view_dlpack(dtype=(17, 4, 1), strides=(1, 2)), BufferError, "dlpack: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) must be row-major and gap-free, its elements one after another (got shape (2, 3), strides (1, 2) in elements)"),
    ("export-cai-packed", lambda f, m: view_dlpack(device=(2, 0), dtype=(17, 4, 1)).__cuda_array_interface__, BufferError, "cuda array interface: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) has no typestr (a typestr counts whole bytes); export it through DLPack"),
    ("buffer-packed", lambda f, m: memoryview(_packed()), BufferError, "buffer: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) has no byte per element"),
    ("array-interface-packed", lambda f, m: _packed().__array_interface__, BufferError, "array interface: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) has no typestr"),
    ("itemsize-packed", lambda f, m: _packed().itemsize, BufferError, "itemsize: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) has no whole-byte item size (several elements share a byte): itemsize_bits is 4"),
    ("byte-strides-packed", lambda f, m: _packed().byte_strides, BufferError, "byte_strides: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) has no whole-byte item size"),
    ("index-packed-mid-byte", lambda f, m: _packed()[1:], BufferError, "layout: the index would start at element 1 of packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1), bit 4 of a byte: a view starts on a byte"),
    ("transpose-packed", lambda f, m: _packed().reshape(2, 2).T, BufferError, "layout: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) must be row-major and gap-free"),
    ("view-packed-layout", lambda f, m: _packed().view(layout=Layout((4,), (1,), 1)), BufferError, "view: a layout counts whole bytes, and packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) or the new dtype has none per element: change the dtype alone"),
    ("view-packed-strided", lambda f, m: StridedMemoryView(np.zeros((2, 4), np.uint8))[:, ::2].view(dtype=stridedview.DLPackDType(17, 4, 1)), BufferError, "view: seeing dtype uint8 as another type of a different bit size needs a row-major, gap-free view"),
    ("view-packed-0d", lambda f, m: StridedMemoryView(np.zeros((), np.uint8)).view(dtype=stridedview.DLPackDType(17, 4, 1)), BufferError, "view: a 0-d view keeps its element size (8 bits, not 4)"),
    ("view-packed-bits", lambda f, m: StridedMemoryView(np.zeros(1, np.uint8)).view(dtype=stridedview.DLPackDType(15, 6, 1)), BufferError, "view: the last axis holds 8 bits, not a multiple of the new element's 6 bits (shape (1,))"),
    ("view-padded-as-packed", lambda f, m: _padded_int4_view().view(dtype=stridedview.DLPackDType(1, 4, 1)), BufferError, "view: dtype int4 holds one sub-byte element a byte (padded), and DLPackDType(code=1, bits=4, lanes=1) names packed elements, several a byte: the element count would change"),
    ("view-dlpack-dtype-range", lambda f, m: host_view().view(dtype=stridedview.DLPackDType(300, 8, 1)), ValueError, "view: DLPackDType(code=300, bits=8, lanes=1) is out of DLPack's ranges"),
    ("copy-packed-partial-byte", lambda f, m: _packed()[:3].copy_from(_packed()[:3]), ValueError, "copy: 3 packed elements of 4 bits (DLPackDType(code=17, bits=4, lanes=1)) end inside a byte"),
    ("tmap-packed-bits", lambda f, m: _packed_device(bits=2).as_tensor_map((2, 64)), ValueError, "tensor map: packed 2-bit elements (DLPackDType(code=1, bits=2, lanes=1)) have no TMA data type"),
    ("tmap-packed-nan", lambda f, m: _packed_device().as_tensor_map((2, 32), oob_fill=1), ValueError, "tensor map: oob_fill 1 (NaN) is not for the packed data types; data type 13 is packed 4-bit values"),
    ("tmap-packed-u6-interleave", lambda f, m: _packed_device(bits=6).as_tensor_map((2, 128), interleave=1), ValueError, "tensor map: data type 15 (16U6_ALIGN16B) needs interleave 0, got 1"),
    ("tmap-packed-capability", lambda f, m: _packed_device().as_tensor_map((2, 32)), ValueError, "tensor map: data type 13 (16U4_ALIGN8B) needs a device of compute capability 10.0 or higher; device 0 has 9.0"),
    ("tmap-atom-capability", lambda f, m: _tmap(box_dim=(2, 16), swizzle=6), ValueError, "tensor map: swizzle 6 (128B_ATOM_64B) needs a device of compute capability 10.0 or higher; device 0 has 9.0"),
    ("tmap-packed-mismatch", lambda f, m: _tmap(data_type=13), ValueError, "tensor map: data type 13 is packed 4-bit values, the view's elements take 32 bits each (view packed values first"),
    # cuda array interface
    ("cai-missing", lambda f, m: StridedMemoryView.from_cuda_array_interface([1], -1), BufferError, "cuda array interface: 'list' object has no __cuda_array_interface__"),
    ("cai-stream-none", lambda f, m: StridedMemoryView(cai()), BufferError, "cuda array interface: stream_ptr=None is ambiguous: pass a stream handle, or -1 to opt out"),
    ("cai-not-dict", lambda f, m: StridedMemoryView.from_cuda_array_interface(CAIWith([1]), -1), TypeError, "cuda array interface: __cuda_array_interface__ must be a dict (got "),
    ("version-missing", lambda f, m: view_cai(version=...), BufferError, "cuda array interface: 'version' is missing"),
    ("version-4", lambda f, m: view_cai(version=4), BufferError, "cuda array interface: 'version' must be an int from 0 to 3 (got 4)"),
    ("version-bool", lambda f, m: view_cai(version=True), BufferError, "cuda array interface: 'version' must be an int from 0 to 3 (got True)"),
    ("shape-missing", lambda f, m: view_cai(shape=...), BufferError, "cuda array interface: 'shape' is missing"),
    ("shape-str", lambda f, m: view_cai(shape="2,3"), TypeError, "cuda array interface: 'shape' must be a tuple of ints (got "),
    ("shape-65", lambda f, m: view_cai(shape=(1,) * 65), BufferError, "cuda array interface: 'shape' has 65 dimensions, more than 64"),
    ("shape-float", lambda f, m: view_cai(shape=(2, 3.0)), TypeError, "cuda array interface: 'shape' must be a tuple of ints (got (2, 3.0))"),
    ("shape-below-int64", lambda f, m: view_cai(shape=(-(2**63) - 1, 3)), BufferError, "cuda array interface: 'shape' extents must be >= 0 (got "),
    ("shape-past-int64", lambda f, m: view_cai(shape=(2**63, 3)), BufferError, "cuda array interface: 'shape' extents must fit in int64 (got "),
    ("shape-negative", lambda f, m: view_cai(shape=(2, -1)), BufferError, "cuda array interface: 'shape' extents must be >= 0 (got (2, -1))"),
    ("typestr-missing", lambda f, m: view_cai(typestr=...), BufferError, "cuda array interface: 'typestr' is missing"),
    ("typestr-bytes", lambda f, m: view_cai(typestr=b"<f4"), TypeError, "cuda array interface: 'typestr' must be a str (got "),
    ("descr-not-a-list", lambda f, m: view_cai(descr=42), TypeError, "cuda array interface: 'descr' must be a list of (name, type) tuples (got 42 of type 'int')"),
    ("typestr-short", lambda f, m: view_cai(typestr="f4"), BufferError, "cuda array interface: 'typestr' must be <byte order><kind><item size>, e.g. '<f4' (got 'f4')"),
    ("typestr-unknown", lambda f, m: view_cai(typestr="<q9"), BufferError, "cuda array interface: 'typestr' '<q9' is not a numpy type string"),
    ("typestr-big-endian", lambda f, m: view_cai(typestr=">f4"), BufferError, "cuda array interface: 'typestr' '>f4' is not native-endian"),
    ("typestr-object", lambda f, m: view_cai(typestr="|O8"), BufferError, "cuda array interface: 'typestr' '|O8' holds Python objects"),
    ("descr-bad", lambda f, m: view_cai(typestr="|V8", descr=[("a", "<f4"), ("a", "<f4")]), BufferError, "cuda array interface: 'descr' [('a', '<f4'), ('a', '<f4')] is not a numpy descr"),
    ("descr-size", lambda f, m: view_cai(typestr="|V4", descr=[("x", "<f4"), ("y", "<f4")]), BufferError, "cuda array interface: 'descr' [('x', '<f4'), ('y', '<f4')] has item size 8, 'typestr' '|V4' 4"),
    ("descr-object", lambda f, m: view_cai(typestr="|V8", descr=[("x", "|O")]), BufferError, "cuda array interface: 'descr' [('x', '|O')] holds Python objects"),
    ("itemsize-0", lambda f, m: view_cai(typestr="|V0"), BufferError, "cuda array interface: 'typestr' '|V0' has item size 0"),
    ("cai-count-overflow", lambda f, m: view_cai(shape=(2**32, 2**31)), BufferError, "cuda array interface: element count overflows int64 (shape "),
    ("data-missing", lambda f, m: view_cai(data=...), BufferError, "cuda array interface: 'data' is missing"),
    ("data-list", lambda f, m: view_cai(data=[0x10000, False]), TypeError, "cuda array interface: 'data' must be a (ptr, readonly) tuple (got "),
    ("data-ptr-float", lambda f, m: view_cai(data=(1.0, False)), TypeError, "cuda array interface: 'data' pointer must be an int (got 1.0)"),
    ("data-ptr-negative", lambda f, m: view_cai(data=(-1, False)), BufferError, "cuda array interface: 'data' pointer must be an address >= 0 (got -1)"),
    ("data-ptr-2**64", lambda f, m: view_cai(data=(2**64, False)), BufferError, "cuda array interface: 'data' pointer must be an address >= 0 (got "),
    ("data-ptr-0", lambda f, m: view_cai(data=(0, False)), BufferError, "cuda array interface: 'data' pointer is 0 for a non-empty array (shape (2, 3))"),
    ("data-readonly-str", lambda f, m: view_cai(data=(0x10000, "no")), TypeError, "cuda array interface: 'data' readonly flag must be a bool (got 'no')"),
    ("strides-str", lambda f, m: view_cai(strides="12,4"), TypeError, "cuda array interface: 'strides' must be None or a tuple of ints (got "),
    ("strides-length", lambda f, m: view_cai(strides=(8,)), BufferError, "cuda array interface: 'strides' (8,) and 'shape' (2, 3) differ in length"),
    ("strides-float", lambda f, m: view_cai(strides=(12, 4.0)), TypeError, "cuda array interface: 'strides' must be None or a tuple of ints (got (12, 4.0))"),
    ("strides-past-int64", lambda f, m: view_cai(strides=(2**63, 4)), BufferError, "cuda array interface: 'strides' must fit in int64 (got "),
    ("strides-not-multiple", lambda f, m: view_cai(strides=(6, 1)), BufferError, "cuda array interface: 'strides' (6, 1) are not multiples of the item size 4"),
    ("cai-byte-offsets", lambda f, m: view_cai(shape=(3,), strides=(2**62,)), BufferError, "cuda array interface: byte offsets from the first element must fit in int64 (got 'shape' (3,), 'strides' (4611686018427387904,), item size 4)"),
    ("mask", lambda f, m: view_cai(mask=object()), BufferError, "cuda array interface: masked arrays are not supported ('mask' is "),
    ("stream-key-float", lambda f, m: view_cai(stream=1.5), TypeError, "cuda array interface: 'stream' must be None or an int (got 1.5)"),
    ("stream-key-0", lambda f, m: view_cai(stream=0), BufferError, "cuda array interface: 'stream' 0 is disallowed (ambiguous: use 1 for the legacy default stream, 2 for the per-thread one)"),
    ("stream-key-negative", lambda f, m: view_cai(stream=-1), BufferError, "cuda array interface: 'stream' must be None or a stream handle > 0 (got -1)"),
    # array interface
    ("ai-missing", lambda f, m: StridedMemoryView.from_array_interface(b"ab"), BufferError, "array interface: no __array_interface__ on a 'bytes' object"),
    ("ai-not-dict", lambda f, m: StridedMemoryView(AIWith([1])), TypeError, "array interface: __array_interface__ must be a dict (got "),
    ("ai-version-missing", lambda f, m: view_ai(version=...), BufferError, "array interface: 'version' is missing"),
    ("ai-version-2", lambda f, m: view_ai(version=2), BufferError, "array interface: 'version' must be 3 (got 2)"),
    ("ai-shape-missing", lambda f, m: view_ai(shape=...), BufferError, "array interface: 'shape' is missing"),
    ("ai-shape-float", lambda f, m: view_ai(shape=(2, 3.0)), TypeError, "array interface: 'shape' must be a tuple of ints (got (2, 3.0))"),
    ("ai-itemsize-0", lambda f, m: view_ai(typestr="|V0"), BufferError, "array interface: 'typestr' '|V0' has item size 0"),
    ("ai-mask", lambda f, m: view_ai(mask=object()), BufferError, "array interface: masked arrays are not supported ('mask' is "),
    ("ai-offset-float", lambda f, m: view_ai(offset=1.5), TypeError, "array interface: 'offset' must be an int (got 1.5"),
    ("ai-data-list", lambda f, m: view_ai(data=[1, 2]), TypeError, "array interface: 'data' must be a (ptr, readonly) tuple or an object with the buffer protocol (got "),
    ("ai-outside", lambda f, m: view_ai(data=bytearray(8)), BufferError, "array interface: the array (bytes 0 to 24 of its buffer) does not lie inside the buffer's 8 bytes"),
    ("ai-data-3", lambda f, m: view_ai(data=(1, 2, 3)), TypeError, "array interface: 'data' must be a (ptr, readonly) tuple (got "),
    ("ai-ptr-float", lambda f, m: view_ai(data=(1.5, False)), TypeError, "array interface: 'data' pointer must be an int (got 1.5)"),
    ("ai-ptr-negative", lambda f, m: view_ai(data=(-1, False)), BufferError, "array interface: 'data' pointer must be an address >= 0 (got -1)"),
    ("ai-ptr-0", lambda f, m: view_ai(data=(0, False)), BufferError, "array interface: 'data' pointer is 0 for a non-empty array (shape (2, 3))"),
    ("ai-readonly-str", lambda f, m: view_ai(data=(0x10000, "no")), TypeError, "array interface: 'data' readonly flag must be a bool (got 'no')"),
    ("ai-offset-tuple", lambda f, m: view_ai(offset=8), BufferError, "array interface: 'offset' applies to a buffer 'data' only (got offset 8 with a (ptr, readonly) tuple)"),
    # buffer protocol
    ("buffer-suboffsets", lambda f, m: StridedMemoryView(_testbuffer_pil()), BufferError, "buffer: indirect buffers (PIL-style suboffsets) cannot be viewed (suboffsets [0, -1])"),
    ("buffer-strides", lambda f, m: StridedMemoryView(_misaligned()), BufferError, "buffer: strides (3,) are not multiples of the item size 2"),
    ("buffer-format-unknown", lambda f, m: StridedMemoryView(_testbuffer_ndarray(format="P")), BufferError, "buffer: format 'P' (itemsize 8) has no numpy dtype ("),
    ("buffer-format-big-endian", lambda f, m: StridedMemoryView(_testbuffer_ndarray(format=">i")), BufferError, "buffer: format '>i' is not native-endian"),
    ("buffer-format-object", lambda f, m: StridedMemoryView(memoryview(np.array([None], dtype=object))), BufferError, "buffer: format 'O' holds Python objects"),
    # from_buffer
    ("fb-not-buffer", lambda f, m: StridedMemoryView.from_buffer([1], (1,)), TypeError, "buffer: from_buffer needs a cuda.core Buffer or an object with the buffer protocol (got "),
    ("fb-size", lambda f, m: StridedMemoryView.from_buffer(DuckBuffer(0x10000, -1), (1,), itemsize=1), TypeError, "buffer: Buffer.size must be an int >= 0 (got "),
    ("fb-handle", lambda f, m: StridedMemoryView.from_buffer(DuckBuffer(-5, 8), (1,), itemsize=1), BufferError, "buffer: Buffer.handle must be an address >= 0 (got -5)"),
    ("fb-device-id", lambda f, m: StridedMemoryView.from_buffer(DuckBuffer(0x10000, 8, device=True, host=False, device_id=-1), (1,), itemsize=1), BufferError, "buffer: a device-accessible Buffer must have a device_id >= 0 (got -1)"),
    ("fb-itemsize-float", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), itemsize=4.0), TypeError, "buffer: itemsize must be an int (got "),
    ("fb-itemsize-0", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), itemsize=0), ValueError, "buffer: itemsize must be > 0 (got 0)"),
    ("fb-dtype-bad", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), dtype="nope"), TypeError, "buffer: dtype must be a numpy dtype (got 'nope'"),
    ("fb-dtype-object", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), dtype=object), ValueError, "buffer: dtype object cannot describe raw memory"),
    ("fb-itemsize-dtype", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), dtype=np.float64, itemsize=4), ValueError, "buffer: itemsize 4 differs from dtype float64's 8"),
    ("fb-no-dtype", lambda f, m: StridedMemoryView.from_buffer(DuckBuffer(0x10000, 8), (1,)), ValueError, "buffer: a cuda.core Buffer needs dtype or itemsize"),
    ("fb-strides-no-shape", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), None, (1,)), ValueError, "buffer: strides were given without a shape"),
    ("fb-flat-non-contiguous", lambda f, m: StridedMemoryView.from_buffer(memoryview(bytearray(8))[::2], dtype=np.uint16), ValueError, "buffer: a non-contiguous buffer keeps its own item size (got itemsize 2, the buffer's is 1)"),
    ("fb-flat-remainder", lambda f, m: StridedMemoryView.from_buffer(bytearray(10), dtype=np.float32), ValueError, "buffer: the buffer's 10 bytes are not a whole number of 4-byte elements"),
    ("fb-shape-65", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,) * 65), ValueError, "buffer: shape has 65 dimensions, more than 64"),
    ("fb-shape-negative", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (-1,)), ValueError, "buffer: shape extents must be from 0 to 2**63 - 1 (got (-1,))"),
    ("fb-count-overflow", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (2**32, 2**32)), ValueError, "buffer: element count overflows int64 (shape "),
    ("fb-strides-length", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (2,), (1, 1)), ValueError, "buffer: strides (1, 1) and shape (2,) differ in length"),
    ("fb-strides-int64", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (1,), (2**63,)), ValueError, "buffer: strides must fit in int64 (got "),
    ("fb-shape-non-contiguous", lambda f, m: StridedMemoryView.from_buffer(memoryview(bytearray(8))[::2], (2,)), ValueError, "buffer: a shape can only be laid over a contiguous buffer (its bytes in one run)"),
    ("fb-before-start", lambda f, m: StridedMemoryView.from_buffer(bytearray(40), (5,), (-2,), dtype=np.float32), ValueError, "buffer: the layout reaches 32 bytes before the buffer's start"),
    ("fb-too-small", lambda f, m: StridedMemoryView.from_buffer(bytearray(40), (11,), dtype=np.float32), ValueError, "buffer: the layout needs 44 bytes, the buffer has 40 (shape (11,), strides (1,), itemsize 4)"),
    ("fb-shape-str", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), "8"), TypeError, "buffer: shape must be a tuple of ints (got "),
    # export
    ("export-copy", lambda f, m: host_view().__dlpack__(copy=True), BufferError, "dlpack: a view never copies (got copy=True)"),
    ("export-device", lambda f, m: host_view().__dlpack__(dl_device=(2, 0)), BufferError, "dlpack: the view lives on device (1, 0), not (2, 0) (a view never copies)"),
    ("export-max-version", lambda f, m: host_view().__dlpack__(max_version=1), TypeError, "dlpack: max_version must be None or a (major, minor) tuple (got 1)"),
    ("export-structured", lambda f, m: structured_view().__dlpack__(max_version=(1, 3), stream=-1), BufferError, "dlpack: dtype [('x', '<f4'), ('y', '<i4')] has no DLPack equivalent"),
    ("export-readonly-legacy", lambda f, m: StridedMemoryView(readonly_array()).__dlpack__(), BufferError, "dlpack: a read-only view cannot be exported as a legacy capsule"),
    ("export-host-stream", lambda f, m: host_view().__dlpack__(stream=5), BufferError, "dlpack: stream must be None for host memory (got 5)"),
    ("export-stream-0", lambda f, m: device_view().__dlpack__(stream=0, max_version=(1, 3)), BufferError, "dlpack: stream 0 is disallowed (ambiguous: pass 1 for the legacy default stream, 2 for the per-thread one)"),
    ("export-cai-bfloat16", lambda f, m: view_dlpack(device=(2, 0), dtype="bfloat16").__cuda_array_interface__, BufferError, "cuda array interface: dtype bfloat16 has no typestr ('<V2' names another type or none); export it through DLPack"),
    ("export-host-cai", lambda f, m: host_view().__cuda_array_interface__, AttributeError, "__cuda_array_interface__: a host-only view (device_id -1) has no CUDA Array Interface; use DLPack"),
    # layouts
    ("layout-axis-type", lambda f, m: host_view().transpose(0, 1.0), TypeError, "transpose: axis must be an int (got 1.0)"),
    ("layout-axis-range", lambda f, m: host_view().transpose(0, 5), ValueError, "transpose: axis 5 is out of bounds for 2 dimensions"),
    ("layout-ndim", lambda f, m: host_view()[(None,) * 63], BufferError, "layout: the index would have 65 dimensions, more than 64"),
    ("layout-stride", lambda f, m: view_dlpack(shape=(3,), strides=(2**61,), dtype="int8", data=0x10000)[::4], BufferError, "layout: a stride of the index passes int64 or the address space"),
    ("layout-count", lambda f, m: host_view()[:1, :1].broadcast_to((2**40, 2**40)), BufferError, "layout: broadcast_to would have 1208925819614629174706176 elements"),
    ("index-bool", lambda f, m: host_view()[True], TypeError, "index: basic indexing only: ints, slices, ..., None (got True)"),
    ("index-list", lambda f, m: host_view()[[0]], TypeError, "index: basic indexing only: ints, slices, ..., None (got [0])"),
    ("index-ellipses", lambda f, m: host_view()[..., ...], IndexError, "index: an index can hold one Ellipsis only (got (Ellipsis, Ellipsis))"),
    ("index-too-many", lambda f, m: host_view()[0, 0, 0], IndexError, "index: too many indices: the view is 2-d, 3 were indexed"),
    ("index-range", lambda f, m: host_view()[2], IndexError, "index: index 2 is out of bounds for axis 0 with size 2"),
    ("iterate-0d", lambda f, m: iter(host_view()[0, 0]), TypeError, "iteration over a 0-d view"),
    ("transpose-count", lambda f, m: host_view().transpose(0), ValueError, "transpose: axes (0,) do not match the view's 2 dimensions"),
    ("transpose-repeat", lambda f, m: host_view().transpose(1, -1), ValueError, "transpose: axes (1, -1) repeat an axis"),
    ("squeeze-repeat", lambda f, m: host_view()[:1, :1].squeeze((0, 0)), ValueError, "squeeze: axis (0, 0) repeats an axis"),
    ("squeeze-extent", lambda f, m: host_view().squeeze(1), ValueError, "squeeze: axis 1 has extent 3, not 1 (shape (2, 3))"),
    ("broadcast-negative", lambda f, m: host_view().broadcast_to((2, -3)), ValueError, "broadcast_to: extents must be >= 0 (got (2, -3))"),
    ("broadcast-fewer", lambda f, m: host_view().broadcast_to(3), ValueError, "broadcast_to: shape (2, 3) has more dimensions than (3,)"),
    ("broadcast-extent", lambda f, m: host_view().broadcast_to((2, 4)), ValueError, "broadcast_to: shape (2, 3) cannot be broadcast to (2, 4)"),
    ("reshape-two-unknown", lambda f, m: host_view().reshape(-1, -1), ValueError, "reshape: extents must be >= 0, with one -1 at most (got (-1, -1))"),
    ("reshape-size", lambda f, m: host_view().reshape(4, 2), ValueError, "reshape: cannot reshape 6 elements into shape (4, 2)"),
    ("reshape-order", lambda f, m: host_view().reshape(6, order="A"), ValueError, "reshape: order must be 'C' or 'F' (got 'A')"),
    ("reshape-none", lambda f, m: host_view().reshape(), TypeError, "reshape: a shape is required (got none)"),
    ("reshape-copy", lambda f, m: host_view()[:, :2].reshape(4), BufferError, "reshape: shape (2, 2) with strides (3, 1) cannot be seen as shape (4,) in C order without a copy"),
    ("view-dtype", lambda f, m: host_view().view(dtype=object), TypeError, "view: dtype must be native-endian with a size > 0, no subarray and no Python objects (got dtype('O'))"),
    ("view-0d", lambda f, m: host_view()[0, 0].view(dtype=np.float64), BufferError, "view: a 0-d view keeps its item size (4 bytes, not 8)"),
    ("view-last-axis", lambda f, m: host_view()[:, ::2].view(dtype=np.int16), BufferError, "view: the last axis must be contiguous to change the item size from 4 to 2"),
    ("view-last-bytes", lambda f, m: host_view().view(dtype=np.float64), BufferError, "view: the last axis holds 12 bytes, not a multiple of the new item size 8"),
    ("view-stride", lambda f, m: host_view()[:, :2].view(dtype=np.float64), BufferError, "view: stride 12 bytes of axis 0 is not a multiple of the new item size 8"),
    ("view-layout-stream", lambda f, m: host_view().view(12345), TypeError, "view: layout must have shape, strides and itemsize, like cuda.core's _StridedLayout (got 12345 of type 'int'): a stream? StridedMemoryView.view(layout=None, dtype=None) takes none"),
    ("launch-argument-field", lambda f, m: _launch_argument_field(), AttributeError, "'ViewableArgument' object has no attribute 'ptr': it is the launch argument, not its view"),
    ("capsule-for-array", lambda f, m: StridedMemoryView(np.zeros(2).__dlpack__()), BufferError, "stridedview: a PyCapsule ('dltensor') is not an array: pass the array itself"),
    ("numpy-big-endian", lambda f, m: StridedMemoryView(np.zeros(2, dtype=">i4")), BufferError, "dlpack: numpy cannot export the non-native byte order of '>i4' through DLPack ("),
    ("c-api-device-id-type", lambda f, m: _c_api_device_id_of(np.zeros(2)), TypeError, "StridedView_DeviceId: the object must be a StridedMemoryView (got array([0., 0.]) of type 'ndarray')"),
    ("view-layout-type", lambda f, m: host_view().view((2, 3)), TypeError, "view: layout must have shape, strides and itemsize, like cuda.core's _StridedLayout (got (2, 3) of type 'tuple')"),
    ("view-layout-extent", lambda f, m: host_view().view(Layout((-1,), None, 4)), ValueError, "view: layout extents must be >= 0 and itemsize > 0 (got shape (-1,), itemsize 4)"),
    ("view-layout-strides", lambda f, m: host_view().view(Layout((6,), (1, 1), 4)), ValueError, "view: layout strides (1, 1) and shape (6,) differ in length"),
    ("view-layout-itemsize", lambda f, m: host_view().view(Layout((3,), None, 8)), ValueError, "view: layout itemsize 8 differs from the item size of float32 (4)"),
    ("view-layout-outside", lambda f, m: host_view().view(Layout((7,), None, 4)), BufferError, "view: layout (shape (7,), strides (1,), itemsize 4, slice_offset 0) reaches outside the view's bytes"),
    # exchange API
    ("exchange-null-object", lambda f, m: _exchange("dltensor", None), TypeError, "dlpack: the exchange API was handed a NULL py_object"),
    ("exchange-not-a-view", lambda f, m: _exchange("dltensor", object()), TypeError, "dlpack: StridedMemoryView's exchange API takes a StridedMemoryView (got 'object')"),
    ("exchange-readonly", lambda f, m: _exchange("dltensor", StridedMemoryView(b"ab")), BufferError, "dlpack: a read-only view cannot be lent as a DLTensor, which has no READ_ONLY flag (use managed_tensor_from_py_object_no_sync or __dlpack__)"),
    ("exchange-subbyte", lambda f, m: _exchange("dltensor", _float4_view()), BufferError, "dlpack: a padded sub-byte view cannot be lent as a DLTensor, which has no flags (use managed_tensor_from_py_object_no_sync or __dlpack__)"),
    ("exchange-from-null-out", lambda f, m: _exchange("from_null_out", host_view()), TypeError, "dlpack: managed_tensor_from_py_object_no_sync was handed a NULL out"),
    ("exchange-to-null", lambda f, m: _exchange("to", None), BufferError, "dlpack: managed_tensor_to_py_object_no_sync was handed a NULL tensor"),
    ("exchange-to-null-out", lambda f, m: _exchange("to_null_out", host_view()), TypeError, "dlpack: managed_tensor_to_py_object_no_sync was handed a NULL out_py_object"),
    ("exchange-to-version", lambda f, m: _exchange("to_version", host_view()), BufferError, "dlpack: unsupported DLPack version 2.3 (major version must be 1)"),
    ("exchange-alloc-null-out", lambda f, m: _allocate((2,), out=False), TypeError, "dlpack: managed_tensor_allocator was handed a NULL out"),
    ("exchange-alloc-null-prototype", lambda f, m: _allocate(None), BufferError, "dlpack: managed_tensor_allocator was handed a NULL prototype"),
    ("exchange-alloc-device", lambda f, m: _allocate((2,), device=(2, 0)), BufferError, "dlpack: stridedview's allocator makes host (CPU) tensors only (got device type 2 (CUDA))"),
    ("exchange-alloc-ndim", lambda f, m: _allocate((1,) * 65), BufferError, "dlpack: ndim must be from 0 to 64 (got 65)"),
    ("exchange-alloc-shape-null", lambda f, m: _allocate((2, 2), shape_null=True), BufferError, "dlpack: shape is NULL with ndim 2"),
    ("exchange-alloc-extent", lambda f, m: _allocate((2, -1)), BufferError, "dlpack: shape[1] must be >= 0 (got -1)"),
    ("exchange-alloc-count", lambda f, m: _allocate((2**32, 2**32)), BufferError, "dlpack: element count overflows int64"),
    ("exchange-alloc-bytes", lambda f, m: _allocate((2**61,)), BufferError, "dlpack: byte count overflows int64"),
    # decorator
    ("decorator-not-iterable", lambda f, m: _decorate(3.5), TypeError, "args_viewable_as_strided_memory: arg_indices must hold ints and strs (got 3.5)"),
    ("decorator-bare", lambda f, m: _decorate(len), TypeError, "args_viewable_as_strided_memory: arg_indices must hold ints and strs (got the function 'len'): the decorator needs parentheses"),
    ("decorator-bool", lambda f, m: _decorate([True]), TypeError, "args_viewable_as_strided_memory: arg_indices must hold ints and strs (got True)"),
    ("decorator-index", lambda f, m: _decorate(5), ValueError, "args_viewable_as_strided_memory: "),
    ("decorator-name", lambda f, m: _decorate("nope"), ValueError, "args_viewable_as_strided_memory: "),
    ("decorator-argument", lambda f, m: _launch_with_list(), BufferError, "args_viewable_as_strided_memory: argument 'x' ('list' object) supports none of DLPack, the CUDA Array Interface, the array interface and the buffer protocol: pass an array of a library that exports one, or convert it first, e.g. numpy.asarray(obj) for host data"),
    ("decorator-view-no-stream", lambda f, m: _launch_device_without_stream(), BufferError, "args_viewable_as_strided_memory: view() of argument 'x' has no stream: dlpack: stream_ptr=None is ambiguous for CUDA memory"),
    ("decorator-view-stream-keyword", lambda f, m: _launch_viewing_with(stream=1), TypeError, "args_viewable_as_strided_memory: view() got an unexpected keyword argument 'stream': the stream is passed as stream_ptr"),
    ("numpy-structured-dtype", lambda f, m: StridedMemoryView(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])), BufferError, "dlpack: numpy cannot export dtype \"[('a', '<f4'), ('b', '<i4')]\" through DLPack ("),
    ("numpy-datetime-dtype", lambda f, m: StridedMemoryView(np.zeros(2, dtype="M8[s]")), BufferError, "dlpack: numpy cannot export dtype 'datetime64[s]' through DLPack ("),
    ("decorator-uninitialised", lambda f, m: _call_uninitialised_launcher(), TypeError, "args_viewable_as_strided_memory: this launcher was never initialised"),
    ("decorator-init-twice", lambda f, m: _init_launcher_again(), TypeError, "args_viewable_as_strided_memory: this launcher is already initialised"),
    ("proxy-init-twice", lambda f, m: _init_proxy_again(), TypeError, "ViewableArgument is already initialised (a launcher's proxy, even an emptied one, is its launcher's): make a new one, ViewableArgument(obj)"),
    # driver
    ("driver-no-bindings", lambda f, m: _no_bindings(m), CUDAError, "cuda-bindings is not installed ("),
    ("driver-unloadable", lambda f, m: _no_driver_library(), CUDAError, "the CUDA driver could not be used for cuInit ("),
    ("driver-call-failed", lambda f, m: _driver_call_failure(f), CUDAError, "cuCtxGetDevice failed: CUDA_ERROR_INVALID_CONTEXT"),
    ("device-pointer-unknown", lambda f, m: _driver_failure(f), CUDAError, "device_id: the CUDA Array Interface view of a 'CAI' object points at 0xdead0000, which the CUDA driver does not know as device, managed or pinned memory (cuPointerGetAttribute failed: CUDA_ERROR_INVALID_VALUE)"),
    ("ordering-with-a-fake", lambda f, m: _ordering_with_a_fake(f), CUDAError, "stream ordering and hand-overs go through the CUDA driver cuda-bindings loaded, and the driver in use (installed with stridedview._driver.use_api) is not it: "),
    ("driver-init-failed", lambda f, m: _driver_init_failure(f), CUDAError, "cuInit failed: CUDA_ERROR_NO_DEVICE (the driver is there but cannot be initialised: no usable CUDA device): pass stream_ptr=-1 to order streams yourself"),
    # general
    ("neither-protocol", lambda f, m: StridedMemoryView([1, 2]), BufferError, "stridedview: 'list' object supports none of DLPack"),
    ("view-of-uninitialised", lambda f, m: StridedMemoryView(StridedMemoryView.__new__(StridedMemoryView)), BufferError, "stridedview: the StridedMemoryView to view is not initialised"),
    ("init-twice", lambda f, m: _again(), TypeError, "StridedMemoryView is already initialised"),
    ("init-parked", lambda f, m: _init_parked_view(), TypeError, "StridedMemoryView is kept empty by a launcher, for its proxy's next view() to fill: make a new view, StridedMemoryView(obj)"),
    # handing a host view on
    ("buffer-device", lambda f, m: memoryview(device_view()), BufferError, "buffer: the view holds CUDA device memory, which the host cannot read"),
    ("buffer-writable", lambda f, m: get_buffer(StridedMemoryView(readonly_array()), PyBUF_WRITABLE), BufferError, "buffer: the view is read-only; a writable buffer was requested"),
    ("buffer-format", lambda f, m: memoryview(_bfloat16_view()), BufferError, "buffer: dtype bfloat16 has no PEP 3118 format"),
    ("buffer-c-contiguous", lambda f, m: get_buffer(StridedMemoryView(np.zeros((2, 3)).T), PyBUF_C_CONTIGUOUS), BufferError, "buffer: the view (shape (3, 2), strides (1, 3)) is not C-contiguous"),
    ("buffer-f-contiguous", lambda f, m: get_buffer(host_view(), PyBUF_F_CONTIGUOUS), BufferError, "buffer: the view (shape (2, 3), strides (3, 1)) is not Fortran-contiguous"),
    ("buffer-any-contiguous", lambda f, m: get_buffer(host_view()[:, ::2], PyBUF_ANY_CONTIGUOUS), BufferError, "buffer: the view (shape (2, 2), strides (3, 2)) is not contiguous"),
    ("array-interface-device", lambda f, m: np.asarray(device_view()), BufferError, "array interface: the view holds CUDA device memory"),
    ("array-interface-bfloat16", lambda f, m: _bfloat16_view().__array_interface__, BufferError, "array interface: dtype bfloat16 has no typestr"),
    # copies
    ("copy-not-view", lambda f, m: host_view().copy_from(np.zeros((2, 3), np.float32), None), TypeError, "copy: the source must be a StridedMemoryView (got 'ndarray')"),
    ("copy-readonly", lambda f, m: StridedMemoryView(readonly_array()).copy_from(StridedMemoryView(np.zeros(3)), None), BufferError, "copy: the destination view is read-only"),
    ("copy-shape", lambda f, m: host_view().copy_from(host_view().T, None), ValueError, "copy: shapes differ (destination (2, 3), source (3, 2))"),
    ("copy-dtype", lambda f, m: host_view().copy_from(host_view().view(dtype=np.int32), None), ValueError, "copy: dtypes differ (destination float32, source int32)"),
    ("copy-self-overlap", lambda f, m: StridedMemoryView.from_buffer(bytearray(8), (2,), (0,), dtype=np.float32).copy_from(host_view()[0, :2], None), ValueError, "copy: the destination's elements overlap (strides (0,))"),
    ("copy-overlap", lambda f, m: _overlapping_copy(), ValueError, "copy: the source and destination overlap (bytes ["),
    ("copy-needs-stream", lambda f, m: device_view().copy_from(host_view(), None), ValueError, "copy: a copy touching device memory needs a stream (got None)"),
    ("copy-two-devices", lambda f, m: _copy_across_devices(f), ValueError, "copy: the views are on devices 0 and 1"),
    # tensor maps
    ("tmap-option-type", lambda f, m: _tmap(oob_fill=True), TypeError, "tensor map: oob_fill must be an int or a driver enum (got True)"),
    ("tmap-option-value", lambda f, m: _tmap(swizzle=7), ValueError, "tensor map: swizzle 7 is not one of (0, 1, 2, 3, 4, 5, 6)"),
    ("tmap-box-type", lambda f, m: _tmap(box_dim=3), TypeError, "tensor map: box_dim must be a sequence of ints (got 3)"),
    ("tmap-box-entry-type", lambda f, m: _tmap(box_dim=(2, 4.9)), TypeError, "tensor map: box_dim[1] must be an int (got 4.9)"),
    ("tmap-option-float", lambda f, m: _tmap(swizzle=1.99), TypeError, "tensor map: swizzle must be an int or a driver enum (got 1.99)"),
    ("tmap-box-rank", lambda f, m: _tmap(box_dim=(4,)), ValueError, "tensor map: box_dim (4,) must have one entry per axis (2)"),
    ("tmap-dtype", lambda f, m: _tmap(typestr="<i2"), ValueError, "tensor map: dtype int16 has no TMA data type"),
    ("tmap-data-type-int", lambda f, m: _tmap(data_type=99), ValueError, "tensor map: data_type 99 is not a CUtensorMapDataType"),
    ("tmap-data-type-type", lambda f, m: _tmap(data_type="no such dtype"), TypeError, "tensor map: data_type must be a dtype or a CUtensorMapDataType (got 'no such dtype')"),
    ("tmap-data-type-dtype", lambda f, m: _tmap(data_type=np.int8), ValueError, "tensor map: dtype int8 has no TMA data type"),
    ("tmap-both", lambda f, m: _tmap(options={"box_dim": (2, 4)}), ValueError, "tensor map: pass either options= or box_dim and the other keywords, not both"),
    ("tmap-no-box", lambda f, m: _tmap(box_dim=None), ValueError, "tensor map: box_dim is required"),
    ("tmap-host", lambda f, m: StridedMemoryView(np.zeros((4, 16), np.float32)).as_tensor_map((2, 4)), ValueError, "tensor map: the view is host memory (device_id -1); TMA reads device memory"),
    ("tmap-rank", lambda f, m: _tmap(shape=(1,) * 6, box_dim=(1,) * 6), ValueError, "tensor map: rank 6 is outside 1 to 5"),
    ("tmap-nan-fill-integer", lambda f, m: _tmap(typestr="<i4", oob_fill=1), ValueError, "tensor map: oob_fill 1 (NaN) is for floating-point data; data type 3 (int32) is an integer type"),
    ("tmap-itemsize", lambda f, m: _tmap(data_type=np.float64), ValueError, "tensor map: data type 8 has 8-byte elements"),
    ("tmap-align", lambda f, m: _tmap(data=(0x10008, False)), ValueError, "tensor map: the global address 0x10008 is not 16-byte aligned"),
    ("tmap-interleave-rank", lambda f, m: _tmap(interleave=1), ValueError, "tensor map: interleave 1 needs rank 3 to 5 (got 2)"),
    ("tmap-inner-strided", lambda f, m: _tmap(strides=(128, 8)), ValueError, "tensor map: the last axis must be contiguous (stride 1 element, got 2)"),
    ("tmap-extent", lambda f, m: _tmap(shape=(0, 16)), ValueError, "tensor map: shape[0] = 0 is outside 1 to 2**32"),
    ("tmap-stride", lambda f, m: _tmap(shape=(4, 6), box_dim=(2, 4)), ValueError, "tensor map: the stride of axis 0 is 24 bytes"),
    ("tmap-box-extent", lambda f, m: _tmap(box_dim=(2, 300)), ValueError, "tensor map: box_dim[1] = 300 is outside 1 to 256"),
    ("tmap-element-stride", lambda f, m: _tmap(element_strides=(1, 9)), ValueError, "tensor map: element_strides[1] = 9 is outside 1 to 8"),
    ("tmap-inner-bytes", lambda f, m: _tmap(box_dim=(2, 3)), ValueError, "tensor map: the box's last axis spans 12 bytes; without interleave it must be a multiple of 16"),
    ("tmap-swizzle-span", lambda f, m: _tmap(box_dim=(2, 16), swizzle=1), ValueError, "tensor map: the box's last axis spans 64 bytes, more than swizzle 1's 32-byte span"),
    ("tmap-interleave-swizzle", lambda f, m: _tmap(shape=(2, 4, 16), box_dim=(1, 2, 8), interleave=2), ValueError, "tensor map: interleave 32B needs swizzle 32B (1), got 0"),
    ("module-attribute", lambda f, m: _unknown_attribute(), AttributeError, "module 'stridedview' has no attribute 'no_such_name'"),
    # hand-overs
    ("record-stream-none", lambda f, m: host_view().record_stream(None), TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got None)"),
    ("record-stream-float", lambda f, m: host_view().record_stream(1.5), TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got 1.5)"),
    ("record-stream-minus-one", lambda f, m: host_view().record_stream(-1), ValueError, "record_stream: stream must be a stream handle >= 0 (got -1): -1 names no stream"),
    ("record-stream-negative", lambda f, m: host_view().record_stream(-3), ValueError, "record_stream: stream must be a stream handle >= 0 (got -3)"),
    ("release-pending-wait", lambda f, m: stridedview.release_pending(wait=1), TypeError, "release_pending: wait must be a bool (got 1)"),
    ("pending-limit", lambda f, m: stridedview._view._set_pending_limit(0), ValueError, "_set_pending_limit: limit must be >= 1 (got 0)"),
    ("torch-fields-hook", lambda f, m: _torch_fields_read_of_a_list(), TypeError, "_torch_fields_read: a torch tensor, not 'list'"),
    ("decorator-record-stream", lambda f, m: args_viewable_as_strided_memory(0, record_stream="yes"), TypeError, "args_viewable_as_strided_memory: record_stream must be a bool (got 'yes')"),
    ("copy-view", lambda f, m: __import__("copy").copy(host_view()), TypeError, "copy: a StridedMemoryView is not copied (copy.copy, copy.deepcopy): make another view of its exporting object ('ndarray'), or copy its elements with copy_to"),
    # Views across processes (stridedview.ipc): the host refusals; the device ones need
    # CUDA IPC (UNTRIGGERED, tests/test_gpu_ipc.py)
    ("ipc-host-packed", lambda f, m: __import__("pickle").dumps(_packed()), TypeError, "ipc: cannot pickle a host view of None elements (DLPackDType(code=17, bits=4, lanes=1))"),
    ("ipc-record-version", lambda f, m: stridedview._ipc._receive({"version": 99, "pid": 1}), BufferError, "ipc: a pickled view of record version 99 (this is 1)"),
    ("ipc-same-process", lambda f, m: stridedview._ipc._receive({"version": 1, "pid": __import__("os").getpid()}), BufferError, "ipc: a pickled device view was unpickled in the process that pickled it: use the view itself (CUDA IPC maps memory into other processes only)"),
    # MPI messages (stridedview.mpi; mpi4py is in the test extra)
    ("mpi-receive-type", lambda f, m: _mpi_message(np.zeros(3), receive=1), TypeError, "stridedview.mpi: 'receive' must be a bool (got 1)"),
    ("mpi-packed", lambda f, m: _mpi_message(_packed()), BufferError, "stridedview.mpi: MPI has no datatype for packed sub-byte elements (DLPackDType(code=17, bits=4, lanes=1))"),
    ("mpi-readonly-receive", lambda f, m: _mpi_message(readonly_array(), receive=True), BufferError, "stridedview.mpi: a read-only view cannot be an MPI receive buffer (shape (3,), dtype float64)"),
    ("mpi-overlap-receive", lambda f, m: _mpi_message(np.lib.stride_tricks.as_strided(np.zeros(2), (3, 2), (0, 8)), receive=True), BufferError, "stridedview.mpi: a view whose elements overlap cannot be an MPI receive buffer (shape (3, 2), strides (0, 1))"),
    ("mpi-no-datatype", lambda f, m: _mpi_message(_bfloat16_view()), BufferError, "stridedview.mpi: MPI has no datatype for element type 'bfloat16' ("),
    ("mpi-datatype-size", lambda f, m: _mpi_message_with_a_one_byte_datatype(m), BufferError, "stridedview.mpi: MPI's datatype for element type 'float64' holds 1 bytes (lb 0, extent 1), the element 8"),
    ("mpi-copy", lambda f, m: __import__("copy").copy(_mpi_message(np.zeros(3))), TypeError, "stridedview.mpi: an MPIMessage owns its MPI datatype and cannot be copied or pickled"),
]


def _mpi_message(obj, **kwargs):
    pytest.importorskip("mpi4py")
    from stridedview.mpi import as_mpi_message

    return as_mpi_message(obj, **kwargs)


def _mpi_message_with_a_one_byte_datatype(monkeypatch):
    """as_mpi_message where mpi4py's conversion gives a one-byte datatype for float64."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI
    from mpi4py.util import dtlib

    monkeypatch.setattr(dtlib, "from_numpy_dtype", lambda dtype: MPI.BYTE.Dup())
    return _mpi_message(np.zeros(3))

#: Rows no public call can reach on a healthy machine, with the reason.
UNTRIGGERED = {
    ("BufferError", "ipc: cannot pickle a view of "): "device memory that cannot be shared: tests/test_gpu_ipc.py",
    ("BufferError", "ipc: cannot pickle a view of packed "): "a device view: CUDA IPC (tests/test_gpu_ipc.py's neighbours)",
    ("BufferError", "ipc: too many pickled views held for importers ("): "65,536 views held for importers at once",
    ("BufferError", "ipc: the view's device (UUID "): "a device hidden from the receiver: two processes with other CUDA_VISIBLE_DEVICES",
    ("BufferError", "ipc: a pickled view was already "): "a second process unpickling: tests/test_gpu_ipc.py",
    ("BufferError", "ipc: the memory of a received view could not be opened ("): "the driver refusing cuIpcOpenMemHandle in a second process",
    ("BufferError", "ipc: the exporting process "): "an exporter process exiting: tests/test_gpu_ipc.py",
    ("MemoryError", ""): "malloc failing for a capsule's ~100 bytes (or a buffer export's shape and format)",
    ("BufferError", "buffer: ndim must be from 0 to "): "an exporter breaking the buffer protocol (CPython caps ndim at 64)",
    ("BufferError", "buffer: shape is NULL with ndim "): "an exporter breaking the buffer protocol (shape is required by the request)",
    ("BufferError", "buffer: shape extents must be >= 0 (got "): "an exporter breaking the buffer protocol (negative extents)",
    ("BufferError", "buffer: the pointer is NULL for "): "an exporter breaking the buffer protocol (NULL memory for elements)",
    ("BufferError", "buffer: itemsize must be > 0 (got "): "an exporter breaking the buffer protocol (item size 0)",
    ("CUDAError", "the CUDA driver cannot order streams here ("): (
        "a driver lacking an entry point the door needs: the simulator's version switch, "
        "tests/test_gpu_driver_door.py"
    ),
    ("ValueError", "stream: not a stream handle (got "): (
        "an internal caller's slip: every stream argument is checked before the door sees it"
    ),
    (
        "CUDAError",
        "cuStreamIsCapturing: the consumer stream's capture was invalidated, and no wait can be added to it "
        "until the capture is ended",
    ): "needs stream capture: raised on the simulated device by tests/test_gpu_graphs.py",
    (
        "CUDAError",
        "cuStreamWaitEvent: the producer stream is capturing another graph, which the consumer's capture "
        "cannot depend on (CUDA_ERROR_STREAM_CAPTURE_ISOLATION); order the streams yourself and pass "
        "stream_ptr=-1",
    ): "needs two captures at once: raised on the simulated device by tests/test_gpu_graphs.py",
    ("CUDAError", "cuStreamIsCapturing: the producer stream's capture was invalidated"): (
        "needs two captures, one invalidated: the same path as the row before (tests/test_gpu_graphs.py)"
    ),
    ("GraphOwnedError", "cuGraphRetainUserObject failed: "): (
        "a driver refusing a graph's reference to a live user object (an injected failure on the simulator)"
    ),
    ("MemoryError", "stridedview: no memory for a graph's user object"): "malloc failing for a 16-byte node",
}


if not stridedview._view.fast_paths:
    # No launcher keeps a view there: the parked view's refusal has nothing to refuse.
    TRIGGERS = [t for t in TRIGGERS if t[0] != "init-parked"]
    UNTRIGGERED[("TypeError", "StridedMemoryView is kept empty by a launcher, for its proxy's next view() to fill: make a new view, StridedMemoryView(obj)")] = (
        "a build without the fast paths (-DSV_NO_GIL_FAST_PATHS) keeps no view"
    )


def _bfloat16_view():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return StridedMemoryView.from_buffer(bytearray(8), dtype=ml_dtypes.bfloat16)


def _overlapping_copy():
    array = np.zeros(6)
    return StridedMemoryView(array[1:]).copy_from(StridedMemoryView(array[:-1]), None)


def _copy_across_devices(fake):
    fake.register_pointer(0x200000, 1 << 16, device=1)
    other = view_cai(data=(0x200000, False))
    return device_view().copy_from(other, fake.new_stream())


_TMAP_LAYOUT = ("shape", "typestr", "data", "strides")


def _packed():
    """A host view of 4 packed float4_e2m1fn values (2 bytes)."""
    return StridedMemoryView(np.zeros(2, np.uint8)).view(dtype=stridedview.DLPackDType(17, 4, 1))


def _packed_device(bits=4):
    """A 4-row device view of packed ``bits``-bit values (unsigned ints; float6_e2m3fn for
    6 bits), 96 or 128 bytes a row."""
    code = 15 if bits == 6 else 1
    row = 96 if bits == 6 else 128
    return view_cai(typestr="|u1", shape=(4, row)).view(dtype=stridedview.DLPackDType(code, bits, 1))


def _tmap(**changes):
    """as_tensor_map of a 4x16 float32 device view with box (2, 4), ``changes`` applied to
    the CAI (shape, typestr, data, strides) or to the call."""
    layout = {"shape": (4, 16)}
    layout.update({k: v for k, v in changes.items() if k in _TMAP_LAYOUT})
    arguments = {"box_dim": (2, 4)}
    arguments.update({k: v for k, v in changes.items() if k not in _TMAP_LAYOUT})
    box_dim = arguments.pop("box_dim")
    return view_cai(**layout).as_tensor_map(box_dim, **arguments)


class Layout:
    """The fields ``view(layout=...)`` reads (cuda.core's _StridedLayout has them)."""

    def __init__(self, shape, strides, itemsize):
        self.shape, self.strides, self.itemsize = shape, strides, itemsize


class AIWith:
    def __init__(self, value):
        self.__array_interface__ = value


def view_ai(**changes):
    """An array interface object with ``changes``, viewed."""
    return StridedMemoryView(AIWith(interface_dict(**changes)))


def _float4_view():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return StridedMemoryView.from_buffer(bytearray(4), (4,), dtype=ml_dtypes.float4_e2m1fn)


def _exchange(what, obj):
    """Call one exchange-API function the way ``what`` names, through ctypes."""
    import ctypes

    from test_exchange_export import DLTensor, ManagedTensor, api

    table = api()
    if what == "dltensor" and obj is None:  # a NULL PyObject *, not Py_None
        by_address = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DLTensor))
        function = ctypes.cast(table.dltensor_from_py_object_no_sync, by_address)
        return function(None, ctypes.byref(DLTensor()))
    if what == "dltensor":
        return table.dltensor_from_py_object_no_sync(obj, ctypes.byref(DLTensor()))
    if what == "from_null_out":
        return table.managed_tensor_from_py_object_no_sync(obj, None)
    if what == "to":
        return table.managed_tensor_to_py_object_no_sync(obj, ctypes.byref(ctypes.c_void_p()))
    tensor = ctypes.c_void_p()
    table.managed_tensor_from_py_object_no_sync(obj, ctypes.byref(tensor))
    if what == "to_null_out":
        return table.managed_tensor_to_py_object_no_sync(tensor.value, None)
    ManagedTensor.from_address(tensor.value).version.major = 2
    return table.managed_tensor_to_py_object_no_sync(tensor.value, ctypes.byref(ctypes.c_void_p()))


def _allocate(shape, device=(1, 0), out=True, shape_null=False):
    """The exchange API's allocator on a float32 prototype of ``shape`` (None: a NULL prototype)."""
    import ctypes

    from test_exchange_export import _prototype, api

    prototype = None if shape is None else _prototype(shape, device=device)
    if shape_null:
        prototype.shape = None
    result = ctypes.c_void_p()
    return api().managed_tensor_allocator(
        None if prototype is None else ctypes.byref(prototype),
        ctypes.byref(result) if out else None, None, None,
    )


class CAIWith:
    def __init__(self, value):
        self.__cuda_array_interface__ = value


def host_view_with(stream_ptr):
    return StridedMemoryView(np.zeros(3), stream_ptr=stream_ptr)


def readonly_array():
    array = np.arange(3.0)
    array.setflags(write=False)
    return array


@pytest.fixture
def fake():
    driver = FakeDriver()
    driver.register_pointer(0x10000, 1 << 20, device=0)
    _driver.use_api(driver)
    yield driver
    _driver.use_api(None)
    assert not driver.unserved


def _row_for(kind, message):
    """The (type, prefix) of the row a message belongs to: the longest prefix that starts it."""
    candidates = [r for r in parse_errors_table() if r.type == kind and message.startswith(r.prefix)]
    if not candidates:
        return None
    best = max(candidates, key=lambda r: len(r.prefix))
    return (best.type, best.prefix)


@pytest.mark.parametrize(
    "trigger, kind, start",
    # The torch triggers need torch (left out of a quick run with it).
    [pytest.param(*t[1:], id=t[0], marks=[pytest.mark.torch] if t[0].startswith("torch-") else [])
     for t in TRIGGERS],
)
def test_trigger(fake, monkeypatch, trigger, kind, start):
    """The public call raises exactly the documented type, its message starting as the row says."""
    assert _row_for(kind.__name__, start) is not None, f"no row of docs/errors.md covers {kind.__name__} {start!r}"
    with pytest.raises(kind) as info:
        trigger(fake, monkeypatch)
    assert type(info.value) is kind
    assert str(info.value).startswith(start), str(info.value)


@pytest.mark.slow
def test_triggers_cover_the_table():
    """Every distinct (type, prefix) of docs/errors.md is triggered above, or listed as unreachable with a reason."""
    table = {(r.type, r.prefix) for r in parse_errors_table()}
    covered = {_row_for(kind.__name__, start) for _, _, kind, start in TRIGGERS}
    missing = table - covered - set(UNTRIGGERED)
    assert not missing, f"rows no trigger reaches: {sorted(missing)}"
    assert not (set(UNTRIGGERED) - table), "UNTRIGGERED names rows that no longer exist"


def test_from_dlpack_of_a_capsule_says_to_pass_the_array():
    """StridedMemoryView.from_dlpack(capsule), as StridedMemoryView(capsule): the array
    belongs there, not its capsule (which cannot be ordered); the capsule is left unconsumed."""
    capsule = np.zeros(3).__dlpack__()
    with pytest.raises(BufferError, match=r"a PyCapsule \('dltensor'\) is not an array: pass the array itself"):
        StridedMemoryView.from_dlpack(capsule, -1)
    assert np.from_dlpack(_CapsuleHolder(capsule)).shape == (3,)  # still whole: nobody consumed it


class _CapsuleHolder:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("dtype, convert", [(np.longdouble, "float64"), (np.clongdouble, "complex128")])
def test_a_long_double_array_names_its_ways_out(dtype, convert):
    """A numpy long double array (wider than double here), which numpy's __dlpack__ refuses:
    the BufferError chains numpy's and names the conversion and the array interface; both
    ways out work as written."""
    array = np.arange(3).astype(dtype)
    if array.dtype.itemsize == np.dtype(convert).itemsize:
        assert StridedMemoryView(array).dtype == array.dtype  # (long double is double here)
        return
    with pytest.raises(BufferError) as caught:
        StridedMemoryView(array)
    message = str(caught.value)
    assert message.startswith(f"dlpack: numpy cannot export dtype '{array.dtype}' through DLPack (")
    assert f"array.astype(numpy.{convert})" in message and "from_array_interface(array)" in message
    assert isinstance(caught.value.__cause__, BufferError)
    assert StridedMemoryView(array.astype(getattr(np, convert))).dtype == np.dtype(convert)
    assert StridedMemoryView.from_array_interface(array).dtype == array.dtype
