"""The identity model and its one decision (specs/auth.md), the token forms, and replay's lines."""

from __future__ import annotations

import anyio
import pytest

from helix_agents.auth import (
    DEFAULT_IDENTITY,
    FirstOf,
    Identity,
    StaticTokens,
    authenticator_of,
    authorize,
    decided_by,
    parse_token_line,
)
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.events import Principal, RequestMade, SessionCreated
from helix_agents.server.cli.timeline import summarize_event

ACME = Principal(tenant="acme", user="alice")
GLOBEX = Principal(tenant="globex", user="bob")
MEMBER = Identity(user="carol", tenant="acme")
READER = Identity(user="rita", tenant="acme", roles=frozenset({"reader"}))
ADMIN = Identity(user="root", roles=frozenset({"admin"}))


def _code(identity: Identity, action: str, owner: Principal | None) -> str:
    try:
        authorize(identity, action, session_id="s-1", owner=owner)  # type: ignore[arg-type]
    except AgentServerError as exc:
        return exc.code
    return "ok"


@pytest.mark.parametrize(
    ("identity", "action", "owner", "expected"),
    [
        (MEMBER, "read", ACME, "ok"),
        (MEMBER, "write", ACME, "ok"),
        (MEMBER, "read", GLOBEX, "NOT_FOUND"),
        (MEMBER, "write", GLOBEX, "NOT_FOUND"),
        (MEMBER, "read", None, "NOT_FOUND"),  # unowned: every-tenant identities only
        (READER, "read", ACME, "ok"),
        (READER, "write", ACME, "FORBIDDEN"),
        (READER, "write", GLOBEX, "FORBIDDEN"),  # the permission first: nothing told
        (READER, "read", GLOBEX, "NOT_FOUND"),
        (ADMIN, "write", GLOBEX, "ok"),
        (ADMIN, "read", None, "ok"),
        (DEFAULT_IDENTITY, "write", None, "ok"),
        (Identity(user="x", roles=frozenset({"auditor"})), "write", Principal(user="y"), "ok"),
    ],
)
def test_one_decision_per_role_action_and_owner(
    identity: Identity, action: str, owner: Principal | None, expected: str
) -> None:
    assert _code(identity, action, owner) == expected


def test_another_tenants_session_reads_as_one_that_does_not_exist() -> None:
    with pytest.raises(AgentServerError) as refused:
        authorize(MEMBER, "read", session_id="s-9", owner=GLOBEX)
    assert (refused.value.code, refused.value.message) == ("NOT_FOUND", "session 's-9' not found")


def test_principal_and_decider_come_from_the_identity() -> None:
    assert MEMBER.principal == Principal(tenant="acme", user="carol")
    assert DEFAULT_IDENTITY.principal is None
    assert decided_by(MEMBER, "Mallory") == "carol"
    assert decided_by(DEFAULT_IDENTITY, "Ada") == "Ada"
    assert decided_by(Identity(user="a\nb" + "x" * 300), None) == ("ab" + "x" * 300)[:200]


def test_the_old_token_forms_are_one_identity_of_every_permission() -> None:
    async def check(token: str) -> bool:
        return token == "yes"

    async def run() -> None:
        listed = authenticator_of(["t1", "t2"])
        assert await listed.authenticate({"authorization": "Bearer t2"}) == DEFAULT_IDENTITY
        assert await listed.authenticate({"authorization": "Bearer t3"}) is None
        assert await listed.authenticate({"authorization": "Basic t2"}) is None
        called = authenticator_of(check)
        assert await called.authenticate({"authorization": "Bearer yes"}) == DEFAULT_IDENTITY
        assert await called.authenticate({"authorization": "Bearer no"}) is None
        mapped = authenticator_of({"t-a": MEMBER})
        assert await mapped.authenticate({"authorization": "Bearer t-a"}) == MEMBER
        both = FirstOf(StaticTokens({"t-r": READER}), mapped)
        assert await both.authenticate({"authorization": "Bearer t-a"}) == MEMBER

    anyio.run(run)
    with pytest.raises(UsageError):
        authenticator_of("one-string")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        StaticTokens({"t": "not an identity"})  # type: ignore[dict-item]


def test_a_token_line_is_a_token_and_its_identity() -> None:
    assert parse_token_line("abc") == ("abc", DEFAULT_IDENTITY)
    assert parse_token_line("abc tenant=acme roles=reader,x user=rita") == (
        "abc",
        Identity(user="rita", tenant="acme", roles=frozenset({"reader", "x"})),
    )
    for bad in ("abc role=x", "abc user=", "abc user=a user=b", "abc plain"):
        with pytest.raises(UsageError):
            parse_token_line(bad)


def test_replay_names_the_owner_and_who_made_a_request() -> None:
    created = SessionCreated(agent_type="solo", run_id="run-1", owner=ACME)
    assert "owner=alice@acme" in summarize_event(created)
    made = RequestMade(action="approval", by=ACME, ref="call_0_1")
    assert summarize_event(made) == "approval (call_0_1) by alice@acme"
    assert summarize_event(RequestMade(action="abort", by=Principal(user="ops"))) == "abort by ops"
