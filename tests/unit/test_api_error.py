"""``api_error``: the library error a caller gets, out of its groups, frames cut, cause kept."""

from __future__ import annotations

import traceback

import pytest

from helix_agents._aio import api_error
from helix_agents.errors import AgentServerError, UsageError


def raised(error: BaseException) -> BaseException:
    """``error`` after being raised and caught (so it carries a traceback)."""
    try:
        raise error
    except BaseException as caught:
        return caught


def test_a_group_of_one_gives_its_error_with_no_frames_and_its_cause_trimmed() -> None:
    cause = raised(KeyError("the cause"))
    inner = raised(UsageError("refused"))
    inner.__cause__ = cause
    group = raised(BaseExceptionGroup("tg", [raised(BaseExceptionGroup("inner", [inner]))]))
    assert None not in (cause.__traceback__, inner.__traceback__)

    error = api_error(group)

    assert error is inner
    assert error.__traceback__ is None
    assert error.__cause__ is cause  # kept, with its message...
    assert cause.__traceback__ is None  # ...but not its frames
    printed = "".join(traceback.format_exception(error))
    assert printed.splitlines() == [
        "KeyError: 'the cause'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "helix_agents.errors.UsageError: refused",
    ]


def test_an_implicit_context_is_trimmed_too_and_a_cycle_ends_the_walk() -> None:
    first = raised(AgentServerError("NOT_FOUND", "no such session"))
    second = raised(ValueError("while handling"))
    second.__context__ = first
    first.__context__ = second  # a cycle: the walk stops
    assert api_error(first) is first
    assert first.__traceback__ is None
    assert second.__traceback__ is None


@pytest.mark.parametrize(
    "error",
    [
        ValueError("not ours"),
        BaseExceptionGroup("two", [UsageError("a"), UsageError("b")]),
        KeyboardInterrupt(),
    ],
    ids=["not-ours", "a-group-of-two", "not-an-exception"],
)
def test_anything_else_is_left_to_the_caller(error: BaseException) -> None:
    caught = raised(error)
    assert api_error(caught) is None
    assert caught.__traceback__ is not None
