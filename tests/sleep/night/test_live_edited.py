"""Issue 32 item 2: a user who edits a live document while a night runs is caught at the
next stage, not at staging after every call: the night stops there (resumable), naming
the file, and the next run resumes it on the file as it is now."""

from __future__ import annotations

import json
from pathlib import Path

from skillopt_sleep.demo import prepare_demo
from skillopt_sleep.night.entry import run_night
from skillopt_sleep.night_end import RunStatus


class EditsMemoryAt:
    """Appends a line to the memory file when stage ``at`` starts (the user, mid-night)."""

    def __init__(self, memory: Path, at: str) -> None:
        self.memory, self.at = memory, at
        self.stages: list[str] = []

    def stage_started(self, name: str) -> None:
        self.stages.append(name)
        if name == self.at:
            with self.memory.open("a", encoding="utf-8") as handle:
                handle.write("\n- A rule the user added by hand tonight.\n")

    def stage_ended(self, name: str) -> None:
        return None

    def rollouts_recorded(self, total: int) -> None:
        return None


async def test_an_edit_during_the_night_stops_it_at_the_next_stage(tmp_path: Path) -> None:
    setup = prepare_demo(tmp_path)
    cfg = setup.config
    memory = cfg.live_memory_path(setup.project)
    watcher = EditsMemoryAt(memory, "rollouts")
    outcome = await run_night(cfg, project=setup.project, observer=watcher)
    assert outcome.status is RunStatus.FAILED
    assert str(memory) in outcome.reason and "changed while the night ran" in outcome.reason
    assert watcher.stages == ["harvest", "rollouts"]  # stopped as the next stage began
    assert outcome.failed_stage == "round1.reflect_skill"
    assert outcome.run_dir is not None
    assert json.loads((outcome.run_dir / "run.json").read_text())["resumable"] is True
    again = await run_night(cfg, project=setup.project)
    assert again.status is RunStatus.COMPLETE and again.run_dir == outcome.run_dir
