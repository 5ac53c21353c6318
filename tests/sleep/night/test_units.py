"""Pure pieces of the night: edit parsing, judge replies, the spend cap, report, progress."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from skillopt.backends.base import Completion, CompletionRequest, Role, Usage
from skillopt.backends.wrappers import BudgetCompleter
from skillopt.errors import BudgetExceededError, ReplyFormatError
from skillopt.progress import TtyProgress
from skillopt.replies import json_values
from skillopt.types import EditTarget, RolloutResult, TaskRecord
from skillopt_sleep.night.report_markdown import cell, render_markdown, score_chart
from skillopt_sleep.reflect import Reflector, RolloutSet, parse_edits
from skillopt_sleep.replay import Docs
from skillopt_sleep.verdicts import parse_judge_reply


def test_parse_edits_validates_and_caps_at_the_budget() -> None:
    reply = (
        'Sure! [{"op": "add", "content": "a"}, {"op": "replace", "content": "b", '
        '"anchor": "x"}, {"op": "add", "content": "  "}, {"op": "delete", "anchor": "y"}]'
    )
    edits = parse_edits(reply, target=EditTarget.MEMORY, budget=2)
    assert [(e.op, e.content, e.anchor) for e in edits] == [("add", "a", ""), ("replace", "b", "x")]
    assert all(e.target is EditTarget.MEMORY for e in edits)
    assert len(parse_edits(reply, target=EditTarget.SKILL, budget=9)) == 3
    with pytest.raises(ReplyFormatError):
        parse_edits('[{"op": "explode", "content": "a"}]', target=EditTarget.SKILL, budget=4)
    with pytest.raises(ReplyFormatError):
        parse_edits("no json here", target=EditTarget.SKILL, budget=4)


def test_first_json_value_skips_broken_prefixes() -> None:
    assert json_values("x [oops [1, 2] tail") == [[1, 2]]
    assert parse_judge_reply('{"score": 0.9, "reason": "ok"}').hard == 1.0
    assert parse_judge_reply('```json\n{"score": 0.5}\n```').soft == 0.5
    with pytest.raises(ReplyFormatError):
        parse_judge_reply('{"score": 7}')


class ScriptedPool:
    """A real pool stand-in at the seam: replies from a list, records requests."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        text = self.replies.pop(0)
        return Completion(text=text, usage=Usage(prompt_tokens=10, completion_tokens=5),
                          member="s", latency=0.0)  # fmt: skip

    def accounting(self) -> dict[str, Any]:
        return {}

    def total_concurrency(self, role: Role) -> int:
        return 1


def _set(task_id: str, *hards: float, criteria: tuple[str, ...] = ()) -> RolloutSet:
    task = TaskRecord(id=task_id, intent=f"do {task_id}")
    results = tuple(
        RolloutResult(task_id=task_id, sample_id=i, hard=h, soft=h, response=f"r{i}",
                      failed_criteria=criteria if h < 1 else ())
        for i, h in enumerate(hards)
    )  # fmt: skip
    return RolloutSet(task=task, results=results)


async def test_reflect_retries_once_then_falls_back_to_single_shot() -> None:
    pool = ScriptedPool(["not json", "still not", '[{"op": "add", "content": "rule"}]'])
    reflector = Reflector(pool=pool, marker="M", preferences="be brief")
    sets = [_set("a", 1.0, 0.0, criteria=("max_chars=200",)), _set("b", 0.0, 0.0)]
    out = await reflector.reflect(
        target=EditTarget.SKILL, docs=Docs(skill="s", memory="m"), sets=sets, budget=3
    )
    assert out.mode.value == "single" and [e.content for e in out.edits] == ["rule"]
    assert out.raw == ("not json", "still not", '[{"op": "add", "content": "rule"}]')
    first, retry, single = (r.prompt for r in pool.requests)
    assert "Attempt groups" in first and "could not be used" in retry
    assert '"max_chars=200"' in single and "be brief" in single and single.startswith("M")


async def test_contrastive_reflection_also_shows_the_tasks_that_failed_every_attempt() -> None:
    # Under a noisy model the tasks with a spread are whichever samples the noise flipped:
    # the steady failures beside them must still reach the optimizer.
    pool = ScriptedPool(['[{"op": "add", "content": "rule"}]'])
    reflector = Reflector(pool=pool, marker="M")
    sets = [_set("a", 1.0, 0.0), _set("b", 0.0, 0.0, criteria=("cites the source",)),
            _set("c", 1.0, 1.0)]  # fmt: skip
    out = await reflector.reflect(
        target=EditTarget.SKILL, docs=Docs(skill="s", memory="m"), sets=sets, budget=3
    )
    assert out.mode.value == "contrastive" and len(pool.requests) == 1
    prompt = pool.requests[0].prompt
    groups, steady = prompt.split("# Attempt groups")[1].split("# Tasks that failed on every")
    assert "do a" in groups and "do b" not in groups
    assert "do b" in steady and "do c" not in prompt
    assert '"cites the source"' in prompt
    assert len(pool.requests[0].metadata["failures"]) == 2


async def test_reflect_makes_no_call_without_failures_or_budget() -> None:
    pool = ScriptedPool([])
    reflector = Reflector(pool=pool, marker="M")
    docs = Docs(skill="s", memory="m")
    done = await reflector.reflect(target=EditTarget.SKILL, docs=docs,
                                   sets=[_set("a", 1.0, 1.0)], budget=3)  # fmt: skip
    assert not done.edits and "nothing to learn" in done.reason
    none = await reflector.reflect(target=EditTarget.SKILL, docs=docs,
                                   sets=[_set("a", 0.0)], budget=0)  # fmt: skip
    assert none.reason == "edit budget is 0" and pool.requests == []


async def test_spending_pool_stops_at_the_cap() -> None:
    pool = BudgetCompleter(ScriptedPool(["a", "b", "c"]), max_calls=2)
    request = CompletionRequest(role=Role.TARGET, prompt="p", stage="rollout")
    await pool.complete(request)
    await pool.complete(request)
    with pytest.raises(BudgetExceededError):
        await pool.complete(request)
    assert pool.summary()["calls"] == 2 and pool.reached == "calls"
    tokens = BudgetCompleter(ScriptedPool(["a", "b"]), max_tokens=10)
    await tokens.complete(request)
    with pytest.raises(BudgetExceededError):
        await tokens.complete(request)
    assert tokens.reached == "tokens"


async def test_what_an_earlier_run_spent_counts_against_the_cap_not_as_this_runs_calls() -> None:
    """A resumed night (a handoff night's next sitting) carries what the answers it reads
    back cost: the cap is the night's, the summary this run's; a child's budget carries
    into its parent's, as its calls do."""
    parent = BudgetCompleter(ScriptedPool(["a", "b", "c"]), max_calls=3)
    child = BudgetCompleter(parent)
    child.carry(2, 50)
    request = CompletionRequest(role=Role.TARGET, prompt="p", stage="rollout")
    await child.complete(request)
    with pytest.raises(BudgetExceededError, match=r"3 calls, .* \(2 of the calls made before"):
        await child.complete(request)
    assert (parent.calls, parent.carried_calls, parent.calls_this_run) == (3, 2, 1)
    assert parent.summary()["calls"] == 1 and parent.summary()["carried"]["calls"] == 2
    assert child.tokens - child.carried_tokens == parent.summary()["tokens"]
    assert "carried" not in BudgetCompleter(ScriptedPool([])).summary()


async def test_the_token_cap_refuses_the_call_that_would_cross_it() -> None:
    pool = ScriptedPool(["a", "b"])
    spend = BudgetCompleter(pool, max_tokens=1000)
    small = CompletionRequest(role=Role.TARGET, prompt="p" * 400, stage="rollout")
    await spend.complete(small)
    huge = CompletionRequest(role=Role.TARGET, prompt="x" * 6_000_000, stage="rollout")
    with pytest.raises(BudgetExceededError, match="next call's prompt alone is ~1500000"):
        await spend.complete(huge)
    # refused before it was sent: the huge prompt cost nothing
    assert len(pool.requests) == 1 and spend.calls == 1 and spend.reached == "tokens"
    assert spend.tokens < 1000


async def test_calls_in_flight_count_against_the_token_cap() -> None:
    gate = anyio.Event()  # set once the second call was refused: the first stays in flight

    class Hanging(ScriptedPool):
        async def complete(self, request: CompletionRequest) -> Any:
            await gate.wait()
            return await super().complete(request)

    spend = BudgetCompleter(Hanging(["a"]), max_tokens=1000)
    request = CompletionRequest(role=Role.TARGET, prompt="p" * 2400, stage="rollout")  # ~600
    async with anyio.create_task_group() as tg:
        tg.start_soon(spend.complete, request)
        while not spend.in_flight_tokens:
            await anyio.lowlevel.checkpoint()
        with pytest.raises(BudgetExceededError):
            await spend.complete(request)  # 600 in flight + 600 would cross 1000
        gate.set()
    assert spend.calls == 1


def test_report_cells_are_escaped_and_chart_scales() -> None:
    assert cell("a|b`c\nd\x1b[31m") == "a\\|b'c d"
    chart = score_chart([{"night": 1, "score": 0.5}, {"night": 2, "score": None}])
    assert chart.count("█") == 15 and "—" in chart
    md = render_markdown(
        {"night": 3, "project_name": "p", "status": "failed", "failed_stage": "rollouts",
         "reason": "every model call failed", "chart": []}
    )  # fmt: skip
    assert "This night failed" in md and "rollouts" in md
    json.dumps({"md": md})


def test_tty_progress_shows_stage_calls_errors_and_eta() -> None:
    out = io.StringIO()
    progress = TtyProgress(out)
    progress.stage("rollouts")
    progress.calls_planned(4)
    progress.call_done(ok=True)
    progress.call_done(ok=False)
    progress.note("hello")
    progress.close()
    text = out.getvalue()
    assert "[rollouts] calls 2/4  errors 1" in text and "eta" in text and "hello" in text


def test_sleep_config_precedence_and_key_paths(tmp_path: Any) -> None:
    from skillopt.errors import ConfigError
    from skillopt_sleep.config import load_sleep_config

    path = tmp_path / "sleep.toml"
    path.write_text("[night]\nrounds = 2\ndream_rollouts = 3\n")
    env = {"SKILLOPT_SLEEP__NIGHT__ROUNDS": "4", "SKILLOPT_SLEEP__GATE__METRIC": '"hard"'}
    cfg = load_sleep_config(path, environ=env, overrides={"night.dream_rollouts": 5})
    assert (cfg.night.rounds, cfg.night.dream_rollouts, cfg.gate.metric) == (4, 5, "hard")
    assert load_sleep_config(path, environ={}, overrides={"night.rounds": None}).night.rounds == 2
    path.write_text("[night]\nroundz = 2\n")
    with pytest.raises(ConfigError, match=r"night\.roundz"):
        load_sleep_config(path, environ={})
    path.write_text("[night]\nval_fraction = 0.7\ntest_fraction = 0.3\n")
    with pytest.raises(ConfigError):
        load_sleep_config(path, environ={})


def test_adopt_roots_are_the_configured_ones_or_what_the_defaults_need(tmp_path: Path) -> None:
    from skillopt_sleep.config import SleepConfig

    project = tmp_path / "proj"
    default = SleepConfig.model_validate({"sources": {"claude_home": str(tmp_path / "c")}})
    assert default.adopt_roots(project) == [tmp_path / "c" / "skills", project]
    # Configured roots are the only ones: a memory file elsewhere does not add its folder.
    elsewhere = SleepConfig.model_validate(
        {"memory_path": str(tmp_path / "notes" / "AGENTS.md"), "skill_roots": ["~/s", "docs"]}
    )
    assert elsewhere.adopt_roots(project) == [Path("~/s").expanduser(), project / "docs"]


def test_runs_list_in_creation_order_even_within_one_second(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from skillopt_sleep.rundir import RunDir

    frozen = datetime(2026, 11, 25, 2, 30, tzinfo=UTC)
    made = [
        RunDir.create(
            tmp_path, now=frozen, project="p", project_key="k", config={},
            config_hash="h", dry_run=False,
        ).path
        for _ in range(12)
    ]  # fmt: skip
    assert RunDir.list_runs(tmp_path) == made


async def test_edits_that_cannot_be_meant_are_refused_without_a_retry() -> None:
    """The prompt's own example, a placeholder, a slot of its template, a line of its own
    instructions: refused before any trial, why recorded, no call spent asking again."""
    echo = [
        {"op": "add", "content": "<instruction>", "anchor": "", "rationale": "<why it helps>"},
        {"op": "add", "content": "..."},
        {"op": "add", "content": "Always <instruction> before answering."},
        {"op": "add", "content": "Never weaken a requirement the user stated."},
        {"op": "add", "content": "Quote the failing test's name in <answer> tags."},
    ]
    pool = ScriptedPool([json.dumps(echo)])
    reflector = Reflector(pool=pool, marker="M")
    out = await reflector.reflect(
        target=EditTarget.SKILL, docs=Docs(skill="s", memory="m"),
        sets=[_set("a", 0.0, 0.0)], budget=9,
    )  # fmt: skip
    assert [e.content for e in out.edits] == ["Quote the failing test's name in <answer> tags."]
    assert len(pool.requests) == 1 and out.calls == 1
    assert len(out.refused) == 4
    assert "the prompt's own example" in out.refused[0]
    assert "placeholder" in out.refused[1]
    assert "template slot <instruction>" in out.refused[2]
    assert "the prompt's own instructions" in out.refused[3]
    assert out.to_dict()["refused"] == list(out.refused)
    only_echo = Reflector(pool=ScriptedPool([json.dumps(echo[:1])]), marker="M")
    none = await only_echo.reflect(
        target=EditTarget.SKILL, docs=Docs(skill="s", memory="m"),
        sets=[_set("a", 0.0, 0.0)], budget=9,
    )  # fmt: skip
    assert not none.edits and none.reason.startswith("every edit proposed was refused")
