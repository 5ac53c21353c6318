"""QA items solved by a real agent CLI (codex, claude, copilot) in a fresh workspace.

The skill under training is installed as the agent's ``SKILL.md`` and the question is
``task.md``; the exec harness runs the CLI, extracts the final answer and keeps the transcript
and a step trace under the rollout's work directory. Scoring is the QA environment's. The
optimizer sees the question, the answer, the harness's trace summary and the numbered steps,
so it can tell a skill defect from an agent that never read the skill.

Target calls go straight to the CLI member (it has its own process limiter), so the pool's
retry policy does not cover them: a retryable failure (a 5xx, a dropped connection, a
timeout) is re-run here with the same jittered backoff, and only a rollout that still fails
reaches the trainer as an error row. The pool still serves the optimizer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import anyio

from skillopt.backends.cli.member import CliBackend
from skillopt.backends.harness.rollout import HarnessOptions, RolloutOutcome, run_rollout
from skillopt.backends.harness.workspace import SkillFile, WorkspaceSpec
from skillopt.backends.retry import RetryPolicy, retry_delay
from skillopt.errors import RetryableBackendError
from skillopt.logging import get_logger
from skillopt.trainer.envs.base import EnvItem, RolloutContext, RolloutResult, Split
from skillopt.trainer.envs.qa import QAEnvironment, extract_answer, qa_result

__all__ = ["ExecQAEnvironment", "run_with_retries"]

_log = get_logger(__name__)

SKILL_NAME = "skillopt-target"
_DESCRIPTION = "How to answer short questions about the provided context."
_ANSWER_HINT = "Finish with the final answer inside <answer></answer> tags."


class ExecQAEnvironment:
    """The QA environment's items and scoring, attempted by an agent CLI."""

    def __init__(
        self,
        qa: QAEnvironment,
        backend: CliBackend,
        *,
        keep_workspace: bool = False,
        trace_budget: int = 2000,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._qa = qa
        self._backend = backend
        self._keep = keep_workspace
        self._trace_budget = trace_budget
        self._retry = retry or RetryPolicy(max_attempts=3)
        self._rng = random.Random()  # jitter only; never affects what is recorded

    @property
    def name(self) -> str:
        return "qa_exec"

    def items(self, split: Split) -> Sequence[EnvItem]:
        return self._qa.items(split)

    def task_types(self) -> list[str]:
        return self._qa.task_types()

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        spec = WorkspaceSpec(
            skill=SkillFile(name=SKILL_NAME, description=_DESCRIPTION, body=skill),
            task=f"{QAEnvironment.user_prompt(item)}\n\n{_ANSWER_HINT}\n",
            denied_names=frozenset({"val", "test"}),
        )
        options = HarnessOptions(
            keep_workspace=self._keep,
            time_limit=ctx.timeout_s,
            trace_budget=self._trace_budget,
            answer_hint=_ANSWER_HINT,
        )
        outcome = await self._run_with_retries(spec, ctx, options)
        summary = outcome.summary
        return qa_result(
            item,
            extract_answer(outcome.answer),
            lines=[
                f"Agent answer: {outcome.answer.strip()[:600]!r} (attempts {outcome.attempts})",
                f"Read task.md: {summary.task_read.value}; read SKILL.md: "
                f"{summary.skill_read.value}; answer format: {summary.answer_format.value}",
                "Steps:",
                outcome.trace_text[: self._trace_budget] or "(no step trace)",
            ],
            no_answer=outcome.parse_error,
            extras={"attempts": outcome.attempts},
        )

    async def _run_with_retries(
        self, spec: WorkspaceSpec, ctx: RolloutContext, options: HarnessOptions
    ) -> RolloutOutcome:
        return await run_with_retries(
            self._backend, spec, ctx.workdir, options, retry=self._retry, rng=self._rng
        )


async def run_with_retries(
    backend: CliBackend,
    spec: WorkspaceSpec,
    rollout_dir: Path,
    options: HarnessOptions,
    *,
    retry: RetryPolicy,
    rng: random.Random,
) -> RolloutOutcome:
    """One exec rollout; a retryable failure is re-run with jittered backoff (the CLI member
    is called directly, so the pool's retry policy does not cover it)."""
    attempt = 1
    while True:
        try:
            return await run_rollout(backend, spec, rollout_dir=rollout_dir, options=options)
        except RetryableBackendError as exc:
            if attempt >= retry.max_attempts:
                raise
            delay = retry_delay(retry, attempt, retry_after=None, rng=rng)
            _log.info(
                "exec_rollout_retry",
                member=backend.name,
                attempt=attempt,
                error=exc.error_class,
                delay_s=round(delay, 3),
            )
            attempt += 1
            await anyio.sleep(delay)
