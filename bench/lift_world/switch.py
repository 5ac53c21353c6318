"""A held-out world where the team changes its mind: two conventions switch after two nights.

The lift world's 24 tasks and six conventions, until the team switches time formats (UTC
ISO-8601 -> DD/MM/YYYY) and where release notes go (``newsfragments/`` -> CHANGELOG.md).
From then on (``era`` 1) a task needing the old convention needs the new one instead, the
new sessions correct the agent toward the new style, and :data:`STALE` requests are never
asked again: their archived tasks keep the references (rubrics) mined before the switch.

What differs from the lift world's model (:class:`SwitchModel`):

- **attempt**: for a switched convention the agent follows the old line when a document
  holds it, even beside the new one (a document that contradicts itself is followed the
  old way; with ``newer_wins`` the new line wins instead), else the one it holds;
- **judge**: a switched convention is graded the way the task's rubric says (it quotes
  the old or the new convention's criterion; one that quotes neither is graded by the
  current era), so tasks mined before the switch expect the old style for good;
- **reflect**: a failing task's missing new convention is proposed as a ``replace`` of
  the old line (anchored on it) when a document holds it, as an ``add`` otherwise; with
  ``newer_wins`` as an ``add`` first and the ``replace`` after it (the issue's model, on
  which the add alone passes and the old line stays).

:func:`switch_score` is the truth after the switch: every needed convention (switched ones
in their new form) followed from the documents, no harmful rule; :func:`both_styles`
says whether the documents hold an old and a new line of one switched convention,
:func:`twice` whether they teach one rule in two lines.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lift_world.history import task_turns
from lift_world.model import Section, WorldModel, _body, _edit, _why
from lift_world.world import BARE, CONVENTIONS, LIFT, TASKS, Convention, Score, Task, World, _rx
from support.transcripts import write_claude_session, write_codex_session

DMY = Convention(
    key="dmy",
    kind="format",
    text="Write every date as DD/MM/YYYY with a 24-hour time, for example 04/03/2025 09:12.",
    detect=_rx(r"dd/mm/yyyy"),
    missing="dates are not written as DD/MM/YYYY",
    rubric="writes every date as DD/MM/YYYY with a 24-hour time",
    corrections=(
        "We switched last week: dates are DD/MM/YYYY now, no more ISO timestamps.",
        "Please use DD/MM/YYYY for dates, the team dropped the ISO format.",
        "no, not the T...Z format any more; 04/03/2025 09:12 style",
    ),
    applied="Dates: 04/03/2025 09:12 to 04/03/2025 10:40.",
    ignored="Times: Mar 4, 9:12 to 10:40 (server time).",
    proof=re.compile(r"\b\d\d/\d\d/\d{4}\b"),
)
CHANGES = Convention(
    key="changes",
    kind="location",
    text="Record every user-visible change as an entry under `## Unreleased` in CHANGELOG.md.",
    detect=_rx(r"changelog\.md"),
    missing="the change is not recorded under ## Unreleased in CHANGELOG.md",
    rubric="adds an entry under ## Unreleased in CHANGELOG.md",
    corrections=(
        "We moved to a single CHANGELOG.md: add it under ## Unreleased.",
        "The fragment files are gone, the entry goes in CHANGELOG.md now.",
        "put it in CHANGELOG.md under Unreleased like we agreed",
    ),
    applied="Added to CHANGELOG.md under ## Unreleased: {summary}.",
    ignored="Added a line at the top of NEWS.md: {summary}.",
    proof=_rx(r"CHANGELOG\.md"),
)
SWITCHES: dict[str, Convention] = {"utc": DMY, "news": CHANGES}
"""Old convention key -> the convention that replaces it."""
ANCHORS = {"utc": "ISO-8601", "news": "newsfragments/"}
"""How a reflection quotes the old line it replaces (a phrase only that line holds)."""
DMY_VALUES = {"t23": "03/03/2025 16:20"}  # lookups of a time: the value after the switch
STALE = frozenset({"t08", "t12", "t13"})
"""Requests never asked again after the switch (their archived tasks stay as mined)."""
SWITCH = World(name="switch", conventions=(*CONVENTIONS, DMY, CHANGES), tasks=TASKS, baits=(BARE,))


def new_needs(task: Task) -> tuple[str, ...]:
    return tuple(SWITCHES[k].key if k in SWITCHES else k for k in task.needs)


def switched(task: Task) -> bool:
    return any(k in SWITCHES for k in task.needs)


def followed(key: str, present: frozenset[str], *, newer_wins: bool = False) -> str | None:
    """Which convention of ``key``'s family the agent follows under documents holding
    ``present``: the old line wins when both are there (the new one with ``newer_wins``)."""
    new = SWITCHES.get(key)
    if newer_wins and new is not None and new.key in present:
        return new.key
    if key in present:
        return key
    return new.key if new is not None and new.key in present else None


def switch_score(*documents: str, newer_wins: bool = False) -> Score:
    """The truth after the switch (see the module docstring)."""
    text = "\n".join(documents)
    present, harmful = SWITCH.conventions_in(text), SWITCH.harmful_in(text)
    solved = 0
    for task in TASKS:
        follows = {followed(k, present, newer_wins=newer_wins) for k in task.needs}
        solved += not harmful and set(new_needs(task)) <= follows
    return Score(solved=solved, total=len(TASKS), present=present, harmful=harmful)


def both_styles(*documents: str) -> list[str]:
    """The switched conventions whose old and new lines the documents both hold."""
    present = SWITCH.conventions_in("\n".join(documents))
    return [k for k, new in SWITCHES.items() if k in present and new.key in present]


def twice(*documents: str) -> list[str]:
    """The conventions two or more bullet lines of the documents teach (a rule twice)."""
    bullets = [ln for d in documents for ln in d.splitlines() if ln.lstrip().startswith("- ")]
    return [c.key for c in SWITCH.conventions if sum(bool(c.detect.search(b)) for b in bullets) > 1]


class SwitchModel(WorldModel):
    """The lift world's model with the switch (see the module docstring); ``era`` 0 before
    the team switched, 1 after."""

    def __init__(self, world_seed: int = 0, *, newer_wins: bool = False) -> None:
        super().__init__(world_seed=world_seed, world=SWITCH)
        self.era = 0
        self.newer_wins = newer_wins

    # -- target ------------------------------------------------------------------------
    def _attempt(self, parts: list[Section]) -> str:
        docs = _body(parts, "doc")
        task = SWITCH.find_task(_body(parts, "task"))
        if task is None:
            return "Done."
        present, harmful = SWITCH.conventions_in(docs), SWITCH.harmful_in(docs)
        return render(task, present, bare=harmful, newer_wins=self.newer_wins)

    # -- judge ---------------------------------------------------------------------------
    def _judge(self, parts: list[Section]) -> dict[str, Any]:
        rubric = _body(parts, "rubric")
        task = SWITCH.find_task(_body(parts, "asked")) or SWITCH.find_task(rubric)
        answer = _body(parts, "answer")
        cut = answer.casefold().rfind("reply with")
        answer = answer[:cut].strip() if cut >= 0 else answer
        if task is None:
            return {"score": 1.0 if answer else 0.0, "reason": "does what was asked"}
        expected = [self._expected(k, rubric) for k in task.needs]
        missing = [SWITCH.by_key[k].missing for k in expected if not _shows(task, k, answer)]
        score = (len(expected) - len(missing)) / len(expected)
        reason = "meets every house convention" if not missing else "; ".join(missing)
        return {"score": round(score, 3), "reason": reason}

    def _expected(self, key: str, rubric: str) -> str:
        new = SWITCHES.get(key)
        if new is None:
            return key
        if new.rubric in rubric:
            return new.key
        if SWITCH.by_key[key].rubric in rubric:
            return key
        return new.key if self.era else key

    # -- optimizer -----------------------------------------------------------------------
    def _reflect(self, parts: list[Section], text: str) -> list[dict[str, Any]]:
        docs = _body(parts, "doc")
        evidence = _body(parts, "failures")
        present, harmful = SWITCH.conventions_in(docs), SWITCH.harmful_in(docs)
        budget_m = re.search(r"at most (\d+)", text)
        budget = int(budget_m.group(1)) if budget_m else 4
        failing = SWITCH.find_tasks(evidence)
        support: Counter[str] = Counter()
        for task in failing:
            for key in task.needs:
                want = self._expected(key, "")
                if followed(key, present, newer_wins=self.newer_wins) != want:
                    support[want] += 1
        order = {c.key: i for i, c in enumerate(SWITCH.conventions)}
        ranked = sorted((k for k in support if support[k] >= 2),
                        key=lambda k: (-support[k], order[k]))  # fmt: skip
        edits: list[dict[str, Any]] = []
        for bait in SWITCH.baits:
            baits = [t for t in failing if t.bait == bait.key]
            if baits and not harmful and (bait.lure not in present or bait.tell in evidence):
                edits.append(_edit(bait.text, bait.why.format(n=len(baits))))
        old_of = {new.key: old for old, new in SWITCHES.items()}
        for key in ranked:
            why = _why(t.subject for t in failing if key in new_needs(t) or key in t.needs)
            old = old_of.get(key)
            text = SWITCH.by_key[key].text
            if old is None or old not in present or self.newer_wins:
                edits.append(_edit(text, why))
            if old is not None and old in present:
                edits.append({"op": "replace", "content": text, "anchor": ANCHORS[old],
                              "rationale": why})  # fmt: skip
        return edits[: max(0, budget)]


def render(
    task: Task, present: frozenset[str], *, bare: bool = False, newer_wins: bool = False
) -> str:
    """The answer of an agent following ``present`` (switched families per :func:`followed`)."""
    follows = {k: followed(k, present, newer_wins=newer_wins) for k in task.needs}
    if "lookup" in task.needs:
        value = task.value
        time_style = follows.get("utc")
        if time_style == "utc" and task.value_utc:
            value = task.value_utc
        elif time_style == "dmy" and task.id in DMY_VALUES:
            value = DMY_VALUES[task.id]
        if bare:
            return value
        if follows["lookup"]:
            return f"{value}\nDefined in {task.source}."
        return LIFT.render_answer(replace(task, value=value, value_utc=""), ())
    if bare:
        return "Done."
    lines = [f"Done: {task.summary}."]
    for key in task.needs:
        way = follows[key]
        conv = SWITCH.by_key[way] if way else SWITCH.by_key[key]
        line = conv.applied if way else conv.ignored
        lines.append(line.format(slug=task.slug, summary=task.summary))
    return "\n".join(lines)


def _shows(task: Task, key: str, answer: str) -> bool:
    """Whether ``answer`` follows convention ``key`` (old or new) for ``task``."""
    first = answer.strip().splitlines()[0].strip() if answer.strip() else ""
    if key == "lookup":
        values = {task.value, task.value_utc, DMY_VALUES.get(task.id, "")} - {""}
        return first in values and f"in {task.source}" in answer
    if "lookup" in task.needs and key in ("utc", "dmy"):
        return first == (task.value_utc if key == "utc" else DMY_VALUES.get(task.id))
    proof = SWITCH.by_key[key].proof
    return bool(proof and proof.search(answer))


@dataclass(frozen=True)
class NewSessions:
    written: int
    tasks: tuple[str, ...]
    oldest: datetime
    newest: datetime


def write_switch_sessions(
    home: Path, project: Path, *, start: datetime, end: datetime, seed: int,
    per_task: int = 2, claude_share: float = 0.6,
) -> NewSessions:  # fmt: skip
    """The sessions after the switch, between ``start`` and ``end``: every request but the
    :data:`STALE` ones, ``per_task`` times; the agent answers the old way and the user
    corrects every switched convention toward the new one (unswitched tasks are accepted)."""
    rng = random.Random(f"switch-{seed}")
    after = World(name="after", conventions=SWITCH.conventions, baits=(BARE,),
                  tasks=tuple(replace(t, needs=new_needs(t)) for t in TASKS))  # fmt: skip
    plans: list[tuple[Task, list[str]]] = []
    for task in after.tasks:
        if task.id in STALE:
            continue
        keys = [k for k in task.needs if k in (DMY.key, CHANGES.key)]
        plans += [(task, keys)] * per_task
    rng.shuffle(plans)
    step = (end - start) / max(1, len(plans))
    for i, (task, keys) in enumerate(plans):
        shape = "corrected" if keys else "accepted"
        turns = task_turns(task, i, shape, keys, rng, after)
        begin = start + step * i
        if rng.random() < claude_share:
            write_claude_session(home / ".claude", cwd=project, turns=turns, start=begin)
        else:
            write_codex_session(home / ".codex", cwd=project, turns=turns, start=begin)
    return NewSessions(
        written=len(plans),
        tasks=tuple(dict.fromkeys(t.id for t, _ in plans)),
        oldest=start,
        newest=start + step * max(0, len(plans) - 1) + timedelta(minutes=10),
    )
