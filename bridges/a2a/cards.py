"""Agent cards: one per served agent, and the gateway's root card listing them all as skills.

A card points at its JSON-RPC endpoint by absolute URL, built from the
request that fetched it (so a proxy's ``Host``/``X-Forwarded-*`` headers,
passed on by uvicorn, give the URL clients can reach). With a bearer token
set on the gateway, each card declares the ``bearer`` HTTP security scheme
and requires it. Cards are public: a client reads one to learn how to
authenticate (specs/a2a.md, "Authentication").
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from .handler import OUTPUT_MODES
from .wire import EXTENSION_URI

__all__ = ["INPUT_MODES", "ServedAgent", "agent_card", "root_card"]

INPUT_MODES = ("text/plain", "application/json")
"""What the served agents take: text, and JSON data (a first message's data is its input)."""

try:
    _VERSION = version("helix-agents")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    _VERSION = "0.0.0"


class ServedAgent:
    """A served agent as a card shows it: its type and what it does."""

    __slots__ = ("description", "name")

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description or f"The {name} agent"

    def skill(self) -> AgentSkill:
        """The agent as a skill (its id is its agent type)."""
        return AgentSkill(
            id=self.name,
            name=self.name,
            description=self.description,
            tags=["helix-agents"],
            input_modes=list(INPUT_MODES),
            output_modes=list(OUTPUT_MODES),
        )


def _card(
    name: str, description: str, url: str, skills: list[AgentSkill], bearer: bool
) -> AgentCard:
    card = AgentCard(
        name=name,
        description=description,
        version=_VERSION,
        provider=AgentProvider(organization="helix-agents", url="https://helix-agents.dev"),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extensions=[
                AgentExtension(
                    uri=EXTENSION_URI,
                    description="helix log sequences and chunks in event metadata; "
                    "Helix-From-Sequence replays a task's stream from a log position",
                    required=False,
                )
            ],
        ),
        default_input_modes=list(INPUT_MODES),
        default_output_modes=list(OUTPUT_MODES),
        skills=skills,
    )
    if bearer:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="the gateway's bearer token"
                )
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


def agent_card(agent: ServedAgent, base_url: str, *, bearer: bool) -> AgentCard:
    """The card of one served agent; its endpoint is ``{base_url}/a2a/{agent type}``."""
    return _card(
        agent.name, agent.description, f"{base_url}/a2a/{agent.name}", [agent.skill()], bearer
    )


def root_card(agents: list[ServedAgent], base_url: str, *, bearer: bool) -> AgentCard:
    """The gateway's card: every served agent as a skill; its endpoint is ``{base_url}/a2a``."""
    names = ", ".join(agent.name for agent in agents) or "none"
    return _card(
        "helix-agents",
        f"A helix-agents gateway serving: {names}. Each skill is an agent, also served "
        "on its own at /a2a/{skill id}.",
        f"{base_url}/a2a",
        [agent.skill() for agent in agents],
        bearer,
    )
