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

import json
import os
import random
import string
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from lift_world.world import LIFT, Task, World

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
    odd_files: int = 0  # empty, truncated or huge files written on top (see Oddities)
    secrets: tuple[str, ...] = field(default=(), repr=False)  # planted; must never leave


@dataclass(frozen=True, kw_only=True)
class Oddities:
    """What real histories also hold: repeated requests carrying a pasted secret, a
    session cut off mid-line, empty session files, a tool output of megabytes."""

    duplicates: int = 0  # near-duplicate task sessions, each with a secret appended
    truncated: int = 0  # sessions whose last line is cut off mid-JSON
    empty: int = 0  # zero-byte session files (per source)
    huge: int = 0  # sessions with one tool output of ``huge_mb`` MB
    huge_mb: float = 3.0


def _wording(task: Task, n: int, rng: random.Random) -> str:
    base = task.variants[n % len(task.variants)]
    opener = rng.choice(OPENERS)
    text = opener + (base[0].lower() + base[1:] if opener else base)
    return text + rng.choice(CLOSERS)


def _correction(world: World, task: Task, key: str, rng: random.Random) -> str:
    if task.bait and key == world.bait(task.bait).lure:
        return rng.choice(world.bait(task.bait).corrections)
    return rng.choice(world.by_key[key].corrections)


def task_turns(
    task: Task, n: int, shape: str, keys: list[str], rng: random.Random, world: World = LIFT
) -> list[Turn]:
    """The turns of the ``n``-th session about ``task``; ``keys`` are the ones corrected."""
    tools = tuple(rng.sample(TOOLS, k=rng.randint(1, 3)))
    applied: set[str] = set()
    render = world.render_answer
    first = Turn(user=_wording(task, n, rng), answer=render(task, applied), tools=tools)
    turns = [first]
    if shape == "accepted":
        return [*turns, Turn(user=rng.choice(THANKS), answer="Glad it helped.")]
    for key in keys:
        applied.add(key)
        turns.append(
            Turn(user=_correction(world, task, key, rng), answer=render(task, applied), tools=tools)
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
    world: World = LIFT,
    claude_share: float = 0.6,
    odd: Oddities | None = None,
    skills: Mapping[str, str] | None = None,
) -> History:
    """Write the sessions under ``home/.claude`` and ``home/.codex``; see the module doc.

    ``claude_share``: the share of sessions written as Claude Code (the rest Codex);
    ``odd``: oddities written on top (a separate random stream: without them the history
    is the same as before they existed); ``skills``: task id to the project skill its
    sessions load (written as Claude Code sessions whose agent called its Skill tool)."""
    skills = skills or {}
    rng = random.Random(seed)
    claude_home, codex_home = home / ".claude", home / ".codex"
    other = home / "work" / "blog"
    project.mkdir(parents=True, exist_ok=True)
    other.mkdir(parents=True, exist_ok=True)
    sessions: list[tuple[Path, list[Turn], str]] = []
    task_sessions = 0
    for task in world.tasks:
        count = max(rng.randint(*per_task) - (1 if task.bait else 0), len(task.needs))
        for n, (shape, keys) in enumerate(_plan(task, count, rng)):
            turns = task_turns(task, n, shape, keys, rng, world)
            sessions.append((project, turns, skills.get(task.id, "")))
            task_sessions += 1
    odd = odd or Oddities()
    odd_rng = random.Random(f"odd-{seed}")
    secrets = [_secret(odd_rng) for _ in range(odd.duplicates)]
    for secret in secrets:  # the same request again, a credential pasted at the end
        task = odd_rng.choice(world.tasks)
        turns = task_turns(task, 0, "corrected", list(task.needs), odd_rng, world)
        turns[0] = Turn(user=f"{turns[0].user} (use {secret} if you need the API)",
                        answer=turns[0].answer, tools=turns[0].tools)  # fmt: skip
        sessions.append((project, turns, skills.get(task.id, "")))
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
        sessions.append((other if kind == 4 else project, turns, ""))
    rng.shuffle(sessions)
    span = timedelta(days=days) - timedelta(hours=1)
    claude = codex = older = 0
    ends: list[datetime] = []
    written: list[Path] = []
    for i, (cwd, turns, skill) in enumerate(sessions):
        # spread evenly over the span with jitter, so every stretch of days has sessions
        offset = span * (i + rng.random()) / len(sessions)
        start = now - timedelta(hours=1) - offset - timedelta(minutes=2 * len(turns) + 1)
        if rng.random() < claude_share or skill:
            written.append(write_claude_session(claude_home, cwd=cwd, turns=turns, start=start,
                                                skill=skill))  # fmt: skip
            claude += 1
        else:
            written.append(write_codex_session(codex_home, cwd=cwd, turns=turns, start=start))
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
        odd_files=_spoil(written, odd, odd_rng, now),
        secrets=tuple(secrets),
    )


def _secret(rng: random.Random) -> str:
    """An API key of a shape redaction knows (``sk-proj-`` + 32 characters)."""
    return "sk-proj-" + "".join(rng.choices(string.ascii_letters + string.digits, k=32))


def _spoil(written: list[Path], odd: Oddities, rng: random.Random, now: datetime) -> int:
    """Cut some sessions off mid-line, add a huge tool output to others, and write empty
    session files; every touched file keeps its mtime. Returns how many files."""
    touched = rng.sample(written, k=min(len(written), odd.truncated + odd.huge))
    for i, path in enumerate(touched):
        stat = path.stat()
        with path.open("a", encoding="utf-8") as out:
            if i < odd.truncated:  # a writer killed mid-line: no closing brace, no newline
                out.write(_huge_line(path, 0.0001)[:70])
            else:
                out.write(_huge_line(path, odd.huge_mb) + "\n")
        os.utime(path, (stat.st_atime, stat.st_mtime))
    roots = [p for p in {_source_root(p) for p in written} if p is not None]
    for root in sorted(roots):
        for k in range(odd.empty):
            if "projects" in root.parts:
                empty = root / f"empty-{k}.jsonl"
            else:
                empty = root / f"{now:%Y}" / f"{now:%m}" / f"{now:%d}" / f"rollout-empty-{k}.jsonl"
            empty.parent.mkdir(parents=True, exist_ok=True)
            empty.write_bytes(b"")
    return len(touched) + odd.empty * len(roots)


def _source_root(path: Path) -> Path | None:
    """The Claude project folder or the Codex ``sessions`` folder a session lives in."""
    if path.parent.parent.name == "projects":
        return path.parent
    for parent in path.parents:
        if parent.name == "sessions":
            return parent
    return None


def _huge_line(path: Path, megabytes: float) -> str:
    """One tool output of about ``megabytes`` MB, in the file's own transcript format."""
    log = "".join(f"line {i}: DEBUG cache miss for key user:{i}\n" for i in range(64))
    body = (log * (int(megabytes * 1_000_000) // len(log) + 1))[: int(megabytes * 1_000_000)]
    if path.parent.parent.name == "projects":
        item = {"type": "tool_result", "tool_use_id": "t", "content": body}
        return json.dumps({"type": "user", "message": {"role": "user", "content": [item]}})
    payload = {"type": "function_call_output", "call_id": "c", "output": body}
    return json.dumps({"type": "response_item", "payload": payload})
