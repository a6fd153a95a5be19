"""The eval's case and score model: a case, its scores, its result, the report of a run.

A case is one recorded session (a root of its tree) re-run as a branch; its
:class:`Score` list says how the branch compares with the recording; a
:class:`CaseResult` is one case's verdict, and an :class:`EvalReport` all of
them. Every struct encodes to JSON as ``helix-agents eval --json`` prints it.
Specified in specs/evals.md.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = ["CaseResult", "CaseVerdict", "EvalReport", "Parting", "Score"]

CaseVerdict = Literal["passed", "failed", "error"]
"""passed: every score passed; failed: some score did not; error: the case could not run."""


class Score(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One scorer's verdict on one case: pass or fail, a value when it measures, and why."""

    name: str
    passed: bool
    value: float | None = None
    """A measured number (a delta, a ratio); None for a plain yes or no."""
    detail: str = ""


class Parting(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where the branch parts from its recording: the first event after their common prefix."""

    common: int
    """Events the two share from the start (normalized: see ``helix_agents.log.diff``)."""
    recorded_seq: int | None
    """The recording's first event after the prefix (None: its log ends there)."""
    recorded_type: str | None
    branch_seq: int | None
    """The branch's first event after the prefix (None: its log ends there)."""
    branch_type: str | None

    def describe(self) -> str:
        """One line: ``parts at seq 7 (message_appended) / branch seq 7 (message_appended)``."""

        def at(seq: int | None, kind: str | None) -> str:
            return "its end" if seq is None else f"seq {seq} ({kind})"

        return (
            f"parts after {self.common} shared events: recorded "
            f"{at(self.recorded_seq, self.recorded_type)}, branch "
            f"{at(self.branch_seq, self.branch_type)}"
        )


class CaseResult(msgspec.Struct, kw_only=True, rename="camel"):
    """One case: the recorded session, its branch in the store, the scores, the verdict."""

    case: str
    """The recorded session's id (the case's name)."""
    agent_type: str
    branch: str | None
    """The branch's session id in the store (None: it could not be started)."""
    verdict: CaseVerdict
    scores: list[Score] = []
    parting: Parting | None = None
    """Where the branch parts from the recording (None: they do not part, or no branch)."""
    recorded_status: str = ""
    branch_status: str = ""
    recorded_output: Any = None
    branch_output: Any = None
    error: str | None = None
    """Why the case could not run (verdict ``error``)."""
    misses: list[str] = []
    """Calls the recording could not answer (a tool or remote child called otherwise)."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Every score passed and the case ran."""
        return self.verdict == "passed"

    def failures(self) -> list[Score]:
        """The scores that did not pass."""
        return [score for score in self.scores if not score.passed]


class EvalReport(msgspec.Struct, kw_only=True, rename="camel"):
    """Every case of one eval run, and how it was run."""

    cases: list[CaseResult]
    agents: str = ""
    """What ran the cases (``MODULE:ATTR``, or the agents' names)."""
    model: str | None = None
    """The model that answered (None: each agent's own)."""
    live: list[str] = []
    """Tools run live (the rest answered from the recordings)."""

    @property
    def passed(self) -> int:
        """How many cases passed."""
        return sum(1 for case in self.cases if case.verdict == "passed")

    @property
    def failed(self) -> int:
        """How many cases failed a score."""
        return sum(1 for case in self.cases if case.verdict == "failed")

    @property
    def errors(self) -> int:
        """How many cases could not run."""
        return sum(1 for case in self.cases if case.verdict == "error")

    @property
    def ok(self) -> bool:
        """Every case passed (and there was at least one)."""
        return bool(self.cases) and self.passed == len(self.cases)

    def case(self, session_id: str) -> CaseResult:
        """The result of the case of recorded session ``session_id`` (KeyError if none)."""
        for result in self.cases:
            if result.case == session_id:
                return result
        raise KeyError(session_id)
