"""What the tokens cost: a price per model (or per agent) and the arithmetic, never a guess.

A :class:`ModelPrice` is USD per million input and output tokens. A
:class:`Prices` looks one up for an LLM call: the user's price for the agent
that made it, else the user's price for the model name the provider reported,
else the built-in :data:`DEFAULT_PRICES` (a few OpenAI models, dated: override
them). A dated snapshot name (``gpt-4o-mini-2024-07-18``) finds the price of
its model (``gpt-4o-mini``). A call that used tokens and has no price makes the
cost unknown (``None``), never a made-up number (``specs/ui.md``, "Cost").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from helix_agents.errors import UsageError
from helix_agents.log.state import UsageTotals

__all__ = ["DEFAULT_PRICES", "PRICES_AS_OF", "Cost", "ModelPrice", "Prices"]


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A model's list price: USD per million input tokens and per million output tokens."""

    input_per_million: float
    output_per_million: float

    def __post_init__(self) -> None:
        for name, value in (
            ("input_per_million", self.input_per_million),
            ("output_per_million", self.output_per_million),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UsageError(f"ModelPrice {name} must be a number of USD, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"ModelPrice {name} must be a finite number >= 0, not {value!r}")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """USD for ``input_tokens`` in and ``output_tokens`` out at this price."""
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


PRICES_AS_OF = "2025-08-07"
"""The date of the built-in prices: OpenAI's published standard-tier list prices then."""

DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    "gpt-4o": ModelPrice(input_per_million=2.50, output_per_million=10.00),
    "gpt-4o-mini": ModelPrice(input_per_million=0.15, output_per_million=0.60),
    "gpt-4.1": ModelPrice(input_per_million=2.00, output_per_million=8.00),
    "gpt-4.1-mini": ModelPrice(input_per_million=0.40, output_per_million=1.60),
    "gpt-4.1-nano": ModelPrice(input_per_million=0.10, output_per_million=0.40),
    "o3": ModelPrice(input_per_million=2.00, output_per_million=8.00),
    "o4-mini": ModelPrice(input_per_million=1.10, output_per_million=4.40),
    "gpt-5": ModelPrice(input_per_million=1.25, output_per_million=10.00),
    "gpt-5-mini": ModelPrice(input_per_million=0.25, output_per_million=2.00),
    "gpt-5-nano": ModelPrice(input_per_million=0.05, output_per_million=0.40),
}
"""Built-in prices by model name, as of :data:`PRICES_AS_OF` (standard tier, no batch or
cached-input discount). Defaults to override: prices change, and yours may differ."""

_PROVIDER = re.compile(r"^(openai|openai-compatible):")
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")


def _model_key(name: str) -> str:
    """A price table's key for ``name``: without a ``provider:`` prefix."""
    return _PROVIDER.sub("", name)


class Cost(msgspec.Struct, kw_only=True, rename="camel"):
    """What some usage cost: ``usd``, or ``None`` when a call that used tokens has no price.

    ``unpriced`` names the models (``"(unnamed)"`` for a call whose provider
    reported none) that had no price, for a page to say what to configure.
    """

    usd: float | None = 0.0
    unpriced: list[str] = []

    def add(self, other: Cost) -> None:
        """Add ``other`` into this cost (unknown stays unknown)."""
        self.usd = None if self.usd is None or other.usd is None else self.usd + other.usd
        self.unpriced.extend(name for name in other.unpriced if name not in self.unpriced)


class Prices:
    """Where prices come from: yours by agent, yours by model name, then the defaults.

    Args:
        models: prices by model name; ``openai:gpt-4o-mini`` and ``gpt-4o-mini``
            are the same key. A call whose model reported a dated snapshot name
            finds its model's price.
        agents: prices by agent type: every call of that agent costs this,
            whatever model it reported (a scripted or self-hosted model).
        defaults: also use :data:`DEFAULT_PRICES` (after yours).
    """

    def __init__(
        self,
        models: Mapping[str, ModelPrice] | None = None,
        *,
        agents: Mapping[str, ModelPrice] | None = None,
        defaults: bool = True,
    ) -> None:
        self.models = {_model_key(k): v for k, v in _checked("models", models).items()}
        self.agents = dict(_checked("agents", agents))
        self.defaults = bool(defaults)

    @classmethod
    def from_json(cls, data: bytes | str) -> Prices:
        """Prices from JSON (the file ``serve --prices`` reads).

        The shape: ``{"models": {NAME: PRICE}, "agents": {TYPE: PRICE}, "defaults": true}``
        (each key optional); a price is ``{"inputPerMillion": USD, "outputPerMillion": USD}``.

        Raises:
            UsageError: not that shape, or a price that is not a number >= 0.
        """
        try:
            parsed = msgspec.json.decode(data, type=_PriceFile)
        except msgspec.ValidationError as exc:
            raise UsageError(f"prices: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise UsageError(f"prices: not JSON ({exc})") from exc
        return cls(parsed.models, agents=parsed.agents, defaults=parsed.defaults)

    @classmethod
    def from_file(cls, path: str | Path) -> Prices:
        """Prices from a JSON file (:meth:`from_json`'s shape); ``UsageError`` if unreadable."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise UsageError(f"prices file {str(path)!r}: {exc.strerror or exc}") from exc
        try:
            return cls.from_json(data)
        except UsageError as exc:
            raise UsageError(f"prices file {str(path)!r}: {exc}") from exc

    def price(self, model: str | None, agent_type: str | None = None) -> ModelPrice | None:
        """The price of a call by ``agent_type`` to ``model``, or ``None`` when none is known."""
        if agent_type is not None and agent_type in self.agents:
            return self.agents[agent_type]
        if not model:
            return None
        tables = [self.models, DEFAULT_PRICES] if self.defaults else [self.models]
        for table in tables:
            for name in (model, _model_key(model), _SNAPSHOT.sub("", _model_key(model))):
                if name in table:
                    return table[name]
        return None

    def cost(self, usage: UsageTotals, agent_type: str | None = None) -> Cost:
        """What ``usage`` (one session's) cost, each model's tokens at its price."""
        cost = Cost()
        for model, tokens in sorted(usage.models.items()):
            if tokens.input_tokens == 0 and tokens.output_tokens == 0:
                continue  # nothing to pay, price or not
            price = self.price(model or None, agent_type)
            if price is None:
                cost.add(Cost(usd=None, unpriced=[model or "(unnamed)"]))
            else:
                cost.add(Cost(usd=price.cost(tokens.input_tokens, tokens.output_tokens)))
        return cost


class _PriceFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    models: dict[str, ModelPrice] = {}
    agents: dict[str, ModelPrice] = {}
    defaults: bool = True


def _checked(what: str, table: Mapping[str, ModelPrice] | None) -> Mapping[str, ModelPrice]:
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise UsageError(f"Prices {what} must map names to ModelPrice, not {type(table).__name__}")
    for key, value in table.items():
        if not isinstance(key, str) or not key:
            raise UsageError(f"Prices {what}: a key must be a non-empty name, not {key!r}")
        if not isinstance(value, ModelPrice):
            raise UsageError(f"Prices {what}[{key!r}] must be a ModelPrice, not {value!r}")
    return table
