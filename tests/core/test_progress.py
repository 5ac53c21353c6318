"""The one progress display: status line, stage counts, notes, kept or replaced stage lines."""

from __future__ import annotations

import io
import re

from skillopt.progress import TtyProgress, terminal_progress
from skillopt_sleep.night_progress import LogProgress, default_progress


def screen(text: str) -> list[str]:
    """The lines a terminal shows: each line's text after its last carriage return."""
    return [line.rsplit("\r", 1)[-1].removeprefix("\x1b[2K") for line in text.split("\n")]


def test_night_stages_keep_their_line_and_notes_are_indented() -> None:
    out = io.StringIO()
    progress = TtyProgress(out, min_interval=0.0, keep_stage_lines=True, note_prefix="  ")
    progress.stage("mine")
    progress.calls_planned(2)
    progress.call_done(ok=True, stage="mine")
    progress.call_done(ok=False, stage="mine")
    progress.note("mined 3 tasks")
    progress.stage("baseline")
    progress.close()
    lines = screen(out.getvalue())
    assert lines[0] == "  mined 3 tasks"
    assert re.fullmatch(r"\[mine\] calls 2/2 \(mine 2\)  errors 1  \d+s", lines[1])
    assert re.fullmatch(r"\[baseline\] calls 0  \d+s", lines[2])  # the last stage's line stays
    assert lines[3:] == [""]


def test_cache_hits_are_shown_apart_from_model_calls() -> None:
    out = io.StringIO()
    progress = TtyProgress(out, min_interval=0.0, keep_stage_lines=True)
    progress.stage("baseline")
    progress.calls_planned(3)
    progress.call_done(ok=True)
    progress.call_done(ok=True, cached=True)
    progress.call_done(ok=True, cached=True)
    progress.close()
    assert re.fullmatch(r"\[baseline\] calls 1/1  cache hits 2  \d+s", screen(out.getvalue())[0])


def test_trainer_steps_replace_each_other() -> None:
    out = io.StringIO()
    progress = TtyProgress(out, min_interval=0.0)
    progress.stage("step 1/2 epoch 1")
    progress.call_done(stage="rollout")
    progress.stage("step 2/2 epoch 1")
    progress.close()
    assert "\n" not in out.getvalue()
    assert out.getvalue().endswith("\r\x1b[2K")


def test_off_a_terminal() -> None:
    assert terminal_progress(io.StringIO()) is None
    assert isinstance(default_progress(io.StringIO()), LogProgress)


def test_a_warning_logged_mid_stage_gets_its_own_line_above_the_status() -> None:
    from skillopt.logging import configure_logging, get_logger

    out = io.StringIO()
    configure_logging(level="WARNING", json=False, stream=out)
    try:
        progress = TtyProgress(out, min_interval=0.0, keep_stage_lines=True)
        progress.stage("rollouts")
        progress.calls_planned(4)
        progress.call_done(ok=True, stage="rollout")
        get_logger("skillopt.backends.pool").warning("pool.retry", member="m", attempt=2)
        progress.call_done(ok=True, stage="rollout")
        progress.close()
    finally:
        configure_logging(json=True)
    lines = screen(out.getvalue())
    [warning] = [line for line in lines if "pool.retry" in line]
    assert "[rollouts]" not in warning and "[warning" in warning
    assert re.fullmatch(r"\[rollouts\] calls 2/4 \(rollout 2\)  eta \d+s  \d+s", lines[-2])


async def test_the_line_ticks_during_a_slow_call_and_names_what_it_waits_on() -> None:
    """A call the server answers after 1.5 s: the line is redrawn while it waits (not only
    when a call ends), with the calls in flight, the seconds since the last answer and
    the member waited on; then it reads as before."""
    import anyio

    from skillopt.backends.base import CompletionRequest, Role
    from skillopt.backends.pool import BackendPool
    from skillopt.config import PoolConfig
    from skillopt.progress import keep_ticking
    from skillopt_sleep.night_progress import find_in_flight
    from support.fake_model_server import FakeModelServer

    out = io.StringIO()
    progress = TtyProgress(out, min_interval=0.0)
    with FakeModelServer(latency=1.5) as server:
        cfg = PoolConfig.model_validate(
            {
                "members": [{"kind": "openai", "name": "slow-1", "base_url": server.url("s"),
                             "model": "m"}],
                "roles": {"target": ["slow-1"], "optimizer": ["slow-1"]},
            }
        )  # fmt: skip
        async with BackendPool.from_config(cfg) as pool:
            in_flight = find_in_flight(pool)
            assert in_flight is not None and in_flight() == (0, "", 0.0)
            progress.watch(in_flight)
            progress.stage("judge")
            progress.calls_planned(1)
            async with anyio.create_task_group() as group:
                group.start_soon(keep_ticking, progress)
                await pool.complete(CompletionRequest(role=Role.TARGET, prompt="hi"))
                group.cancel_scope.cancel()
            progress.call_done(ok=True)
    frames = [f.removeprefix("\x1b[2K") for f in out.getvalue().split("\r") if f.strip()]
    waiting = [f for f in frames if "in flight" in f]
    assert waiting, frames
    assert re.fullmatch(
        r"\[judge\] calls 0/1  1s  in flight 1, last answer 1s ago, waiting on slow-1 \(1s\)",
        waiting[0],
    )
    assert re.fullmatch(r"\[judge\] calls 1/1  \ds", frames[-1])  # the answer came: no wait


def test_a_tick_redraws_at_most_once_a_second() -> None:
    out = io.StringIO()
    progress = TtyProgress(out, min_interval=0.0)
    progress.stage("judge")
    drawn = out.getvalue()
    progress.tick()  # drawn a moment ago: nothing to move yet
    assert out.getvalue() == drawn
