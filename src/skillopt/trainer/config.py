"""Trainer configuration: TOML files with ``base = "..."`` inheritance and ``--set`` overrides.

Every section is a frozen pydantic model with ``extra="forbid"``, so a misspelt key is an error
that names its dotted path instead of being silently dropped. Secrets are never stored here:
backends reference their keys by environment-variable name in the pool config file.
"""

from __future__ import annotations

import tomllib
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillopt.config import config_error
from skillopt.errors import ConfigError
from skillopt.executor.settings import ExecutorSettings
from skillopt.gate import GateConfig, GateMetric
from skillopt.trainer.dataset import DataSection

__all__ = [
    "BackendKind",
    "BackendSection",
    "EnvSection",
    "EvaluationSection",
    "GateMetric",
    "LrControl",
    "LrScheduler",
    "OptimizerSection",
    "PairPolicy",
    "ReflectSection",
    "TrainSection",
    "TrainerConfig",
    "UpdateMode",
    "load_trainer_config",
    "parse_override",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpdateMode(StrEnum):
    PATCH = "patch"  # ranked edits applied to the text
    REWRITE = "rewrite_from_suggestions"  # ranked edits handed to one rewrite call
    FULL_REWRITE = "full_rewrite"  # each analyst writes a whole skill; merges combine them


class LrScheduler(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


class PairPolicy(StrEnum):
    MIXED = "mixed"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


class LrControl(StrEnum):
    FIXED = "fixed"  # the schedule sets the budget
    AUTONOMOUS = "autonomous"  # the optimizer decides each step (schedule value as fallback)


class BackendKind(StrEnum):
    DEMO = "demo"  # the bundled deterministic QA world model (offline)
    POOL = "pool"  # a BackendPool built from a pool config file


class TrainSection(_Section):
    num_epochs: int = Field(default=2, ge=1)
    train_size: int = Field(default=0, ge=0)  # 0 = derive from the split
    batch_size: int = Field(default=20, gt=0)
    accumulation: int = Field(default=1, gt=0)
    seed: int = 42


class ReflectSection(_Section):
    minibatch_size: int = Field(default=4, gt=0)
    merge_batch_size: int = Field(default=4, ge=2)
    failure_only: bool = False
    max_trajectory_chars: int = Field(default=2000, gt=0)
    skill_aware: bool = False  # execution lapses become appendix reminders, not rule edits
    consolidate_threshold: int = Field(default=0, ge=0)  # compact the appendix past N notes


class OptimizerSection(_Section):
    learning_rate: int = Field(default=4, ge=1)  # max edits per step
    min_learning_rate: int = Field(default=2, ge=0)
    lr_scheduler: LrScheduler = LrScheduler.COSINE
    lr_control: LrControl = LrControl.FIXED
    update_mode: UpdateMode = UpdateMode.PATCH
    use_slow_update: bool = True
    slow_update_samples: int = Field(default=10, ge=1)
    slow_update_gated: bool = False
    pair_policy: PairPolicy = PairPolicy.MIXED
    use_meta_skill: bool = True

    @model_validator(mode="after")
    def _min_below_max(self) -> OptimizerSection:
        if self.min_learning_rate > self.learning_rate:
            raise ValueError("min_learning_rate must not exceed learning_rate")
        return self


class EvaluationSection(_Section):
    sel_env_num: int = Field(default=0, ge=0)  # 0 = the whole val split
    test_env_num: int = Field(default=0, ge=0)
    eval_test: bool = True


_OLD_GATE_KEYS = {
    "use_gate": "mode",
    "gate_metric": "metric",
    "mixed_weight": "mixed_weight",
    "gate_confidence": "confidence",
    "gate_samples": "samples_per_task",
    "gate_max_samples": "max_samples_per_task",
    "gate_confirm_samples": "confirm_samples",
    "gate_min_delta": "min_delta",
}


def _old_gate_key(parts: list[str], value: Any) -> tuple[list[str], Any]:
    """``evaluation.gate_*`` (and ``evaluation.use_gate``) in the ``[gate]`` table, with a
    deprecation warning; any other key as it is."""
    if len(parts) != 2 or parts[0] != "evaluation" or parts[1] not in _OLD_GATE_KEYS:
        return parts, value
    new = _OLD_GATE_KEYS[parts[1]]
    if new == "mode" and isinstance(value, bool):
        value = "strict" if value else "off"
    warnings.warn(
        f"evaluation.{parts[1]} is deprecated: use gate.{new} (the [gate] table)",
        FutureWarning,
        stacklevel=4,
    )
    return ["gate", new], value


def _lift_old_gate_keys(data: dict[str, Any]) -> dict[str, Any]:
    """One config layer with its ``evaluation.gate_*`` keys moved into ``[gate]``."""
    evaluation = data.get("evaluation")
    if not isinstance(evaluation, dict) or not set(evaluation) & set(_OLD_GATE_KEYS):
        return data
    out = {**data, "evaluation": dict(evaluation)}
    gate = dict(out.get("gate") or {})
    for key in [k for k in evaluation if k in _OLD_GATE_KEYS]:
        (_, new), value = _old_gate_key(["evaluation", key], out["evaluation"].pop(key))
        if new in gate:
            raise ConfigError(
                f"set twice: as evaluation.{key} and as gate.{new}", key=f"gate.{new}"
            )
        gate[new] = value
    out["gate"] = gate
    return out


class EnvSection(_Section):
    # qa | qa_exec (an agent CLI from the pool config answers) | an installed entry point of
    # the "skillopt.environments" group | "package.module:factory" (envs/registry.py)
    name: str = "qa"
    data_dir: str = ""  # holds train.jsonl / val.jsonl / test.jsonl; "" = bundled synthetic set
    skill_init: str = ""  # "" = start from an empty skill (explicitly, not by accident)
    limit: int = Field(default=0, ge=0)  # truncate every split (0 = no limit)
    rollout_timeout_s: float = Field(default=60.0, gt=0)
    max_output_tokens: int = Field(default=512, gt=0)
    exec_member: str = ""  # qa_exec: the CLI member (by name) of backend.pool_config
    keep_workspace: bool = False  # qa_exec: keep each rollout's workspace on disk
    options: dict[str, Any] = Field(default_factory=dict)  # your own environment's settings
    data: DataSection = Field(default_factory=DataSection)  # layout and field names (dataset.py)


class BackendSection(_Section):
    kind: BackendKind = BackendKind.DEMO
    pool_config: str = ""  # TOML file for kind = "pool"
    demo_latency_s: float = Field(default=0.0, ge=0.0)
    optimizer_timeout_s: float = Field(default=300.0, gt=0)
    optimizer_max_output_tokens: int = Field(default=8192, gt=0)
    max_concurrency: int = Field(default=32, gt=0)  # kind = "demo": the demo member's limit


class TrainerConfig(_Section):
    out_root: str = "outputs/train"
    train: TrainSection = TrainSection()
    reflect: ReflectSection = ReflectSection()
    optimizer: OptimizerSection = OptimizerSection()
    evaluation: EvaluationSection = EvaluationSection()
    # the paired gate of every step and the final promotion: the one set of defaults the
    # night's [gate] has too; configs/trainer/base.toml carries the trainer's own choices
    gate: GateConfig = GateConfig()
    env: EnvSection = EnvSection()
    backend: BackendSection = BackendSection()
    executor: ExecutorSettings = ExecutorSettings()  # where rollouts run (local, or Ray)

    @model_validator(mode="before")
    @classmethod
    def _gate_table(cls, data: Any) -> Any:
        """Old ``evaluation.gate_*`` keys lifted into ``[gate]`` (a partial table completes
        from :class:`GateConfig`'s defaults, the night's too)."""
        if not isinstance(data, dict):
            return data
        return _lift_old_gate_keys(data)

    @model_validator(mode="after")
    def _gate_mode(self) -> TrainerConfig:
        if self.gate.mode == "greedy":
            raise ValueError('gate.mode: the trainer\'s gate is "strict" or "off"')
        return self

    def redacted_dump(self) -> dict[str, Any]:
        """A JSON-ready dump safe to persist (the model holds no secrets; strings redacted)."""
        from skillopt.redact import redact_obj

        dumped: dict[str, Any] = redact_obj(self.model_dump(mode="json"))
        return dumped


_BASE_KEY = "base"


def _deep_merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    out = dict(parent)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_layers(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in (*seen, resolved))
        raise ConfigError(f"inheritance cycle: {chain}", key=_BASE_KEY, source=str(path))
    try:
        data = tomllib.loads(resolved.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError("file not found", source=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"unreadable: {exc}", source=str(path)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source=str(path)) from exc
    data = _lift_old_gate_keys(data)
    base = data.pop(_BASE_KEY, None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError("must be a relative or absolute file path", key=_BASE_KEY)
    parent = _read_layers(resolved.parent / base, (*seen, resolved))
    return _deep_merge(parent, data)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b=value``; the value is read as a TOML literal, else kept as a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override must look like section.key=value, got {text!r}")
    raw = raw.strip()
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def _set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError("is not a section", key=".".join(parts[:-1]))
        node = child
    node[parts[-1]] = value


def load_trainer_config(
    path: str | Path, *, overrides: list[str] | tuple[str, ...] = ()
) -> TrainerConfig:
    """Load ``path`` (with its ``base`` chain), apply ``--set`` overrides, validate.

    Relative ``env.data_dir``, ``env.skill_init`` and ``backend.pool_config`` are resolved
    against the directory of the file that is loaded (the leaf).
    """
    source = Path(path)
    data = _read_layers(source, ())
    origins: dict[str, str] = {}
    for item in overrides:
        parts, value = _old_gate_key(*parse_override(item))
        _set_path(data, parts, value)
        origins[".".join(parts)] = f"--set {item}"
    try:
        cfg = TrainerConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, data, str(source), origins) from None
    return _resolve_paths(cfg, source.resolve().parent)


def _resolve(value: str, root: Path) -> str:
    if not value:
        return value
    candidate = Path(value).expanduser()
    return str(candidate if candidate.is_absolute() else (root / candidate).resolve())


def _resolve_paths(cfg: TrainerConfig, root: Path) -> TrainerConfig:
    env = cfg.env.model_copy(
        update={
            "data_dir": _resolve(cfg.env.data_dir, root),
            "skill_init": _resolve(cfg.env.skill_init, root),
        }
    )
    backend = cfg.backend.model_copy(
        update={"pool_config": _resolve(cfg.backend.pool_config, root)}
    )
    return cfg.model_copy(update={"env": env, "backend": backend})
