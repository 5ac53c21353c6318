"""The lift world as a model behind HTTP: reads our prompt templates, answers every role.

HTTP members see only prompt text, so this reads the prompt's level-1 headings back
(``# Skill``, ``# Failed tasks``, ...). Headings it does not recognise (a document's own
title, a section the templates gain later) belong to the section before them, so a
document may hold any Markdown and a new template section never breaks the parse. Every
JSON reply takes the shape of the example in the prompt's "Reply with ..." paragraph
(placeholders like ``<one sentence>`` read as null), so a schema that gains or loses
fields is still answered in kind.

Roles, told apart by their headings:

- **attempt** (target): answers the task (found by its subject phrase in ``# Task``) as an
  agent following exactly the conventions written in the documents; with the harmful
  rule present it gives a bare answer. With ``noise`` set, that share of attempts flips
  (right -> one convention dropped, wrong -> right), decided by a hash of (seed, task,
  documents, n-th such call), so a run is reproducible whatever the call order.
- **judge**: grades the answer against the task's true conventions (partial credit).
- **mine**: one session (or each session of a batched prompt, ``# Session S1``, ...) ->
  the recurring task it is about, always in the same one of its
  wordings (picked per world seed, so task ids, and the night's hash splits, vary with
  the seed), with a rubric from the corrections the session holds; one-off sessions give
  no task.
- **reflect** (both templates): proposes the missing conventions of the failing tasks it
  is shown, most-supported first, and only those that at least :data:`MIN_SUPPORT`
  distinct failing tasks point at (like an optimizer told to write general instructions,
  it does not turn one example into a house rule). So what a night learns depends on how
  much cross-task evidence its reflections see. Shown a bait task answered at length, it
  first proposes the harmful "just the bare value" generalisation (one is enough).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lift_world.world import LIFT, LONG_LOOKUP, Task, World, flip_choice, solves

__all__ = ["LONG_LOOKUP", "WorldModel", "fill", "reply_shape", "sections"]
MIN_SUPPORT = 2  # distinct failing tasks a convention needs before reflection proposes it

_HEADING = re.compile(r"^# (.+)$", re.M)
_ENTRY = re.compile(r"^# Session (S\d+)\b.*$", re.M)  # one session of a batched mining prompt
_SUBHEADING = re.compile(r"^## ", re.M)


@dataclass(frozen=True)
class Section:
    kind: str
    title: str
    body: str


def _kind(title: str) -> str | None:
    """What a template heading introduces; ``None`` for a heading that is not ours."""
    t = title.strip().casefold()
    if t in ("skill", "project notes", "memory") or t.startswith(("current ", "the other doc")):
        return "doc"
    if t == "task" or t.startswith("the task"):
        return "task"
    if re.search(r"went well|succe|passed", t):
        return "successes"
    if re.search(r"fail|went wrong|attempt group|mistake|regress", t):
        return "failures"
    if "what the user asked" in t:
        return "asked"
    if "good answer" in t:
        return "rubric"
    if t in ("the answer", "answer"):
        return "answer"
    if "developer asked" in t:
        return "session"
    if "reactions" in t:
        return "feedback"
    if re.search(r"preference|contract|how to answer|tools|last answer|example|fold", t):
        return "other"
    return None


def sections(text: str) -> list[Section]:
    """The prompt's sections in order; unrecognised headings stay inside the one before."""
    out: list[Section] = []
    kind, title, start = "preamble", "", 0
    for m in _HEADING.finditer(text):
        found = _kind(m.group(1))
        if found is None:
            continue
        out.append(Section(kind, title, text[start : m.start()].strip()))
        kind, title, start = found, m.group(1).strip(), m.end()
    out.append(Section(kind, title, text[start:].strip()))
    return out


def _body(parts: list[Section], kind: str) -> str:
    return "\n\n".join(s.body for s in parts if s.kind == kind)


# --------------------------------------------------------------------------- reply shapes


def _balanced(text: str, start: int) -> str:
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            esc = ch == "\\" and not esc
            if ch == '"' and not esc:
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


def _nullify_placeholders(raw: str) -> str:
    out, in_str, i = [], False, 0
    while i < len(raw):
        ch = raw[i]
        if ch == '"' and (i == 0 or raw[i - 1] != "\\"):
            in_str = not in_str
        if ch == "<" and not in_str:
            end = raw.find(">", i)
            if end > 0:
                out.append("null")
                i = end + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def reply_shape(text: str) -> Any:
    """The JSON example after the prompt's last "Reply with", or ``None``."""
    at = text.casefold().rfind("reply with")
    if at < 0:
        return None
    starts = [i for i in (text.find("[", at), text.find("{", at)) if i >= 0]
    if not starts:
        return None
    try:
        return json.loads(_nullify_placeholders(_balanced(text, min(starts))))
    except ValueError:
        return None


def _empty(value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, str | list | dict):
        return type(value)()
    if isinstance(value, int | float):
        return 0
    return None


def fill(shape: Any, payload: Any) -> Any:
    """``payload`` in the form of ``shape``: its keys, a list where it has one."""
    if isinstance(shape, list):
        item = shape[0] if shape else {}
        items = payload if isinstance(payload, list) else [payload]
        return [fill(item, p) for p in items]
    if isinstance(shape, dict):
        if isinstance(payload, list):
            key = next((k for k, v in shape.items() if isinstance(v, list)), None)
            if key is None:
                return fill(shape, payload[0]) if payload else {}
            out = {k: _empty(v) for k, v in shape.items()}
            out[key] = fill(shape[key], payload)
            return out
        return {k: payload[k] if k in payload else _empty(v) for k, v in shape.items()}
    return payload


# --------------------------------------------------------------------------- the model


class WorldModel:
    """The reply function of the fake server (``FakeModelServer(reply_fn=model.reply)``)."""

    def __init__(self, world_seed: int = 0, world: World = LIFT) -> None:
        self._lock = threading.Lock()
        self.world = world
        self.world_seed = world_seed
        self.noise = 0.0
        self.noisy_tasks: frozenset[str] | None = None  # None: every task is noisy
        self.seed = 0
        self.calls: Counter[str] = Counter()
        self.flips = 0
        self.unknown: list[str] = []
        self._seen: Counter[tuple[Any, ...]] = Counter()

    def configure(
        self, *, world_seed: int, noise: float, seed: int,
        noisy_tasks: frozenset[str] | None = None,
    ) -> None:  # fmt: skip
        """Start a run: which world, the share of attempts to flip, the seed picking them
        and (``noisy_tasks``, ids) the only tasks whose attempts may flip (None: all)."""
        with self._lock:
            self.world_seed, self.noise, self.seed = world_seed, noise, seed
            self.noisy_tasks = noisy_tasks
            self._seen.clear()

    def take_stats(self) -> dict[str, Any]:
        """Calls by role (and flips, unknown prompts) since the last call; resets them."""
        with self._lock:
            stats = {"calls": dict(self.calls), "flips": self.flips, "unknown": self.unknown}
            self.calls, self.flips, self.unknown = Counter(), 0, []
        return stats

    def reply(self, request: Any) -> str:
        """Answer one request (a :class:`support.fake_model_server.Request`)."""
        return self.answer(str(request.user_text))

    def answer(self, text: str) -> str:
        entries = list(_ENTRY.finditer(text))
        if entries:
            return self._answer_batch(text, entries)
        parts = sections(text)
        kinds = {s.kind for s in parts}
        reply: Any
        if "session" in kinds:
            kind, reply = "mine", self._mine(parts)
        elif "answer" in kinds and ("asked" in kinds or "rubric" in kinds):
            kind, reply = "judge", self._judge(parts)
        elif "failures" in kinds:
            kind, reply = "reflect", self._reflect(parts, text)
        elif "task" in kinds:
            kind, reply = "attempt", self._attempt(parts)
        else:
            kind, reply = "unknown", "[]"
        with self._lock:
            self.calls[kind] += 1
            if kind == "unknown" and len(self.unknown) < 5:
                self.unknown.append(text[:300])
        if kind in ("mine", "judge", "reflect"):
            return json.dumps(fill(reply_shape(text) or _DEFAULT_SHAPES[kind], reply))
        return str(reply)

    # -- target ------------------------------------------------------------------------
    def _attempt(self, parts: list[Section]) -> str:
        docs = _body(parts, "doc")
        w = self.world
        task = w.find_task(_body(parts, "task"))
        if task is None:
            return "Done."
        present, harmful = w.conventions_in(docs), w.harmful_in(docs)
        right = solves(task, present, harmful)
        if self._flip(task, present, harmful):
            if right:  # drop one needed convention
                dropped = task.needs[flip_choice(self.seed, task.id, "drop") % len(task.needs)]
                return w.render_answer(task, set(task.needs) - {dropped})
            return w.render_answer(task, task.needs)
        return w.render_answer(task, present, bare=harmful)

    def _flip(self, task: Task, present: frozenset[str], harmful: bool) -> bool:
        if self.noise <= 0 or (self.noisy_tasks is not None and task.id not in self.noisy_tasks):
            return False
        key = (task.id, tuple(sorted(present)), harmful)
        with self._lock:
            self._seen[key] += 1
            n = self._seen[key]
        roll = flip_choice(self.seed, *key, n) % 10_000 / 10_000
        if roll < self.noise:
            with self._lock:
                self.flips += 1
            return True
        return False

    # -- judge ---------------------------------------------------------------------------
    def _judge(self, parts: list[Section]) -> dict[str, Any]:
        w = self.world
        task = w.find_task(_body(parts, "asked")) or w.find_task(_body(parts, "rubric"))
        answer = _body(parts, "answer")
        cut = answer.casefold().rfind("reply with")
        answer = answer[:cut].strip() if cut >= 0 else answer
        if task is None:
            return {"score": 1.0 if answer else 0.0, "reason": "does what was asked"}
        score, missing = w.grade(task, answer)
        reason = "meets every house convention" if not missing else "; ".join(missing)
        return {"score": round(score, 3), "reason": reason}

    # -- miner ---------------------------------------------------------------------------
    def _mine(self, parts: list[Section]) -> list[dict[str, Any]]:
        asked = _body(parts, "session")
        w = self.world
        task = w.find_task(asked)
        if task is None:
            return []
        folded = asked.casefold()
        criteria = [f"does what was asked: {task.summary}"]
        for c in w.conventions:
            if any(p.casefold()[:40] in folded for p in c.corrections):
                criteria.append(c.rubric)
        if task.bait:
            bait = w.bait(task.bait)
            if any(p.casefold()[:40] in folded for p in bait.corrections):
                criteria.append(w.by_key[bait.lure].rubric)
        feedback = _body(parts, "feedback")
        pos, neg = "pos:" in feedback, "neg:" in feedback
        satisfied = True if pos and not neg else False if neg and not pos else None
        rubric = "\n".join(f"- {c}" for c in dict.fromkeys(criteria))
        intent = self.wording(task)
        return [{"intent": intent, "rubric": rubric, "checks": [], "satisfied": satisfied}]

    def _answer_batch(self, text: str, entries: list[re.Match[str]]) -> str:
        """Several sessions in one mining prompt: each entry (``# Session S1``, its parts
        under ``##`` headings) mined on its own, answered in the prompt's reply shape."""
        answers = []
        for i, m in enumerate(entries):
            end = entries[i + 1].start() if i + 1 < len(entries) else len(text)
            body = _SUBHEADING.sub("# ", text[m.end() : end])
            answers.append({"session": m.group(1), "tasks": self._mine(sections(body))})
        with self._lock:
            self.calls["mine"] += 1
        shape = reply_shape(text[: entries[0].start()]) or _DEFAULT_SHAPES["mine_batch"]
        return json.dumps(fill(shape, answers))

    def wording(self, task: Task) -> str:
        """The one wording the miner gives ``task`` in this world."""
        return task.variants[flip_choice(self.world_seed, task.id) % len(task.variants)]

    # -- optimizer -----------------------------------------------------------------------
    def _reflect(self, parts: list[Section], text: str) -> list[dict[str, Any]]:
        w = self.world
        docs = _body(parts, "doc")
        evidence = _body(parts, "failures")
        present, harmful = w.conventions_in(docs), w.harmful_in(docs)
        budget_m = re.search(r"at most (\d+)", text)
        budget = int(budget_m.group(1)) if budget_m else 4
        failing = w.find_tasks(evidence)
        support: Counter[str] = Counter()
        for task in failing:
            support.update(k for k in task.needs if k not in present)
        order = {c.key: i for i, c in enumerate(w.conventions)}
        backed = [k for k in support if support[k] >= MIN_SUPPORT]
        ranked = sorted(backed, key=lambda k: (-support[k], order[k]))
        edits: list[dict[str, Any]] = []
        for bait in w.baits:
            baits = [t for t in failing if t.bait == bait.key]
            if baits and not harmful and (bait.lure not in present or bait.tell in evidence):
                edits.append(_edit(bait.text, bait.why.format(n=len(baits))))
        for key in ranked:
            tasks = [t.subject for t in failing if key in t.needs]
            edits.append(_edit(w.by_key[key].text, _why(tasks)))
        return edits[: max(0, budget)]


def _edit(content: str, rationale: str) -> dict[str, Any]:
    return {"op": "add", "content": content, "anchor": "", "rationale": rationale}


def _why(subjects: Iterable[str]) -> str:
    shown = list(subjects)
    return f"{len(shown)} failed task(s) needed it ({', '.join(shown[:4])})"


_DEFAULT_SHAPES: dict[str, Any] = {
    "judge": {"score": None, "reason": ""},
    "mine": {"tasks": [{"intent": "", "rubric": "", "checks": [], "satisfied": None}]},
    "mine_batch": {"sessions": [{"session": "", "tasks": []}]},
    "reflect": [{"op": "add", "content": "", "anchor": "", "rationale": ""}],
}
