"""Prices: the arithmetic, the lookup (agent, model, snapshot names, defaults), a file, rollups."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from helix_agents.errors import UsageError
from helix_agents.events import SessionCreated, SubSessionStarted, UsageRecorded
from helix_agents.log import Cost, ModelPrice, ModelTokens, Prices, UsageTotals, get_usage_rollup
from helix_agents.log.pricing import DEFAULT_PRICES, PRICES_AS_OF
from helix_agents.stores import MemoryEventStore

MINI = ModelPrice(input_per_million=0.15, output_per_million=0.60, cached_input_per_million=0.075)


def _usage(**models: tuple[int, int]) -> UsageTotals:
    return UsageTotals(
        input_tokens=sum(i for i, _ in models.values()),
        output_tokens=sum(o for _, o in models.values()),
        llm_calls=len(models),
        models={
            name.replace("_", "-").replace("unnamed", ""): ModelTokens(
                input_tokens=i, output_tokens=o, llm_calls=1
            )
            for name, (i, o) in models.items()
        },
    )


def test_the_arithmetic_is_usd_per_million_tokens() -> None:
    assert MINI.cost(1_000_000, 0) == pytest.approx(0.15)
    assert MINI.cost(0, 1_000_000) == pytest.approx(0.60)
    assert MINI.cost(2_000, 500) == pytest.approx((2_000 * 0.15 + 500 * 0.60) / 1e6)
    assert MINI.cost(0, 0) == 0.0


@pytest.mark.parametrize("bad", [-0.01, math.inf, math.nan, "0.15", True])
def test_a_price_that_is_not_a_finite_number_at_least_zero_is_refused(bad: Any) -> None:
    with pytest.raises(UsageError, match="input_per_million"):
        ModelPrice(input_per_million=bad, output_per_million=1.0)


def test_the_lookup_order_agent_then_yours_then_the_defaults() -> None:
    own = ModelPrice(input_per_million=1.0, output_per_million=2.0)
    agent = ModelPrice(input_per_million=9.0, output_per_million=9.0)
    prices = Prices({"openai:gpt-4o-mini": own}, agents={"writer": agent})
    # Your price for the model, whether you wrote the provider or not, and the
    # dated snapshot name the provider reports finds it too.
    assert prices.price("gpt-4o-mini") is own
    assert prices.price("gpt-4o-mini-2024-07-18") is own
    assert prices.price("openai:gpt-4o-mini") is own
    # An agent's price wins over any model's.
    assert prices.price("gpt-4o-mini", "writer") is agent
    assert prices.price(None, "writer") is agent
    # The defaults fill the gaps; a longer name is not its prefix's model.
    assert prices.price("gpt-4o") is DEFAULT_PRICES["gpt-4o"]
    assert prices.price("gpt-4o-2024-08-06") is DEFAULT_PRICES["gpt-4o"]
    assert prices.price("gpt-4o-mini-audio") is None
    assert prices.price("llama3.2:3b") is None
    assert prices.price(None) is None
    assert prices.price("") is None
    assert Prices(defaults=False).price("gpt-4o") is None


def test_the_defaults_are_dated_and_each_a_price() -> None:
    assert PRICES_AS_OF.count("-") == 2
    assert DEFAULT_PRICES["gpt-4o-mini"] == MINI
    assert all(isinstance(price, ModelPrice) for price in DEFAULT_PRICES.values())


def test_a_cost_sums_each_models_tokens_at_its_price() -> None:
    usage = _usage(gpt_4o_mini=(1_000, 200), gpt_4o=(3_000, 100))
    cost = Prices().cost(usage)
    expected = MINI.cost(1_000, 200) + DEFAULT_PRICES["gpt-4o"].cost(3_000, 100)
    assert cost.usd == pytest.approx(expected)
    assert cost.unpriced == []


def test_an_unpriced_call_makes_the_cost_unknown_never_a_guess() -> None:
    cost = Prices().cost(_usage(gpt_4o_mini=(1_000, 200), my_local_model=(50, 5), unnamed=(7, 1)))
    assert cost.usd is None
    assert cost.unpriced == ["(unnamed)", "my-local-model"]
    # A call that used no tokens costs nothing, price or not; no calls cost 0.
    assert Prices().cost(_usage(my_local_model=(0, 0))) == Cost(usd=0.0)
    assert Prices().cost(UsageTotals()) == Cost(usd=0.0)
    # An agent's price covers whatever its calls reported.
    flat = ModelPrice(input_per_million=1.0, output_per_million=1.0)
    by_agent = Prices(agents={"local": flat}).cost(_usage(unnamed=(500_000, 500_000)), "local")
    assert by_agent.usd == pytest.approx(1.0)


def test_costs_add_and_unknown_stays_unknown() -> None:
    total = Cost()
    total.add(Cost(usd=0.5))
    total.add(Cost(usd=0.25))
    assert total.usd == pytest.approx(0.75)
    total.add(Cost(usd=None, unpriced=["x"]))
    total.add(Cost(usd=1.0))
    total.add(Cost(usd=None, unpriced=["x", "y"]))
    assert (total.usd, total.unpriced) == (None, ["x", "y"])


def test_prices_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        '{"models": {"openai:my-ft": {"inputPerMillion": 3, "outputPerMillion": 12}},'
        ' "agents": {"writer": {"inputPerMillion": 0.5, "outputPerMillion": 1.5}},'
        ' "defaults": false}'
    )
    prices = Prices.from_file(path)
    assert prices.price("my-ft") == ModelPrice(input_per_million=3.0, output_per_million=12.0)
    assert prices.price("x", "writer") == ModelPrice(input_per_million=0.5, output_per_million=1.5)
    assert prices.price("gpt-4o") is None  # defaults off


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ('{"model": {}}', "unknown field"),
        ('{"models": {"m": {"inputPerMillion": 1}}}', "outputPerMillion"),
        ('{"models": {"m": {"inputPerMillion": "1", "outputPerMillion": 1}}}', "Expected"),
        ('{"models": {"m": {"inputPerMillion": -1, "outputPerMillion": 1}}}', ">= 0"),
    ],
)
def test_a_bad_prices_file_is_one_usage_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(UsageError, match="prices file") as refused:
        Prices.from_file(path)
    assert says in str(refused.value)
    with pytest.raises(UsageError, match="No such file"):
        Prices.from_file(tmp_path / "missing.json")


def test_bad_tables_are_refused() -> None:
    with pytest.raises(UsageError, match="must be a ModelPrice"):
        Prices({"gpt-4o": {"inputPerMillion": 1}})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="non-empty name"):
        Prices(agents={"": MINI})


async def test_the_rollup_prices_every_session_of_the_tree() -> None:
    store = MemoryEventStore()
    await store.append(
        "root",
        [
            SessionCreated(session_id="root", seq=1, ts=1.0, agent_type="lead", run_id="r"),
            UsageRecorded(
                session_id="root",
                seq=2,
                ts=2.0,
                kind="tokens",
                name="gpt-4o-mini-2024-07-18",
                input_tokens=10_000,
                output_tokens=1_000,
            ),
            SubSessionStarted(
                session_id="root",
                seq=3,
                ts=3.0,
                sub_session_id="kid",
                agent_type="writer",
                tool_call_id="c1",
            ),
        ],
        0,
    )
    await store.append(
        "kid",
        [
            SessionCreated(
                session_id="kid",
                seq=1,
                ts=1.0,
                agent_type="writer",
                run_id="r",
                parent_session_id="root",
            ),
            UsageRecorded(
                session_id="kid",
                seq=2,
                ts=2.0,
                kind="tokens",
                name="scripted",
                input_tokens=4_000,
                output_tokens=400,
            ),
        ],
        0,
    )
    unknown = await get_usage_rollup(store, "root")
    assert unknown.cost_usd is None
    assert unknown.unpriced_models == ["scripted"]
    assert unknown.models["gpt-4o-mini-2024-07-18"].input_tokens == 10_000
    writer = ModelPrice(input_per_million=1.0, output_per_million=2.0)
    rollup = await get_usage_rollup(store, "root", prices=Prices(agents={"writer": writer}))
    assert rollup.cost_usd == pytest.approx(MINI.cost(10_000, 1_000) + writer.cost(4_000, 400))
    assert rollup.unpriced_models == []
    own = await get_usage_rollup(store, "root", include_sub_agents=False)
    assert own.cost_usd == pytest.approx(MINI.cost(10_000, 1_000))


def test_create_http_app_takes_prices_or_a_mapping_of_model_prices() -> None:
    from helix_agents.server import AgentServer, create_http_app
    from helix_agents.server.gateway.app import _prices

    assert _prices({"openai:m": MINI}).price("m") is MINI
    given = Prices(agents={"a": MINI})
    assert _prices(given) is given
    assert _prices(None).price("gpt-4o-mini") == MINI  # the defaults
    with pytest.raises(UsageError, match="prices must be Prices or a mapping"):
        create_http_app(AgentServer([], MemoryEventStore()), prices=42)  # type: ignore[arg-type]


# --- cached input and reasoning (issue 33) ------------------------------------------


def test_cached_input_and_reasoning_are_priced_apart() -> None:
    price = ModelPrice(
        input_per_million=3.0,
        output_per_million=15.0,
        cached_input_per_million=0.3,
        reasoning_per_million=20.0,
    )
    # 1M in, of which 800k cached; 100k out, of which 40k reasoning.
    usd = price.cost(1_000_000, 100_000, cached_input_tokens=800_000, reasoning_tokens=40_000)
    assert usd == pytest.approx(
        200_000 * 3.0 / 1e6 + 800_000 * 0.3 / 1e6 + 60_000 * 15.0 / 1e6 + 40_000 * 20.0 / 1e6
    )
    # Not given: cached input at the input price, reasoning at the output price.
    plain = ModelPrice(input_per_million=3.0, output_per_million=15.0)
    assert plain.cost(1_000, 500, cached_input_tokens=900, reasoning_tokens=400) == pytest.approx(
        plain.cost(1_000, 500)
    )
    # A count above its whole (a provider's slip) counts as the whole, never a negative.
    assert price.cost(100, 10, cached_input_tokens=500, reasoning_tokens=50) == pytest.approx(
        (100 * 0.3 + 10 * 20.0) / 1e6
    )


@pytest.mark.parametrize("field", ["cached_input_per_million", "reasoning_per_million"])
@pytest.mark.parametrize("bad", [-1.0, math.inf, "0.1", True])
def test_a_bad_cached_or_reasoning_price_is_refused(field: str, bad: Any) -> None:
    with pytest.raises(UsageError, match=field):
        ModelPrice(input_per_million=1.0, output_per_million=1.0, **{field: bad})


def test_the_defaults_price_cached_input_at_the_providers_discount() -> None:
    prices = Prices()
    mini = prices.price("gpt-4o-mini-2024-07-18")
    assert mini is not None
    assert mini.cached_input_per_million == pytest.approx(mini.input_per_million / 2)
    assert mini.reasoning_per_million is None  # reasoning is output, at the output price
    sonnet = prices.price("anthropic:claude-sonnet-4-20250514")
    assert sonnet is not None
    assert sonnet.cached_input_per_million == pytest.approx(sonnet.input_per_million / 10)
    flash = prices.price("google:gemini-2.5-flash")
    assert flash is not None
    assert flash.cached_input_per_million == pytest.approx(flash.input_per_million / 4)
    assert prices.price("claude-3-5-haiku-latest") is DEFAULT_PRICES["claude-3-5-haiku"]
    assert all(
        price.cached_input_per_million is not None
        and price.cached_input_per_million < price.input_per_million
        for price in DEFAULT_PRICES.values()
    )


def test_a_prices_file_takes_cached_and_reasoning_prices(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        '{"models": {"m": {"inputPerMillion": 2, "outputPerMillion": 8,'
        ' "cachedInputPerMillion": 0.5, "reasoningPerMillion": 8}}}'
    )
    assert Prices.from_file(path).price("m") == ModelPrice(
        input_per_million=2.0,
        output_per_million=8.0,
        cached_input_per_million=0.5,
        reasoning_per_million=8.0,
    )


async def test_the_rollup_counts_and_prices_cached_and_reasoning_tokens() -> None:
    store = MemoryEventStore()
    await store.append(
        "root",
        [
            SessionCreated(session_id="root", seq=1, ts=1.0, agent_type="lead", run_id="r"),
            UsageRecorded(
                session_id="root",
                seq=2,
                ts=2.0,
                kind="tokens",
                name="gpt-5-mini",
                input_tokens=100_000,
                output_tokens=20_000,
                cached_input_tokens=80_000,
                reasoning_tokens=12_000,
            ),
            UsageRecorded(
                session_id="root",
                seq=3,
                ts=3.0,
                kind="tokens",
                name="gpt-5-mini",
                input_tokens=50_000,
                output_tokens=1_000,
            ),
        ],
        0,
    )
    rollup = await get_usage_rollup(store, "root")
    assert (rollup.input_tokens, rollup.cached_input_tokens) == (150_000, 80_000)
    assert (rollup.output_tokens, rollup.reasoning_tokens) == (21_000, 12_000)
    tokens = rollup.models["gpt-5-mini"]
    assert (tokens.cached_input_tokens, tokens.reasoning_tokens, tokens.llm_calls) == (
        80_000,
        12_000,
        2,
    )
    # gpt-5-mini: $0.25 in, $0.025 cached in, $2.00 out (reasoning is output).
    expected = (70_000 * 0.25 + 80_000 * 0.025 + 21_000 * 2.00) / 1e6
    assert rollup.cost_usd == pytest.approx(expected)
    # Priced as if nothing were cached, it would cost more: the discount is applied.
    assert expected < (150_000 * 0.25 + 21_000 * 2.00) / 1e6
