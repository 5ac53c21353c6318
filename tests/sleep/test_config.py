"""The default learned skill is the project's own: a safe, short name per project path."""

from __future__ import annotations

import re
from pathlib import Path

from skillopt_sleep.config import SleepConfig, managed_skill_name


def test_two_projects_of_one_name_get_two_safe_short_names(tmp_path: Path) -> None:
    one = tmp_path / "a" / ("Proj Alpha_" * 10)
    two = tmp_path / "b" / ("Proj Alpha_" * 10)
    names = {managed_skill_name(p) for p in (one, two)}
    assert len(names) == 2
    for name in names:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and len(name) <= 64
        assert name.startswith("skillopt-sleep-learned-proj-alpha")


def test_the_default_path_is_per_project_and_a_configured_one_is_kept(tmp_path: Path) -> None:
    cfg = SleepConfig.model_validate({"sources": {"claude_home": str(tmp_path / "c")}})
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    assert cfg.live_skill_path(alpha) != cfg.live_skill_path(beta)
    assert cfg.live_skill_path(alpha).parent.parent == tmp_path / "c" / "skills"
    shared = tmp_path / "c" / "skills" / "skillopt-sleep-learned" / "SKILL.md"
    assert cfg.shared_skill_path() == shared
    fixed = SleepConfig.model_validate({"skill_path": str(tmp_path / "s" / "SKILL.md")})
    assert fixed.live_skill_path(alpha) == fixed.live_skill_path(beta)
    assert fixed.shared_skill_path() is None  # the user chose the path: nothing to migrate
