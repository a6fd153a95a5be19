"""How much the property, fuzz and soak tests do: CI's budget, or the long run by hand.

The README's test command (what ``.ci/run`` runs) uses CI's budget: every
property, fuzz and soak test runs, on fewer examples, roots or scenarios.
``HELIX_BUDGET=long`` is the long run, by hand: the Hypothesis profile
``long`` and every budget here at its long value. ``HYPOTHESIS_PROFILE``
still picks a Hypothesis profile of its own (``tests/conftest.py``).

Standard library only: the benchmarks may load it too.
"""

from __future__ import annotations

import os

__all__ = ["LONG", "budget"]

LONG = os.environ.get("HELIX_BUDGET", "ci") == "long"
"""True in the long run (``HELIX_BUDGET=long``)."""

if os.environ.get("HELIX_BUDGET", "ci") not in ("ci", "long"):
    raise RuntimeError(f"HELIX_BUDGET is 'ci' or 'long', not {os.environ['HELIX_BUDGET']!r}")


def budget(ci: int, long: int) -> int:
    """``ci`` in CI's run, ``long`` in the long one (examples, roots, scenarios)."""
    return long if LONG else ci
