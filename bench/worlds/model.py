"""A drawn world played over HTTP: the target, the miner, the judge and the reflection.

Built on :class:`lift_world.model.WorldModel` (its prompt parsing and reply shapes); what
differs is the world's behaviour:

- **attempt**: follows the conventions in the documents; a spoiler in them changes the
  answers of the tasks it breaks (bare / near-miss / a question) and adds its tell line.
  A share ``noise`` of attempts flips (right -> one convention dropped, wrong -> right).
- **judge**: strict partial credit (a near-miss earns half a convention), wrong on a
  share ``judge_error`` of verdicts, and biased towards some spoilers' tells on the tasks
  they fool.
- **mine**: each session's task, in one wording (or, for the reworded duplicates, the
  session's own), with a rubric, or for the checked tasks lenient rule checks only (a
  near-miss passes them; a bare value passes a lookup's length check).
- **reflect**: the missing conventions two or more failing tasks point at, after the
  spoilers their triggers call for (the every-fold one always).

:meth:`TrustModel.fault` is the server's rule: transient faults (5xx, 429, a timeout) on a
share ``faults`` of requests, and every target call of the doomed task failing.

Every random draw (a flip, a judge's error, a fault and its kind) is common random numbers:
a hash of (world seed, condition, night seed, the kind of draw, the request's identity,
the n-th occurrence of that identical request), never a shared stream or a count of
calls of another shape. The request's identity is its content: the whole prompt (an
attempt's task and documents, a judge's request, rubric and answer), with the world's
HOME (a temporary path of the run's own, in mining prompts) read as ``~``. The requests carry
no sample id (the product sends model, messages, token cap and reply format only; its
``sample_id`` and metadata stay in the process), so repeats of one identical prompt (K
samples, a judge asked again about the same answer, a retry after a fault) are told
apart by the occurrence counter of that exact prompt alone: the n-th attempt of a
request faults (or flips) on a draw of its own, so a retry can succeed. The same product
on the same seed meets the same draws under any concurrency and load; identical
concurrent requests may swap their draws among themselves, nothing else does (the
product pairs sample k of two arms, so such a swap can still change how many samples a
noisy comparison draws: only a sample id in the request could pin that down).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from lift_world.model import WorldModel, _body, _edit, _why, sections
from support.fake_model_server import Reply
from worlds.world import GenWorld, Task, stable, unit

MIN_SUPPORT = 2
TIMEOUT = 5.0  # the member timeout trust.py configures; a "timeout" fault outlasts it


class TrustModel(WorldModel):
    def __init__(self, world: GenWorld) -> None:
        super().__init__(world_seed=world.seed, world=world)  # type: ignore[arg-type]
        self.gw = world
        self.faults = 0.0
        self.condition = ""  # the night's condition (trust.py sets it), part of every draw
        self.home = ""  # the world's HOME (trust.py sets it): no part of a request's identity
        self.faulted: Counter[str] = Counter()
        self._occurrences: Counter[tuple[str, int]] = Counter()

    def configure(
        self, *, world_seed: int, noise: float, seed: int, noisy_tasks: frozenset[str] | None = None
    ) -> None:
        super().configure(world_seed=world_seed, noise=noise, seed=seed, noisy_tasks=noisy_tasks)
        with self._lock:
            self._occurrences.clear()
            self.faulted = Counter()

    # -- the draws (common random numbers) -----------------------------------------------
    def _base(self) -> tuple[object, ...]:
        return (self.gw.seed, self.condition, self.seed)

    def _identity(self, text: str) -> int:
        """A request's identity: its text, the run's own HOME path left out."""
        return stable(text.replace(self.home, "~") if self.home else text)

    def _occurrence(self, kind: str, key: int) -> int:
        """Which occurrence of request ``key`` this is, counted per kind of draw."""
        with self._lock:
            self._occurrences[(kind, key)] += 1
            return self._occurrences[(kind, key)]

    def _draw(self, kind: str, key: int, n: int) -> float:
        """A uniform in [0, 1) for the ``n``-th occurrence of request ``key``."""
        return unit(*self._base(), kind, key, n)

    def _request_key(self, parts: list[Any]) -> int:
        """A parsed prompt's identity: every section's heading and body."""
        return self._identity("\x1f".join(f"{s.kind}\x1e{s.title}\x1e{s.body}" for s in parts))

    # -- faults (the server's rule) ------------------------------------------------------
    def fault(self, request: Any) -> Reply | None:
        text = str(request.user_text)
        if self.gw.doomed and self._is_attempt_of(text, self.gw.doomed):
            with self._lock:
                self.faulted["doomed"] += 1
            # refused every time (a content filter): not retried, no member's health hurt
            return Reply(status=400, error_code="content_filter")
        if self.faults <= 0:
            return None
        key = self._identity(text)
        n = self._occurrence("fault", key)  # the n-th attempt of this request
        if self._draw("fault", key, n) >= self.faults:
            return None
        kind = stable(*self._base(), "fault-kind", key, n) % 4
        with self._lock:
            self.faulted[("500", "503", "429", "timeout")[kind]] += 1
        if kind == 0:
            return Reply(status=500)
        if kind == 1:
            return Reply(status=503)
        if kind == 2:
            return Reply(status=429, headers={"retry-after-ms": "200"})
        return Reply(latency=TIMEOUT + 1.0)

    def _is_attempt_of(self, text: str, task_id: str) -> bool:
        if "# Session" in text:
            return False
        parts = sections(text)
        kinds = {s.kind for s in parts}
        if "task" not in kinds or "failures" in kinds or "answer" in kinds or "session" in kinds:
            return False
        task = self.gw.find_task(_body(parts, "task"))
        return task is not None and task.id == task_id

    # -- target --------------------------------------------------------------------------
    def _attempt(self, parts: list[Any]) -> str:
        w = self.gw
        docs = _body(parts, "doc")
        task = w.find_task(_body(parts, "task"))
        if task is None:
            return "Done."
        present, spoilers = w.conventions_in(docs), w.spoilers_in(docs)
        right = w.solves(task, present, spoilers)
        tells = sorted(spoilers)
        if self._flips(task, parts) and task.needs:
            if right:
                drop = task.needs[stable(*self._base(), "drop", task.id) % len(task.needs)]
                return w.render_answer(task, set(task.needs) - {drop}, tells=tells)
            return w.render_answer(task, task.needs, tells=tells)
        by = {s.key: s for s in w.spoilers}
        breaking = [
            k
            for k in ("direct", "every", "counterfactual", "narrow", "lucky")
            if k in spoilers and task.id in by[k].breaks
        ]
        if not breaking:
            return w.render_answer(task, present, tells=tells)
        first = breaking[0]
        if first == "direct":
            return w.render_answer(task, present, mode="bare")
        if first == "every":
            return w.render_answer(task, present, mode="ask", tells=tells)
        if first == "counterfactual":
            return w.render_answer(task, present, mode="near", tells=tells)
        if first == "narrow":  # "exempt from the house steps": the bare minimum
            return w.render_answer(task, present, mode="bare")
        return w.render_answer(task, (), tells=tells)  # lucky: the steps left to others

    def _flips(self, task: Task, parts: list[Any]) -> bool:
        """Whether this attempt flips: a share ``noise`` of the occurrences of each prompt."""
        if self.noise <= 0 or (self.noisy_tasks is not None and task.id not in self.noisy_tasks):
            return False
        key = self._request_key(parts)
        if self._draw("flip", key, self._occurrence("flip", key)) >= self.noise:
            return False
        with self._lock:
            self.flips += 1
        return True

    # -- judge ---------------------------------------------------------------------------
    def _judge(self, parts: list[Any]) -> dict[str, Any]:
        w = self.gw
        task = w.find_task(_body(parts, "asked")) or w.find_task(_body(parts, "rubric"))
        answer = _body(parts, "answer")
        cut = answer.casefold().rfind("reply with")
        answer = answer[:cut].strip() if cut >= 0 else answer
        if task is None:
            return {"score": 1.0 if answer else 0.0, "reason": "does what was asked"}
        score, missing = w.grade(task, answer)
        for s in w.spoilers:  # a biased judge: it likes this spoiler's tell on these tasks
            tell = {"every": 0.4, "lucky": 1.0}.get(s.key, 0.0)
            if task.id in s.fooled and tell and self._tell(s.key) in answer:
                score, missing = min(1.0, score + tell), []
        if w.judge_error and self._judge_errs(parts):
            score = 1.0 - score  # the judge errs
            missing = [] if score >= 0.99 else missing or ["it misses the point"]
        reason = "meets every house convention" if not missing else "; ".join(missing)
        return {"score": round(score, 3), "reason": reason}

    def _judge_errs(self, parts: list[Any]) -> bool:
        """Whether this verdict errs: a share ``judge_error`` of the occurrences of each
        judge request (the same answer to the same request, asked again, draws anew)."""
        key = self._request_key(parts)
        return self._draw("judge", key, self._occurrence("judge", key)) < self.gw.judge_error

    @staticmethod
    def _tell(kind: str) -> str:
        from worlds.world import TELLS

        return TELLS[kind]

    # -- miner ---------------------------------------------------------------------------
    def _mine(self, parts: list[Any]) -> list[dict[str, Any]]:
        w = self.gw
        asked = _body(parts, "session")
        task = w.find_task(asked)
        if task is None:
            return []
        folded = asked.casefold()
        feedback = _body(parts, "feedback")
        pos, neg = "pos:" in feedback, "neg:" in feedback
        satisfied = True if pos and not neg else False if neg and not pos else None
        intent = self.wording(task)
        if task.id in w.duplicates:  # the session's own wording: one task mined twice
            own = [v for v in task.variants if v.casefold()[:25] in folded]
            intent = own[0] if own else intent
        if task.id in w.checked:
            if task.value:
                checks = [{"op": "max_chars", "arg": 160}]
            else:
                stem = w.by_key[task.needs[0]].stem
                checks = [{"op": "contains", "arg": stem}] if stem else []
            if checks:
                return [{"intent": intent, "rubric": "", "checks": checks, "satisfied": satisfied}]
        criteria = [f"does what was asked: {task.summary}"]
        for key in task.needs:
            c = w.by_key[key]
            if any(p.casefold()[:40] in folded for p in c.corrections):
                criteria.append(c.rubric)
        rubric = "\n".join(f"- {c}" for c in dict.fromkeys(criteria))
        return [{"intent": intent, "rubric": rubric, "checks": [], "satisfied": satisfied}]

    def wording(self, task: Task) -> str:  # type: ignore[override]
        return task.variants[stable(self.gw.seed, task.id) % len(task.variants)]

    # -- optimizer -----------------------------------------------------------------------
    def _reflect(self, parts: list[Any], text: str) -> list[dict[str, Any]]:
        w = self.gw
        docs = _body(parts, "doc")
        evidence = _body(parts, "failures")
        present, spoilers = w.conventions_in(docs), w.spoilers_in(docs)
        m = re.search(r"at most (\d+)", text)
        budget = int(m.group(1)) if m else 4
        failing = w.find_tasks(evidence)
        support: Counter[str] = Counter()
        for task in failing:
            support.update(k for k in task.needs if k not in present and k in w.by_key)
        order = {c.key: i for i, c in enumerate(w.conventions)}
        ranked = sorted(
            (k for k in support if support[k] >= MIN_SUPPORT and k in order),
            key=lambda k: (-support[k], order[k]),
        )
        edits: list[dict[str, Any]] = []  # the spoilers
        good: list[dict[str, Any]] = []  # the conventions (and the narrow spoiler's bundle)
        by = {s.key: s for s in w.spoilers}
        ids = {t.id for t in failing}
        if "direct" in by and "direct" not in spoilers:
            baits = [t for t in failing if t.bait]
            if baits:
                edits.append(
                    _edit(
                        by["direct"].text,
                        f"users asked for just the value in "
                        f"{len(baits)} failed lookups; it applies to every answer",
                    )
                )
        if "every" in by and "every" not in spoilers:
            edits.append(_edit(by["every"].text, "misunderstood requests caused rework"))
        if "counterfactual" in by and "counterfactual" not in spoilers:
            multi = [t for t in failing if len(t.needs) >= 2]
            if len(multi) >= 2 or len(failing) >= 4:
                edits.append(
                    _edit(
                        by["counterfactual"].text,
                        "answers keep missing one or "
                        "another house convention; a checklist covers them all",
                    )
                )
        if "lucky" in by and "lucky" not in spoilers and by["lucky"].trigger in ids:
            edits.append(_edit(by["lucky"].text, "one failure was a step another team owns"))
        for key in ranked:
            if key == w.shared and "narrow" in by and "narrow" not in spoilers:
                tasks = [t.subject for t in failing if key in t.needs]
                good.append(_edit(by["narrow"].text, _why(tasks)))
            tasks = [t.subject for t in failing if key in t.needs]
            good.append(_edit(w.by_key[key].text, _why(tasks)))
        merged = [e for pair in zip(edits, good, strict=False) for e in pair]
        n = min(len(edits), len(good))
        merged += edits[n:] + good[n:]
        return merged[: max(0, budget)]
