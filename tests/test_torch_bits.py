"""torch's negative and conjugate bits: refused alike whether read in C or by the methods.

A torch tensor with either bit set is a lazy view whose memory does not hold its values,
and every entry point refuses it.  Where torch's own methods answer (torch.Tensor,
torch.nn.Parameter, subclasses that override neither ``is_neg``/``is_conj`` nor
``__torch_function__``, no TorchFunctionMode active) the bits are read in C through
torch's ``at::native::is_neg``/``is_conj``, after a calibration proven against the
methods once per process (src/stridedview/_torch_bits.pxi); elsewhere the methods are
asked.  ``_view._set_torch_bits_direct_enabled(False)`` forces the methods, so each
refusal is checked both ways, on the exchange-API and on the ``__dlpack__`` path.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory
from torch_expectations import expected_bits_reader, expected_mode_readers

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.interop, pytest.mark.torch, pytest.mark.usefixtures("forbidden_driver")]

NEG = "^dlpack: the torch tensor has its negative bit set, so its memory does not hold its values"
CONJ = "^dlpack: the torch tensor has its conjugate bit set, so its memory does not hold its values"
SYMBOLS = (
    "_ZN2at6native6is_negERKNS_6TensorE",
    "_ZN2at6native7is_conjERKNS_6TensorE",
    "_ZN2at4impl27torch_function_mode_enabledEv",
)
FIELDS = ("ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly")


class Plain(torch.Tensor):
    """A subclass that overrides nothing (its bits may be read directly)."""


class PlainParameter(torch.nn.Parameter):
    """A Parameter subclass that overrides nothing."""


@contextlib.contextmanager
def switched(setter, enabled):
    """Within the block ``setter(enabled)`` holds; afterwards ``setter(True)``."""
    setter(enabled)
    try:
        yield
    finally:
        setter(True)


def reader(kind):
    """Within the block torch's bits are read ``kind`` ("direct" or "methods")."""
    return switched(_view._set_torch_bits_direct_enabled, kind == "direct")


def path(kind):
    """Within the block views take the exchange-API ("fast") or ``__dlpack__`` ("general") path."""
    return switched(_view._set_fast_paths_enabled, kind == "fast")


@contextlib.contextmanager
def calibration(symbols=None):
    """Within the block the bits are calibrated afresh (resolving ``symbols``); afterwards
    they are calibrated afresh with torch's own."""
    _view._reset_torch_bits_calibration(symbols)
    try:
        yield
    finally:
        _view._reset_torch_bits_calibration()


def _launch(tensor):
    return args_viewable_as_strided_memory((0,))(lambda arg: arg.view(-1))(tensor)


ENTRY_POINTS = {
    "constructor": lambda t: StridedMemoryView(t, -1),
    "from_dlpack": lambda t: StridedMemoryView.from_dlpack(t, -1),
    "launcher": _launch,
}


def _neg(*shape, dtype=torch.float32):
    return torch._neg_view(torch.arange(float(max(1, _size(shape)))).reshape(shape).to(dtype))


def _size(shape):
    size = 1
    for extent in shape:
        size *= extent
    return size


def _complex(*shape):
    return torch.arange(float(_size(shape))).reshape(shape).to(torch.complex64) * (1 + 2j)


def _data_assigned():
    tensor = torch.zeros(3)
    tensor.data = _neg(3)
    return tensor


def _swapped():
    tensor, neg = torch.ones(3), _neg(3)
    torch.utils.swap_tensors(tensor, neg)
    return tensor


def _set_in_place():
    tensor = torch.ones(3)
    torch._C._set_neg(tensor, True)
    return tensor


LAZY = {
    "conj-imag": (lambda: _complex(2, 3).conj().imag, NEG),
    "neg-view": (lambda: _neg(2, 3), NEG),
    "neg-view-slice": (lambda: _neg(4, 3)[1::2, 1:], NEG),
    "neg-view-transpose": (lambda: _neg(2, 3).transpose(0, 1), NEG),
    "neg-view-T": (lambda: _neg(2, 3).T, NEG),
    "neg-view-detach": (lambda: _neg(2, 3).detach(), NEG),
    "neg-view-view": (lambda: _neg(2, 3).view(6), NEG),
    "neg-view-int": (lambda: _neg(2, 3, dtype=torch.int32), NEG),
    "conj-imag-slice": (lambda: _complex(4).conj().imag[::2], NEG),
    "conj": (lambda: _complex(2, 3).conj(), CONJ),
    "conj-slice": (lambda: _complex(2, 3).conj()[:, 1:], CONJ),
    "conj-T": (lambda: _complex(2, 3).conj().T, CONJ),
    "neg-and-conj": (lambda: torch._neg_view(_complex(3).conj()), NEG),
    "data-assigned": (_data_assigned, NEG),
    "swap-tensors": (_swapped, NEG),
    "set-neg-in-place": (_set_in_place, NEG),
    "parameter": (lambda: torch.nn.Parameter(_neg(3)), NEG),
    "parameter-conj": (lambda: torch.nn.Parameter(_complex(3).conj()), CONJ),
    "parameter-subclass": (lambda: PlainParameter(_neg(3)), NEG),
    "plain-subclass": (lambda: _neg(2, 3).as_subclass(Plain), NEG),
    "plain-subclass-conj": (lambda: _complex(3).conj().as_subclass(Plain), CONJ),
}


@pytest.mark.parametrize("route", ["fast", "general"])
@pytest.mark.parametrize("kind", ["direct", "methods"])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("case", list(LAZY))
def test_lazy_bits_refused_by_every_reader(case, entry, kind, route):
    """Every way a tensor gets a lazy bit is refused with that bit's error, however the bit is read."""
    make, message = LAZY[case]
    tensor = make()
    with reader(kind), path(route):
        with pytest.raises(BufferError, match=message):
            ENTRY_POINTS[entry](tensor)
        assert _view._torch_bits_reader() == kind


@pytest.mark.parametrize("kind", ["direct", "methods"])
@pytest.mark.parametrize("route", ["fast", "general"])
def test_bit_changed_in_place_is_seen_on_the_same_object(kind, route):
    """Setting and clearing the negative bit of one tensor in place flips its next view's outcome."""
    tensor = torch.arange(3.0)
    with reader(kind), path(route):
        assert StridedMemoryView(tensor, -1).shape == (3,)
        torch._C._set_neg(tensor, True)
        with pytest.raises(BufferError, match=NEG):
            StridedMemoryView(tensor, -1)
        torch._C._set_neg(tensor, False)
        assert StridedMemoryView(tensor, -1).ptr == tensor.data_ptr()


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(6.0).reshape(2, 3),
        lambda: torch.nn.Parameter(torch.ones(3)),
        lambda: PlainParameter(torch.ones(3)),
        lambda: torch.ones(3).as_subclass(Plain),
        lambda: _complex(3),
        lambda: _complex(3).conj().resolve_conj(),
        lambda: _neg(3).resolve_neg(),
    ],
    ids=["tensor", "parameter", "parameter-subclass", "plain-subclass", "complex", "resolved-conj", "resolved-neg"],
)
def test_direct_reader_in_use_and_accepts_plain_tensors(make):
    """On this machine the calibration succeeds: the bits are read directly, and tensors without them are viewed."""
    tensor = make()
    with calibration():
        assert _view._torch_bits_reader() == "uncalibrated"
        view = StridedMemoryView(tensor, -1)
        assert _view._torch_bits_reader() == expected_bits_reader(torch)
    assert view.ptr == tensor.data_ptr()


class LyingIsNeg(torch.Tensor):
    """A subclass whose ``is_neg`` answers what the test says, counting its calls."""

    answer = False
    calls = 0

    def is_neg(self):
        type(self).calls += 1
        return type(self).answer


@pytest.mark.parametrize("route", ["fast", "general"])
@pytest.mark.parametrize("answer", [False, True])
def test_subclass_overriding_is_neg_is_asked(answer, route):
    """A subclass overriding ``is_neg`` in Python has it called, and its answer is followed."""
    base = _neg(3) if not answer else torch.ones(3)  # the method contradicts the bit
    tensor = base.as_subclass(LyingIsNeg)
    LyingIsNeg.answer, LyingIsNeg.calls = answer, 0
    StridedMemoryView(torch.ones(1), -1)  # calibrated
    assert _view._torch_bits_reader() == expected_bits_reader(torch)
    with path(route):
        if answer:
            with pytest.raises(BufferError, match=NEG):
                StridedMemoryView(tensor, -1)
        else:
            assert StridedMemoryView(tensor, -1).shape == (3,)
    assert LyingIsNeg.calls == 1


class InterceptsIsNeg(torch.Tensor):
    """A subclass whose ``__torch_function__`` answers True for ``is_neg``."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) == "is_neg":
            return True
        return super().__torch_function__(func, types, args, kwargs)


class InterceptsAttributes(torch.Tensor):
    """A subclass whose ``__getattribute__`` hands out an ``is_neg`` answering True."""

    def __getattribute__(self, name):
        if name == "is_neg":
            return lambda: True
        return super().__getattribute__(name)


@pytest.mark.parametrize("route", ["fast", "general"])
@pytest.mark.parametrize("subclass", [InterceptsIsNeg, InterceptsAttributes])
def test_subclass_intercepting_is_neg_is_followed(subclass, route):
    """A subclass whose ``__torch_function__`` or ``__getattribute__`` answers for ``is_neg`` gets that answer followed, not the bit's."""
    tensor = torch.ones(3).as_subclass(subclass)
    StridedMemoryView(torch.ones(1), -1)
    assert _view._torch_bits_reader() == expected_bits_reader(torch)
    with path(route), pytest.raises(BufferError, match=NEG):
        StridedMemoryView(tensor, -1)


class NegativeMode(torch.overrides.TorchFunctionMode):
    """A TorchFunctionMode that answers True for ``is_neg`` and counts the calls it sees."""

    def __init__(self):
        super().__init__()
        self.is_neg_calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) == "is_neg":
            self.is_neg_calls += 1
            return True
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("route", ["fast", "general"])
@pytest.mark.parametrize(
    "make",
    [lambda: torch.ones(3), lambda: torch.nn.Parameter(torch.ones(3)), lambda: torch.ones(3).as_subclass(Plain)],
    ids=["tensor", "parameter", "plain-subclass"],
)
def test_torch_function_mode_is_followed(make, route):
    """Under a TorchFunctionMode, ``is_neg`` is asked through the mode (as the method would be) even where the bit is read directly."""
    tensor = make()
    StridedMemoryView(torch.ones(1), -1)
    assert _view._torch_bits_reader() == expected_bits_reader(torch)
    mode = NegativeMode()
    with path(route), mode, pytest.raises(BufferError, match=NEG):
        StridedMemoryView(tensor, -1)
    assert mode.is_neg_calls == 1
    assert StridedMemoryView(tensor, -1).shape == (3,)  # the mode gone, the bit is read again


def mode_reader(kind):
    """Within the block the TorchFunctionMode check reads torch's struct ("state") or
    calls torch's function ("function")."""
    return switched(_view._set_torch_mode_state_enabled, kind == "state")


class PassingMode(torch.overrides.TorchFunctionMode):
    """A TorchFunctionMode that passes every call on."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _mode_states():
    """(name, context manager factory) for each state torch's mode check can be in: modes
    pushed and nested, torch functions disabled (wholly or for subclasses) with and
    without a mode, and enabled again inside."""
    nested = contextlib.ExitStack
    return [
        ("none", contextlib.nullcontext),
        ("mode", PassingMode),
        ("two-modes", lambda: _entered(nested(), PassingMode(), PassingMode())),
        ("disabled", torch._C.DisableTorchFunction),
        ("subclasses-disabled", torch._C.DisableTorchFunctionSubclass),
        ("mode-disabled", lambda: _entered(nested(), PassingMode(), torch._C.DisableTorchFunction())),
        ("mode-subclasses-disabled",
         lambda: _entered(nested(), PassingMode(), torch._C.DisableTorchFunctionSubclass())),
        ("mode-disabled-enabled", lambda: _entered(
            nested(), PassingMode(), torch._C.DisableTorchFunction(), torch._C._EnableTorchFunction()
        )),
    ]


def _entered(stack, *contexts):
    """``stack`` with ``contexts`` entered in order when it is entered."""
    @contextlib.contextmanager
    def entering():
        with stack:
            for context in contexts:
                stack.enter_context(context)
            yield
    return entering()


MODE_STATES = _mode_states()


@pytest.mark.parametrize("kind", ["state", "function"])
@pytest.mark.parametrize("state", [m for _, m in MODE_STATES], ids=[n for n, _ in MODE_STATES])
def test_mode_check_answers_what_torch_answers(state, kind):
    """The hot path's TorchFunctionMode check, read from torch's thread-local struct or
    asked of torch's function, says what ``torch._C._is_torch_function_mode_enabled()``
    says in every state, on this thread and on a new one (whose struct is another)."""
    import threading

    StridedMemoryView(torch.ones(1), -1)
    assert _view._torch_mode_reader() in expected_mode_readers(torch)
    answers = []

    def both():
        return _view._torch_mode_active_now(), torch._C._is_torch_function_mode_enabled()

    def ask():
        with state():
            answers.append(both())
        answers.append(both())

    with mode_reader(kind):
        ask()
        thread = threading.Thread(target=ask)
        thread.start()
        thread.join()
        with PassingMode():  # this thread's mode is not the new thread's
            thread = threading.Thread(target=ask)
            thread.start()
            thread.join()
    assert answers[1] == answers[3] == answers[5] == (False, False), answers
    assert all(ours == torch_says for ours, torch_says in answers), answers


@pytest.mark.parametrize("kind", ["state", "function"])
def test_mode_check_reader_is_followed_by_views(kind):
    """Under a mode, whichever way the check is made, views of tensors ask the mode (a
    launch's too, the fields reader's path), and without one read the bits directly."""
    StridedMemoryView(torch.ones(1), -1)
    tensor = torch.ones(3)
    with mode_reader(kind):
        expected = ("function",) if kind == "function" else expected_mode_readers(torch)
        assert _view._torch_mode_reader() in expected
        mode = NegativeMode()
        with mode, pytest.raises(BufferError, match=NEG):
            _launch(tensor)
        assert mode.is_neg_calls == 1
        assert _launch(tensor).shape == (3,)
        assert StridedMemoryView(tensor, -1).shape == (3,)


def test_mode_check_falls_back_without_torch_state():
    """A calibration that cannot resolve torch's get_state() leaves torch's function
    answering the mode check, which still sees a mode."""
    tensor = torch.ones(3)
    with calibration():
        _view._reset_torch_bits_calibration(
            mode_state_symbol="_ZN2at4impl22PythonTorchFunctionTLS13no_such_stateEv"
        )
        StridedMemoryView(tensor, -1)
        assert _view._torch_bits_reader() == expected_bits_reader(torch)
        assert _view._torch_mode_reader() == (
            "function" if expected_bits_reader(torch) == "direct" else "uncalibrated"
        )
        mode = NegativeMode()
        with mode, pytest.raises(BufferError, match=NEG):
            StridedMemoryView(tensor, -1)
        assert mode.is_neg_calls == 1


@pytest.mark.parametrize(
    "symbols",
    [
        (SYMBOLS[1], SYMBOLS[0], SYMBOLS[2]),  # is_neg and is_conj swapped
        ("_ZN2at6native10is_complexERKNS_6TensorE", SYMBOLS[1], SYMBOLS[2]),  # another property
        ("_ZN2at6native12is_inferenceERKNS_6TensorE", SYMBOLS[1], SYMBOLS[2]),  # False for every probe
        ("_ZN2at6native19no_such_function_xyERKNS_6TensorE", SYMBOLS[1], SYMBOLS[2]),
        (SYMBOLS[0], SYMBOLS[1], "_ZN2at4impl27torch_function_all_disabledEv"),  # another flag
        (SYMBOLS[0], SYMBOLS[1]),
    ],
    # Each stand-in has the signature it replaces: calling a function through another
    # signature is undefined behaviour no calibration can detect (the mangled names
    # pin torch's parameter types).
    ids=["swapped", "is-complex", "constant", "missing", "wrong-mode-flag", "too-few"],
)
def test_failed_calibration_falls_back_to_methods(symbols):
    """A calibration whose functions cannot be resolved or disagree with the methods leaves the methods in use, still refusing both bits."""
    plain, neg, conj = torch.ones(3), _neg(3), _complex(3).conj()
    with calibration(symbols):
        assert StridedMemoryView(plain, -1).shape == (3,)
        assert _view._torch_bits_reader() == "methods"
        with pytest.raises(BufferError, match=NEG):
            StridedMemoryView(neg, -1)
        with pytest.raises(BufferError, match=CONJ):
            StridedMemoryView(conj, -1)


def test_calibration_probe_failure_falls_back(monkeypatch):
    """A probe that cannot be made (torch without ``_neg_view``) makes the calibration fall back, raising nothing."""
    neg = _neg(3)

    def missing(tensor):
        raise AttributeError("no _neg_view")

    with calibration():
        monkeypatch.setattr(torch, "_neg_view", missing)
        assert StridedMemoryView(torch.ones(3), -1).shape == (3,)
        assert _view._torch_bits_reader() == "methods"
        with pytest.raises(BufferError, match=NEG):
            StridedMemoryView(neg, -1)


@pytest.mark.parametrize(
    "context",
    [torch._C.DisableTorchFunction, torch._C.DisableTorchFunctionSubclass, NegativeMode],
    ids=["torch-functions-disabled", "subclasses-disabled", "mode"],
)
def test_calibration_succeeds_whatever_the_callers_torch_function_state(context):
    """Calibrating inside the caller's DisableTorchFunction or TorchFunctionMode still proves the direct read."""
    tensor = torch.ones(3)
    with calibration():
        with context():
            try:
                StridedMemoryView(tensor, -1)
            except BufferError:
                pass  # the mode answers True for is_neg
        assert _view._torch_bits_reader() == expected_bits_reader(torch)
        assert _view._torch_mode_reader() in expected_mode_readers(torch)


def _outcome(make):
    """The view's fields, or the error's type and message."""
    try:
        view = make()
    except BufferError as error:
        return ("refused", str(error))
    return tuple(getattr(view, name) for name in FIELDS)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int16, torch.int64, torch.uint8,
          torch.bool, torch.complex64, torch.complex128]


@st.composite
def lazy_tensors(draw):
    """Tensors of any dtype and layout, with or without the negative and conjugate bits."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    tensor = torch.arange(float(_size(shape))).reshape(shape)
    tensor = (tensor * (1 + 1j) if dtype.is_complex else tensor).to(dtype)
    if dtype.is_complex and draw(st.booleans()):
        tensor = tensor.conj()
        if draw(st.booleans()):
            tensor = tensor.imag  # the negative bit, on a real view
    if draw(st.booleans()):
        tensor = torch._neg_view(tensor)
    if tensor.ndim and draw(st.booleans()):
        step = draw(st.sampled_from([1, 2, 3]))
        tensor = tensor[1::step] if draw(st.booleans()) else tensor[::step]
    if tensor.ndim > 1 and draw(st.booleans()):
        tensor = tensor.transpose(0, -1)
    wrap = draw(st.sampled_from(["tensor", "parameter", "plain-subclass"]))
    if wrap == "parameter":
        tensor = torch.nn.Parameter(tensor, requires_grad=False)
    elif wrap == "plain-subclass":
        tensor = tensor.as_subclass(Plain)
    if draw(st.booleans()) and not tensor.is_neg():
        torch._C._set_neg(tensor, True)  # set in place, after the view was made
    return tensor


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor=lazy_tensors(), route=st.sampled_from(["fast", "general"]))
def test_direct_and_method_readers_agree(tensor, route):
    """For random tensors the direct and the method reader give the same view or the same error, and refuse exactly the lazy ones."""
    with path(route):
        direct = _outcome(lambda: StridedMemoryView(tensor, -1))
        assert _view._torch_bits_reader() == expected_bits_reader(torch)
        with reader("methods"):
            methods = _outcome(lambda: StridedMemoryView(tensor, -1))
    assert direct == methods
    if tensor.is_neg():
        assert direct[0] == "refused" and "negative bit" in direct[1]
    elif tensor.is_complex() and tensor.is_conj():
        assert direct[0] == "refused" and "conjugate bit" in direct[1]
    else:
        assert direct[0] != "refused", direct
