"""``args_viewable_as_strided_memory``: which arguments a launch function gets as proxies.

The rules (docs/api.md, docs/errors.md "Decorator"): the chosen arguments are
named by position (counting ``self``) and/or by parameter name, resolved once at
decoration against the signature, and wrapped whether the caller passes them by
position or by keyword; ``None`` passes through; anything with neither DLPack nor
the CUDA Array Interface is a BufferError naming the parameter.  Each proxy gives
back the original object (``.obj``) and a new ``StridedMemoryView`` per
``.view(stream_ptr)`` call.

cuda-core's decorator of the same name is the peer: it indexes ``args`` only, so a
keyword call fails there (shown below, as the reason for resolving names).
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

import numpy as np
import pytest

import stridedview
from producers import assert_view, make_producer
from stridedview import StridedMemoryView, ViewableArgument, args_viewable_as_strided_memory

PREFIX = "args_viewable_as_strided_memory: "

pytestmark = pytest.mark.usefixtures("forbidden_driver")


class HostCAI:
    """A CUDA Array Interface producer whose data pointer is a numpy array's (host memory).

    ``stream`` goes in the dict (version 3) when given; no GPU is needed as long as
    the consumer passes ``stream_ptr=-1`` and never asks for ``device_id``.
    """

    def __init__(self, array=None, *, stream=None):
        if array is None:
            array = np.arange(6, dtype=np.float32).reshape(2, 3)
        self.array = array
        host = array.__array_interface__
        self.interface = {
            "version": 3,
            "shape": tuple(array.shape),
            "typestr": host["typestr"],
            "data": (host["data"][0], False),
            "strides": host["strides"],
        }
        if stream is not None:
            self.interface["stream"] = stream

    @property
    def __cuda_array_interface__(self):
        return self.interface


def record(*names):
    """A function of parameters ``names`` returning its arguments as a dict (by name)."""
    namespace = {}
    exec(f"def launch({', '.join(names)}):\n    return dict(locals())", namespace)
    return namespace["launch"]


def array():
    """A small host array every consumer can view."""
    return np.arange(6, dtype=np.float32).reshape(2, 3)


def check_proxy(proxy, original):
    """Fail unless ``proxy`` is a ViewableArgument over exactly ``original``."""
    assert type(proxy) is ViewableArgument
    assert proxy.obj is original


# --- which arguments are wrapped ---------------------------------------------------

@pytest.mark.parametrize(
    "chosen",
    [(1,), ("y",), (1, "y"), ("y", 1), 1, "y"],
    ids=["index", "name", "index-and-name", "name-and-index", "bare-int", "bare-str"],
)
@pytest.mark.parametrize(
    "call",
    [
        lambda f, x, y, z: f(x, y, z),
        lambda f, x, y, z: f(x, y=y, z=z),
        lambda f, x, y, z: f(x=x, y=y, z=z),
        lambda f, x, y, z: f(z=z, y=y, x=x),
    ],
    ids=["positional", "keyword", "all-keywords", "keywords-reordered"],
)
def test_chosen_argument_wrapped_by_position_or_keyword(chosen, call):
    """The parameter chosen by index or name is wrapped however the caller passes it, and only it."""
    launch = args_viewable_as_strided_memory(chosen)(record("x", "y", "z"))
    x, y, z = array(), array(), array()
    got = call(launch, x, y, z)
    check_proxy(got["y"], y)
    assert got["x"] is x
    assert got["z"] is z


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x, y, z: f(x, y, z=z),
        lambda f, x, y, z: f(*(x, y), **{"z": z}),
        lambda f, x, y, z: f.__call__(x, y, z=z),
        lambda f, x, y, z: functools.partial(f, x)(y, z=z),
        lambda f, x, y, z: type(f).__call__(f, x, y, z=z),
    ],
    ids=["vectorcall", "unpacked", "__call__", "partial", "type-__call__"],
)
def test_launcher_wraps_alike_through_every_calling_convention(call):
    """The launcher wraps the same arguments whether called by vectorcall or with a tuple and dict."""
    launch = args_viewable_as_strided_memory((1, "z"))(record("x", "y", "z"))
    x, y, z = array(), array(), array()
    got = call(launch, x, y, z)
    assert got["x"] is x
    check_proxy(got["y"], y)
    check_proxy(got["z"], z)


def test_index_and_name_of_the_same_parameter_wrap_once():
    """Naming one parameter twice (index and name) wraps it once, not a proxy of a proxy."""
    launch = args_viewable_as_strided_memory((0, "x", 0))(record("x"))
    x = array()
    check_proxy(launch(x)["x"], x)
    check_proxy(launch(x=x)["x"], x)


def test_several_arguments_wrapped():
    """Every chosen argument is wrapped, the others untouched."""
    launch = args_viewable_as_strided_memory((0, 2, "d"))(record("a", "b", "c", "d"))
    a, b, c, d = array(), array(), array(), array()
    got = launch(a, b, c=c, d=d)
    check_proxy(got["a"], a)
    assert got["b"] is b
    check_proxy(got["c"], c)
    check_proxy(got["d"], d)


def test_cuda_core_decorator_fails_on_keyword_calls():
    """cuda-core's decorator indexes the positional args only: a keyword call is an IndexError (why names are resolved here)."""
    cuda_utils = pytest.importorskip("cuda.core.utils")
    peer = cuda_utils.args_viewable_as_strided_memory((1,))(record("x", "y"))
    x, y = array(), array()
    assert peer(x, y)["y"].obj is y  # by position it works
    with pytest.raises(IndexError):
        peer(x, y=y)
    # stridedview's decorator, same choice, same keyword call:
    ours = args_viewable_as_strided_memory((1,))(record("x", "y"))
    check_proxy(ours(x, y=y)["y"], y)


def test_positions_resolved_once_at_decoration(monkeypatch):
    """The signature is read when decorating, never when calling."""
    launch_function = record("x", "y")
    launch = args_viewable_as_strided_memory(("y",))(launch_function)

    def no_signature(*args, **kwargs):
        raise AssertionError("inspect.signature called at call time")

    monkeypatch.setattr(inspect, "signature", no_signature)
    y = array()
    check_proxy(launch(1, y)["y"], y)
    check_proxy(launch(1, y=y)["y"], y)


def test_missing_optional_argument_not_wrapped():
    """A chosen parameter the caller leaves out keeps its default (nothing to wrap)."""

    @args_viewable_as_strided_memory((0, "out"))
    def launch(x, out=None):
        return x, out

    x = array()
    proxy, out = launch(x)
    check_proxy(proxy, x)
    assert out is None


@pytest.mark.parametrize(
    "call",
    [lambda f, x: f(x, None), lambda f, x: f(x, out=None)],
    ids=["positional", "keyword"],
)
def test_none_passes_through(call):
    """None (an optional output) is handed on as None, not wrapped and not an error."""

    @args_viewable_as_strided_memory((0, 1))
    def launch(x, out):
        return x, out

    x = array()
    proxy, out = call(launch, x)
    check_proxy(proxy, x)
    assert out is None


@pytest.mark.parametrize(
    "call",
    [lambda f, v: f(1, v), lambda f, v: f(1, y=v)],
    ids=["positional", "keyword"],
)
@pytest.mark.parametrize(
    "value, type_name",
    [([1, 2], "list"), (3.5, "float"), (object(), "object"), ("ab", "str")],
    ids=["list", "float", "object", "str"],
)
def test_neither_protocol_is_buffer_error_naming_parameter(call, value, type_name):
    """An argument with none of the four protocols is a BufferError naming the parameter and its type."""
    called = []

    @args_viewable_as_strided_memory(("y",))
    def launch(x, y):
        called.append(True)

    expected = (
        f"{PREFIX}argument 'y' ('{type_name}' object) supports none of DLPack, the CUDA "
        "Array Interface, the array interface and the buffer protocol"
    )
    with pytest.raises(BufferError, match=re.escape(expected)):
        call(launch, value)
    assert called == []


def test_wrapping_calls_no_protocol_method():
    """Wrapping only checks that a protocol is there: __dlpack__ is first called by .view()."""
    producer = make_producer()
    launch = args_viewable_as_strided_memory((0,))(record("x"))
    proxy = launch(producer)["x"]
    check_proxy(proxy, producer)
    assert producer.calls == []
    proxy.view()
    assert [name for name, _ in producer.calls] == ["__dlpack_device__", "__dlpack__"]
    producer.release_capsules()


# --- decoration-time errors --------------------------------------------------------

@pytest.mark.parametrize(
    "bad",
    [True, False, 1.0, None, b"x", (0,), 1j],
    ids=["True", "False", "float", "None", "bytes", "tuple", "complex"],
)
def test_bad_entry_type_is_type_error(bad):
    """An entry that is not an int or a str (bools included) is a TypeError quoting it."""
    expected = f"{PREFIX}arg_indices must hold ints and strs (got {bad!r})"
    with pytest.raises(TypeError, match=re.escape(expected)):
        args_viewable_as_strided_memory([0, bad])(record("x", "y"))


def test_bare_bool_is_type_error():
    """A bare bool is not taken for the index 0 or 1."""
    with pytest.raises(TypeError, match=re.escape(f"{PREFIX}arg_indices must hold ints and strs (got True)")):
        args_viewable_as_strided_memory(True)(record("x", "y"))


@pytest.mark.parametrize("bad", [1.5, None, object()], ids=["float", "None", "object"])
def test_non_iterable_arg_indices_is_type_error(bad):
    """arg_indices that is neither an int, a str nor an iterable of them is a TypeError (message unspecified)."""
    with pytest.raises(TypeError):
        args_viewable_as_strided_memory(bad)(record("x"))


def test_one_decorator_for_several_functions():
    """A decorator made once resolves its names against each function it decorates."""
    decorator = args_viewable_as_strided_memory(("y",))
    first = decorator(record("x", "y"))
    second = decorator(record("y", "x"))
    a, b = array(), array()
    check_proxy(first(a, b)["y"], b)
    check_proxy(second(a, b)["y"], a)
    assert second(a, b)["x"] is b


def _star(a, *args, b, **kwargs):
    pass


def _positional_only(a, b, /, c):
    pass


@pytest.mark.parametrize(
    "func, index",
    [
        (record("x", "y"), 2),
        (record("x", "y"), 5),
        (record("x", "y"), -1),
        (record(), 0),
        (_star, 1),  # *args
        (_star, 2),  # keyword-only b
        (_star, 3),  # **kwargs
    ],
    ids=["one-past-end", "far", "negative", "no-params", "var-positional", "keyword-only", "var-keyword"],
)
def test_index_without_positional_parameter_is_value_error(func, index):
    """An index that names no positional parameter is a ValueError with the function's qualname."""
    expected = f"{PREFIX}{func.__qualname__} has no positional parameter at index {index}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        args_viewable_as_strided_memory((index,))(func)


@pytest.mark.parametrize("name", ["nope", "args", "kwargs", "X", ""], ids=["unknown", "star-args", "star-kwargs", "case", "empty"])
def test_unknown_name_is_value_error(name):
    """A name that is no parameter (or names *args / **kwargs) is a ValueError quoting it."""
    expected = f"{PREFIX}{_star.__qualname__} has no parameter named {name!r}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        args_viewable_as_strided_memory((name,))(_star)


def test_error_names_method_qualname():
    """The ValueError names a method by its qualified name (Class.method)."""

    class Kernel:
        def launch(self, x):
            pass

    expected = f"{PREFIX}{Kernel.launch.__qualname__} has no parameter named 'y'"
    assert "Kernel.launch" in expected
    with pytest.raises(ValueError, match=re.escape(expected)):
        args_viewable_as_strided_memory(("y",))(Kernel.launch)


# --- what the wrapper keeps -----------------------------------------------------------

def test_functools_wraps_metadata():
    """__name__, __qualname__, __doc__, __module__ and __wrapped__ are the function's; the signature shows through."""

    def launch(x, y, *, stream=None):
        """Launch the kernel."""

    wrapped = args_viewable_as_strided_memory((0,))(launch)
    assert wrapped is not launch
    for attribute in functools.WRAPPER_ASSIGNMENTS:
        assert getattr(wrapped, attribute) == getattr(launch, attribute), attribute
    assert wrapped.__wrapped__ is launch
    assert inspect.signature(wrapped) == inspect.signature(launch)


def test_return_value_and_exceptions_pass_through():
    """The function's result is returned and its exceptions propagate unchanged."""

    @args_viewable_as_strided_memory((0,))
    def launch(x, fail=False):
        if fail:
            raise KeyError("inner")
        return ("result", x)

    x = array()
    result, proxy = launch(x)
    assert result == "result"
    check_proxy(proxy, x)
    with pytest.raises(KeyError, match="inner"):
        launch(x, fail=True)


# --- methods, staticmethods, keyword-only and positional-only ------------------------

class Kernel:
    """Methods decorated as a launcher class would."""

    @args_viewable_as_strided_memory((1,))
    def by_index(self, x, y=None):
        return self, x, y

    @args_viewable_as_strided_memory(("y",))
    def by_name(self, x, y=None):
        return self, x, y

    @staticmethod
    @args_viewable_as_strided_memory((0,))
    def static(x, y=None):
        return x, y

    @classmethod
    @args_viewable_as_strided_memory((1,))
    def klass(cls, x):
        return cls, x


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
def test_method_counts_self_at_position_0(keyword):
    """On a method index 1 is the first argument after self; self itself is untouched."""
    kernel, x = Kernel(), array()
    me, proxy, y = kernel.by_index(x=x) if keyword else kernel.by_index(x)
    assert me is kernel
    check_proxy(proxy, x)
    assert y is None


def test_method_through_the_class():
    """Calling the function through the class with an explicit self wraps the same argument."""
    kernel, x = Kernel(), array()
    me, proxy, _ = Kernel.by_index(kernel, x)
    assert me is kernel
    check_proxy(proxy, x)


@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
def test_method_by_name(keyword):
    """A method's parameter chosen by name is wrapped by position (after self) or keyword."""
    kernel, x, y = Kernel(), array(), array()
    me, got_x, proxy = kernel.by_name(x, y=y) if keyword else kernel.by_name(x, y)
    assert me is kernel
    assert got_x is x
    check_proxy(proxy, y)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: Kernel.static(x),
        lambda x: Kernel().static(x),
        lambda x: Kernel.static(x=x),
    ],
    ids=["class", "instance", "keyword"],
)
def test_staticmethod_has_no_self(call):
    """A staticmethod's index 0 is its first parameter, through the class or an instance."""
    x = array()
    proxy, y = call(x)
    check_proxy(proxy, x)
    assert y is None


def test_classmethod_counts_cls_at_position_0():
    """A classmethod decorated underneath counts cls at position 0, like self."""
    x = array()
    cls, proxy = Kernel.klass(x)
    assert cls is Kernel
    check_proxy(proxy, x)


def test_keyword_only_parameter_by_name():
    """A keyword-only parameter can be chosen by name and is wrapped when passed."""

    @args_viewable_as_strided_memory(("out",))
    def launch(x, *, out):
        return x, out

    x, out = array(), array()
    got_x, proxy = launch(x, out=out)
    assert got_x is x
    check_proxy(proxy, out)


def test_positional_only_parameter_by_index():
    """A positional-only parameter chosen by index is wrapped; a same-named keyword goes to **kwargs untouched."""

    @args_viewable_as_strided_memory((1,))
    def launch(a, b, /, **kwargs):
        return a, b, kwargs

    a, b, other = array(), array(), array()
    got_a, proxy, kwargs = launch(a, b, b=other)
    assert got_a is a
    check_proxy(proxy, b)
    assert kwargs["b"] is other


def test_positional_only_parameter_by_name():
    """A positional-only parameter may also be named: it is wrapped at its position."""

    @args_viewable_as_strided_memory(("b",))
    def launch(a, b, /):
        return a, b

    a, b = array(), array()
    got_a, proxy = launch(a, b)
    assert got_a is a
    check_proxy(proxy, b)


def test_star_args_beyond_the_chosen_positions_untouched():
    """Extra positional arguments collected by *args are left alone."""

    @args_viewable_as_strided_memory((0,))
    def launch(x, *rest):
        return x, rest

    x, extra = array(), array()
    proxy, rest = launch(x, extra)
    check_proxy(proxy, x)
    assert rest[0] is extra


# --- the proxy -------------------------------------------------------------------------

def _fields(view):
    """The host-knowable fields of a view (device_id left out: for CAI views it needs the driver)."""
    return (view.ptr, view.shape, view.strides, view.dtype, view.is_device_accessible, view.readonly)


def _numpy():
    return np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]


def _torch():
    torch = pytest.importorskip("torch")
    return torch.arange(12, dtype=torch.float64).reshape(3, 4).T


def _jax():
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(12, dtype=jnp.int32).reshape(3, 4)


@pytest.mark.interop
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_numpy, id="numpy"),
        pytest.param(_torch, id="torch", marks=pytest.mark.torch),
        pytest.param(_jax, id="jax", marks=pytest.mark.jax),
    ],
)
def test_proxy_view_of_real_producer(make):
    """The proxy's .obj is the argument itself and .view() equals StridedMemoryView(obj) field for field."""
    obj = make()

    @args_viewable_as_strided_memory((0,))
    def launch(x):
        return x

    proxy = launch(obj)
    check_proxy(proxy, obj)
    got = proxy.view()
    want = StridedMemoryView(obj)
    assert type(got) is StridedMemoryView
    assert got.exporting_obj is obj
    assert _fields(got) == _fields(want)
    assert got.device_id == want.device_id == -1


def test_proxy_view_of_dlpack_producer_with_stream():
    """.view(stream_ptr) passes the stream on: a host producer gets stream=None whatever is asked."""
    producer = make_producer()
    proxy = args_viewable_as_strided_memory((0,))(record("x"))(producer)["x"]
    view = proxy.view(0x5000)
    assert_view(
        view, ptr=producer.expected_ptr, shape=(2, 3), strides=(3, 1), dtype="float32",
        device_id=-1, is_device_accessible=False, readonly=False, exporting_obj=producer,
    )
    assert producer.calls[-1] == ("__dlpack__", {"stream": None, "max_version": (1, 3), "copy": False})
    del view
    producer.release_capsules()


def test_proxy_view_of_cai_producer_over_host_memory(fake):
    """For a CAI producer with stream_ptr=-1 the proxy's view equals StridedMemoryView(obj, -1), device_id included."""
    producer = HostCAI(stream=0x5000)
    fake.register_pointer(producer.array.ctypes.data, producer.array.nbytes, device=1)

    @args_viewable_as_strided_memory(("x",))
    def launch(x):
        return x

    proxy = launch(x=producer)
    check_proxy(proxy, producer)
    got = proxy.view(-1)
    want = StridedMemoryView(producer, -1)
    assert _fields(got) == _fields(want)
    assert got.ready_stream == want.ready_stream == 0x5000
    assert_view(
        got, ptr=producer.array.ctypes.data, shape=(2, 3), strides=(3, 1), dtype="float32",
        device_id=1, is_device_accessible=True, readonly=False, exporting_obj=producer,
    )
    # Only the device lookups: -1 ordered nothing.
    assert set(fake.names()) <= {"cuInit", "cuPointerGetAttribute"}


def test_proxy_view_of_cai_producer_needs_stream():
    """The proxy's view of a CAI producer with the default stream_ptr=None is refused as ambiguous."""
    proxy = ViewableArgument(HostCAI())
    with pytest.raises(BufferError, match=re.escape("cuda array interface: stream_ptr=None is ambiguous")):
        proxy.view()


def test_new_view_per_call():
    """Each .view() call makes a new view (the stream is only known there)."""
    x = array()
    proxy = args_viewable_as_strided_memory((0,))(record("x"))(x)["x"]
    first, second = proxy.view(), proxy.view()
    assert first is not second
    assert _fields(first) == _fields(second)
    assert first.exporting_obj is second.exporting_obj is x


def test_new_proxy_per_launch():
    """Each launch wraps its arguments afresh."""
    x = array()
    launch = args_viewable_as_strided_memory((0,))(record("x"))
    assert launch(x)["x"] is not launch(x)["x"]


def test_bare_decorator_says_parentheses_are_needed():
    """``@args_viewable_as_strided_memory`` without ``(...)`` is a TypeError saying to add the parentheses."""
    with pytest.raises(TypeError) as caught:

        @args_viewable_as_strided_memory
        def launch(x):
            return x

    message = str(caught.value)
    assert message.startswith(f"{PREFIX}arg_indices must hold ints and strs (got the function ")
    assert "launch" in message
    assert "needs parentheses" in message
    assert "@args_viewable_as_strided_memory((0, 'out'))" in message


def test_exported_names():
    """The decorator and the proxy type are in stridedview.__all__."""
    assert {"args_viewable_as_strided_memory", "ViewableArgument"} <= set(stridedview.__all__)


def test_proxy_view_has_a_signature():
    """help() and IDEs see ``view(stream_ptr=None)`` on the proxy, though it is a plain
    method descriptor (no function object between the interpreter and the C code)."""
    parameters = inspect.signature(ViewableArgument.view).parameters
    if list(parameters) != ["self", "stream_ptr"] or parameters["stream_ptr"].default is not None:
        raise AssertionError(parameters)


@pytest.mark.parametrize("count", [3, 16, 17, 40])
def test_launcher_passes_any_number_of_arguments_and_keeps_no_reference(count):
    """Calls of up to 16 arguments go through a stack array, longer ones through a tuple:
    either way func sees every argument in place (chosen ones wrapped, by position and by
    keyword), and afterwards nothing holds a reference the call took."""
    names = [f"a{i}" for i in range(count)]
    namespace = {}
    exec(f"def launch({', '.join(names)}):\n    return [{', '.join(names)}]", namespace)
    launch = args_viewable_as_strided_memory((0, count - 1))(namespace["launch"])
    arrays = [np.arange(3.0) + i for i in range(count)]
    before = [sys.getrefcount(a) for a in arrays]
    received = launch(*arrays[:-1], **{names[-1]: arrays[-1]})
    if not all(isinstance(received[i], ViewableArgument) for i in (0, count - 1)):
        raise AssertionError(received)
    if any(received[i] is not arrays[i] for i in range(1, count - 1)):
        raise AssertionError("an unchosen argument was not passed as it was")
    if received[-1].view(-1).ptr != arrays[-1].ctypes.data:
        raise AssertionError("the keyword argument was not wrapped around its array")
    del received
    after = [sys.getrefcount(a) for a in arrays]
    if after != before:
        raise AssertionError((before, after))


@pytest.mark.parametrize("count", [3, 20])
def test_refused_argument_midway_releases_the_arguments_taken(count):
    """A chosen argument with no protocol, after others were taken: BufferError, and the
    arguments already taken (wrapped or not) are released."""
    names = [f"a{i}" for i in range(count)]
    namespace = {}
    exec(f"def launch({', '.join(names)}):\n    pass", namespace)
    launch = args_viewable_as_strided_memory((0, count - 1))(namespace["launch"])
    arrays = [np.arange(3.0) for _ in range(count - 1)]
    before = [sys.getrefcount(a) for a in arrays]
    with pytest.raises(BufferError, match=f"argument 'a{count - 1}'"):
        launch(*arrays, [1, 2])
    after = [sys.getrefcount(a) for a in arrays]
    if after != before:
        raise AssertionError((before, after))


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), ((-1,), {}), ((None,), {}), ((), {"stream_ptr": -1}), ((-1, 2), {}),
     ((), {"stream": -1}), ((-1,), {"stream_ptr": -1})],
)
def test_proxy_view_takes_its_arguments_as_its_signature_says(args, kwargs):
    """``proxy.view(...)`` (a fast entry for zero or one positional argument, Cython's
    parser for the rest) gives ``StridedMemoryView(proxy.obj, ...)``'s view or error,
    the stream passed on; a wrong count or keyword is a TypeError naming view()."""
    proxy = ViewableArgument(HostCAI())
    try:
        expected = StridedMemoryView(proxy.obj, *args, **kwargs)
    except TypeError:
        # A keyword other than stream_ptr gets the decorator's hint (naming stream_ptr).
        with pytest.raises(TypeError, match=r"^(args_viewable_as_strided_memory: )?view\(\) "):
            proxy.view(*args, **kwargs)
        return
    except BufferError as exc:
        with pytest.raises(BufferError) as caught:
            proxy.view(*args, **kwargs)
        if str(caught.value) != str(exc):
            raise AssertionError((str(caught.value), str(exc)))
        return
    view = proxy.view(*args, **kwargs)
    got = (view.ptr, view.shape, view.strides, view.dtype, view.ready_stream)
    want = (expected.ptr, expected.shape, expected.strides, expected.dtype, expected.ready_stream)
    if got != want:
        raise AssertionError((got, want))


def test_proxy_view_by_keyword_is_the_positional_view():
    """arg.view(stream_ptr=s), the form users write, takes the proxy's own entry and gives
    the view arg.view(s) gives, for every stream value and producer kind; a call mixing the
    forms is refused as Cython's wrapper refuses it."""
    from test_cai import CAIProducer

    objects = [np.arange(12.0).reshape(3, 4)[:, ::2], np.array(2.5), CAIProducer()]
    seen = []

    @args_viewable_as_strided_memory((0,))
    def launch(arg):
        for stream in (-1, None):
            if stream is None and isinstance(arg.obj, CAIProducer):
                continue  # a CAI view needs a stream: refused alike, checked below
            by_keyword, positional = arg.view(stream_ptr=stream), arg.view(stream)
            seen.append(
                (by_keyword.ptr, by_keyword.shape, by_keyword.strides, by_keyword.dtype,
                 by_keyword.readonly, by_keyword.exporting_obj is arg.obj)
                == (positional.ptr, positional.shape, positional.strides, positional.dtype,
                    positional.readonly, True)
            )
        with pytest.raises(TypeError, match="multiple values for keyword argument 'stream_ptr'"):
            arg.view(-1, stream_ptr=-1)

    for obj in objects:
        launch(obj)
    assert seen and all(seen)

    @args_viewable_as_strided_memory((0,))
    def without_stream(arg):
        with pytest.raises(BufferError) as by_keyword:
            arg.view(stream_ptr=None)
        with pytest.raises(BufferError) as positional:
            arg.view(None)
        assert str(by_keyword.value) == str(positional.value)

    without_stream(CAIProducer())


def test_proxy_view_descriptor_called_every_other_way():
    """The ``view`` descriptor's own entry (what the interpreter calls for a keyword call) takes
    a proxy receiver through the unbound method, a kept bound method and functools.partial,
    by keyword and positionally, to the same view; no receiver, or one of another type, is
    refused with CPython's own messages."""
    import functools

    array = np.arange(12.0).reshape(3, 4)[:, ::2]
    proxy = ViewableArgument(array)
    bound = proxy.view
    calls = [
        lambda: ViewableArgument.view(proxy, stream_ptr=-1),
        lambda: ViewableArgument.view(proxy, -1),
        lambda: bound(stream_ptr=-1),
        lambda: functools.partial(ViewableArgument.view, proxy)(stream_ptr=-1),
        lambda: functools.partial(ViewableArgument.view, proxy, stream_ptr=-1)(),
    ]
    for call in calls:
        view = call()
        assert (view.ptr, view.shape, view.strides, view.dtype, view.exporting_obj) == (
            array.ctypes.data, (3, 2), (4, 2), array.dtype, array
        )
    with pytest.raises(TypeError, match=r"^unbound method ViewableArgument\.view\(\) needs an argument$"):
        ViewableArgument.view(stream_ptr=-1)
    with pytest.raises(TypeError, match=r"^descriptor 'view' for '.*ViewableArgument' objects doesn't apply to a '(numpy\.)?ndarray' object$"):
        ViewableArgument.view(array, stream_ptr=-1)
    with pytest.raises(TypeError, match="multiple values for keyword argument 'stream_ptr'"):
        ViewableArgument.view(proxy, -1, stream_ptr=-1)
