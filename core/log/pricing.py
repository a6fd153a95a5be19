"""What the tokens cost: a price per model (or per agent) and the arithmetic, never a guess.

A :class:`ModelPrice` is USD per million input and output tokens, and per
million cached input tokens (read from the provider's prompt cache) and
reasoning tokens (thinking) when those are priced apart. A :class:`Prices`
looks one up for an LLM call: the user's price for the agent that made it,
else the user's price for the model name the provider reported, else the
built-in :data:`DEFAULT_PRICES` (a few OpenAI, Anthropic and Google models,
dated: override them). A dated snapshot name (``gpt-4o-mini-2024-07-18``,
``claude-sonnet-4-20250514``) finds the price of its model. A call that used
tokens and has no price makes the cost unknown (``None``), never a made-up
number (``specs/ui.md``, "Cost").
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
    """A model's list price in USD per million tokens.

    ``cached_input_per_million`` prices the input tokens read from the
    provider's prompt cache (``None``: the input price, no discount assumed);
    ``reasoning_per_million`` prices the reasoning (thinking) tokens, which
    are part of the output (``None``: the output price, as providers bill them).
    """

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None
    reasoning_per_million: float | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("input_per_million", self.input_per_million),
            ("output_per_million", self.output_per_million),
            ("cached_input_per_million", self.cached_input_per_million),
            ("reasoning_per_million", self.reasoning_per_million),
        ):
            if value is None and name not in ("input_per_million", "output_per_million"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UsageError(f"ModelPrice {name} must be a number of USD, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"ModelPrice {name} must be a finite number >= 0, not {value!r}")

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cached_input_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> float:
        """USD for ``input_tokens`` in and ``output_tokens`` out at this price.

        ``cached_input_tokens`` of the input and ``reasoning_tokens`` of the
        output are priced at their own prices (a count above its whole counts
        as the whole).
        """
        cached = min(max(cached_input_tokens, 0), input_tokens)
        reasoning = min(max(reasoning_tokens, 0), output_tokens)
        cached_price = self.cached_input_per_million
        reasoning_price = self.reasoning_per_million
        return (
            (input_tokens - cached) * self.input_per_million
            + cached * (self.input_per_million if cached_price is None else cached_price)
            + (output_tokens - reasoning) * self.output_per_million
            + reasoning * (self.output_per_million if reasoning_price is None else reasoning_price)
        ) / 1_000_000


def _price(input: float, output: float, cached: float) -> ModelPrice:
    return ModelPrice(
        input_per_million=input, output_per_million=output, cached_input_per_million=cached
    )


PRICES_AS_OF = "2025-08-07"
"""The date of the built-in prices: the providers' published standard-tier list prices then."""

DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    # OpenAI: cached input at its published price (50 % off for gpt-4o, 75 % for
    # gpt-4.1 and o-series, 90 % for gpt-5); reasoning tokens are output tokens.
    "gpt-4o": _price(2.50, 10.00, 1.25),
    "gpt-4o-mini": _price(0.15, 0.60, 0.075),
    "gpt-4.1": _price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _price(0.10, 0.40, 0.025),
    "o3": _price(2.00, 8.00, 0.50),
    "o4-mini": _price(1.10, 4.40, 0.275),
    "gpt-5": _price(1.25, 10.00, 0.125),
    "gpt-5-mini": _price(0.25, 2.00, 0.025),
    "gpt-5-nano": _price(0.05, 0.40, 0.005),
    # Anthropic: a cache read is 10 % of the input price (a cache write, 125 %, is
    # priced as input); extended thinking is billed as output.
    "claude-opus-4-1": _price(15.00, 75.00, 1.50),
    "claude-opus-4": _price(15.00, 75.00, 1.50),
    "claude-sonnet-4": _price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": _price(3.00, 15.00, 0.30),
    "claude-3-5-haiku": _price(0.80, 4.00, 0.08),
    # Google: prompts up to 200k tokens (gemini-2.5-pro costs more above); cached
    # input at the context-caching price; thinking is billed as output.
    "gemini-2.5-pro": _price(1.25, 10.00, 0.31),
    "gemini-2.5-flash": _price(0.30, 2.50, 0.075),
    "gemini-2.5-flash-lite": _price(0.10, 0.40, 0.025),
}
"""Built-in prices by model name, as of :data:`PRICES_AS_OF` (standard tier, no batch
discount; cached input at the provider's discount). Defaults to override: prices change,
and yours may differ."""

_PROVIDER = re.compile(r"^(openai|openai-compatible|openai-responses|anthropic|google):")
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|latest)$")


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
        (each key optional); a price is ``{"inputPerMillion": USD, "outputPerMillion": USD}``
        and optionally ``"cachedInputPerMillion"`` and ``"reasoningPerMillion"``.

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
                usd = price.cost(
                    tokens.input_tokens,
                    tokens.output_tokens,
                    cached_input_tokens=tokens.cached_input_tokens,
                    reasoning_tokens=tokens.reasoning_tokens,
                )
                cost.add(Cost(usd=usd))
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
