"""Three weeks of agent sessions about the lift world, as Claude Code and Codex transcripts.

Every task recurs several times (its wording varies from one time to the next), in a
session of one of these shapes, the agent always starting without the house conventions:

- *corrected*: the user corrects one or all of the conventions the task needs, the agent
  fixes its answer, and the user usually thanks it;
- *accepted*: the user takes the answer as it is ("ok thanks");
- *abandoned*: one correction, a fixed answer, and the user leaves without a word.

Each task has at least one corrected session per convention it needs, so the history
holds evidence for every convention. Bait lookups are corrected in words that invite a
"just the bare value" generalisation. Noise sessions are mixed in: one-off questions,
greetings, slash commands only, and sessions in another project. Sessions end between
``now - days`` and ``now - 1h``, most of them older than the default 72 h lookback;
about 60% are Claude Code, the rest Codex.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from lift_world.world import BAIT_CORRECTIONS, BY_KEY, TASKS, Task, render_answer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.transcripts import Turn, write_claude_session, write_codex_session

TOOLS = ("Read", "Grep", "Edit", "Bash")
OPENERS = ("", "", "", "hey, ", "quick one: ", "again: ", "ok, next thing. ")
CLOSERS = ("", "", "", " thanks", " please", " (same as last time)")
THANKS = ("thanks, that works", "perfect, thanks", "great, looks good", "ok thanks")
ONE_OFFS = (
    "Explain the difference between a process and a thread in Python.",
    "What does the walrus operator do? I keep forgetting.",
    "Summarise this stack trace for me: KeyError 'region' in loader.py line 88",
    "Write a regex that matches a semantic version string.",
    "How do I squash the last three commits without losing the messages?",
    "Give me a one-paragraph explanation of consistent hashing for the wiki.",
    "Translate this error message to plain English: EADDRINUSE :::8080",
    "What's a good name for a helper that retries with backoff?",
)


@dataclass(frozen=True)
class History:
    """What was written: where, how many sessions of each kind, and the time span."""

    home: Path
    project: Path
    sessions: int
    task_sessions: int
    noise_sessions: int
    claude: int
    codex: int
    older_than_72h: int
    oldest: datetime
    newest: datetime


def _wording(task: Task, n: int, rng: random.Random) -> str:
    base = task.variants[n % len(task.variants)]
    opener = rng.choice(OPENERS)
    text = opener + (base[0].lower() + base[1:] if opener else base)
    return text + rng.choice(CLOSERS)


def _correction(task: Task, key: str, rng: random.Random) -> str:
    if task.bait and key == "lookup":
        return rng.choice(BAIT_CORRECTIONS)
    return rng.choice(BY_KEY[key].corrections)


def task_turns(task: Task, n: int, shape: str, keys: list[str], rng: random.Random) -> list[Turn]:
    """The turns of the ``n``-th session about ``task``; ``keys`` are the ones corrected."""
    tools = tuple(rng.sample(TOOLS, k=rng.randint(1, 3)))
    applied: set[str] = set()
    first = Turn(user=_wording(task, n, rng), answer=render_answer(task, applied), tools=tools)
    turns = [first]
    if shape == "accepted":
        return [*turns, Turn(user=rng.choice(THANKS), answer="Glad it helped.")]
    for key in keys:
        applied.add(key)
        turns.append(
            Turn(user=_correction(task, key, rng), answer=render_answer(task, applied), tools=tools)
        )
    if shape == "corrected" and rng.random() < 0.8:
        turns.append(Turn(user=rng.choice(THANKS), answer="Glad it helped."))
    return turns


def _plan(task: Task, count: int, rng: random.Random) -> list[tuple[str, list[str]]]:
    """Session shapes for one task: every needed convention corrected at least once."""
    plan: list[tuple[str, list[str]]] = []
    for i in range(count):
        roll = rng.random()
        if i < len(task.needs):  # one corrected session per convention, all first
            keys = list(task.needs) if rng.random() < 0.5 else [task.needs[i]]
            plan.append(("corrected", keys))
        elif roll < 0.55:
            plan.append(("corrected", list(task.needs)))
        elif roll < 0.8:
            plan.append(("accepted", []))
        else:
            plan.append(("abandoned", [rng.choice(task.needs)]))
    rng.shuffle(plan)
    return plan


def write_history(
    home: Path,
    project: Path,
    *,
    now: datetime,
    seed: int,
    per_task: tuple[int, int] = (3, 5),
    noise: int = 14,
    days: float = 21.0,
) -> History:
    """Write the sessions under ``home/.claude`` and ``home/.codex``; see the module doc."""
    rng = random.Random(seed)
    claude_home, codex_home = home / ".claude", home / ".codex"
    other = home / "work" / "blog"
    project.mkdir(parents=True, exist_ok=True)
    other.mkdir(parents=True, exist_ok=True)
    sessions: list[tuple[Path, list[Turn]]] = []
    task_sessions = 0
    for task in TASKS:
        count = max(rng.randint(*per_task) - (1 if task.bait else 0), len(task.needs))
        for n, (shape, keys) in enumerate(_plan(task, count, rng)):
            sessions.append((project, task_turns(task, n, shape, keys, rng)))
            task_sessions += 1
    for i in range(noise):
        kind = i % 5
        if kind == 0:
            turns = [Turn(user="hi"), Turn(user="/clear")]
        elif kind == 1:
            turns = [Turn(user="/compact")]
        else:
            ask = ONE_OFFS[i % len(ONE_OFFS)]
            turns = [Turn(user=ask, answer="Here is a short explanation."), Turn(user="thanks")]
        sessions.append((other if kind == 4 else project, turns))
    rng.shuffle(sessions)
    span = timedelta(days=days) - timedelta(hours=1)
    claude = codex = older = 0
    ends: list[datetime] = []
    for i, (cwd, turns) in enumerate(sessions):
        # spread evenly over the span with jitter, so every stretch of days has sessions
        offset = span * (i + rng.random()) / len(sessions)
        start = now - timedelta(hours=1) - offset - timedelta(minutes=2 * len(turns) + 1)
        if rng.random() < 0.6:
            write_claude_session(claude_home, cwd=cwd, turns=turns, start=start)
            claude += 1
        else:
            write_codex_session(codex_home, cwd=cwd, turns=turns, start=start)
            codex += 1
        end = start + timedelta(minutes=2 * len(turns))
        ends.append(end)
        older += end < now - timedelta(hours=72)
    return History(
        home=home,
        project=project,
        sessions=len(sessions),
        task_sessions=task_sessions,
        noise_sessions=noise,
        claude=claude,
        codex=codex,
        older_than_72h=older,
        oldest=min(ends),
        newest=max(ends),
    )
