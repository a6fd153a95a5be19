"""Webhook signatures, the URL allow-list and the outbox fold (specs/server.md "Webhooks")."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import msgspec
import pytest

from helix_agents.branches.copy import branch_log
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.events import (
    ApprovalRequested,
    Completed,
    Failed,
    RunStarted,
    SessionCreated,
    SessionForked,
    Suspended,
    Webhook,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
)
from helix_agents.runtime.writer import stamp
from helix_agents.server.webhooks import AllowList, check_url
from helix_agents.webhooks import WebhookSignatureError, fold_outbox, sign, verify

BODY = b'{"event":"completed"}'


def test_a_signature_is_the_hmac_of_the_timestamp_and_the_body() -> None:
    header = sign("k", BODY, timestamp=1_700_000_000)
    digest = hmac.new(b"k", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={digest}"
    assert verify("k", BODY, header, now=1_700_000_100) == 1_700_000_000


def test_verify_refuses_what_it_should() -> None:
    header = sign("k", BODY, timestamp=1_700_000_000)
    now = 1_700_000_000
    with pytest.raises(WebhookSignatureError, match="no Helix-Signature"):
        verify("k", BODY, None, now=now)
    with pytest.raises(WebhookSignatureError, match="malformed"):
        verify("k", BODY, "v1=abc", now=now)
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify("other", BODY, header, now=now)
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify("k", BODY + b" ", header, now=now)
    with pytest.raises(WebhookSignatureError, match="replay"):
        verify("k", BODY, header, now=now + 301)
    assert verify("k", BODY, header, now=now + 50, tolerance=60) == now
    # Two v1 entries (a rotation): either matching is enough.
    rotated = f"{header},v1={'0' * 64}"
    assert verify("k", BODY, rotated, now=now) == now


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("192.168.1.2", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::ffff:127.0.0.1", "loopback"),
        ("100.64.0.1", "non-global"),
        ("93.184.216.34", None),
    ],
)
def test_the_allow_list_refuses_non_public_addresses(address: str, kind: str | None) -> None:
    assert AllowList().refusal(ipaddress.ip_address(address)) == kind


def test_an_allowed_network_is_allowed_and_a_bad_entry_refused() -> None:
    allow = AllowList(["127.0.0.1", "10.1.0.0/16", "Hooks.Internal."])
    assert allow.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert allow.refusal(ipaddress.ip_address("10.1.2.3")) is None
    assert allow.refusal(ipaddress.ip_address("10.2.0.1")) == "private"
    assert allow.hosts == {"hooks.internal"}
    with pytest.raises(UsageError, match="not a CIDR"):
        AllowList(["http://x/"])


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/", "scheme"),
        ("http:///nohost", "no host"),
        ("http://u:p@example.com/", "credentials"),
        ("http://example.com/#frag", "fragment"),
        ("http://example.com:99999/", "out of range"),
        ("http://example.com/" + "a" * 2100, "longer than"),
        ("http://10.0.0.1/", "private"),
    ],
)
async def test_check_url_refuses_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(AgentServerError, match=why) as caught:
        await check_url(url, AllowList())
    assert caught.value.code == "INVALID_REQUEST"


async def test_check_url_connects_to_the_checked_address() -> None:
    target = await check_url("http://127.0.0.1:8080/a?b=1", AllowList(["127.0.0.1"]))
    assert target.connect_url() == "http://127.0.0.1:8080/a?b=1"
    assert target.host_header == "127.0.0.1:8080"
    v6 = await check_url("https://[::1]/x", AllowList(["::1"]))
    assert v6.connect_url() == "https://[::1]:443/x"


def test_the_outbox_owes_one_delivery_per_run_end_it_asks_about() -> None:
    hook = Webhook(url="https://hooks.example.com/h", events=["completed", "paused_for_person"])
    events = stamp(
        "s",
        0,
        [
            SessionCreated(agent_type="a", run_id="r1", webhook=hook),
            RunStarted(run_id="r1"),
            ApprovalRequested(tool_call_id="c1", tool_name="rm"),
            Suspended(reason="approval", tool_call_ids=["c1"]),
            WebhookAttempted(delivery_id="s#4", attempt=1, next_at=100.0),
            WebhookFailed(delivery_id="s#4", attempt=1, error="HTTP 500", next_at=50.0),
            RunStarted(run_id="r2", mode="resume"),
            Failed(error="boom"),  # not asked about
            RunStarted(run_id="r3", mode="continue"),
            Completed(output={"ok": True}),
            WebhookAttempted(delivery_id="s#10", attempt=1, next_at=200.0),
            WebhookDelivered(delivery_id="s#10", attempt=1, status_code=204),
        ],
    )
    outbox = fold_outbox(events)
    paused, done = outbox.deliveries
    assert (paused.delivery_id, paused.event, paused.attempts) == ("s#4", "paused_for_person", 1)
    assert (paused.last_error, paused.next_at, paused.settled) == ("HTTP 500", 50.0, False)
    assert [entry.tool_call_id for entry in paused.pending_inputs] == ["c1"]
    assert (done.delivery_id, done.event, done.delivered) == ("s#10", "completed", True)
    assert done.body("s", "a")["output"] == {"ok": True}
    assert outbox.pending() == [paused]
    assert [(w.event, w.attempts, w.delivered) for w in outbox.status()] == [
        ("paused_for_person", 1, False),
        ("completed", 1, True),
    ]


def test_a_log_without_a_webhook_owes_nothing() -> None:
    events = stamp(
        "s", 0, [SessionCreated(agent_type="a", run_id="r"), RunStarted(run_id="r"), Completed()]
    )
    outbox = fold_outbox(events)
    assert outbox.webhook is None
    assert outbox.deliveries == []
    assert outbox.status() == []


def test_a_branch_does_not_inherit_its_origins_webhook() -> None:
    """A fork's caller did not ask for the origin's webhook: the branch owes nothing, even
    for the run ends its copied prefix holds."""
    hook = Webhook(url="https://hooks.example.com/h")
    prefix = stamp(
        "origin",
        0,
        [
            SessionCreated(agent_type="a", run_id="r", webhook=hook),
            RunStarted(run_id="r"),
            Completed(output=1),
        ],
    )
    assert len(fold_outbox(prefix).deliveries) == 1
    marker = SessionForked(origin_session_id="origin", origin_seq=3)
    branch = branch_log(prefix, {"origin": "branch"}, [], marker)
    created = branch[0]
    assert isinstance(created, SessionCreated)
    assert created.webhook is msgspec.UNSET
    assert fold_outbox(branch).deliveries == []
