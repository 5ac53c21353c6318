"""Handoff mode end to end: a night with no model stops at each stage's end with its
prompts written, a test agent answers them as the mock world would, and the resumed night
ends as the same night on the mock backend did."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from skillopt.backends.handoff import PENDING_NAME, PROMPTS_NAME, read_pending
from skillopt.backends.open import open_completer
from skillopt_sleep.cli import main
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.handoff import as_handoff, handoff_dir
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night.outcome import EXIT_WAITING
from skillopt_sleep.night_end import NightResult, RunStatus
from support.handoff_agent import RecordingMock, answer_pending, recording_pool
from support.sleep_setup import write_config
from support.three_skills import three_skills_project

SECRET = "ghp_" + "Zx9" * 12  # a GitHub token's shape, planted in a transcript


def plant_secret(setup: DemoSetup) -> None:
    """Put a token into the first user message of one demo session."""
    path = sorted(setup.claude_home.rglob("*.jsonl"))[0]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first = next(line for line in lines if line["type"] == "user")
    first["message"]["content"] += f" (the deploy token is {SECRET})"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def small(cfg: SleepConfig) -> SleepConfig:
    """One round; the heuristic miner, as the mock night has (the mock cannot mine)."""
    night = cfg.night.model_copy(update={"rounds": 1, "llm_mine": False})
    return cfg.model_copy(update={"night": night})


def trials(run_dir: Path) -> list[tuple[object, ...]]:
    rows = json.loads((run_dir / "trials.json").read_text())["trials"]
    return [
        (t["name"], t["kind"], [e["content"] for e in t["edits"]],
         (t.get("decision") or {}).get("accepted"))
        for t in rows
    ]  # fmt: skip


def skills(run_dir: Path) -> list[tuple[object, ...]]:
    rows = json.loads((run_dir / "report.json").read_text()).get("skills") or []
    return [(s.get("name"), s.get("status"), s.get("reason")) for s in rows]


@pytest.mark.slow
@pytest.mark.parametrize("project", [prepare_demo, three_skills_project], ids=["demo", "skills"])
async def test_a_handoff_night_resumes_sitting_by_sitting_to_the_mock_nights_end(
    tmp_path: Path, project: Callable[[Path], DemoSetup]
) -> None:
    """(``skills``: a project with three skills of its own, each learning alongside.)"""
    setup = project(tmp_path)
    plant_secret(setup)
    cfg = small(setup.config)
    mock = RecordingMock()
    async with open_completer(recording_pool(mock)) as stack:
        reference = await run_night(
            cfg.model_copy(update={"state_dir": tmp_path / "mock-state"}),
            project=setup.project, pool=stack,
        )  # fmt: skip
    assert reference.status is RunStatus.COMPLETE and reference.accepted

    handoff = as_handoff(cfg)
    where = handoff_dir(handoff, setup.project)
    asked: list[tuple[str, int]] = []
    reached = False  # the planted token's message reached a prompt (redacted)
    for _ in range(40):
        outcome = await run_night(handoff, project=setup.project)
        if outcome.status is not RunStatus.WAITING:
            break
        assert outcome.exit_code == EXIT_WAITING and outcome.result is NightResult.WAITING
        written = (where / PROMPTS_NAME).read_text() + (where / PENDING_NAME).read_text()
        assert SECRET not in written
        reached = reached or "the deploy token is" in written
        pending = read_pending(where)
        assert pending and all(p.prompt and p.answer_file == f"answers/{p.id}.md" for p in pending)
        asked.append((outcome.failed_stage, answer_pending(where, mock.replies)))
    assert outcome.status is RunStatus.COMPLETE, outcome.reason
    assert reached
    # the same decisions as on the mock, every prompt asked once
    assert (outcome.result, outcome.accepted, outcome.baseline, outcome.candidate) == (
        reference.result, reference.accepted, reference.baseline, reference.candidate)  # fmt: skip
    assert outcome.run_dir is not None and reference.run_dir is not None
    assert trials(outcome.run_dir) == trials(reference.run_dir)
    assert skills(outcome.run_dir) == skills(reference.run_dir)
    assert sum(n for _, n in asked) == len(mock.replies)
    assert not (where / PENDING_NAME).exists() and not (where / PROMPTS_NAME).exists()
    assert len({json.loads((outcome.run_dir / "run.json").read_text())["run_id"]}) == 1
    assert asked[0][0] == "rollouts"  # a first sitting gathers every first rollout


def test_once_handoff_writes_the_prompts_and_exits_with_its_own_code(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    config = write_config(setup, pool='[pool]\nkind = "handoff"\n')
    out = io.StringIO()
    argv = ["once", "--config", str(config), "--project", str(setup.project),
            "--log-level", "WARNING"]  # fmt: skip
    with contextlib.redirect_stdout(out):
        assert main(argv) == EXIT_WAITING == 75
    where = handoff_dir(setup.config, setup.project)
    said = out.getvalue()
    assert "waiting_for_answers" in said and str(where / PROMPTS_NAME) in said
    pending = json.loads((where / PENDING_NAME).read_text())
    assert pending["resume"].endswith(f"once --config {config} --project {setup.project}")
    rows = pending["prompts"]
    assert rows and {"id", "role", "prompt", "format", "answer_file"} <= set(rows[0])
    text = (where / PROMPTS_NAME).read_text()
    assert all(f"## {i}. `{r['id']}`" in text for i, r in enumerate(rows, 1))
    with contextlib.redirect_stdout(io.StringIO()):  # unanswered: it waits again, same prompts
        assert main(argv) == EXIT_WAITING
    assert {p.id for p in read_pending(where)} == {r["id"] for r in rows}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--json"]) == EXIT_WAITING
    said = json.loads(out.getvalue())
    assert said["status"] == "waiting" and said["result"] == "waiting_for_answers"
    assert said["handoff"]["dir"] == str(where) and said["handoff"]["pending"] == len(rows)


def test_a_demo_handoff_night_needs_a_state_dir_to_be_resumed() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["once", "--demo", "--handoff", "--log-level", "WARNING"]) == 2
    assert "--state-dir" in err.getvalue()
