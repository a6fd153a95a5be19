"""The side-by-side run's printed lines and JSON figures, per engine.

Targets (issue 35): on DBOS, helix's durable overhead per agent step (over
its built-in runtime) at most Pydantic AI's (over its plain run) and at most
1.5x the engine's floor (the engine alone running as many no-op steps); on
Temporal, helix's time per agent step at most 0.7x Pydantic AI's.
"""

from __future__ import annotations

from typing import Any

from sidebyside.contender import SKIPPED

__all__ = ["DBOS_TARGETS", "TEMPORAL_TARGET", "dbos_block", "temporal_block"]

DBOS_TARGETS = {"helix_over_pai_overhead": 1.0, "helix_overhead_over_floor": 1.5}
"""On DBOS: the most helix's overhead may be over Pydantic AI's, and over the floor."""
TEMPORAL_TARGET = 0.7
"""On Temporal: the most helix's time per agent step may be over Pydantic AI's."""

Figures = dict[str, dict[str, Any] | None]


def _ms(figure: dict[str, Any] | None) -> float | None:
    return None if figure is None else float(figure["ms"])


def _ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom <= 0:
        return None
    return round(top / bottom, 2)


def _show(value: float | None, unit: str = " ms") -> str:
    return "    n/a" if value is None else f"{value:7.1f}{unit}"


def _skipped(*figures: dict[str, Any] | None) -> list[str]:
    return [f"  Pydantic AI: {SKIPPED}"] if any(f is None for f in figures) else []


def _over(durable: float | None, plain: float | None) -> float | None:
    return None if durable is None or plain is None else round(durable - plain, 3)


def _target(ratio: float | None, target: float) -> str:
    if ratio is None:
        return f"n/a (target <= {target:g})"
    return f"{ratio:.2f} (target <= {target:g}: {'met' if ratio <= target else 'not met'})"


def _head(title: str, steps: int, count: int, rounds: int) -> str:
    return (
        f"side by side on {title}: {steps} tool steps a session, {count} sessions a contender "
        f"a round, {rounds} interleaved round(s), medians; per agent step:"
    )


def _itemized(name: str, profile: dict[str, Any]) -> list[str]:
    engine = profile.get("engine_checkpoints_ms", profile.get("engine_and_rest_ms"))
    label = "engine checkpoints" if "engine_checkpoints_ms" in profile else "engine and the rest"
    hop = profile.get("loop_hop_ms")
    ours = f"our code {profile['our_code_ms']:.1f} ms" + (
        f" (of which {hop:.1f} ms handing the step to the worker's loop)" if hop is not None else ""
    )
    kinds = ", ".join(f"{key} {value:g}" for key, value in profile["steps_by_kind"].items())
    lines = [
        f"  {name} itemized, per agent step (of a mean {profile['total_ms']:.1f} ms): "
        f"{label} {engine:.1f} ms, log appends {profile['log_appends_ms']:.1f} ms "
        f"({profile['appends_per_step']:g}), log reads {profile['log_reads_ms']:.1f} ms "
        f"({profile['reads_per_step']:g}), {ours}"
        + (f", the rest {profile['rest_ms']:.1f} ms" if "rest_ms" in profile else ""),
        f"    outside the steps: the launch (the start until the first step) "
        f"{profile['launch_ms']:.1f} ms, between the steps and after them "
        f"{profile['between_steps_ms']:.1f} ms",
        f"    durable steps per agent step {profile['durable_steps_per_step']:g} ({kinds})",
    ]
    return lines


def dbos_block(
    where: str, figures: Figures, steps: int, count: int, rounds: int
) -> tuple[list[str], dict[str, Any]]:
    """The DBOS comparison on ``where`` (``sqlite`` or ``postgres``): lines and figures."""
    helix_plain, pai_plain = _ms(figures["helix_builtin"]), _ms(figures["pai_plain"])
    helix = figures[f"helix_dbos_{where}"]
    pai, bare = _ms(figures[f"pai_dbos_{where}"]), _ms(figures[f"bare_dbos_{where}"])
    helix_over = _over(_ms(helix), helix_plain)
    pai_over = _over(pai, pai_plain)
    ratios = {
        "helix_over_pai_overhead": _ratio(helix_over, pai_over),
        "helix_overhead_over_floor": _ratio(helix_over, bare),
    }
    title = "DBOS (SQLite system database)" if where == "sqlite" else "DBOS (Postgres system db)"
    lines = [
        _head(title, steps, count, rounds),
        f"  helix built-in (SQLite log)          {_show(helix_plain)}",
        f"  Pydantic AI plain (in memory)        {_show(pai_plain)}",
        f"  helix on DBOS (dbos_server)          {_show(_ms(helix))}   "
        f"durable overhead {_show(helix_over)}",
        f"  Pydantic AI DBOSAgent (tool a step)  {_show(pai)}   durable overhead {_show(pai_over)}",
        f"  DBOS alone (2 no-op steps)           {_show(bare)}   (the floor)",
        *_skipped(figures["pai_plain"], figures[f"pai_dbos_{where}"]),
        "  ratios: helix overhead / Pydantic AI overhead "
        + _target(ratios["helix_over_pai_overhead"], DBOS_TARGETS["helix_over_pai_overhead"])
        + "; helix overhead / the floor "
        + _target(ratios["helix_overhead_over_floor"], DBOS_TARGETS["helix_overhead_over_floor"]),
    ]
    if helix is not None and "profile" in helix:
        lines += _itemized("helix on DBOS", helix["profile"])
    summary = {
        "helix_builtin_ms": helix_plain,
        "pai_plain_ms": pai_plain,
        "helix_dbos_ms": _ms(helix),
        "pai_dbos_ms": pai,
        "bare_dbos_ms": bare,
        "helix_overhead_ms": helix_over,
        "pai_overhead_ms": pai_over,
        "floor_ms": bare,
        "ratios": ratios,
        "targets": DBOS_TARGETS,
        "helix_itemized": None if helix is None else helix.get("profile"),
        "rounds_ms": {key: (f or {}).get("rounds_ms") for key, f in figures.items()},
    }
    return lines, summary


def _history(name: str, history: dict[str, Any] | None) -> str:
    if history is None:
        return f"    {name}: n/a"
    return (
        f"    {name}: {history['bytes']:.0f} bytes, {history['events']:g} events, "
        f"{history['activities']:g} activities, {history['local_activities']:g} local "
        f"activities, {history['workflow_tasks']:g} workflow tasks"
    )


def temporal_block(
    figures: Figures, steps: int, count: int, rounds: int
) -> tuple[list[str], dict[str, Any]]:
    """The Temporal comparison: lines and figures."""
    helix_plain, pai_plain = _ms(figures["helix_builtin"]), _ms(figures["pai_plain"])
    helix, pai, bare = figures["helix_temporal"], figures["pai_temporal"], figures["bare_temporal"]
    helix_over = _over(_ms(helix), helix_plain)
    pai_over = _over(_ms(pai), pai_plain)
    ratio = _ratio(_ms(helix), _ms(pai))
    lines = [
        _head("Temporal (one dev server)", steps, count, rounds),
        f"  helix built-in (SQLite log)          {_show(helix_plain)}",
        f"  Pydantic AI plain (in memory)        {_show(pai_plain)}",
        f"  helix on Temporal (a worker here)    {_show(_ms(helix))}   "
        f"durable overhead {_show(helix_over)}",
        f"  Pydantic AI TemporalAgent            {_show(_ms(pai))}   "
        f"durable overhead {_show(pai_over)}",
        f"  Temporal alone (2 no-op activities)  {_show(_ms(bare))}   (the floor)",
        *_skipped(figures["pai_plain"], pai),
        "  ratio: helix per-step time / Pydantic AI per-step time "
        + _target(ratio, TEMPORAL_TARGET)
        + f"; helix overhead / Pydantic AI overhead {_ratio(helix_over, pai_over) or 'n/a'}",
    ]
    if helix is not None and "profile" in helix:
        lines += _itemized("helix on Temporal", helix["profile"])
    lines.append("  history per agent step (fetch_history):")
    for name, figure in (("helix", helix), ("Pydantic AI", pai), ("Temporal alone", bare)):
        lines.append(_history(name, None if figure is None else figure.get("history")))
    summary = {
        "helix_builtin_ms": helix_plain,
        "pai_plain_ms": pai_plain,
        "helix_temporal_ms": _ms(helix),
        "pai_temporal_ms": _ms(pai),
        "bare_temporal_ms": _ms(bare),
        "helix_overhead_ms": helix_over,
        "pai_overhead_ms": pai_over,
        "ratios": {
            "helix_over_pai_step": ratio,
            "helix_over_pai_overhead": _ratio(helix_over, pai_over),
        },
        "targets": {"helix_over_pai_step": TEMPORAL_TARGET},
        "helix_itemized": None if helix is None else helix.get("profile"),
        "history_per_step": {
            name: None if figure is None else figure.get("history")
            for name, figure in (("helix", helix), ("pai", pai), ("bare", bare))
        },
        "rounds_ms": {key: (f or {}).get("rounds_ms") for key, f in figures.items()},
    }
    return lines, summary
