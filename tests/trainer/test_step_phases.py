"""Step phases: a rewrite never changes a protected region; legacy documents are migrated."""

from __future__ import annotations

import json
from pathlib import Path

from skillopt.backends.base import Completion, CompletionRequest
from skillopt.skilldoc import Region, learned_bullets, region_spans
from skillopt.trainer.build import build_environment
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt.trainer.demo import DemoWorld
from skillopt.trainer.loop import Trainer
from support.trainer_fakes import pool_of

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs/trainer/qa_demo.toml"
LEARNED = (
    f"{Region.LEARNED.start}\n## Learned preferences & procedures\n\n"
    f"- Cite the context's own words.\n{Region.LEARNED.end}\n"
)


def config(tmp_path: Path, skill: str, *extra: str) -> TrainerConfig:
    init = tmp_path / "SKILL.md"
    init.write_text(skill)
    return load_trainer_config(
        DEMO,
        overrides=[
            f"out_root={json.dumps(str(tmp_path / 'run'))}",
            f"env.skill_init={json.dumps(str(init))}",
            "backend.demo_latency_s=0",
            "train.num_epochs=1",
            "evaluation.eval_test=false",
            "optimizer.use_slow_update=false",
            *extra,
        ],
    )


class RewritesLearnedLines(DemoWorld):
    """The demo world, except that its rewrites also rewrite the night-learned lines."""

    async def complete(self, request: CompletionRequest) -> Completion:
        done = await super().complete(request)
        if request.stage != "rewrite":
            return done
        reply = json.loads(done.text)
        reply["new_skill"] = reply["new_skill"].replace("Cite the context's own words.", "Guess.")
        return Completion(text=json.dumps(reply), usage=done.usage, member=done.member, latency=0)


async def test_a_rewrite_keeps_the_learned_block_verbatim(tmp_path: Path) -> None:
    cfg = config(tmp_path, "# QA\n\n" + LEARNED, "optimizer.update_mode=rewrite_from_suggestions")
    async with pool_of(RewritesLearnedLines()) as pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    candidates = sorted((tmp_path / "run/steps").glob("step_*/candidate_skill.md"))
    assert candidates  # at least one rewrite became a candidate
    for path in candidates:
        text = path.read_text()
        s, e = region_spans(text, Region.LEARNED)[0]
        assert text[s:e] + "\n" == LEARNED
        assert "Guess." not in text


async def test_a_legacy_skill_is_migrated_when_read(tmp_path: Path) -> None:
    legacy = LEARNED.replace("SKILLOPT:LEARNED", "SKILLOPT-SLEEP:LEARNED")
    cfg = config(tmp_path, "# QA\n\n" + legacy)
    async with pool_of(DemoWorld()) as pool:
        await Trainer(cfg, build_environment(cfg), pool).run()
    initial = (tmp_path / "run/skills/skill_v0000.md").read_text()
    assert "SKILLOPT-SLEEP" not in initial
    assert learned_bullets(initial) == ("Cite the context's own words.",)
    best = (tmp_path / "run/best_skill.md").read_text()
    assert len(region_spans(best, Region.LEARNED)) == 1
