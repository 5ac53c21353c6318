"""The progress display counts every model call of a stage, reflection included, and the
replies the response cache served apart (they are no model call)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night


class Recorder:
    def __init__(self) -> None:
        self.current = ""
        self.done: Counter[str] = Counter()
        self.planned: Counter[str] = Counter()
        self.cache_hits: Counter[str] = Counter()

    def stage(self, name: str) -> None:
        self.current = name

    def calls_planned(self, n: int) -> None:
        self.planned[self.current] += n

    def call_done(self, *, ok: bool, cached: bool = False) -> None:
        if cached:
            self.cache_hits[self.current] += 1
            self.planned[self.current] -= 1
        else:
            self.done[self.current] += 1

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass


async def test_reflection_calls_show_in_the_progress(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    progress = Recorder()
    outcome = await run_night(setup.config, project=setup.project, progress=progress)
    assert outcome.run_dir is not None
    stages = json.loads((outcome.run_dir / "run.json").read_text())["stages"]
    reflects = {s["name"]: s["model_calls"] for s in stages if "reflect" in s["name"]}
    assert sum(reflects.values()) > 0
    for name, calls in reflects.items():
        # folds whose reflection prompts coincide share one model call (the pool's cache):
        # the display counts the model calls, the cache hits apart
        assert progress.done[name] == calls, name
        assert progress.planned[name] == progress.done[name], name
    model_calls = {s["name"]: s["model_calls"] for s in stages}
    assert all(progress.done[name] == n for name, n in model_calls.items() if name in progress.done)


async def test_last_stage_line_comes_before_the_night_line(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    setup = prepare_demo(tmp_path)
    with capture_logs() as logs:
        await run_night(setup.config, project=setup.project)
    events = [e for e in logs if e["event"] in ("night.stage_done", "night.done")]
    assert events[-1]["event"] == "night.done"
    assert events[-2]["event"] == "night.stage_done" and events[-2]["stage"] == "commit"
