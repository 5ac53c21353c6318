"""The night's spend, before and after: the up-front estimate and the per-call token model.

Before mining, :func:`announce_mining` says what mining tonight's sessions will cost.
Before the learning stages spend anything, :func:`announce_estimate` says how many calls
each stage will make and what they will cost, learned from what the project's earlier
nights spent per task and stage (:mod:`skillopt_sleep.stage_rates`) and priced from what
they and earlier calls measured, and warns when the budget will cut the night short (said
again once the night has measured what it assumed: :mod:`.estimate_revision`). A night
priced on the priors alone says a range, its low end the night should reflection propose no
edit the gate can try (:func:`gate_floor`). After the night, :func:`learn_tokens` folds
tonight's measured spend into the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from skillopt.config import CLI_KINDS
from skillopt.logging import get_logger
from skillopt.prompts import render_prompt
from skillopt.types import Split, TaskRecord
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.night.course import Course, Estimate
from skillopt_sleep.night.night_state import Night
from skillopt_sleep.night.outcome import NightResult
from skillopt_sleep.replay import Docs, calls_per_sample
from skillopt_sleep.sampling_guess import SamplingGuess, sampling_guess
from skillopt_sleep.stage_rates import (
    JUDGED,
    LEARNING,
    NOISE_SCALE,
    QUIET,
    NightRecord,
    NightShape,
    measured_alike,
    night_record,
    predict_calls,
    tonight_noise,
)
from skillopt_sleep.state import project_dir
from skillopt_sleep.token_model import TokenEstimate, TokenModel, budget_warning, estimate_tokens

__all__ = [
    "GATE_STAGES",
    "SpendEstimate",
    "announce_estimate",
    "announce_mining",
    "gate_floor",
    "learn_tokens",
    "night_shape",
]

# The order a night spends in, so the line reads the same on every run.
_NIGHT_ORDER = ("mine", "rollout", "judge", "reflect", "trial", "union", "final", "steady", "test")


def _in_night_order(stage: str) -> tuple[int, str]:
    known = stage in _NIGHT_ORDER
    return (_NIGHT_ORDER.index(stage) if known else len(_NIGHT_ORDER), stage)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendEstimate:
    """The night's spend estimate, printed before any call (the cap itself is
    :class:`skillopt.backends.wrappers.BudgetCompleter`)."""

    calls: int
    tokens: int
    by_stage: dict[str, int]
    by_skill: dict[str, int] = field(default_factory=dict)  # the fan-out's share, per skill
    # the calls should reflection propose no edit the gate can try, when the gate's share
    # rests on no measured night (said as a range: :func:`gate_floor`); None: not said
    floor: int | None = None

    def describe(self) -> str:
        stages = ", ".join(
            f"{k} {self.by_stage[k]}" for k in sorted(self.by_stage, key=_in_night_order)
            if self.by_stage[k]
        )  # fmt: skip
        said = f"about {self.calls} model calls (~{self.tokens} tokens): {stages}"
        if self.floor is not None:
            said = (
                f"between {self.floor} and {self.calls} model calls (~{self.tokens} tokens at "
                f"the most): {self.floor} if reflection proposes no edit the gate can try (no "
                f"trial, union or final check), {self.calls} if it proposes as many as a "
                f"first night of the lift world did and every one is tried: {stages}"
            )
        if self.by_skill:
            said += "; of which your skills: " + ", ".join(
                f"{name} {n}" for name, n in self.by_skill.items()
            )
        return said


_log = get_logger(__name__)

GATE_STAGES = frozenset({"trial", "union", "attribution", "final"})
"""The gate's stages: run only on an edit reflection proposed that the gate can try."""


def gate_floor(by_stage: Mapping[str, int]) -> int:
    """The calls of ``by_stage`` made should reflection propose no edit the gate can try:
    every stage but the gate's, and judging in proportion to the judged calls left (the
    small real model's nights: every edit it proposed was refused before any trial)."""
    judged = sum(n for s, n in by_stage.items() if s in JUDGED)
    left = sum(n for s, n in by_stage.items() if s in JUDGED and s not in GATE_STAGES)
    judge = by_stage.get("judge", 0)
    return sum(n for s, n in by_stage.items() if s not in GATE_STAGES and s != "judge") + (
        round(judge * left / judged) if judged else judge
    )


def announce_mining(night: Night, calls: int) -> None:
    """Before the first mining call: the mining calls planned (the sessions the cache
    lacks, packed into calls as the miner packs them), and the most they can take: each
    call's reply is asked again once when it cannot be used."""
    night.mining_estimate = calls
    if calls:
        night.progress.note(
            f"estimated spend: mining about {calls} model call(s) (at most {2 * calls}, "
            "should replies need asking again); the rest is estimated once the tasks are known"
        )


def _stage_calls(
    night: Night, by_stage: dict[str, int], *, recheck: int, rubric: float
) -> dict[str, int]:
    """The calls each stage is expected to make (``by_stage``: as predicted), a quiet
    night's known samples and mining's in: what it made, mining being over when this is
    said (its plan only when it made none, a resumed night's); stages with none left out."""
    if recheck:  # the samples the quiet night draws are known: a rollout and its judge each
        by_stage = {"rollout": recheck, "judge": round(recheck * rubric)}
    mined = night.spend.calls_by_stage.get("mine", 0)
    if night.mining_estimate is not None or mined:
        by_stage["mine"] = mined or night.mining_estimate or 0
    return {s: n for s, n in by_stage.items() if n}


def _learned_from(nights: int, span: tuple[int, int, int] | None) -> str:
    """Where the estimate came from, said with it."""
    learned = (
        f"learned from {nights} earlier night(s)" if nights
        else "no earlier night measured yet: a prior"
    )  # fmt: skip
    if span is not None:  # how far nights like tonight's were apart, learning calls only
        low, high, alike = span
        learned += f"; the {alike} nights like it would have made {low}-{high} learning calls here"
    return learned


def _priced(
    night: Night, model: TokenModel, predicted: Mapping[str, int], by_stage: Mapping[str, int],
    tasks: list[TaskRecord], docs: Docs, rubric: float,
) -> tuple[TokenEstimate, int]:  # fmt: skip
    """The tokens of ``by_stage``'s calls: the stages earlier nights priced (``predicted``)
    as they did, the rest per call (the price and where it came from, and the total)."""
    unpriced = {s: n for s, n in by_stage.items() if s not in predicted}
    priced = estimate_tokens(model, night.cfg.pool, _as_calls(unpriced), rubric_share=rubric)
    unpriced_tokens = priced.tokens
    if priced.sources and set(priced.sources.values()) == {"prior"} and not _any_cli(night.cfg):
        # nothing measured yet but mining: tonight's own prompts say more than a flat prior
        unpriced_tokens = round(sum(unpriced.values()) * _text_prior(tasks, docs))
    return priced, unpriced_tokens + sum(v for s, v in predicted.items() if s in by_stage)


def announce_estimate(
    night: Night,
    tasks: list[TaskRecord],
    learn: list[TaskRecord],
    test: list[TaskRecord],
    *,
    docs: Docs,
    skills: Mapping[str, int] | None = None,
    recheck: int = 0,
) -> Estimate:
    """The spend estimate, said before any call of the learning stages (mining's before
    mining): calls per stage learned from the project's earlier nights (``learn``: the managed
    night's tasks, ``skills``: each fanned-out skill's task count; ``recheck``: a quiet night's
    samples to draw; ``docs``: the live documents, whose recorded answers say how noisy tonight's
    tasks are), priced per stage or member; a range on the prior; whether the budget cuts it."""
    rubric = sum(calls_per_sample(t) - 1 for t in tasks) / len(tasks)  # judged by the model
    model = TokenModel.load(project_dir(night.cfg.state_path(), night.project))
    n_learn = len(learn) + sum((skills or {}).values())
    known = _known_noise(night, [*learn], docs)
    guess = sampling_guess(night.cfg.pool)
    noise = tonight_noise(model.nights, known, guess.kind if guess else None)
    predicted = predict_calls(
        model.nights, kind=QUIET if recheck else LEARNING, tasks=n_learn, test=len(test),
        sessions=0, noise=noise, shape=(shape := night_shape(night.cfg, n_learn, rubric)),
    )  # fmt: skip
    by_stage = _stage_calls(night, dict(predicted.calls), recheck=recheck, rubric=rubric)
    model.observe(night.spend.usage_by_member)  # tonight's calls so far (mining) count too
    priced, tokens = _priced(night, model, predicted.tokens, by_stage, tasks, docs, rubric)
    estimate = SpendEstimate(
        calls=sum(by_stage.values()), tokens=tokens, by_stage=by_stage,
        by_skill=_by_skill(by_stage, skills or {}, n_learn),
        floor=_unmeasured_floor(by_stage, predicted.nights, recheck))  # fmt: skip
    learned = _learned_from(predicted.nights, span := predicted.span if not recheck else None)
    basis, on_noise = _noise_basis(known, guess, model.nights)
    calm = None if recheck or basis == "archive" else _if_consistent(
        model, by_stage, noise, n_learn, len(test), shape)  # fmt: skip
    on_noise += f"; about {calm} if the probe finds it answers consistently" if calm else ""
    said = f"{estimate.describe()} ({learned}; {on_noise})" + (
        f"; per call: {priced.describe()}" if priced.sources else "")  # fmt: skip
    night.progress.note(f"estimated spend: {said}")
    warning = _warn_budget(night, estimate)
    _log.info("night.estimate", calls=estimate.calls, floor=estimate.floor, noise=noise,
              tokens=estimate.tokens, nights=predicted.nights, sources=priced.sources)  # fmt: skip
    detail = {
        "calls": estimate.calls,
        "floor": estimate.floor,
        "by_stage": estimate.by_stage,
        "by_skill": estimate.by_skill,
        **priced.to_dict(),
        "tokens": estimate.tokens,
        "learned_from_nights": predicted.nights,
        "learning_span": [span[0], span[1]] if span is not None else None,
        "noise": noise,
        "noise_basis": basis,
        "if_consistent": calm,
        "tasks": {"learnable": n_learn, "test": len(test), "judged_share": round(rubric, 4)},
        "edits_per_reflection": predicted.edits_per_reflection,
        "budget_warning": warning,
    }
    return Estimate(said=said, detail=detail)


def _unmeasured_floor(by_stage: Mapping[str, int], nights: int, recheck: int) -> int | None:
    """The low end of a learning night's range when its gate is priced on the prior alone
    (``nights``: the measured learning nights the rates come from): the prior is a night
    whose reflections proposed a dozen edits, all tried, and a small model's may propose
    none the gate can try; a measured night's rates carry what its gate ran. None when
    measured, a quiet night (``recheck``), or no gate was priced."""
    if recheck or nights:
        return None
    floor = gate_floor(by_stage)
    return floor if floor < sum(by_stage.values()) else None


REPLY_TOKENS = 150  # a reply's tokens, before any was measured


def night_shape(cfg: SleepConfig, learnable: int, rubric: float) -> NightShape:
    """What tonight will run, as the priors scale with it (:class:`NightShape`)."""
    night = cfg.night
    return NightShape(samples=night.dream_rollouts, rounds=night.rounds,
                      folds=max(1, min(night.folds, learnable)), rubric=rubric)  # fmt: skip


def _by_skill(by_stage: Mapping[str, int], skills: Mapping[str, int], tasks: int) -> dict[str, int]:
    """The fan-out's share of the learning calls, per skill (by its task count)."""
    learning = sum(n for s, n in by_stage.items() if s not in ("mine", "test"))
    return {name: round(learning * n / tasks) for name, n in skills.items() if tasks}


def _if_consistent(
    model: TokenModel,
    by_stage: Mapping[str, int],
    noise: float | None,
    tasks: int,
    test: int,
    shape: NightShape,
) -> int | None:
    """When tonight is priced as a noisy model's on no measurement (the config's guess or
    the last night's), what it costs should the noise probe find it consistent: the first
    rollouts decide which, and a noisy night costs several times more."""
    if noise is None or noise < NOISE_SCALE:
        return None
    calm = predict_calls(model.nights, kind=LEARNING, tasks=tasks, test=test, sessions=0,
                         noise=0.0, shape=shape)  # fmt: skip
    return by_stage.get("mine", 0) + sum(n for s, n in calm.calls.items() if s != "mine")


def _warn_budget(night: Night, estimate: SpendEstimate) -> str:
    """Say when the budget will cut the night short, and have it spend by plan then
    (:mod:`.learn.budget_plan`); the warning, or "" when the budget covers the estimate."""
    budget = night.cfg.budget
    warning = budget_warning(calls=estimate.calls, tokens=estimate.tokens,
                             max_calls=budget.max_calls, max_tokens=budget.max_tokens)  # fmt: skip
    if warning and warning not in night.notes:  # said once, if the estimate is said again
        night.notes.append(warning)
        night.progress.note(warning)
    if warning:
        night.noise.budget_is_tight()
    return warning


def _noise_basis(
    known: list[float] | None, guess: SamplingGuess | None, records: list[NightRecord]
) -> tuple[str, str]:
    """What tonight's noise guess rests on (archive | config | last night | none), and the
    estimate line's few words on it."""
    if known:
        return "archive", (
            f"noise: the archive's answers to these tasks ({sum(known) / len(known):.0%} disagreed)"
        )
    if guess is not None:
        alike = measured_alike(records, guess.kind)
        if alike is not None:
            return "config", f"noise: {guess.why}, {alike:.0%} as such a model's last night"
        return "config", (
            f"noise: assuming a {guess.kind} model, {guess.why} ({guess.kind} until measured);"
            " no noise probe yet"
        )
    last = measured_alike(records, None)
    if last is not None:
        return "last night", f"noise: the last learning night's ({last:.0%})"
    return "none", "noise: not known, a consistent model assumed"


def _any_cli(cfg: SleepConfig) -> bool:
    return cfg.pool is not None and any(m.kind in CLI_KINDS for m in cfg.pool.members)


def _text_prior(tasks: list[TaskRecord], docs: Docs) -> float:
    """Tokens one attempt costs by its text: the prompt tonight's documents and tasks make
    (about four characters a token), and a reply."""
    if not tasks:
        return 0.0
    fixed = render_prompt("attempt", marker="", skill=docs.skill or "(none)",
                          memory=docs.memory or "(none)", intent="", context="")  # fmt: skip
    asked = sum(len(t.intent) + len(t.context) + len(t.system_contract) for t in tasks)
    return (len(fixed) + asked / len(tasks)) / 4 + REPLY_TOKENS


def _as_calls(by_stage: Mapping[str, int]) -> dict[str, int]:
    """Stages as the member pricing names them (reflection apart, the rest attempts)."""
    return {("reflect" if s == "reflect" else s): n for s, n in by_stage.items()}


def _known_noise(night: Night, tasks: list[TaskRecord], docs: Docs) -> list[float] | None:
    """Per task with two or more recorded samples under ``docs`` (the live documents): 1.0
    if they ever disagreed; None unless that covers half of ``tasks`` or more."""
    from skillopt_sleep.night.quiet.recorded import noise_estimates

    if not tasks:
        return None
    known = [1.0 if e.disagreement > 0 else 0.0
             for e in noise_estimates(night, tasks, docs).values() if e.samples >= 2]  # fmt: skip
    return known if 2 * len(known) >= len(tasks) else None


def learn_tokens(night: Night, course: Course | None = None) -> None:
    """Fold tonight's measured tokens per call into the project's token model, and, for a
    night that ran to its end, what each stage spent per task (:mod:`.stage_rates`)."""
    where = project_dir(night.cfg.state_path(), night.project)
    model = TokenModel.load(where)
    model.observe(night.spend.usage_by_member)
    record = _night_record(night, course) if course is not None else None
    if record is not None:
        model.record_night(record)
    try:
        model.save(where)
    except OSError as exc:  # a cache of averages: never sinks the night
        _log.warning("token_model.save_failed", error=str(exc))


def _night_record(night: Night, course: Course) -> NightRecord | None:
    """Tonight's spend per stage; None for a night cut short (failed, budget-stopped) or
    one that had no task to learn from."""
    ended = course.result not in (NightResult.FAILED, NightResult.BUDGET_REACHED,
                                  NightResult.NO_TASKS, NightResult.WAITING)  # fmt: skip
    if not ended or course.gathered is None or night.spend.exhausted:
        return None
    tasks = course.gathered.tasks
    test = sum(t.split is Split.TEST for t in tasks)
    return night_record(
        kind=LEARNING if night.noise_seen is not None else QUIET,
        tasks=len(tasks) - test, test=test, sessions=night.sessions_mined,
        noise=night.noise_seen,
        stages={name: (row.calls, row.tokens) for name, row in night.spend.stages.items()},
        sampling=guess.kind if (guess := sampling_guess(night.cfg.pool)) else None,
        edits=sum(night.findings.proposed) if night.findings.proposed else None,
    )  # fmt: skip
