"""Read back, do not re-ask (issue 30, lever 1): what a sample is drawn for (:class:`Arm`),
and the answers the night already judged that stand in for other samples (:class:`StandIns`).

On a night the noise probe judged consistent, a model asked the same task under the same
documents answers alike: another sample of a (task, documents) pair the night already has
a judged answer for repeats that answer (the ledger's ``repeats``). So a sample drawn as
:attr:`Arm.READ_BACK` (the baseline arm of a decision, a later rollouts wave, a
confirmation pair) takes that answer: no attempt is made, and the ledger counts the
attempt as *saved*, never as a call or a repeat.

The answer is read back, not the judge's verdict on it: the read-back is judged in its own
sample, as every answer is (a judge call whose reply the response cache holds when the
same answer was judged in that sample already). The probe speaks for the model, not for
the judge; a verdict read back would carry one mistaken verdict into every sample of the
pair, every decision of the night then reading it (reading verdicts back once cost the
held-out fault nights half their true score, and this lever, reading them back too, 2
points of the consistent nights' on ``bench/trust.py``).

Two kinds of sample are always asked, whatever the night knows:

* :attr:`Arm.CANDIDATE`, the candidate arm of every decision (a trial, a union, an
  attribution or a mask, a retest, the final check, ``adopt --edit``): what a decision is
  about is a real answer of the model tonight, never one inferred from another sample.
* :attr:`Arm.ASKED`, every sample that exists to see the model's or the judge's noise (the
  probe, the steady top-up, a judge asked again), and any draw not said otherwise.

Read-back turns off for the rest of the night the first time two real answers of one pair
differ in their text: the model is then not as consistent as the probe found, and an
answer standing in for another sample could hide what it would have said.
:attr:`StandIns.off` says where; the learning modules write it into the night's notes. One
answer scored two ways is the judge's noise, not the model's (as the probe reads it):
every read-back gets its own verdict, so it does not turn read-back off (the replayer's
``judge_noise`` hears it, and the comparisons judge the changed pairs again).

A read-back is not journalled: ``rollouts.jsonl`` holds what the model answered (the
archive reads it as observations of the model). A resumed night rebuilds the known answers
and any disagreement from the journalled rows, in the order they were written, so it reads
back what the killed run would have.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from skillopt.types import RolloutResult

__all__ = ["Arm", "Known", "StandIns"]

Pair = tuple[str, str]  # (task id, documents' key: skill hash.memory hash)


class Arm(enum.Enum):
    """What a sample is drawn for: whether an answer the night already judged for its
    (task, documents) may stand in for it (see the module docstring)."""

    ASKED = "asked"  # always a real call: a sample that sees noise, or any other draw
    CANDIDATE = "candidate"  # the candidate arm of a decision: always a real call
    READ_BACK = "read_back"  # on a consistent night, a known answer of the pair stands in


def pair_of(task_id: str, skill_hash: str, memory_hash: str) -> Pair:
    return task_id, f"{skill_hash}.{memory_hash}"


@dataclass(frozen=True, slots=True)
class Known:
    """The first real, judged answer of a pair tonight, and where it was drawn."""

    result: RolloutResult
    phase: str


@dataclass
class StandIns:
    """The night's known answers per (task, documents), and whether they may stand in."""

    known: dict[Pair, Known] = field(default_factory=dict)
    off: str = ""  # where two real answers of one pair disagreed (empty: read-back is on)
    stood_in: set[str] = field(default_factory=set)  # job keys whose result is a read-back
    count: int = 0  # samples read back tonight
    _flying: dict[Pair, anyio.Event] = field(default_factory=dict)  # a real call of the pair

    def heard(self, pair: Pair, result: RolloutResult, *, phase: str) -> None:
        """A real answer of ``pair`` (judged, no error): the first is kept; a later one whose
        text differs turns read-back off for the rest of the night."""
        if result.error or not result.response:
            return
        first = self.known.get(pair)
        if first is None:
            self.known[pair] = Known(result=result, phase=phase)
            return
        if self.off or first.result.response == result.response:
            return
        self.off = (
            f"task {pair[0]} under documents {pair[1]}: sample {first.result.sample_id} "
            f"({first.phase}) and sample {result.sample_id} ({phase}) answered differently"
        )

    def heard_row(self, row: Mapping[str, Any], result: RolloutResult) -> None:
        """A journalled row of an earlier run of the night (a resumed night rebuilds what
        that run knew): a middle verdict of more opinions is no answer of its own."""
        if int(row.get("opinions") or 1) > 1:
            return
        pair = pair_of(result.task_id, result.skill_hash, result.memory_hash)
        self.heard(pair, result, phase=str(row.get("phase") or ""))

    def answer(self, pair: Pair, sample_id: int) -> Known | None:
        """The known answer standing in for ``sample_id`` of ``pair`` (None: ask)."""
        if self.off:
            return None
        first = self.known.get(pair)
        if first is None:
            return None
        result = dataclasses.replace(first.result, sample_id=sample_id)
        return Known(result=result, phase=first.phase)

    def in_flight(self, pair: Pair) -> anyio.Event | None:
        """The real call of ``pair`` under way, if any: a read-back waits for its answer."""
        return self._flying.get(pair)

    @contextmanager
    def asking(self, pair: Pair) -> Iterator[None]:
        """A real call of ``pair`` is under way (the first one marks the pair in flight)."""
        if pair in self._flying:
            yield
            return
        flight = self._flying[pair] = anyio.Event()
        try:
            yield
        finally:
            del self._flying[pair]
            flight.set()
