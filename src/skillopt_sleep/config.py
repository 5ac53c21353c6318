"""Sleep settings: ``~/.config/skillopt/sleep.toml`` + env + flags, validated strictly.

Precedence is flags > env (``SKILLOPT_SLEEP__SECTION__KEY``) > file > defaults; loading
goes through :func:`skillopt.config.load_toml_model`, so every problem is a
:class:`~skillopt.errors.ConfigError` naming the key path. The ``[pool]`` section is the
shared :class:`~skillopt.config.PoolConfig`; ``[daemon]`` is
:class:`~skillopt_sleep.daemon.settings.DaemonSettings`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from skillopt.config import (
    POOL_ENV_PREFIX,
    PoolConfig,
    StrictModel,
    load_toml_model,
    redacted_dump,
)
from skillopt.executor.settings import ExecutorSettings
from skillopt.gate.config import GateConfig
from skillopt_sleep.daemon.settings import DaemonSettings

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ENV_PREFIX",
    "MANAGED_SKILL",
    "BudgetSettings",
    "NightSettings",
    "RetentionSettings",
    "SleepConfig",
    "SourceKindName",
    "SourcesSettings",
    "config_file",
    "load_sleep_config",
    "managed_skill_name",
]

DEFAULT_CONFIG_PATH = Path("~/.config/skillopt/sleep.toml")
ENV_PREFIX = "SKILLOPT_SLEEP__"
# The learned skill's name before each project had its own: one file every project shared
# (the migration reads it; see skillopt_sleep.skills.managed).
MANAGED_SKILL = "skillopt-sleep-learned"
_SLUG = re.compile(r"[^a-z0-9]+")


def managed_skill_name(project: Path) -> str:
    """The project's own learned skill: ``skillopt-sleep-learned-<name>-<hash>``, the
    name made safe (lowercase, digits, hyphens) and short enough for an agent's 64-char
    limit, the hash of the project's real path telling apart two projects of one name."""
    real = os.path.realpath(os.path.expanduser(project))
    slug = _SLUG.sub("-", Path(real).name.lower()).strip("-")[:24].strip("-") or "root"
    digest = hashlib.sha256(real.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{MANAGED_SKILL}-{slug}-{digest}"


SourceKindName = Literal[
    "claude_code", "codex", "copilot", "copilot_cli", "cursor", "pi", "opencode", "auto"
]


def _default_sources() -> list[SourceKindName]:
    return ["claude_code", "codex"]


class SourcesSettings(StrictModel):
    """Where transcripts are read from (defaults: docs/harvest-mine-adopt.md).

    ``kinds`` names the agents to read; ``auto`` adds every agent whose sessions exist on
    this machine. Each agent's location has its own key.
    """

    kinds: list[SourceKindName] = Field(default_factory=_default_sources, min_length=1)
    claude_home: Path = Path("~/.claude")
    codex_home: Path = Path("~/.codex")
    copilot_cli_home: Path = Path("~/.copilot")
    cursor_home: Path = Path("~/.cursor")
    pi_home: Path | None = None  # None = $PI_CODING_AGENT_DIR's parent, or ~/.pi
    pi_session_dirs: list[Path] = Field(default_factory=list)  # pi --session-dir folders
    vscode_user_dirs: list[Path] = Field(default_factory=list)  # [] = every VS Code flavour's
    opencode_db: Path | None = None  # None = $OPENCODE_DB, or every opencode*.db of its data dir
    # Until the first harvest; then the window's start stays fixed. 0 = all history.
    lookback_hours: float = Field(default=72.0, ge=0)
    # Every harvest looks back lookback_hours from now (older sessions stay pending, unread).
    rolling_window: bool = False
    max_sessions: int = Field(default=0, ge=0)  # per night (the rest wait); 0 = 3 x max_tasks

    @field_validator("kinds", mode="before")
    @classmethod
    def _one_kind_is_a_list(cls, value: Any) -> Any:
        """``kinds = "auto"`` (or ``"claude_code, codex"``) means that list."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value


class NightSettings(StrictModel):
    """What one night does."""

    max_tasks: int = Field(default=40, ge=1, le=5000)
    # Share of max_tasks kept for tasks recalled from the archive when there are new ones
    # too; capacity one kind cannot fill goes to the other.
    recall_share: float = Field(default=0.5, ge=0, le=1)
    retire_after_passes: int = Field(default=3, ge=0)  # consecutive passing nights; 0 = never
    retire_after_days: float = Field(default=30.0, ge=0)  # unseen that long; 0 = never
    dream_rollouts: int = Field(default=2, ge=1, le=16)  # K samples per train task
    # Model calls a quiet night may spend re-sampling the tasks steady the longest, so a
    # model changed under the same name is noticed (0 = off; a rubric task takes 2)
    drift_check_calls: int = Field(default=3, ge=0, le=5)
    # rollout -> reflect -> trial iterations, each on samples of its own. A round runs
    # while something still fails and the round before it kept an edit, or the model
    # answered noisily (an empty round may then be bad luck, not convergence)
    rounds: int = Field(default=3, ge=1, le=10)
    edit_budget: int = Field(default=4, ge=0, le=32)
    evolve_skill: bool = True
    evolve_memory: bool = True
    folds: int = Field(default=3, ge=2, le=10)  # cross-fitting: every task is held out once
    llm_mine: bool = True
    # A mining call's prompt plus the reply it may need, in tokens: the sessions of one
    # request are mined as one, and several requests share a call up to this bound
    mine_call_tokens: int = Field(default=8000, ge=500, le=200_000)
    test_fraction: float = Field(default=0.0, ge=0, lt=1)  # report-only tasks, never learned on
    seed: int = 42
    preferences: str = ""
    evidence: bool = True
    evidence_max_chars: int = Field(default=4000, ge=200)
    # Share of a stage's model-judge calls that may fail before the night fails there.
    max_judge_failures: float = Field(default=0.25, ge=0, le=1)
    # Opt-in: agent CLI members' calls (the replay's rollouts) run as Ray tasks.
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)

    @model_validator(mode="before")
    @classmethod
    def _replaced_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old, new in _REPLACED_NIGHT_KEYS.items():
                if old in data:
                    raise ValueError(f"night.{old} is no longer used: {new}; remove it")
        return data


_REPLACED_NIGHT_KEYS = {
    "val_fraction": "every task is now held out once per night by cross-fitting (night.folds)",
    "attribution": "every proposed edit is now gated on its own",
}


class BudgetSettings(StrictModel):
    """Per-night spend cap (0 means no cap), and how long a night waits out an outage."""

    max_calls: int = Field(default=5000, ge=0)
    max_tokens: int = Field(default=4_000_000, ge=0)
    # Seconds, in all, the night's calls may wait for a role whose every member has an
    # open circuit (for the earliest probe) before they fail; 0 = fail at once.
    outage_patience_seconds: float = Field(default=600.0, ge=0)


class RetentionSettings(StrictModel):
    """Which run directories a project keeps (see :mod:`skillopt_sleep.retention`)."""

    keep_last: int = Field(default=30, ge=0)  # the last N runs; 0 = keep every run
    keep_adopted: bool = True  # every night whose proposal was adopted, whatever its age


class SkillsSettings(StrictModel):
    """The project's own skills (``.claude/skills/*/SKILL.md`` and the like): a night
    routes each task to the skill it exercised and learns on each skill with its tasks."""

    fanout: bool = True  # false: one night, the managed skill and memory only
    roots: list[Path] = Field(default_factory=list)  # more skill folders (relative = project)
    min_tasks: int = Field(default=3, ge=2)  # a skill with fewer learnable tasks is skipped


class SleepConfig(StrictModel):
    state_dir: Path = Path("~/.local/state/skillopt-sleep")
    # live SKILL.md; default <claude_home>/skills/<managed_skill_name(project)>/SKILL.md
    skill_path: Path | None = None
    memory_path: Path | None = None  # live memory; default <project>/CLAUDE.md
    skill_roots: list[Path] = Field(default_factory=list)  # [] = see adopt_roots()
    # true: adopt an accepted night's managed skill and memory; "all": its per-skill
    # proposals (the project's own skills) too
    auto_adopt: bool | Literal["all"] = False
    # A bare `adopt` on a night with per-skill proposals: "list" them and adopt nothing
    # (exit 2) until told which (--skill NAME / --all); "all" adopts every one
    bare_adopt: Literal["list", "all"] = "list"
    sources: SourcesSettings = Field(default_factory=SourcesSettings)
    night: NightSettings = Field(default_factory=NightSettings)
    gate: GateConfig = Field(default_factory=GateConfig)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    skills: SkillsSettings = Field(default_factory=SkillsSettings)
    pool: PoolConfig | None = None
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)

    @model_validator(mode="before")
    @classmethod
    def _pool_keys_at_the_top(cls, data: Any) -> Any:
        """``[[members]]`` / ``[roles]`` pasted from an endpoints file belong under pool."""
        if isinstance(data, Mapping):
            for key in PoolConfig.model_fields:
                if key in data:
                    table = f"[[pool.{key}]]" if key == "members" else f"[pool.{key}]"
                    raise PydanticCustomError(
                        "keyed",
                        "{reason}",
                        {
                            "key": key,
                            "reason": f"unknown key: in sleep.toml the endpoint settings live "
                            f"under [pool]: write {table}",
                        },
                    )
        return data

    # -- resolved paths -------------------------------------------------------------
    def state_path(self) -> Path:
        return self.state_dir.expanduser()

    def live_skill_path(self, project: Path) -> Path:
        """``skill_path``, else the project's own learned skill under the agent's skills."""
        if self.skill_path is not None:
            return self.skill_path.expanduser()
        return self.skills_home() / managed_skill_name(project) / "SKILL.md"

    def skills_home(self) -> Path:
        """The agent's user-level skills folder (where the default learned skills live)."""
        return self.sources.claude_home.expanduser() / "skills"

    def shared_skill_path(self) -> Path | None:
        """The learned skill every project shared before each had its own, when the
        default path is in use (``None``: ``skill_path`` is set, nothing to migrate)."""
        if self.skill_path is not None:
            return None
        return self.skills_home() / MANAGED_SKILL / "SKILL.md"

    def live_memory_path(self, project: Path) -> Path:
        """``memory_path``, else the project's ``CLAUDE.md``, or its ``AGENTS.md`` when only
        that one exists (what Codex, Cursor and Copilot read)."""
        if self.memory_path is not None:
            return _under(project, self.memory_path)
        claude, agents = project / "CLAUDE.md", project / "AGENTS.md"
        return agents if agents.is_file() and not claude.is_file() else claude

    def adopt_roots(self, project: Path) -> list[Path]:
        """The only folders ``adopt`` may write under: ``skill_roots`` as configured
        (relative = under the project), else what the default paths need: the live skill's
        skills folder and the project (where the default memory file lives)."""
        if self.skill_roots:
            return [_under(project, root) for root in self.skill_roots]
        return [self.live_skill_path(project).parent.parent, project]

    def snapshot(self) -> dict[str, Any]:
        """The redacted config as JSON data (for run.json)."""
        return redacted_dump(self)

    def fingerprint(self) -> str:
        """A hash of what decides a night's result (a resumed night must match it)."""
        data = self.model_dump(mode="json", include={"night", "gate", "skill_path", "memory_path"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _under(project: Path, path: Path) -> Path:
    """``path`` with ``~`` expanded; a relative one is taken under the project."""
    path = path.expanduser()
    return path if path.is_absolute() else project / path


def config_file(path: Path | None) -> Path | None:
    """The file a command reads: ``path``, else the default file when it exists."""
    if path is not None:
        return path
    default = DEFAULT_CONFIG_PATH.expanduser()
    return default if default.is_file() else None


def load_sleep_config(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    override_sources: Mapping[str, str] | None = None,
) -> SleepConfig:
    """Load the sleep config. ``path=None`` reads the default file when it exists;
    ``override_sources`` names the flag behind an override (for errors)."""
    path = config_file(path)
    return load_toml_model(
        path,
        SleepConfig,
        env_prefix=ENV_PREFIX,
        overrides=overrides,
        environ=environ,
        env_aliases={POOL_ENV_PREFIX: f"{ENV_PREFIX}POOL__"},
        override_sources=override_sources,
    )
