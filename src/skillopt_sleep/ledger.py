"""The night's ledger: what each model call bought, per stage and per decision.

Every stage's line comes from the budget wrapper's tally
(:class:`skillopt.backends.wrappers.BudgetCompleter`): model calls (failed ones included), the
replies the response cache served (counted apart: they are no call and cost nothing), tokens,
and the prompt tokens the provider served from its own prompt cache (``cached_tokens``:
OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``,
the codex and claude CLIs' JSON usage; the copilot CLI reports no usage at all).

**Calls that changed no decision.** The samples of a stage (rollout, trial, union,
attribution, final) are what its decisions read: the task's pass state, and for the paired
stages the accept or reject of an edit and the regression verdict of each task. Within one
stage, a task is *settled* when every sample it got there, under every pair of documents
tested there, scored alike (:func:`skillopt.gate.task_settled`); in the rollout stage, which
compares nothing and measures each round's documents for reflection, every sample under the
same documents. Then each pair of documents' first sample of the task tells the task's
outcome, and every later sample changed no decision: the task's pass state is the same
without it, and in a paired test each pair it makes has delta 0, which the sign-flip test
leaves out and which does not change the sign of the mean gain (the gate's ``min_delta`` is
0 by default; with a positive one, a zero pair counts against the edit, and the ledger then
overstates what could go). The samples' model calls (the attempt and its judge call; cache
hits and results reused from an interrupted run excluded, a failed sample never counted)
are the night's *no-decision* calls: what a test that stops at the first sample settling it
would not have spent. Mining and reflection are never counted: they make the candidates the
decisions are about.

**Calls that could not change a decision** (``repeats``, issue 30): on a night the noise
probe judged consistent, a model asked the same task under the same documents answers
alike, so every sample of a (task, documents) pair after the night's first one, in any
stage, repeats an answer the night already had: whatever it scored, it could not change a
decision (the gate counts it as an independent pair all the same). Their model calls (the
attempt and its judge call) are counted per stage, the judge calls under ``judge``. The
``steady`` top-up is exempt (it is drawn for the nights after, which read it), and on a
night not judged consistent nothing is counted: a repeat there may answer otherwise.

**Calls saved** (``saved``, issue 30 lever 1): on such a night a sample that is no
decision's candidate takes the answer the night already has for its (task, documents)
(:mod:`skillopt_sleep.stand_in`): its attempt is not made (one saved call each, per stage),
and the sample is no repeat; its own judge call, when it makes one, counts under
``judge``. ``read_backs`` counts the samples.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skillopt.gate import task_settled

__all__ = ["SampleCost", "build_ledger", "no_decision_calls", "repeat_calls", "saved_calls"]

JUDGE_STAGE = "judge"
# Stages that measure documents without pairing them against others: a task settles per
# documents there. Every other stage is taken as paired (the conservative reading).
UNPAIRED_STAGES = frozenset({"rollout"})
# Samples drawn for later nights, which read them back: never a repeat of tonight's.
FOR_LATER = frozenset({"steady"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleCost:
    """One sample a stage drew: where it belongs, what it scored, what it cost."""

    stage: str  # the job's phase: rollout, trial, union, attribution, final, ...
    task_id: str
    docs: str  # the documents' hashes: skill and memory
    sample_id: int
    score: tuple[float, float]  # (hard, soft)
    attempt_calls: int  # 0 when the response cache answered, else 1
    judge_calls: int  # model calls of its judging (0: judged locally or from the cache)
    tokens: int = 0  # of those calls
    cached_tokens: int = 0  # part of their prompts the provider served from its cache
    failed: bool = False
    read_back: bool = False  # a known answer stood in: no call made (:mod:`.stand_in`)
    saved_calls: int = 0  # a read-back's: the calls the answer it read back cost

    @property
    def calls(self) -> int:
        return self.attempt_calls + self.judge_calls


def _settled(samples: list[SampleCost]) -> bool:
    """Every sample scored alike, hard and soft (a score that is not finite never does)."""
    if not all(math.isfinite(v) for s in samples for v in s.score):
        return False
    return all(task_settled([s.score[i] for s in samples], []) for i in (0, 1))


def no_decision_calls(samples: Iterable[SampleCost]) -> dict[str, Counter[str]]:
    """Per decision stage: ``samples``, their ``calls``, ``tokens`` and ``cached_tokens``,
    and the ``no_decision`` calls (the attempts' and their judge calls) with their tokens;
    under ``by_stage`` the no-decision calls by accounting stage (judge calls are the
    ``judge`` stage's there). See the module docstring."""
    groups: dict[tuple[str, str, str], list[SampleCost]] = defaultdict(list)
    out: dict[str, Counter[str]] = defaultdict(Counter)
    by_stage: Counter[str] = Counter()
    for s in samples:
        docs = s.docs if s.stage in UNPAIRED_STAGES else ""
        groups[(s.stage, s.task_id, docs)].append(s)
        row = out[s.stage]
        row["samples"] += 1
        row["calls"] += s.calls
        row["tokens"] += s.tokens
        row["cached_tokens"] += s.cached_tokens
    for (stage, _task, _docs), group in groups.items():
        answered = [s for s in group if not s.failed]
        if len(answered) < 2 or not _settled(answered):
            continue
        first: dict[str, int] = {}
        for s in answered:
            first[s.docs] = min(first.get(s.docs, s.sample_id), s.sample_id)
        for s in answered:
            if s.sample_id == first[s.docs]:
                continue
            out[stage]["no_decision"] += s.calls
            out[stage]["no_decision_tokens"] += s.tokens
            by_stage[stage] += s.attempt_calls
            by_stage[JUDGE_STAGE] += s.judge_calls
    result = dict(out)
    result["by_stage"] = by_stage
    return result


def repeat_calls(samples: Iterable[SampleCost], *, consistent: bool) -> Counter[str]:
    """Per accounting stage, the model calls of samples that repeat a (task, documents)
    pair the night already had an answer for, on a night judged ``consistent`` (see the
    module docstring); empty otherwise."""
    out: Counter[str] = Counter()
    if not consistent:
        return out
    answered: set[tuple[str, str]] = set()
    for s in samples:
        if s.failed or s.stage in FOR_LATER or s.read_back:
            continue
        pair = (s.task_id, s.docs)
        if pair in answered:
            out[s.stage] += s.attempt_calls
            out[JUDGE_STAGE] += s.judge_calls
        answered.add(pair)
    return +out


def saved_calls(samples: Iterable[SampleCost]) -> Counter[str]:
    """Per stage, the calls read-backs saved (see the module docstring)."""
    out: Counter[str] = Counter()
    for s in samples:
        if s.read_back:
            out[s.stage] += s.saved_calls
    return +out


_DECISION_KEYS = (
    "samples",
    "calls",
    "tokens",
    "cached_tokens",
    "no_decision",
    "no_decision_tokens",
)


def build_ledger(
    spend: Mapping[str, Any], samples: Iterable[SampleCost], *, consistent: bool = False
) -> dict[str, Any]:
    """``report.json``'s ``ledger``: totals, each stage's line and each decision stage's
    calls with those that changed no decision, and (``consistent``: the noise probe judged
    tonight's model so) those that could not change one."""
    drawn = list(samples)
    decided = no_decision_calls(drawn)
    by_stage = decided.pop("by_stage")
    repeats = repeat_calls(drawn, consistent=consistent)
    saved = saved_calls(drawn)
    stages: dict[str, Any] = {}
    for name, row in (spend.get("stages") or {}).items():
        stages[name] = {**row, "no_decision": by_stage.get(name, 0),
                        "repeats": repeats.get(name, 0), "saved": saved.get(name, 0)}  # fmt: skip
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in stages.values())
    cached = sum(int(r.get("cached_tokens") or 0) for r in stages.values())
    return {
        "calls": int(spend.get("calls") or 0),
        "cache_hits": int(spend.get("cache_hits") or 0),
        "tokens": int(spend.get("tokens") or 0),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_share": round(cached / prompt, 4) if prompt else None,
        "no_decision": sum(by_stage.values()),
        "repeats": sum(repeats.values()),
        "saved": sum(saved.values()),
        "read_backs": sum(1 for s in drawn if s.read_back),
        "stages": stages,
        "decisions": {
            name: {k: int(row.get(k, 0)) for k in _DECISION_KEYS}
            for name, row in sorted(decided.items())
        },
    }
