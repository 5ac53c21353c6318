"""Watching after adoption, acted on: when the user's sessions contradict an adopted line,
the next night proposes its removal through the gate. Real nights against the world model
on the loopback fake model server; the world changes between nights as a team's mind does."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skillopt.backends.mock import DEFAULT_RULES, World
from skillopt_sleep.adopt import adopt
from skillopt_sleep.config import SleepConfig
from skillopt_sleep.demo import DemoSetup, prepare_demo
from skillopt_sleep.line_watch import WatchedLine, watch_lines
from skillopt_sleep.night.entry import NightResult, run_night
from skillopt_sleep.staging import load_manifest
from support.fake_model_server import FakeModelServer, Request
from support.sleep_setup import http_config
from support.transcripts import Turn, write_claude_session
from support.world_http import SwitchingWorld

TESTS = next(r for r in DEFAULT_RULES if r.key == "tests")
# The team changed its mind: the tests line now makes the agent drop everything else.
TESTS_NOW_HARMFUL = World(
    rules=tuple(
        dataclasses.replace(r, harmful=True, triggers=()) if r.key == "tests" else r
        for r in DEFAULT_RULES
    )
)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoSetup:
    monkeypatch.setenv("SKILLOPT_TEST_FAKE_KEY", "test-key-not-secret")
    return prepare_demo(tmp_path)


def _report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def _intent(run_dir: Path, task_id: str) -> str:
    rows = (run_dir / "tasks.jsonl").read_text().splitlines()
    return next(t["intent"] for t in map(json.loads, rows) if t["id"] == task_id)


def _ask(setup: DemoSetup, *turns: str, minutes: int) -> None:
    write_claude_session(
        setup.claude_home, cwd=setup.project,
        turns=[Turn(user=t, answer="Done.") for t in turns],
        start=datetime.now(UTC) + timedelta(minutes=minutes),
    )  # fmt: skip


async def _adopted_night(setup: DemoSetup, cfg: SleepConfig) -> tuple[Path, WatchedLine]:
    """Night 1 learns the demo's rules and is adopted; the tests line is watched."""
    first = await run_night(cfg, project=setup.project)
    assert first.result is NightResult.ACCEPTED
    adopt(first.run_dir, skill_roots=cfg.adopt_roots(setup.project))
    line = next(w for w in watch_lines(cfg, setup.project) if w.line == TESTS.text)
    assert line.requests and not line.contradicted
    return first.run_dir, line


def _correct_against(setup: DemoSetup, run_dir: Path, line: WatchedLine) -> None:
    """A session after the adoption: the same request, and the user pushes back."""
    intent = _intent(run_dir, line.requests[0])
    _ask(setup, intent, "No, that's wrong: stop doing that.", minutes=1)


def _watched(run_dir: Path) -> dict[str, Any]:
    rows = _report(run_dir)["watched_lines"]
    return next(w for w in rows if w["line"] == TESTS.text)


def _removal_trials(run_dir: Path) -> list[dict[str, Any]]:
    trials = json.loads((run_dir / "trials.json").read_text())
    trials = trials["trials"] if isinstance(trials, dict) else trials
    return [t for t in trials if t["name"].endswith(".watched")]


def _skill(setup: DemoSetup, cfg: SleepConfig) -> str:
    return cfg.live_skill_path(setup.project).read_text()


@pytest.mark.slow
async def test_a_contradicted_line_whose_removal_helps_is_staged_for_removal(
    setup: DemoSetup,
) -> None:
    world = SwitchingWorld()
    with FakeModelServer(reply_fn=world.reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        first, line = await _adopted_night(setup, cfg)
        _correct_against(setup, first, line)
        world.world = TESTS_NOW_HARMFUL
        second = await run_night(cfg, project=setup.project)
    assert second.result is NightResult.ACCEPTED
    flagged = next(w for w in watch_lines(cfg, setup.project) if w.line == TESTS.text)
    # after the night that tested it, status says what that night did, not what is next
    assert flagged.contradicted and flagged.last_test is not None
    assert f"night {flagged.last_test[0]} staged its removal" in flagged.flag()
    assert "skillopt-sleep adopt" in flagged.flag()
    trial = _removal_trials(second.run_dir)[0]
    assert trial["verdict"] == "accepted" and trial["edits"][0]["op"] == "delete"
    assert (
        "contradicted by your sessions" in trial["note"] and "1 with a correction" in trial["note"]
    )
    watched = _watched(second.run_dir)
    assert watched["contradicted"] and watched["tonight"]["removal"] == "removed"
    entry = next(e for e in load_manifest(second.run_dir).entries if e.kind.value == "skill")
    staged = (second.run_dir / entry.proposed_file).read_text()
    assert TESTS.text not in staged
    assert TESTS.text in _skill(setup, cfg)  # staged for the user, never applied by the night
    markdown = (second.run_dir / "report.md").read_text()
    assert f"`{line.edit_id}` **removed**" in markdown


@pytest.mark.slow
async def test_a_contradicted_line_the_tasks_still_need_is_kept(setup: DemoSetup) -> None:
    with FakeModelServer(reply_fn=SwitchingWorld().reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        first, line = await _adopted_night(setup, cfg)
        _correct_against(setup, first, line)
        _ask(setup, "Give me a one-liner on what the scheduler does", minutes=2)
        second = await run_night(cfg, project=setup.project)
    trial = _removal_trials(second.run_dir)[0]
    assert trial["verdict"] == "rejected"
    watched = _watched(second.run_dir)
    assert watched["tonight"]["removal"] == "kept"
    flagged = next(w for w in watch_lines(cfg, setup.project) if w.line == TESTS.text)
    assert "tested removing it and kept the line" in flagged.flag()
    assert "rejected its removal" in watched["tonight"]["why"]
    assert TESTS.text in _skill(setup, cfg)
    manifest = second.run_dir / "proposal"
    if manifest.exists():
        entries = [e for e in load_manifest(second.run_dir).entries if e.kind.value == "skill"]
        assert all(TESTS.text in (second.run_dir / e.proposed_file).read_text() for e in entries)


@pytest.mark.slow
async def test_no_flagged_line_adds_no_trial_and_no_call(setup: DemoSetup) -> None:
    """The same changed world without the pushback: nothing is flagged, no removal is
    tried, and the night's calls are its rollouts and reflections alone."""
    world = SwitchingWorld()
    with FakeModelServer(reply_fn=world.reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        await _adopted_night(setup, cfg)
        world.world = TESTS_NOW_HARMFUL
        before = len(server.requests)
        second = await run_night(cfg, project=setup.project)
        calls = len(server.requests) - before
    assert not _removal_trials(second.run_dir)
    assert "tonight" not in _watched(second.run_dir)
    assert second.result is NightResult.NO_EDITS
    stages = json.loads((second.run_dir / "run.json").read_text())["stages"]
    paid = {s["name"]: s["model_calls"] for s in stages if s["model_calls"]}
    assert set(paid) == {"recheck", "rollouts", "round1.reflect_skill", "round1.reflect_memory"}
    assert calls == sum(paid.values()) == _report(second.run_dir)["spend"]["calls"]


@pytest.mark.slow
async def test_an_adopted_version_worse_than_the_one_it_replaced_gets_its_restore_staged(
    setup: DemoSetup,
) -> None:
    """An ungated night's proposal (the over-eager rule rides along) is adopted; once the
    archive holds samples of it, the next night finds it passes fewer of the same tasks
    than the replaced version did, gates the restore (reading back the archive's samples
    where they settle a task, drawing new ones elsewhere) and stages it."""
    terse = next(r for r in DEFAULT_RULES if r.harmful)
    with FakeModelServer(reply_fn=SwitchingWorld().reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        ungated = cfg.model_copy(update={"gate": cfg.gate.model_copy(update={"mode": "off"})})
        before = _skill(setup, cfg)
        first = await run_night(ungated, project=setup.project)
        adopt(first.run_dir, skill_roots=cfg.adopt_roots(setup.project))
        assert terse.text in _skill(setup, cfg)
        second = await run_night(cfg, project=setup.project)  # measures the adopted version
        third = await run_night(cfg, project=setup.project)
        fourth = await run_night(cfg, project=setup.project)  # the restore left unadopted
    assert not [t for t in _trials(second.run_dir) if t["kind"] == "restore"]
    # one test per adoption: a staged restore the user did not adopt is declined
    assert not [t for t in _trials(fourth.run_dir) if t["kind"] == "restore"]
    restore = next(t for t in _trials(third.run_dir) if t["kind"] == "restore")
    assert restore["verdict"] == "accepted" and "passed fewer" in restore["note"]
    assert third.result is NightResult.ACCEPTED
    entry = next(e for e in load_manifest(third.run_dir).entries if e.kind.value == "skill")
    assert (third.run_dir / entry.proposed_file).read_text() == before
    assert terse.text in _skill(setup, cfg)  # staged, never applied by the night
    stages = json.loads((third.run_dir / "run.json").read_text())["stages"]
    paid = next(s for s in stages if s["name"] == "restore")
    # the archive's samples of tasks steady under a version (two agreeing samples at least)
    # are read, not asked again; a task with one recorded sample gets new ones
    assert paid["recorded"] > 0 and paid["drawn"] > 0
    assert paid["model_calls"] <= 2 * paid["drawn"]


def _trials(run_dir: Path) -> list[dict[str, Any]]:
    trials = json.loads((run_dir / "trials.json").read_text())
    return trials["trials"] if isinstance(trials, dict) else trials


class FlippingWorld(SwitchingWorld):
    """The world's answers, a share of attempts spoiled (a model sampled above zero
    temperature): the n-th call of one prompt is spoiled by a hash of (prompt, n), so a
    task's samples disagree while a night's outcome stays the same from run to run."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.seen: dict[str, int] = {}

    def reply(self, request: Request) -> str:
        text = request.user_text
        answer = super().reply(request)
        if "# Project notes" not in text:  # attempts only; judges and the rest are exact
            return answer
        n = self.seen[text] = self.seen.get(text, -1) + 1
        digest = hashlib.sha256(f"{text}\x1f{n}".encode()).digest()
        return "Done." if digest[0] < 256 * self.share else answer


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
async def test_a_restore_on_noisy_tasks_draws_new_samples(setup: DemoSetup) -> None:
    """Where a version's recorded answers of a task disagreed, the screen's choice rests on
    those very samples: the restore's gate draws new ones for them (ids above every
    recorded one) instead of reading back the samples that chose it."""
    world = FlippingWorld(share=0.25)
    with FakeModelServer(reply_fn=world.reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        ungated = cfg.model_copy(update={"gate": cfg.gate.model_copy(update={"mode": "off"})})
        first = await run_night(ungated, project=setup.project)
        adopt(first.run_dir, skill_roots=cfg.adopt_roots(setup.project))
        second = await run_night(cfg, project=setup.project)
        third = await run_night(cfg, project=setup.project)
    assert any(t["kind"] == "restore" for t in _trials(third.run_dir))
    recorded: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in _rows(first.run_dir) + _rows(second.run_dir):
        if not row["error"]:
            key = (row["task_id"], row["skill_hash"], row["memory_hash"])
            recorded.setdefault(key, []).append(row)
    drawn = [r for r in _rows(third.run_dir) if r["phase"] == "restore"]
    noisy = 0
    for row in drawn:
        earlier = recorded.get((row["task_id"], row["skill_hash"], row["memory_hash"]), [])
        if len({(r["hard"], r["soft"]) for r in earlier}) > 1:  # they disagreed
            noisy += 1
            assert row["sample_id"] > max(r["sample_id"] for r in earlier), row
    assert noisy > 0  # the world is noisy enough to show it


@pytest.mark.slow
async def test_a_kept_line_is_tried_again_only_after_a_new_correction(setup: DemoSetup) -> None:
    """Once a night rejected a flagged line's removal, later nights do not pay to test it
    again (it could only repeat that answer, or pass by chance) until the user corrects
    the agent against it once more."""
    base = datetime.now(UTC)

    def at(minutes: int) -> Callable[[], datetime]:
        return lambda: base + timedelta(minutes=minutes)

    with FakeModelServer(reply_fn=SwitchingWorld().reply) as server:
        cfg = http_config(setup, server, llm_mine=False)
        first, line = await _adopted_night(setup, cfg)
        _correct_against(setup, first, line)  # +1 min
        _ask(setup, "Give me a one-liner on what the scheduler does", minutes=2)
        # a session's file is dated at its last turn, a few minutes after its first
        second = await run_night(cfg, project=setup.project, clock=at(30))
        _ask(setup, "Give me a one-liner on what the cache layer does", minutes=40)
        third = await run_night(cfg, project=setup.project, clock=at(60))
        intent = _intent(first, line.requests[0])
        _ask(setup, intent, "No, that's wrong again: stop doing that.", minutes=70)
        fourth = await run_night(cfg, project=setup.project, clock=at(90))
    assert [t["verdict"] for t in _removal_trials(second.run_dir)] == ["rejected"]
    assert _removal_trials(third.run_dir) == []  # settled: not paid for again
    assert "tonight" not in _watched(third.run_dir)
    assert _removal_trials(fourth.run_dir)  # a new correction: tested again
