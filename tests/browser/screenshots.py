"""Screenshots compared with their checked-in baselines, for layout regressions.

:func:`check_screenshot` compares a PNG with ``baselines/NAME.png``: a pixel
counts as changed when a colour channel moved by more than
:data:`CHANNEL_TOLERANCE` (anti-aliasing noise), and the check fails when more
than :data:`MAX_CHANGED` of the pixels changed, or the size did. On failure the
actual image and a diff (changed pixels red over a faded copy) are written to
the test output folder. ``HELIX_UPDATE_SCREENSHOTS=1`` writes the baselines
instead (tests/README.md).

Text rendering depends on the fonts installed: the baselines record a
fingerprint of them (:data:`FONTS_PROBE`), and on a machine whose fonts measure
differently the test skips the comparison, saying so, rather than failing on
every glyph (:func:`fonts_mismatch`).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

BASELINES = Path(__file__).parent / "baselines"
FINGERPRINT = BASELINES / "fonts.json"
CHANNEL_TOLERANCE = 32
MAX_CHANGED = 0.0005
"""At most 0.05% of the pixels may change (a 1280x1000 page: 640 pixels): a shifted line
of text fails, rendering noise does not (on this machine the pages come out pixel-exact)."""

FONTS_PROBE = """() => {
  const probe = document.createElement("canvas").getContext("2d");
  const sample = "helix-agents inspector 0123456789 — approved by Ada";
  const widths = {};
  for (const font of ["15px system-ui", "600 12px system-ui", "13px ui-monospace, monospace"]) {
    probe.font = font;
    widths[font] = Math.round(probe.measureText(sample).width * 100) / 100;
  }
  return widths;
}"""
"""Measures a sample text in the page's fonts: equal on machines that render alike."""


def updating() -> bool:
    """True when the run writes baselines instead of comparing (``HELIX_UPDATE_SCREENSHOTS=1``)."""
    return os.environ.get("HELIX_UPDATE_SCREENSHOTS") == "1"


async def fonts_mismatch(page: Any) -> str | None:
    """Why this machine's screenshots cannot be compared (its fonts differ), or ``None``.

    When updating, records this machine's fingerprint instead (and answers ``None``).
    """
    measured = await page.evaluate(FONTS_PROBE)
    if updating():
        BASELINES.mkdir(parents=True, exist_ok=True)
        FINGERPRINT.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
        return None
    if not FINGERPRINT.exists():
        pytest.fail(f"no {FINGERPRINT.name}: run with HELIX_UPDATE_SCREENSHOTS=1 to make baselines")
    recorded = json.loads(FINGERPRINT.read_text())
    if recorded != measured:
        return (
            f"this machine's fonts measure {measured}, the baselines' {recorded}: the "
            "screenshots cannot be compared here (regenerate with HELIX_UPDATE_SCREENSHOTS=1)"
        )
    return None


def changed_pixels(actual: Any, expected: Any) -> tuple[int, Any]:
    """How many pixels differ beyond the tolerance, and a mask of them (mode ``L``)."""
    from PIL import ImageChops

    difference = ImageChops.difference(actual, expected)
    bands = [
        band.point(lambda v: 255 if v > CHANNEL_TOLERANCE else 0) for band in difference.split()
    ]
    mask = bands[0]
    for band in bands[1:]:
        mask = ImageChops.lighter(mask, band)
    return mask.histogram()[255], mask


def diff_image(actual: Any, mask: Any) -> Any:
    """The actual image faded, with the changed pixels in red."""
    from PIL import Image

    faded = Image.blend(actual, Image.new("RGB", actual.size, "white"), 0.7)
    red = Image.new("RGB", actual.size, (220, 0, 0))
    return Image.composite(red, faded, mask)


def check_screenshot(png: bytes, name: str, artifacts: Path) -> None:
    """Compare ``png`` with baseline ``NAME.png`` (or write it when updating); see the module."""
    from PIL import Image

    baseline = BASELINES / f"{name}.png"
    if updating():
        BASELINES.mkdir(parents=True, exist_ok=True)
        baseline.write_bytes(png)
        return
    if not baseline.exists():
        pytest.fail(f"no baseline {baseline}: run with HELIX_UPDATE_SCREENSHOTS=1 to make it")
    actual = Image.open(io.BytesIO(png)).convert("RGB")
    expected = Image.open(baseline).convert("RGB")
    artifacts.mkdir(parents=True, exist_ok=True)
    if actual.size != expected.size:
        (artifacts / f"{name}-actual.png").write_bytes(png)
        pytest.fail(
            f"{name}: the page is {actual.size[0]}x{actual.size[1]} px, its baseline "
            f"{expected.size[0]}x{expected.size[1]} (actual: {artifacts / f'{name}-actual.png'})"
        )
    changed, mask = changed_pixels(actual, expected)
    ratio = changed / (actual.size[0] * actual.size[1])
    if ratio > MAX_CHANGED:
        (artifacts / f"{name}-actual.png").write_bytes(png)
        diff = artifacts / f"{name}-diff.png"
        diff_image(actual, mask).save(diff)
        pytest.fail(
            f"{name}: {changed} pixels ({ratio:.3%}) differ from the baseline, over "
            f"{MAX_CHANGED:.2%}: see {diff} (if the change is meant, HELIX_UPDATE_SCREENSHOTS=1)"
        )
