"""Replay: attempt tasks under given documents and judge each answer, all concurrently.

Every rollout is one task in an anyio task group; the only bound is the pool's own limits
(its role gates and member limiters), so the fan-out is as wide as the endpoints allow.
Judging runs in the same task right after its attempt, so judges stream behind rollouts
instead of waiting for a whole wave.

Finished rollouts are appended to ``rollouts.jsonl`` as they complete and are keyed by
(task, skill hash, memory hash, sample, fresh), with the calls and tokens each cost
(``spent``); a resumed night reuses them instead of calling the model again, and counts
what they cost against the night's budget where it reads them back (``carry``), so its
budget decides as the night's one run would. A job whose key is already in flight (a
concurrent batch asked for the same sample a moment earlier: the baseline arm every
candidate of a fold shares) waits for that rollout instead of paying for it twice.

Read back, do not re-ask (:mod:`.stand_in`): a job drawn as ``Arm.READ_BACK`` (the caller
says so only on a night the probe judged consistent) whose (task, documents) has a real
answer tonight takes that answer, no attempt made, judged in its own sample and not
journalled; one whose pair is being asked right now waits for that answer. A candidate arm
(``Arm.CANDIDATE``) or a noise check (``Arm.ASKED``) is always asked, even when a
read-back holds its key. Two real answers of one pair that differ turn read-back off.

Every model-judge verdict is noted by answer: one answer scored two ways tonight sets
``judge_noise``. A job asked with more opinions (``Job.opinions``: the gate's changed pairs on
a consistent night once the judge contradicted itself) reads back the answer its
one-verdict record holds and asks the judge again, the middle verdict scoring it.

A task whose own calls keep failing while the other tasks' calls answer (a request the
endpoint cannot serve, whatever the documents) is *set aside* when none of its calls has
answered tonight and its last :data:`SET_ASIDE_AFTER` failed (each after the pool's own
retries; a task that answered once is only unlucky): its later samples fail at once, without a call,
so one broken task neither burns the budget nor keeps the member's breaker open for the
rest. The gate leaves a task with no sample out by name (``unreachable``); the report and
``status`` name the tasks set aside.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from skillopt.backends.base import Completer, Completion, CompletionRequest, Role, Usage
from skillopt.backends.wrappers import forget_redactions
from skillopt.concurrency import gather_indexed
from skillopt.errors import (
    AnswerPendingError,
    BackendError,
    BudgetExceededError,
    NoHealthyMemberError,
    RetryableBackendError,
)
from skillopt.judges import judge_local, score_rule_checks
from skillopt.progress import Progress
from skillopt.prompts import render_prompt
from skillopt.redact import sanitize
from skillopt.replies import reply_schema
from skillopt.skilldoc import content_hash
from skillopt.types import JudgeResult, Origin, ReferenceKind, RolloutResult, TaskRecord
from skillopt_sleep.error_groups import ErrorGroups, error_class
from skillopt_sleep.ledger import SampleCost
from skillopt_sleep.replay_spent import Spent, spent_pair, spent_parts
from skillopt_sleep.stand_in import Arm, Known, Pair, StandIns, pair_of
from skillopt_sleep.verdicts import (
    RUBRIC_PASS,
    JudgeReply,
    JudgeTally,
    middle,
    parse_judge_reply,
    settled,
    verdict_score,
)

__all__ = [
    "ATTEMPT_TOKENS",
    "RUBRIC_PASS",
    "SET_ASIDE",
    "SET_ASIDE_AFTER",
    "Arm",
    "Docs",
    "Job",
    "Replayer",
    "calls_per_sample",
    "clean",
    "forget_night_memos",
    "spent_pair",
    "task_hint",
]

ATTEMPT_TOKENS = 1024  # an attempt's reply limit
SET_ASIDE_AFTER = 4
"""Failed calls in a row (each after the pool's own retries) after which a task none of
whose calls answered tonight is set aside, when other tasks' calls answered meanwhile."""
SET_ASIDE = "set aside: "
"""Prefix of a rollout's ``error`` when its task was set aside (no call made)."""


@functools.lru_cache(maxsize=4096)
def clean(text: str) -> str:
    """:func:`sanitize`, memoised: the same skill, memory and intents recur thousands of
    times in a night, and redaction is the night's main CPU cost."""
    return sanitize(text)


@functools.lru_cache(maxsize=1024)
def _short_hash(text: str) -> str:
    return content_hash(text)[:16]


def calls_per_sample(task: TaskRecord) -> int:
    """Model calls one sample of ``task`` takes at most: the attempt, and the judge's for a
    rubric or mined checks (other references are judged locally)."""
    return 2 if task.reference_kind is ReferenceKind.RUBRIC or mined_checks(task) else 1


def forget_night_memos() -> None:
    """Empty every text memo a night fills (these and the redaction memos under the pool):
    the daemon does it after each night, so its memory stays that of one night."""
    clean.cache_clear()
    _short_hash.cache_clear()
    forget_redactions()


@dataclass(frozen=True, slots=True, kw_only=True)
class Docs:
    """The documents an attempt runs under."""

    skill: str
    memory: str

    @property
    def skill_hash(self) -> str:
        return _short_hash(self.skill)

    @property
    def memory_hash(self) -> str:
        return _short_hash(self.memory)

    @property
    def key(self) -> str:
        """One id for the pair (what the archive records outcomes under)."""
        return f"{self.skill_hash}.{self.memory_hash}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    task: TaskRecord
    docs: Docs
    sample_id: int = 0
    phase: str = "rollout"  # baseline | rollout | trial | final | test (accounting stage)
    fresh: bool = False  # bypass the response cache (the gate's final check)
    opinions: int = 1  # the judge's verdicts on the answer; the middle one scores it
    # what the sample is for: a candidate arm and a noise check are always asked; a
    # READ_BACK sample may be served from its pair's known answer (:mod:`.stand_in`)
    arm: Arm = Arm.ASKED

    @property
    def pair(self) -> Pair:
        """(task, documents): the samples one known answer may stand in for."""
        return pair_of(self.task.id, self.docs.skill_hash, self.docs.memory_hash)

    @property
    def key(self) -> str:
        parts = [
            self.task.id,
            self.docs.skill_hash,
            self.docs.memory_hash,
            str(self.sample_id),
            "fresh" if self.fresh else "cached",
        ]
        if self.opinions > 1:  # another record than the sample's one-verdict result
            parts.append(f"opinions={self.opinions}")
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]

    def one_verdict(self) -> Job:
        """The same sample judged once: the record whose answer more opinions are on."""
        return dataclasses.replace(self, opinions=1)


JUDGE_ERROR = "judge: "
"""Prefix of a rollout's ``error`` when its answer came back but judging it failed."""
OPINION = 1_000_000
"""Stride between the judge sample ids of one answer's verdicts (:attr:`Job.opinions`):
the k-th further verdict on sample ``s`` is asked as sample ``s + k * OPINION``, beyond every
sample id a night draws, so it is another draw of the judge, never a verdict read back."""


def mined_checks(task: TaskRecord) -> bool:
    """Whether ``task``'s rule checks came from a miner (not written or shipped by a user):
    they state what an answer must hold, not all that makes it right. A miner's check on
    a path prefix or an answer's length is met by a near-miss too, so an answer that meets
    them is judged by the model judge as well; one that fails them scores without a call."""
    return bool(task.checks) and task.origin not in (Origin.MANUAL, Origin.SEED)


def task_hint(task: TaskRecord) -> dict[str, Any]:
    """The structured view of a task members may use (the mock's world model does)."""
    return {
        "id": clean(task.id),
        "intent": clean(task.intent),
        "tags": [clean(t) for t in task.tags],
    }


@dataclass(kw_only=True)
class Replayer:
    """Runs :class:`Job` batches through the pool; remembers and records every result."""

    pool: Completer
    marker: str
    record: Callable[[list[dict[str, Any]]], None] | None = None
    evidence: Callable[[list[dict[str, Any]]], None] | None = None
    progress: Progress | None = None
    # counts (calls, tokens) an earlier run of the night spent on a result read back now
    carry: Callable[[int, int], None] | None = None
    attempt_tokens: int = ATTEMPT_TOKENS
    # Rows buffered before an append: 1 = each result is journalled as it lands, so a
    # resumed night pays only for calls that never answered (the run directory's journal
    # batches its fsyncs by time, not by count).
    flush_every: int = 1
    done: dict[str, RolloutResult] = field(default_factory=dict)
    answers: dict[str, RolloutResult] = field(default_factory=dict)  # answered, not judged
    reused: int = 0
    judging: JudgeTally = field(default_factory=JudgeTally)
    errors: ErrorGroups = field(default_factory=ErrorGroups)
    costs: list[SampleCost] = field(default_factory=list)  # what each sample drawn here cost
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _evidence: list[dict[str, Any]] = field(default_factory=list)
    _flying: dict[str, anyio.Event] = field(default_factory=dict)  # key -> set once done
    set_aside: dict[str, str] = field(default_factory=dict)  # task id -> why
    # task -> (its calls failed in a row, calls answered when the first of them failed)
    _streaks: dict[str, tuple[int, int]] = field(default_factory=dict)
    _answered: int = 0  # calls that answered, all tasks together
    _answered_tasks: set[str] = field(default_factory=set)  # tasks with a call that answered
    # what earlier runs of the night spent on a preloaded result, counted once read back:
    # a judged rollout (attempt and judge), an answer whose judging failed (the attempt)
    _spent_before: dict[str, tuple[int, int]] = field(default_factory=dict)
    judge_noise: bool = False  # the model judge scored one answer two ways tonight
    # answers judged tonight per (task, documents), read back for READ_BACK samples
    stand_ins: StandIns = field(default_factory=StandIns)
    _verdicts: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)

    def preload(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Remember rollouts from an earlier (killed or failed) run of this night.

        Only what answered is kept: a rollout whose call failed is run again, and one whose
        answer came back but whose judging failed is judged again without a new attempt.
        """
        allowed = set(RolloutResult.__dataclass_fields__)
        for row in rows:
            key = row.get("key")
            if not key:
                continue
            result = RolloutResult.from_dict({k: v for k, v in row.items() if k in allowed})
            attempt, judge = spent_parts(row.get("spent"))
            if not result.error:
                self.done[str(key)] = result
                self.stand_ins.heard_row(row, result)
                self.answers.pop(str(key), None)
                self._spent_before[str(key)] = (attempt[0] + judge[0], attempt[1] + judge[1])
            elif result.error.startswith("judge: ") and result.response:
                self.answers[str(key)] = result
                self._spent_before[str(key)] = attempt
            else:
                self._spent_before.pop(str(key), None)
        return len(self.done)

    def _read_back(self, key: str) -> tuple[int, int]:
        """What an earlier run spent on the preloaded result of ``key``, counted against
        the night's budget the first time this run reads it back ((0, 0) after that)."""
        calls, tokens = self._spent_before.pop(key, (0, 0))
        if (calls or tokens) and self.carry is not None:
            self.carry(calls, tokens)
        return calls, tokens

    async def run(self, jobs: Sequence[Job]) -> list[RolloutResult]:
        """Results in the order of ``jobs``. Failures become results with ``error`` set.

        A job already done is read back; one already in flight (asked for by a concurrent
        batch, e.g. the baseline arm two candidates share) waits for that rollout; a
        READ_BACK job whose pair has a known answer is served from it (:mod:`.stand_in`)."""
        results: list[RolloutResult | None] = [None] * len(jobs)
        todo: list[tuple[int, anyio.Event, bool]] = []  # (index, its flight, leads it)
        for i, job in enumerate(jobs):
            if job.key in self.done and self._serves(job):
                results[i] = self.done[job.key]
                self.reused += 1
                self._read_back(job.key)
            elif job.key in self._flying:
                todo.append((i, self._flying[job.key], False))
            else:
                self._flying[job.key] = anyio.Event()
                todo.append((i, self._flying[job.key], True))
        if self.progress is not None:
            self.progress.calls_planned(
                sum(
                    calls_per_sample(jobs[i].task)
                    for i, _, lead in todo
                    if lead and jobs[i].task.id not in self.set_aside
                )
            )

        async def one(k: int) -> RolloutResult:
            i, flight, lead = todo[k]
            return await self._shared(jobs[i], flight, lead=lead)

        try:
            fresh = await gather_indexed(one, len(todo))
        finally:
            self.flush()
        for (i, _, _), result in zip(todo, fresh, strict=True):
            results[i] = result
        return [r for r in results if r is not None]

    async def _shared(self, job: Job, flight: anyio.Event, *, lead: bool) -> RolloutResult:
        """The job's rollout: the call it leads, or the one in flight it waits for (made
        again only when that call ended without a result, e.g. cancelled)."""
        if lead:
            try:
                return await self._asked(job)
            finally:
                if self._flying.get(job.key) is flight:
                    del self._flying[job.key]
                flight.set()
        await flight.wait()
        kept = self.done.get(job.key)
        if kept is None or not self._serves(job):
            return await self._one(job)
        self.reused += 1
        return kept

    def was_read_back(self, task: TaskRecord, docs: Docs, sample_id: int) -> bool:
        """Whether the sample a comparison drew (fresh, one verdict) is a read-back."""
        job = Job(task=task, docs=docs, sample_id=sample_id, fresh=True)
        return job.key in self.stand_ins.stood_in

    def _serves(self, job: Job) -> bool:
        """Whether the result kept for ``job.key`` answers ``job``: a read-back answers
        only another READ_BACK sample; a candidate or a noise check is asked for real."""
        return job.arm is Arm.READ_BACK or job.key not in self.stand_ins.stood_in

    def _known(self, job: Job) -> Known | None:
        """The answer that stands in for a READ_BACK sample (None: it is asked)."""
        if job.arm is not Arm.READ_BACK or job.opinions > 1:
            return None
        return self.stand_ins.answer(job.pair, job.sample_id)

    async def _asked(self, job: Job) -> RolloutResult:
        """The rollout of a job leading its key: a READ_BACK sample whose pair has a known
        answer, or will once the call of the pair under way ends, reads it back (a
        consistent model would repeat it); any other is asked, its pair marked in flight."""
        known = self._known(job)
        flight = self.stand_ins.in_flight(job.pair) if job.arm is Arm.READ_BACK else None
        if known is None and flight is not None:
            await flight.wait()
            known = self._known(job)
        if known is not None:
            return await self._read_back_judged(job, known)
        with self.stand_ins.asking(job.pair):
            return await self._one(job)

    async def _read_back_judged(self, job: Job, known: Known) -> RolloutResult:
        """``known``'s answer as this sample's, no attempt made, judged in this sample as
        any answer is (its own verdict: a verdict read back would carry one mistaken
        verdict into every sample of the pair, and the gate would count it once each).
        Remembered, counted as a read-back, not journalled (the journal holds what the
        model answered); a judging that fails leaves the sample to be drawn again."""
        if self.progress is not None:  # its attempt was planned as a call: none is made
            self.progress.calls_planned(-1)
        spent, evidence, answer = Spent(), list[dict[str, Any]](), known.result
        try:
            verdict = await self._judge(job.task, answer.response, answer.tools_called, evidence,
                                        spent, key=job.key, sample_id=job.sample_id)  # fmt: skip
        except (BackendError, NoHealthyMemberError, BudgetExceededError) as exc:
            return dataclasses.replace(answer, error=f"{JUDGE_ERROR}{_cause(exc)}")
        result = dataclasses.replace(answer, hard=verdict.hard, soft=verdict.soft,
                                     reason=verdict.reason,
                                     failed_criteria=verdict.failed)  # fmt: skip
        self.done[job.key] = result
        self.stand_ins.stood_in.add(job.key)
        self.stand_ins.count += 1
        self.costs.append(
            SampleCost(stage=job.phase, task_id=job.task.id, docs=job.docs.skill_hash + ":"
                       + job.docs.memory_hash, sample_id=job.sample_id,
                       score=(float(result.hard), float(result.soft)), attempt_calls=0,
                       judge_calls=spent.judge, tokens=spent.tokens, read_back=True,
                       saved_calls=1)
        )  # fmt: skip
        return result

    def flush(self) -> None:
        """Persist buffered rollouts and evidence (line-complete appends)."""
        rows, self._rows = self._rows, []
        evidence, self._evidence = self._evidence, []
        if rows and self.record is not None:
            self.record(rows)
        if evidence and self.evidence is not None:
            self.evidence(evidence)

    def _tick(self, ok: bool, *, cached: bool = False) -> None:
        if self.progress is None:
            return
        if cached:  # the response cache answered: no model call, shown apart
            self.progress.call_done(ok=ok, cached=True)
        else:
            self.progress.call_done(ok=ok)

    def _answered_call(self, task_id: str) -> None:
        self._answered += 1
        self._answered_tasks.add(task_id)
        self._streaks.pop(task_id, None)

    def _failed_call(self, task_id: str, exc: BaseException) -> None:
        """Count a failed call against its task; set the task aside after
        :data:`SET_ASIDE_AFTER` in a row while other calls answered, unless one of its calls
        answered tonight. A refused budget or an open circuit says nothing about the task."""
        if isinstance(exc, BudgetExceededError | NoHealthyMemberError) or task_id in self.set_aside:
            return
        if task_id in self._answered_tasks:
            return
        fails, answered_then = self._streaks.get(task_id, (0, self._answered))
        fails += 1
        self._streaks[task_id] = (fails, answered_then)
        if fails >= SET_ASIDE_AFTER and self._answered > answered_then:
            self.set_aside[task_id] = (
                f"its last {fails} calls failed while other tasks' calls answered "
                f"(last: {_cause(exc)})"
            )

    async def _one(self, job: Job) -> RolloutResult:
        task, docs = job.task, job.docs
        if task.id in self.set_aside:
            return self._aside(job)
        judged = self._judged_answer(job)
        if judged is not None:
            return await self._more_opinions(job, judged)
        prompt, request = self._attempt_request(job)
        base: dict[str, Any] = {
            "task_id": task.id,
            "sample_id": job.sample_id,
            "skill_hash": docs.skill_hash,
            "memory_hash": docs.memory_hash,
        }
        evidence: list[dict[str, Any]] = []
        spent = Spent()
        try:
            done = await self._attempt(job, request, spent)
        except (BackendError, NoHealthyMemberError, BudgetExceededError) as exc:
            self._tick(False)
            self._failed_call(task.id, exc)
            spent.attempt = int(not isinstance(exc, BudgetExceededError))
            failed = RolloutResult(**base, error=_cause(exc))
            return self._finish(job, failed, evidence, spent, failure=(job.phase, exc))
        self._tick(True, cached=done.cached)
        if not done.cached:
            self._answered_call(task.id)
        spent.count(done)
        response = sanitize(done.text)
        evidence.append({"kind": "attempt", "prompt": prompt, "reply": response})
        tokens = done.usage.total_tokens
        try:
            verdict = await self._judge(
                task, response, done.tools_called, evidence, spent, key=job.key,
                sample_id=job.sample_id,
            )  # fmt: skip
            verdict = await self._middle(job, response, done.tools_called, evidence, spent, verdict)
        except (BackendError, NoHealthyMemberError, BudgetExceededError) as exc:
            result = RolloutResult(
                **base,
                response=response,
                member=done.member,
                latency=done.latency,
                tokens=tokens,
                error=f"{JUDGE_ERROR}{_cause(exc)}",
            )
            return self._finish(job, result, evidence, spent, failure=(f"{job.phase}.judge", exc))
        result = RolloutResult(
            **base,
            response=response,
            hard=verdict.hard,
            soft=verdict.soft,
            reason=verdict.reason,
            failed_criteria=verdict.failed,
            tools_called=done.tools_called,
            member=done.member,
            latency=done.latency,
            tokens=tokens,
        )
        return self._finish(job, result, evidence, spent)

    def _attempt_request(self, job: Job) -> tuple[str, CompletionRequest]:
        """The attempt's prompt, and the request that asks it."""
        task, docs = job.task, job.docs
        prompt = render_prompt(
            "attempt",
            marker=self.marker,
            skill=clean(docs.skill) or "(none)",
            memory=clean(docs.memory) or "(none)",
            intent=clean(task.intent),
            context=clean(task.context),
        )
        request = CompletionRequest(
            role=Role.TARGET,
            prompt=prompt,
            system=clean(task.system_contract),
            sample_id=job.sample_id,
            stage=job.phase,
            use_cache=not job.fresh,
            max_output_tokens=self.attempt_tokens,
            metadata={
                "stage": "attempt",
                "task": task_hint(task),
                "skill": clean(docs.skill),
                "memory": clean(docs.memory),
            },
        )
        return prompt, request

    def _judged_answer(self, job: Job) -> RolloutResult | None:
        """For a sample asked with more opinions, its one-verdict record when that holds a
        judged answer: the answer is not asked again, only the judge is."""
        if job.opinions <= 1:
            return None
        first = self.done.get(job.one_verdict().key)
        return first if first is not None and first.response and not first.error else None

    async def _more_opinions(self, job: Job, first: RolloutResult) -> RolloutResult:
        """``first``'s answer with the middle of ``job.opinions`` verdicts, its own the first."""
        spent, evidence = Spent(), list[dict[str, Any]]()
        own = JudgeResult(hard=first.hard, soft=first.soft, reason=first.reason,
                          failed=first.failed_criteria)  # fmt: skip
        try:
            verdict = await self._middle(
                job, first.response, first.tools_called, evidence, spent, own
            )
        except AnswerPendingError as exc:  # judged again once the answer is there
            failed = dataclasses.replace(first, error=f"{JUDGE_ERROR}{_cause(exc)}")
            return self._finish(job, failed, evidence, spent, failure=("judge", exc))
        result = dataclasses.replace(
            first, hard=verdict.hard, soft=verdict.soft, reason=verdict.reason,
            failed_criteria=verdict.failed,
        )  # fmt: skip
        return self._finish(job, result, evidence, spent)

    async def _middle(
        self,
        job: Job,
        response: str,
        tools: tuple[str, ...],
        evidence: list[dict[str, Any]],
        spent: Spent,
        first: JudgeResult,
    ) -> JudgeResult:
        """The middle of ``job.opinions`` verdicts on one answer (``first`` and further
        draws of the judge, :data:`OPINION`), ordered by score: one mistaken verdict among
        three does not decide. The judge is asked only until one score holds a majority
        (that score is the middle whatever the rest would say): two agreeing verdicts of
        three end it. When a further verdict cannot be had (a failed call, the budget),
        ``first`` stands, as the sample's one verdict would have."""
        verdicts = [first]
        for k in range(1, job.opinions):
            if settled(verdicts, job.opinions):
                break
            try:
                again = job.sample_id + k * OPINION
                verdicts.append(
                    await self._judge(
                        job.task, response, tools, evidence, spent, key=job.key, sample_id=again
                    )
                )
            except AnswerPendingError:
                raise  # handoff: this verdict waits for its answer, as any call does
            except (BackendError, NoHealthyMemberError, BudgetExceededError):
                return first
        return middle(verdicts)

    def _heard(self, task_id: str, response: str, verdict: JudgeResult) -> None:
        """Note a model judge's verdict: one answer scored two ways tonight is the judge's
        noise (:attr:`judge_noise`)."""
        answer = hashlib.sha256(response.encode("utf-8", "surrogatepass")).hexdigest()[:20]
        score = verdict_score(verdict)
        if self._verdicts.setdefault((task_id, answer), score) != score:
            self.judge_noise = True

    def _aside(self, job: Job) -> RolloutResult:
        """The result of a sample of a task set aside: failed, no call made, not kept (a
        resumed night gives the task its chance again)."""
        result = RolloutResult(
            task_id=job.task.id,
            sample_id=job.sample_id,
            skill_hash=job.docs.skill_hash,
            memory_hash=job.docs.memory_hash,
            error=f"{SET_ASIDE}{self.set_aside[job.task.id]}",
        )
        self.costs.append(
            SampleCost(stage=job.phase, task_id=job.task.id,
                       docs=f"{result.skill_hash}:{result.memory_hash}", sample_id=job.sample_id,
                       score=(0.0, 0.0), attempt_calls=0, judge_calls=0, tokens=0,
                       cached_tokens=0, failed=True)
        )  # fmt: skip
        return result

    async def _attempt(self, job: Job, request: CompletionRequest, spent: Spent) -> Completion:
        """The attempt's reply: a model call, or the answer an earlier run of this night
        already paid for (its judging failed, so only the judge is asked again)."""
        kept = self.answers.pop(job.key, None)
        if kept is None:
            return await self.pool.complete(request)
        spent.earlier = self._read_back(job.key)
        return Completion(
            text=kept.response,
            usage=Usage(completion_tokens=kept.tokens),
            member=kept.member,
            latency=kept.latency,
            attempts=0,
            cached=True,
            tools_called=kept.tools_called,
        )

    async def _judge(
        self,
        task: TaskRecord,
        response: str,
        tools: tuple[str, ...],
        evidence: list[dict[str, Any]],
        spent: Spent,
        *,
        key: str,
        sample_id: int,
    ) -> JudgeResult:
        local = judge_local(task, response, tools)
        if local is not None and not (mined_checks(task) and local.hard >= 1.0):
            return local
        if task.checks and local is None:  # a rubric task's mined checks come first
            local = score_rule_checks(task.checks, response, tools)
            if local.hard < 1.0:
                return local  # a stated necessary condition failed: no judge call
        if not response.strip():
            return JudgeResult(hard=0.0, soft=0.0, reason="empty answer")
        prompt = render_prompt(
            "judge",
            marker=self.marker,
            intent=clean(task.intent),
            rubric=_rubric(task),
            response=response,
        )
        request = CompletionRequest(
            role=Role.OPTIMIZER,
            prompt=prompt,
            # each sample its own verdict: the same answer judged again in another sample
            # is another draw of the judge, not its first verdict read back (one mistaken
            # verdict would otherwise count once per sample that repeats the answer)
            sample_id=sample_id,
            stage="judge",
            max_output_tokens=300,
            json_mode=True,
            reply_schema=reply_schema(JudgeReply, "verdict"),
            metadata={"stage": "judge", "task": task_hint(task), "response": response},
            check_reply=parse_judge_reply,  # an unusable verdict is a failed, retried call
        )
        try:
            done = await self.pool.complete(request)
        except (BackendError, NoHealthyMemberError) as exc:
            spent.judge += 1
            self._tick(False)
            self._failed_call(task.id, exc)
            self.judging.judged(key, _cause(exc))
            raise
        except BudgetExceededError:
            self._tick(False)
            raise
        self._tick(True, cached=done.cached)
        if not done.cached:
            self._answered_call(task.id)
        self.judging.judged(key)
        spent.count(done, judge=True)
        evidence.append({"kind": "judge", "prompt": prompt, "reply": sanitize(done.text)})
        verdict = parse_judge_reply(done.text)  # the pool's check_reply already accepted it
        self._heard(task.id, response, verdict)
        return verdict

    def _finish(
        self,
        job: Job,
        result: RolloutResult,
        evidence: list[dict[str, Any]],
        spent: Spent,
        *,
        failure: tuple[str, BaseException] | None = None,
    ) -> RolloutResult:
        """Remember ``result`` and what it cost; ``failure`` is (stage, error) when a call
        failed. A transient failure (a retryable error after the pool's retries, every
        member open) is not remembered as the sample's result: asked again, the sample is
        drawn again, and when it was the judging that failed, only the judge is asked again
        of the answer already paid for. A judging whose replies could not be read is
        remembered: asking again would most likely fail again."""
        retryable = failure is not None and isinstance(
            failure[1], RetryableBackendError | NoHealthyMemberError
        )
        judging = result.error.startswith(JUDGE_ERROR)
        if judging and retryable and result.response and not _unreadable(failure):
            self.answers[job.key] = result
        elif judging or not retryable:
            self.done[job.key] = result
            self.stand_ins.stood_in.discard(job.key)
        if job.opinions == 1:  # a real answer (more opinions re-judge one already heard)
            self.stand_ins.heard(job.pair, result, phase=job.phase)
        self.costs.append(
            SampleCost(
                stage=job.phase,
                task_id=job.task.id,
                docs=f"{result.skill_hash}:{result.memory_hash}",
                sample_id=job.sample_id,
                score=(float(result.hard), float(result.soft)),
                attempt_calls=spent.attempt,
                judge_calls=spent.judge,
                tokens=spent.tokens,
                cached_tokens=spent.cached_tokens,
                failed=bool(result.error),
            )
        )
        grouped: dict[str, str] = {}
        if failure is not None:
            stage, exc = failure
            grouped = {
                "error_member": str(getattr(exc, "member", "") or ""),
                "error_stage": stage,
                "error_class": error_class(exc),
            }
            self.errors.add(
                member=grouped["error_member"],
                stage=stage,
                error_class=grouped["error_class"],
                message=result.error,
            )
        if self.record is not None:
            row = result.to_dict()
            row.update(key=job.key, phase=job.phase, fresh=job.fresh, split=job.task.split.value,
                       spent=spent.parts())  # fmt: skip
            row.update(grouped)
            if job.opinions > 1:  # a middle verdict, not an answer of its own (.stand_in)
                row["opinions"] = job.opinions
            self._rows.append(row)
        if self.evidence is not None:
            self._evidence.extend(
                {"phase": job.phase, "task_id": clean(job.task.id), "sample_id": job.sample_id, **e}
                for e in evidence
            )
        if len(self._rows) >= self.flush_every or len(self._evidence) >= 2 * self.flush_every:
            self.flush()
        return result


def _unreadable(failure: tuple[str, BaseException] | None) -> bool:
    """The failure was replies that could not be read (``bad_reply``), not the moment's
    trouble (a timeout, a server error, a rate limit, every member open)."""
    exc = failure[1] if failure is not None else None
    return isinstance(exc, RetryableBackendError) and exc.kind == "bad_reply"


# What the judge reads when a task has no rubric of its own: the request is already in the
# prompt, and sending it twice only costs tokens.
NO_RUBRIC = "Everything the request above asks for, done fully and correctly."


def _rubric(task: TaskRecord) -> str:
    reference = clean(task.reference).strip()
    return reference if reference and reference != clean(task.intent).strip() else NO_RUBRIC


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", "") or str(exc)
    member = getattr(exc, "member", "")
    label = getattr(exc, "error_class", type(exc).__name__)
    text = f"{label}: {cause}" + (f" (member {member})" if member else "")
    return sanitize(text)[:300]
