"""``exec_check``: an agent works in a workspace of input files; a checker scores what it left.

In the style of SpreadsheetBench and OfficeQA: each item gives instructions and input files,
the agent produces output files, and a checker program (the ``program`` scorer) decides.
Items: ``{id, instructions, files: {name: text | {"path": "relative/to/data_dir"}},
output?, checker?, task_type?, ...}``; anything else the item holds (expected values) is
for the checker, which reads the item from ``$SKILLOPT_ITEM`` and is never shown to the
agent. The checker command comes from the item or from ``env.options.scorer.checker``
(placeholders ``{python}``, ``{data_dir}``, ``{workspace}``).

Who does the work:

* with ``env.exec_member`` (a CLI member of ``backend.pool_config``): the agent CLI runs in
  a writable workspace with the skill installed, through the exec harness (the same as
  ``qa_exec``, retried the same way); ``env.options.agent_hint`` adds a line to its prompt;
* without one: the target model is shown the instructions and the input files and answers
  with the content of the item's ``output`` file inside ``<answer>`` tags, which is written
  into the workspace before the checker runs (the offline demo works this way).

Another scorer can be named in ``env.options.scorer`` (it then scores the agent's reply).
The workspace is removed after scoring unless ``env.keep_workspace``. Items load through
:mod:`skillopt.trainer.dataset` (``[env.data]``); relative ``{"path": ...}`` files and
``{data_dir}`` resolve against ``env.data_dir``, else the folder of the configured file.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from skillopt.atomicio import atomic_write_text
from skillopt.backends.base import CompletionRequest, Role
from skillopt.backends.cli.member import CliBackend
from skillopt.backends.harness.rollout import HarnessOptions
from skillopt.backends.harness.workspace import SkillFile, WorkspaceSpec, build_workspace
from skillopt.backends.retry import RetryPolicy
from skillopt.errors import ConfigError
from skillopt.trainer.dataset import (
    DataSection,
    SplitItems,
    bundled,
    data_root,
    load_splits,
    requiring,
)
from skillopt.trainer.envs.base import EnvItem, RolloutContext, RolloutResult
from skillopt.trainer.envs.exec_cli import run_with_retries
from skillopt.trainer.envs.qa import extract_answer
from skillopt.trainer.scorers.base import ScoreContext, Scorer
from skillopt.trainer.scorers.registry import build_scorer, scorer_settings

__all__ = ["ExecCheckEnvironment", "check_exec_item"]

SKILL_NAME = "skillopt-target"
_DESCRIPTION = "How to produce the files a task asks for from its input files."
_AGENT_HINT = (
    "Write the files the task asks for in the current directory, then reply with a one-line "
    "summary inside <answer></answer> tags."
)
_SYSTEM = """You complete file-producing tasks.

# Skill
{skill}

Reply with the complete content of the requested output file inside <answer></answer> tags."""
_OPTIONS = ("scorer", "agent_hint")
_FILE_CHARS = 4000


def _inside(path: str) -> bool:
    rel = PurePosixPath(path)
    return bool(path) and not rel.is_absolute() and ".." not in rel.parts


def _file_source(name: str, value: Any) -> None:
    if not _inside(name):
        raise ValueError(f"'files' name {name!r} must be a relative path inside the workspace")
    if isinstance(value, str):
        return
    if isinstance(value, dict) and isinstance(value.get("path"), str) and _inside(value["path"]):
        return
    raise ValueError(
        f'\'files\'[{name!r}] must be text or {{"path": "..."}} inside the data directory'
    )


def check_exec_item(item: Mapping[str, Any]) -> str:
    if not isinstance(item.get("instructions"), str) or not item["instructions"].strip():
        raise ValueError("'instructions' must be a non-empty string")
    files = item.get("files", {})
    if not isinstance(files, dict):
        raise ValueError("'files' must be an object of name -> text or {\"path\": ...}")
    for name, value in files.items():
        _file_source(name, value)
    if "output" in item and (not isinstance(item["output"], str) or not item["output"]):
        raise ValueError("'output' must be a file name")
    return str(item.get("task_type") or "exec")


def _fresh_workspace(workspace: Path, spec: WorkspaceSpec) -> None:
    """The workspace as a resumed attempt must see it: rebuilt from nothing."""
    if workspace.exists():
        shutil.rmtree(workspace)
    build_workspace(workspace, spec)


def _files_left(workspace: Path) -> list[str]:
    """What the agent left, hidden paths (the installed skill) aside."""
    if not workspace.is_dir():
        return []
    return sorted(
        str(p.relative_to(workspace))
        for p in workspace.rglob("*")
        if p.is_file() and not p.relative_to(workspace).parts[0].startswith(".")
    )


def _head(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[:_FILE_CHARS]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Work:
    answer: str  # the agent's final reply
    notes: list[str]  # trajectory lines about how the work went
    attempts: int


class ExecCheckEnvironment(SplitItems):
    """File-producing tasks scored by a checker (or another configured scorer)."""

    def __init__(
        self,
        data_dir: str | Path = "",
        *,
        limit: int = 0,
        options: Mapping[str, Any] | None = None,
        backend: CliBackend | None = None,
        keep_workspace: bool = False,
        trace_budget: int = 2000,
        data: DataSection | None = None,
    ) -> None:
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(_OPTIONS))
        if unknown:
            known = ", ".join(_OPTIONS)
            raise ConfigError(
                f"unknown option {unknown[0]!r} (exec_check reads {known})",
                key=f"env.options.{unknown[0]}",
            )
        hint = opts.get("agent_hint", "")
        if not isinstance(hint, str):
            raise ConfigError("must be a string", key="env.options.agent_hint")
        spec = requiring(data, "instructions")
        default = bundled("exec_sample")
        super().__init__(
            load_splits(data_dir, spec, default_dir=default, limit=limit, check=check_exec_item)
        )
        self._root = data_root(data_dir, spec, default)
        settings = scorer_settings(opts, default="program")
        self._scorer: Scorer = build_scorer(settings, data_dir=str(self._root))
        self._hint = hint
        self._backend = backend
        self._keep = keep_workspace
        self._trace_budget = trace_budget
        self._retry = RetryPolicy(max_attempts=3)
        self._rng = random.Random()  # jitter only; never affects what is recorded

    @property
    def name(self) -> str:
        return "exec_check"

    def _spec(self, item: EnvItem, skill: str) -> WorkspaceSpec:
        inline, copied = {}, {}
        for name, value in dict(item.data.get("files", {})).items():
            if isinstance(value, str):
                inline[name] = value
            else:
                copied[name] = self._root / value["path"]
        return WorkspaceSpec(
            skill=SkillFile(name=SKILL_NAME, description=_DESCRIPTION, body=skill),
            task=str(item.data["instructions"]),
            files=inline,
            copy_files=copied,
            denied_names=frozenset({"val", "test"}),
            writable=True,
        )

    async def rollout(self, item: EnvItem, skill: str, ctx: RolloutContext) -> RolloutResult:
        spec = self._spec(item, skill)
        workspace = ctx.workdir / "workspace"
        try:
            if self._backend is not None:
                work = await self._by_agent(spec, ctx)
            else:
                work = await self._by_model(item, spec, skill, ctx, workspace)
            verdict = await self._scorer.score(
                work.answer,
                item.data,
                ScoreContext(
                    completer=ctx.completer,
                    timeout_s=ctx.timeout_s,
                    max_output_tokens=ctx.max_output_tokens,
                    workspace=workspace,
                    rollout_dir=ctx.workdir,
                ),
            )
            left = _files_left(workspace)
        finally:
            if not self._keep:
                shutil.rmtree(workspace, ignore_errors=True)
        trajectory = "\n".join(
            [
                f"Task: {str(item.data['instructions']).strip()[:600]}",
                *work.notes,
                f"Files in the workspace after the agent: {', '.join(left) or '(none)'}",
                f"Verification: {verdict.check}",
            ]
        )
        return verdict.result(
            item,
            response=extract_answer(work.answer),
            trajectory=trajectory,
            extras={"attempts": work.attempts},
        )

    async def _by_agent(self, spec: WorkspaceSpec, ctx: RolloutContext) -> _Work:
        assert self._backend is not None
        hint = f"{_AGENT_HINT}\n{self._hint}".strip()
        options = HarnessOptions(
            keep_workspace=True,  # the checker reads it; removed after scoring
            time_limit=ctx.timeout_s,
            trace_budget=self._trace_budget,
            answer_hint=hint,
        )
        outcome = await run_with_retries(
            self._backend, spec, ctx.workdir, options, retry=self._retry, rng=self._rng
        )
        summary = outcome.summary
        notes = [
            f"Agent reply: {outcome.answer.strip()[:600]!r} (attempts {outcome.attempts})",
            f"Read task.md: {summary.task_read.value}; read SKILL.md: {summary.skill_read.value}",
            "Steps:",
            outcome.trace_text[: self._trace_budget] or "(no step trace)",
        ]
        return _Work(answer=outcome.answer, notes=notes, attempts=outcome.attempts)

    async def _by_model(
        self, item: EnvItem, spec: WorkspaceSpec, skill: str, ctx: RolloutContext, workspace: Path
    ) -> _Work:
        _fresh_workspace(workspace, spec)
        output = str(item.data.get("output") or "")
        if not output:
            raise ConfigError(
                f"item {item.id!r} has no 'output' file name: without env.exec_member the "
                "model's answer is written to it",
                key="env.exec_member",
            )
        shown = [
            f"## {name}\n{_head(workspace / name)}"
            for name in sorted(dict(item.data.get("files", {})))
        ]
        instructions = str(item.data["instructions"]).strip()
        prompt = "\n\n".join(
            [instructions, "# Input files", *shown, f"Write the content of `{output}`."]
        )
        demo = {"id": item.id, "task_type": item.task_type,
                "answers": [str(item.data.get("reference", ""))]}  # fmt: skip
        reply = await ctx.completer.complete(
            CompletionRequest(
                role=Role.TARGET,
                system=_SYSTEM.format(skill=skill.strip() or "(no skill yet)"),
                prompt=prompt,
                max_output_tokens=ctx.max_output_tokens,
                timeout=ctx.timeout_s,
                sample_id=ctx.sample_id,
                use_cache=ctx.use_cache,
                stage="rollout",
                # what the offline demo model reads (HTTP members ignore metadata)
                metadata={"qa_item": demo},
            )
        )
        atomic_write_text(workspace / output, extract_answer(reply.text).strip() + "\n")
        notes = [f"Model reply (written to {output}): {reply.text.strip()[:600]}"]
        return _Work(answer=reply.text, notes=notes, attempts=1)
