"""Tools from plain functions: ``@tool`` reads a function's name, docstring and signature.

``define_tool`` wants a pydantic input model and an ``execute(input, ctx)``
function; ``tool`` builds both from an ordinary function::

    @tool
    async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''The weather in a city now.

        Args:
            city: the city's name, e.g. "Paris".
        '''

The name is the function's, the description the docstring's text before its
sections, each parameter's description its ``Args:`` line (or a pydantic
``Field(description=...)``, as a default or in ``Annotated``, which wins). A
parameter annotated :class:`ToolContext` receives the context instead of an
argument. Sync functions run on a worker thread, as ``define_tool``'s do.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from helix_agents.agents.tools import ApprovalRule, Tool, ToolContext, define_tool
from helix_agents.errors import UsageError

__all__ = ["tool"]

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples|Note|Notes):\s*$"
)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@overload
def tool(fn: Callable[..., Any], /) -> Tool[Any]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execute: Literal["client"] | None = None,
    timeout: float | None = None,
    requires_approval: ApprovalRule = False,
    output_schema: type[BaseModel] | None = None,
    expires_in: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool[Any]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execute: Literal["client"] | None = None,
    timeout: float | None = None,
    requires_approval: ApprovalRule = False,
    output_schema: type[BaseModel] | None = None,
    expires_in: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Tool[Any] | Callable[[Callable[..., Any]], Tool[Any]]:
    """Make a :class:`Tool` of a plain function: ``@tool``, ``@tool(...)`` or ``tool(fn)``.

    Args:
        fn: the function (sync or async); its parameters are the tool's input.
        name: the tool's name (default: the function's).
        description: shown to the LLM (default: the docstring, before its sections).
        execute: ``"client"`` for a tool the end user's client runs: the
            function then only describes it (name, docstring, signature) and
            is never called.
        timeout: seconds; a slower call ends with an error result.
        requires_approval: True, or a predicate ``(input, ctx) -> bool``, as
            for :func:`define_tool`.
        output_schema: a pydantic model the result must match.
        expires_in: seconds a client tool or an approval waits for its answer.
        metadata: free-form data kept on the tool.

    Raises:
        UsageError: the function has ``*args``/``**kwargs``, an annotation that
            cannot be resolved, no description, or an option
            :func:`define_tool` refuses.
    """

    def build(function: Callable[..., Any]) -> Tool[Any]:
        return _function_tool(
            function,
            name=name,
            description=description,
            execute=execute,
            options={
                "timeout": timeout,
                "requires_approval": requires_approval,
                "output_schema": output_schema,
                "expires_in": expires_in,
                "metadata": metadata,
            },
        )

    if fn is None:
        return build
    if not callable(fn):
        raise UsageError(f"tool() takes a function, not {fn!r}")
    return build(fn)


def _function_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    execute: Literal["client"] | None,
    options: dict[str, Any],
) -> Tool[Any]:
    tool_name = str(name or getattr(function, "__name__", ""))
    if execute not in (None, "client"):
        raise UsageError(f"tool {tool_name!r}: execute must be 'client' or left out")
    summary, arg_docs = _read_docstring(inspect.getdoc(function) or "")
    text = description if description is not None else summary
    if not text:
        raise UsageError(
            f"tool {tool_name!r}: give the function a docstring (the LLM reads it), "
            "or pass description="
        )
    input_model, names, context_name = _input_model(function, tool_name, arg_docs)
    runner: Any = "client" if execute == "client" else _runner(function, names, context_name)
    return define_tool(tool_name, text, input_model, runner, **options)


def _read_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the text before the first section) and the ``Args:`` lines."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        heading = _SECTION.match(line)
        if heading:
            section, current = heading.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            item = _ARG_LINE.match(line)
            indented_more = current is not None and line.startswith(" " * 8)
            if item and not indented_more:
                current = item.group(1).lstrip("*")
                args[current] = item.group(2).strip()
            elif current is not None and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), args


def _is_context(hint: Any) -> bool:
    """True for a ``ToolContext`` annotation (or a class built on it)."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint is ToolContext or (isinstance(hint, type) and ToolContext in hint.__mro__)


def _input_model(
    function: Callable[..., Any], tool_name: str, arg_docs: dict[str, str]
) -> tuple[type[BaseModel], dict[str, str], str | None]:
    """The pydantic model of ``function``'s parameters, field to parameter, the context's name."""
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise UsageError(
            f"tool {tool_name!r}: cannot read the function's signature: {exc}"
        ) from exc
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    context_name: str | None = None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(
                f"tool {tool_name!r}: *{param.name} cannot be described to the LLM; "
                "name each parameter"
            )
        hint = hints.get(param.name, Any)
        if _is_context(hint):
            context_name = param.name
            continue
        if param.name.startswith("_"):
            raise UsageError(f"tool {tool_name!r}: parameter {param.name!r} starts with '_'")
        # ``json``, ``copy``...: a field may not shadow BaseModel's; it is renamed, the
        # LLM still sees (and sends) the parameter's own name as its alias.
        field_name = f"{param.name}_" if hasattr(BaseModel, param.name) else param.name
        names[field_name] = param.name
        fields[field_name] = _field(param, hint, arg_docs.get(param.name))
    model_name = "".join(part.title() for part in tool_name.replace("-", "_").split("_")) or "Tool"
    model: type[BaseModel] = create_model(
        f"{model_name}Input",
        __config__=ConfigDict(extra="forbid", populate_by_name=True),
        **fields,
    )
    return model, names, context_name


def _field(param: inspect.Parameter, hint: Any, doc: str | None) -> tuple[Any, Any]:
    """``(annotation, FieldInfo)`` for one parameter: its default and its description."""
    extra: dict[str, Any] = {}
    if doc and not _annotated_description(hint):
        extra["description"] = doc
    if hasattr(BaseModel, param.name):
        extra["alias"] = param.name
    default = param.default
    if isinstance(default, FieldInfo):
        if default.description:
            extra.pop("description", None)
        return hint, FieldInfo.merge_field_infos(default, **extra) if extra else default
    if default is inspect.Parameter.empty:
        return hint, Field(**extra)
    return hint, Field(default=default, **extra)


def _annotated_description(hint: Any) -> bool:
    """True when an ``Annotated[..., Field(description=...)]`` describes the parameter."""
    if typing.get_origin(hint) is not typing.Annotated:
        return False
    return any(
        isinstance(extra, FieldInfo) and extra.description for extra in typing.get_args(hint)[1:]
    )


def _runner(
    function: Callable[..., Any], names: dict[str, str], context_name: str | None
) -> Callable[..., Any]:
    """``execute(input, ctx)`` calling ``function`` with the input's fields as arguments."""

    def arguments(value: BaseModel, ctx: Any) -> dict[str, Any]:
        given = {param: getattr(value, field) for field, param in names.items()}
        if context_name is not None:
            given[context_name] = ctx
        return given

    if inspect.iscoroutinefunction(function):

        async def run_async(value: BaseModel, ctx: Any) -> Any:
            return await function(**arguments(value, ctx))

        return run_async

    def run_sync(value: BaseModel, ctx: Any) -> Any:
        return function(**arguments(value, ctx))

    return run_sync
