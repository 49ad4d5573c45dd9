"""``args_viewable_as_strided_memory``: hand a kernel launcher views of its array arguments."""

from __future__ import annotations

import functools

from stridedview._view import _ViewableLauncher

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeVar

    _R = TypeVar("_R")


# The wrapped function receives ViewableArgument proxies where its callers pass
# arrays, so its signature cannot be the caller's: the result is typed as taking
# any arguments and returning what the function returns.
def args_viewable_as_strided_memory(
    arg_indices: Iterable[int | str] | int | str,
    *,
    record_stream: bool = False,
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Wrap the chosen arguments of a launch function in ``ViewableArgument`` proxies.

    ``arg_indices`` names the arguments by position (an int, counting ``self`` for
    a method) and/or by parameter name (a str); both are resolved once, against
    the function's signature, so an argument is wrapped whether the caller passes
    it by position or by keyword.  Inside the function, ``arg.view(stream_ptr)``
    gives the ``StridedMemoryView`` on the launch stream and ``arg.obj`` the
    original object.  ``None`` passes through unwrapped (optional outputs); an
    argument with none of the view's protocols (DLPack, the CUDA Array Interface,
    numpy's array interface, the buffer protocol) is a BufferError naming the
    parameter, raised when the function is called.

    ``record_stream=True``: each view made in a launch with a stream
    (``arg.view(s)``, ``s`` not None or -1) of device-accessible memory hands its
    memory over to ``s`` when it is released, as ``view.record_stream(s)`` does,
    and the launch records one event per stream when the function returns, for all
    its views: a temporary argument (``launch(x + 1)``) is not freed while the
    kernel still reads it.  A view the function keeps past the launch hands over on
    its own when it is released.  Views made with ``-1`` or of host memory hand
    nothing over (the launcher must then keep the argument alive itself).
    """
    if type(record_stream) is not bool:
        raise TypeError(
            f"args_viewable_as_strided_memory: record_stream must be a bool (got {record_stream!r})"
        )
    if callable(arg_indices):
        # @args_viewable_as_strided_memory with no (...): the function came as arg_indices.
        raise TypeError(
            "args_viewable_as_strided_memory: arg_indices must hold ints and strs "
            f"(got the function {getattr(arg_indices, '__qualname__', arg_indices)!r}): "
            "the decorator needs parentheses naming the arguments to view, as in "
            "@args_viewable_as_strided_memory((0, 'out'))"
        )
    if isinstance(arg_indices, (int, str)):
        arg_indices = (arg_indices,)
    try:
        chosen = tuple(arg_indices)
    except TypeError:
        raise TypeError(
            "args_viewable_as_strided_memory: arg_indices must hold ints and strs "
            f"(got {arg_indices!r})"
        ) from None

    def decorate(func: Callable[..., _R]) -> Callable[..., _R]:
        import inspect  # costs ~10 ms: imported when a launcher is decorated, not at import

        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = list(inspect.signature(func).parameters.values())
        selected: dict[str, inspect.Parameter] = {}
        for index in chosen:
            if isinstance(index, bool) or not isinstance(index, (int, str)):
                raise TypeError(
                    f"args_viewable_as_strided_memory: arg_indices must hold ints and strs "
                    f"(got {index!r})"
                )
            if isinstance(index, int):
                if not 0 <= index < len(parameters) or parameters[index].kind not in positional:
                    raise ValueError(
                        f"args_viewable_as_strided_memory: {func.__qualname__} has no "
                        f"positional parameter at index {index}"
                    )
                parameter = parameters[index]
            else:
                matches = [p for p in parameters if p.name == index]
                if not matches or matches[0].kind in (
                    inspect.Parameter.VAR_POSITIONAL,
                    inspect.Parameter.VAR_KEYWORD,
                ):
                    raise ValueError(
                        f"args_viewable_as_strided_memory: {func.__qualname__} has no "
                        f"parameter named {index!r}"
                    )
                parameter = matches[0]
            selected[parameter.name] = parameter
        by_position = tuple(
            sorted(
                (parameters.index(p), name)
                for name, p in selected.items()
                if p.kind in positional
            )
        )
        by_keyword = tuple(
            name
            for name, p in selected.items()
            if p.kind != inspect.Parameter.POSITIONAL_ONLY
        )

        launcher = _ViewableLauncher(func, by_position, by_keyword, record_stream)
        functools.update_wrapper(launcher, func)
        return launcher

    return decorate

