"""An eval's report three ways: a terminal table, JSON, and JUnit XML for CI.

The three say the same thing: a case passes when every score passed, fails
when one did not, and is an error when it could not run; a case whose
branch parts from its recording names the first event where they part.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import msgspec

from helix_agents.testing.evals.model import CaseResult, EvalReport, Score

__all__ = ["report_json", "report_junit", "report_lines", "summary_line"]


def _cell(score: Score) -> str:
    if score.value is not None:
        text = (
            f"{score.value:+.6f}" if abs(score.value) < 1 and score.value else f"{score.value:+g}"
        )
        return text if score.passed else f"{text} FAIL"
    if not score.passed:
        return "FAIL"
    return "-" if score.detail.startswith("unknown") else "ok"


def summary_line(report: EvalReport) -> str:
    """``20 cases: 18 passed, 2 failed, 0 errors``."""
    return (
        f"{len(report.cases)} cases: {report.passed} passed, {report.failed} failed, "
        f"{report.errors} errors"
    )


def _why(case: CaseResult) -> list[str]:
    lines = [f"{case.case} {case.verdict}: branch {case.branch or '(none)'}"]
    if case.error:
        lines.append(f"  error: {case.error}")
    for score in case.failures():
        lines.append(f"  {score.name}: {score.detail or 'failed'}")
    if case.parting is not None:
        lines.append(f"  {case.parting.describe()}")
    for miss in case.misses:
        lines.append(f"  not in the recording: {miss}")
    if case.branch and case.verdict != "error":
        lines.append(
            f"  compare: helix-agents diff {case.case} {case.branch} "
            f"(the inspector: ui/diff?a={case.case}&b={case.branch})"
        )
    return lines


def report_lines(report: EvalReport) -> list[str]:
    """The terminal table: a row per case, a column per score, then why each failure failed."""
    names: list[str] = []
    for case in report.cases:
        for score in case.scores:
            if score.name not in names:
                names.append(score.name)
    rows = [["CASE", "VERDICT", *(name.upper() for name in names), "PARTS AT (recorded seq)"]]
    for case in report.cases:
        by_name = {score.name: _cell(score) for score in case.scores}
        parts = "-" if case.parting is None else str(case.parting.recorded_seq or "end")
        if case.parting is not None and case.parting.recorded_type:
            parts += f" {case.parting.recorded_type}"
        rows.append([case.case, case.verdict, *(by_name.get(name, "") for name in names), parts])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.append(summary_line(report))
    for case in report.cases:
        if case.verdict != "passed":
            lines.extend(_why(case))
    return lines


def report_json(report: EvalReport) -> bytes:
    """The report as one JSON object (``eval --json``), with the counts added."""
    data = msgspec.to_builtins(report)
    data.update(
        {"passed": report.passed, "failed": report.failed, "errors": report.errors, "ok": report.ok}
    )
    return msgspec.json.encode(data)


def report_junit(report: EvalReport, *, suite: str = "helix-agents eval") -> str:
    """The report as JUnit XML: a ``testcase`` per case; ``failure`` or ``error`` if not passed."""
    seconds = sum(case.seconds for case in report.cases)
    root = ET.Element("testsuites", name=suite)
    node = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(report.cases)),
        failures=str(report.failed),
        errors=str(report.errors),
        skipped="0",
        time=f"{seconds:.3f}",
    )
    for case in report.cases:
        element = ET.SubElement(
            node,
            "testcase",
            classname=f"eval.{case.agent_type}",
            name=case.case,
            time=f"{case.seconds:.3f}",
        )
        why = "\n".join(_why(case))
        if case.verdict == "error":
            ET.SubElement(element, "error", message=case.error or "error").text = why
        elif case.verdict == "failed":
            failed = ", ".join(score.name for score in case.failures())
            message = f"failed: {failed}"
            if case.parting is not None:
                message += f"; {case.parting.describe()}"
            ET.SubElement(element, "failure", message=message).text = why
        scores = "\n".join(
            f"{score.name}: {'pass' if score.passed else 'FAIL'}"
            + ("" if score.value is None else f" {score.value:g}")
            + (f" ({score.detail})" if score.detail else "")
            for score in case.scores
        )
        ET.SubElement(element, "system-out").text = f"branch: {case.branch or '(none)'}\n{scores}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
