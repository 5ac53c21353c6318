"""Calls per stage, learned from what earlier nights of the project measured.

The night's design changes (sequential tests stop early, quiet nights reuse archived
answers, mining shares calls), and the same design spends six times more on a model that
flips its answers than on one that answers consistently. So the estimate is not derived
from the design: it is learned.

1. **Record** (:func:`night_record`): after a night that ran to its end, what each stage
   spent (calls, tokens) with what it spent them on: the learnable tasks (every stage but
   mining and the test split), the test tasks, the sessions mined; the kind of night
   (``learning``, or ``quiet`` when it ended without learning) and the share of tasks
   whose first rollouts disagreed (``noise``). The last :data:`KEEP` nights are kept in
   ``token-model.json`` (:class:`~skillopt_sleep.token_model.TokenModel` ``nights``).
   A stage's calls are counted per what drives them (:meth:`NightRecord.unit`): mining per
   session, the test split per test task, reflection per night (a call per fold, round and
   document, however many tasks), judging per call of the stages whose answers it judges
   (:data:`JUDGED`: answers the response cache has judged already cost nothing), the rest
   per learnable task.
2. **Predict** (:func:`predict_calls`): each stage's calls per unit, a weighted mean over
   the recorded nights of the same kind, the recent and those of a noise like tonight's
   weighing most. Tonight's noise (:func:`tonight_noise`): what the archive recorded for
   tonight's tasks; else, when the config says how the target samples
   (:mod:`skillopt_sleep.sampling_guess`: greedy is consistent, sampled is noisy), the last
   learning night of that kind's (the kind it was run as, else the kind its noise
   measured), or that kind's prior; else the last learning night's. With no night
   recorded, the priors stand in: :data:`PRIOR_PER_TASK` (a consistent model's first
   night on the lift world) and :data:`PRIOR_NOISY_PER_TASK` (a noisy model's), scaled to
   what tonight will run (:class:`NightShape`): the samples drawn per task, the folds its
   tasks make and its rounds (reflection's calls), and the share of its samples the model
   judges (a night of exact references needs no judge). A project's own nights are taken
   as measured: they ran the project's config.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from skillopt_sleep.sampling_guess import CONSISTENT, NOISY

__all__ = [
    "JUDGED",
    "KEEP",
    "LEARNING",
    "PRIOR_EDITS",
    "PRIOR_MINE_PER_SESSION",
    "PRIOR_NOISY_PER_TASK",
    "PRIOR_PER_TASK",
    "PRIOR_REFLECT",
    "PRIOR_TEST_PER_TASK",
    "QUIET",
    "NightRecord",
    "NightShape",
    "Prediction",
    "measured_alike",
    "night_record",
    "predict_calls",
    "stage_group",
    "tonight_noise",
]

KEEP = 12  # nights remembered
RECENCY = 0.6  # each older night weighs this much less
SPAN_NIGHTS = 3  # recorded nights like tonight's it takes to say a span
NOISE_SCALE = 0.05  # nights whose noise differs by this much weigh 1/e as much
# A consistent model's first night on the lift world (24 tasks, ``bench/cost.py`` at main
# d7f5c9a): calls per learnable task, reflection calls per night, judge calls per call of
# the stages it judges. Only until the project's own nights are measured.
PRIOR_PER_TASK = {"rollout": 4.7, "trial": 11.7, "union": 5.0, "final": 2.0}
PRIOR_REFLECT = 8.0
PRIOR_JUDGED = 0.5
# the candidate edits its three rounds' reflections proposed (main at 1ca0cc7: 6, 4 and 2),
# what its trials were run on: scaled as reflection is
PRIOR_EDITS = 12.0
PRIOR_TEST_PER_TASK = 1.0  # an attempt (its judge call is the judge stage's)
# ... and a first night of a model flipping 20 % of its answers there (a third of the
# tasks' first rollouts disagree): the prior once tonight's noise is measured.
PRIOR_NOISY_PER_TASK = {"rollout": 8.5, "trial": 41.1, "union": 15.1, "attribution": 4.9,
                        "final": 2.6}  # fmt: skip
PRIOR_NOISY_REFLECT = 25.0
PRIOR_NOISY_JUDGED = 0.61
PRIOR_NOISY_EDITS = 14.0  # three such nights proposed 12, 16 and 14
# The stages whose answers the judge judges: its calls are counted per call of theirs.
JUDGED = ("rollout", "trial", "union", "final", "attribution", "steady", "recheck", "test")
PER_NIGHT = frozenset({"reflect"})
PRIOR_WEIGHT = 0.05  # a prior's weight, as a share of a measured night of the project
PRIOR_MINE_PER_SESSION = 0.1  # batched mining, sessions of one request mined together
LEARNING, QUIET = "learning", "quiet"


@dataclass(frozen=True, slots=True, kw_only=True)
class NightShape:
    """What a night will run, as far as the priors' rates scale with it; the defaults are
    the lift world night the priors were measured on (``bench/cost.py``: the default
    config, 24 tasks, every sample judged by the model)."""

    samples: int = 2  # dream rollouts per learnable task (``night.dream_rollouts``)
    rounds: int = 3  # ``night.rounds``
    folds: int = 3  # the folds tonight's learnable tasks make (no more than the tasks)
    rubric: float = 1.0  # the share of samples the model judges

    def scaled(self, stage: str) -> float:
        """How many times the prior's calls of ``stage`` tonight makes: rollouts by the
        samples drawn; reflection by its calls (one per fold and document in the first
        round, later rounds reflecting only where edits are still wanted: the prior's
        three rounds made a third more than its first); judging by the judged share."""
        prior = _PRIOR_SHAPE
        if stage == "rollout":
            return self.samples / prior.samples
        if stage == "reflect":
            return (
                self.folds / prior.folds * _round_weight(self.rounds) / _round_weight(prior.rounds)
            )
        if stage == "judge":
            return self.rubric / prior.rubric
        return 1.0


def _round_weight(rounds: int) -> float:
    """Reflection's calls over ``rounds`` rounds, as a share of the first round's."""
    return 1.0 + (max(1, rounds) - 1) / 6


_PRIOR_SHAPE = NightShape()


def _prior(
    noise: float, per_task: Mapping[str, float], reflect: float, judged: float, edits: float
) -> NightRecord:
    calls = {s: round(r * 100) for s, r in per_task.items()}
    calls["test"] = round(PRIOR_TEST_PER_TASK * 100)
    calls["reflect"] = round(reflect)
    calls["judge"] = round(judged * sum(calls.get(s, 0) for s in JUDGED))
    return NightRecord(kind=LEARNING, tasks=100, test=100, noise=noise, calls=calls,
                       edits=round(edits))  # fmt: skip


def stage_group(stage: str) -> str:
    """The ledger's stage a request stage counts under (``reflect_contrastive`` is
    ``reflect``, every mining stage ``mine``)."""
    for head in ("mine", "reflect", "judge"):
        if stage.startswith(head):
            return head
    return stage


@dataclass(frozen=True, slots=True, kw_only=True)
class NightRecord:
    """What one night spent, per stage, and on what."""

    kind: str  # learning | quiet
    tasks: int  # learnable tasks
    test: int = 0
    sessions: int = 0  # sessions mined tonight
    noise: float | None = None  # share of tasks whose first rollouts disagreed
    sampling: str | None = None  # consistent | noisy: what the config said (.sampling)
    calls: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    edits: int | None = None  # candidate edits its reflections proposed (None: not recorded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NightRecord:
        noise = data.get("noise")
        return cls(
            kind=str(data["kind"]),
            tasks=int(data["tasks"]),
            test=int(data.get("test", 0)),
            sessions=int(data.get("sessions", 0)),
            noise=None if noise is None else float(noise),
            sampling=None if data.get("sampling") is None else str(data["sampling"]),
            calls={str(k): int(v) for k, v in dict(data.get("calls", {})).items()},
            tokens={str(k): int(v) for k, v in dict(data.get("tokens", {})).items()},
            edits=None if data.get("edits") is None else int(data["edits"]),
        )

    def unit(self, stage: str) -> int:
        """What a stage's calls are counted per: sessions for mining, test tasks for the
        test split, the night for reflection (when it had tasks), the judged stages' calls
        for judging, learnable tasks for the rest."""
        if stage == "mine":
            return self.sessions
        if stage in PER_NIGHT:
            return 1 if self.tasks else 0
        if stage == "judge":
            return sum(self.calls.get(s, 0) for s in JUDGED)
        return self.test if stage == "test" else self.tasks

    @property
    def noise_kind(self) -> str | None:
        """Consistent or noisy: as the config said it samples, else as its noise measured."""
        if self.sampling is not None or self.noise is None:
            return self.sampling
        return NOISY if self.noise >= NOISE_SCALE else CONSISTENT


PRIOR_NOISE = {CONSISTENT: 0.0, NOISY: 0.32}  # the priors' noise, by kind of model


def priors(shape: NightShape | None = None) -> tuple[NightRecord, NightRecord]:
    """The consistent and the noisy prior, scaled to ``shape`` (None: as measured)."""
    at = shape or _PRIOR_SHAPE

    def per_task(rates: Mapping[str, float]) -> dict[str, float]:
        return {stage: rate * at.scaled(stage) for stage, rate in rates.items()}

    return (
        _prior(PRIOR_NOISE[CONSISTENT], per_task(PRIOR_PER_TASK),
               PRIOR_REFLECT * at.scaled("reflect"), PRIOR_JUDGED * at.scaled("judge"),
               PRIOR_EDITS * at.scaled("reflect")),
        _prior(PRIOR_NOISE[NOISY], per_task(PRIOR_NOISY_PER_TASK),
               PRIOR_NOISY_REFLECT * at.scaled("reflect"),
               PRIOR_NOISY_JUDGED * at.scaled("judge"), PRIOR_NOISY_EDITS * at.scaled("reflect")),
    )  # fmt: skip


def night_record(
    *,
    kind: str,
    tasks: int,
    test: int,
    sessions: int,
    noise: float | None,
    stages: Mapping[str, tuple[int, int]],
    sampling: str | None = None,
    edits: int | None = None,
) -> NightRecord:
    """One night's record from its ledger (request stage -> (calls, tokens)); ``sampling``:
    consistent or noisy, as the config said the target samples; ``edits``: the candidate
    edits its reflections proposed."""
    calls: dict[str, int] = {}
    tokens: dict[str, int] = {}
    for stage, (n, used) in stages.items():
        group = stage_group(stage)
        calls[group] = calls.get(group, 0) + n
        tokens[group] = tokens.get(group, 0) + used
    return NightRecord(kind=kind, tasks=tasks, test=test, sessions=sessions, noise=noise,
                       sampling=sampling, calls=calls, tokens=tokens, edits=edits)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """Calls and tokens per stage, and where the rates came from."""

    calls: dict[str, int]
    tokens: dict[str, int]  # only the stages measured nights priced (the rest: per member)
    nights: int  # recorded nights the rates are learned from (0: the prior)
    noise: float | None  # the noise the rates were matched to
    # the fewest and most learning calls the recorded nights like tonight's would have
    # made on tonight's tasks (mining and the test split aside), with how many they are;
    # None under SPAN_NIGHTS of them
    span: tuple[int, int, int] | None = None
    # the candidate edits a reflection call was expected to propose, what the trials and
    # their judging were priced on (None: no night recorded how many)
    edits_per_reflection: float | None = None


def _weights(records: Sequence[NightRecord], noise: float | None) -> list[float]:
    """Newest last: recency, and closeness of noise when both are known."""
    out = []
    for age, rec in enumerate(reversed(records)):
        w = RECENCY**age
        if noise is not None and rec.noise is not None:
            w *= math.exp(-abs(rec.noise - noise) / NOISE_SCALE)
        out.append(w)
    return list(reversed(out))


def _rates(records: Sequence[NightRecord], weights: Sequence[float]) -> dict[str, float]:
    """Per stage, the weighted calls per unit (``sum w c / sum w u``)."""
    calls: dict[str, float] = {}
    units: dict[str, float] = {}
    stages = {s for r in records for s in r.calls}
    for rec, w in zip(records, weights, strict=True):
        for stage in stages | {"test"}:
            unit = rec.unit(stage)
            if unit:
                calls[stage] = calls.get(stage, 0.0) + w * rec.calls.get(stage, 0)
                units[stage] = units.get(stage, 0.0) + w * unit
    return {s: calls[s] / units[s] for s in calls if units.get(s)}


def _per_call(records: Iterable[NightRecord], weights: Iterable[float]) -> dict[str, float]:
    tokens: dict[str, float] = {}
    calls: dict[str, float] = {}
    for rec, w in zip(records, weights, strict=True):
        for stage, n in rec.calls.items():
            if n:
                tokens[stage] = tokens.get(stage, 0.0) + w * rec.tokens.get(stage, 0)
                calls[stage] = calls.get(stage, 0.0) + w * n
    return {s: tokens[s] / calls[s] for s in calls if calls[s]}


def tonight_noise(
    records: Sequence[NightRecord], known: Sequence[float] | None, sampling: str | None = None
) -> float | None:
    """Tonight's expected noise: what the archive knows of tonight's tasks (``known``, per
    task with recorded samples: 1 if they ever disagreed), when it knows half of them or
    more; else, when the config says how the target samples (``sampling``: consistent or
    noisy), the last learning night of that kind's, or that kind's prior; else the last
    learning night's."""
    if known:
        return sum(known) / len(known)
    if sampling is not None:
        alike = measured_alike(records, sampling)
        return PRIOR_NOISE[sampling] if alike is None else alike
    return measured_alike(records, None)


def measured_alike(records: Sequence[NightRecord], sampling: str | None) -> float | None:
    """The noise the last learning night of a model sampling like tonight's measured
    (``sampling``: consistent or noisy; None: any night)."""
    for rec in reversed(records):
        if (
            rec.kind == LEARNING
            and rec.noise is not None
            and (sampling is None or rec.noise_kind == sampling)
        ):
            return rec.noise
    return None


def predict_calls(
    records: Sequence[NightRecord],
    *,
    kind: str,
    tasks: int,
    test: int,
    sessions: int,
    noise: float | None,
    shape: NightShape | None = None,
) -> Prediction:
    """Tonight's calls per stage (``kind`` learning or quiet), learned from ``records``;
    the priors scaled to ``shape``, what tonight will run (None: the priors' own night)."""
    same = [r for r in records if r.kind == kind and r.tasks]
    mined = [r for r in records if r.sessions]
    calls: dict[str, float] = {}
    pool, weights = list(same), _weights(same, noise)
    if kind == LEARNING:  # the priors, as nights that weigh little once any was measured
        # a prior is recorded over 100 tasks; once nights were measured it weighs as
        # PRIOR_WEIGHT of one of theirs, whatever their size (else it outweighs small ones)
        size = sum(r.tasks for r in same) / len(same) / 100 if same else 1.0
        for prior in priors(shape):
            w = PRIOR_WEIGHT * size if same else 1.0
            if noise is None:
                w *= prior.noise == 0.0  # nothing known: the consistent prior only
            else:
                w *= math.exp(-abs((prior.noise or 0.0) - noise) / NOISE_SCALE)
            pool.append(prior)
            weights.append(w)
    if pool and sum(weights) > 0:
        rates = _rates(pool, weights)
        for stage, rate in rates.items():
            if stage not in ("mine", "judge"):
                per = 1 if stage in PER_NIGHT else test if stage == "test" else tasks
                calls[stage] = rate * (per if tasks or stage == "test" else 0)
        judged = sum(calls.get(s, 0.0) for s in JUDGED)
        calls["judge"] = rates.get("judge", 0.0) * judged
    mine_rate = _rates(mined, _weights(mined, None)).get("mine") if mined else None
    calls["mine"] = (PRIOR_MINE_PER_SESSION if mine_rate is None else mine_rate) * sessions
    per_call = _per_call(records, _weights(records, noise)) if records else {}
    rounded = {s: round(n) for s, n in calls.items() if round(n)}
    priced = {s: round(n * per_call[s]) for s, n in rounded.items() if s in per_call}
    return Prediction(calls=rounded, tokens=priced, nights=len(same), noise=noise,
                      span=_span(same, noise, tasks),
                      edits_per_reflection=_edits_per_reflection(pool, weights))  # fmt: skip


def _edits_per_reflection(records: Sequence[NightRecord], weights: Sequence[float]) -> float | None:
    """The candidate edits per reflection call of the weighted nights that recorded them."""
    edits = reflect = 0.0
    for rec, w in zip(records, weights, strict=True):
        if rec.edits is not None and rec.calls.get("reflect"):
            edits += w * rec.edits
            reflect += w * rec.calls["reflect"]
    return edits / reflect if reflect else None


def _span(
    records: Sequence[NightRecord], noise: float | None, tasks: int
) -> tuple[int, int, int] | None:
    """How far apart the recorded nights of a model like tonight's (consistent or noisy,
    :attr:`NightRecord.noise_kind`) were, per learnable task, scaled to tonight's
    ``tasks``: a noisy model's nights vary by half again from one to the next, and a plan
    needs that spread."""
    if noise is None or not tasks:
        return None
    kind = NOISY if noise >= NOISE_SCALE else CONSISTENT
    alike = [r for r in records if r.noise_kind == kind]
    if len(alike) < SPAN_NIGHTS:
        return None
    scaled = [_learning_calls(r, tasks) for r in alike]
    return round(min(scaled)), round(max(scaled)), len(alike)


def _learning_calls(record: NightRecord, tasks: int) -> float:
    """The learning calls (mining and the test split aside) ``record``'s night would have
    made on ``tasks`` learnable tasks: its per-night stages as they were, the rest scaled."""
    scale = tasks / record.tasks
    return sum(
        n if stage in PER_NIGHT else n * scale
        for stage, n in record.calls.items()
        if stage not in ("mine", "test")
    )
