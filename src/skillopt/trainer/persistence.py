"""The run directory: every file the trainer writes, written atomically, read strictly.

Layout (``NNNN`` = global step, ``EE`` = epoch)::

    config.json  runtime_state.json  history.json  best_skill.md  summary.json  timing.json
    skills/skill_vNNNN.md            the skill after step NNNN (never rewritten afterwards)
    selection_eval_baseline/results.json
    steps/step_NNNN/[batch_K/]rollout/results.json, [batch_K/]patches/minibatch_*.json,
        merged_patch.json, ranked_edits.json, candidate_skill.md, edit_apply_report.json,
        selection_eval/results.json, trajectory_digest.json, step_record.json, timing.json
    slow_update/epoch_EE/..., meta_skill/epoch_EE/..., final_selection_eval/, test_eval*/

``timing.json`` files hold wall-clock figures and pool latency; every other file depends only
on the configuration and the model's replies, so two runs with the same replies are
byte-identical apart from them. A state file that exists but cannot be parsed or validated
raises :class:`CorruptStateError` naming it; the run never silently restarts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillopt.atomicio import (
    atomic_write_text,
    dumps_json,
    dumps_json_list,
    fsync_dir,
    sweep_temp_files,
)
from skillopt.errors import CorruptStateError
from skillopt.redact import redact_obj
from skillopt.run_files import RunFiles

__all__ = ["RunDir", "RunState", "StepBufferEntry"]

STATE_VERSION = 1


class StepBufferEntry(BaseModel):
    """What later prompts of the same epoch learn about an earlier step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    action: str
    n_total: int
    n_fail: int
    failure_patterns: list[dict[str, Any]] = []
    score_before: float | None = None
    score_after: float | None = None
    rejected_edits: list[str] = []


class RunState(BaseModel):
    """Everything needed to continue a run after the last completed step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = STATE_VERSION
    last_completed_step: int = 0
    total_steps: int  # schedule horizon fixed at the first start
    current_skill_path: str
    # The best skill's own file (never rewritten); best_skill.md is a copy published from it
    # after each state save, so the two cannot disagree after a crash between writes.
    best_skill_path: str = "best_skill.md"
    current_score: float
    best_score: float
    best_step: int = 0
    current_origin: str = "initial_skill"
    best_origin: str = "initial_skill"
    baseline_hash: str
    baseline_score: float
    selection_cache: dict[str, tuple[float, float]] = Field(default_factory=dict)
    step_buffer: list[StepBufferEntry] = []
    step_buffer_epoch: int = 0
    meta_skill: str = ""
    epochs_closed: list[int] = []


class RunDir(RunFiles):
    """Paths and strict I/O of one run directory."""

    def __init__(self, root: str | Path) -> None:
        # Absolute, so a path built from it is never joined onto the root a second time.
        super().__init__(Path(root).expanduser().absolute())
        # Step records as written, by identity (the record is kept, so an id is never
        # reused): a record is final once persisted, and history.json repeats every one.
        self._record_texts: dict[int, tuple[dict[str, Any], str]] = {}
        self._unsynced_dirs: set[Path] = set()

    # -- paths ----------------------------------------------------------------------------

    def step_dir(self, step: int) -> Path:
        return self.root / "steps" / f"step_{step:04d}"

    def skill_path(self, step: int) -> Path:
        return self.root / "skills" / f"skill_v{step:04d}.md"

    def epoch_dir(self, kind: str, epoch: int) -> Path:
        return self.root / kind / f"epoch_{epoch:02d}"

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # -- generic I/O ----------------------------------------------------------------------

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(self.root)

    def put_text(self, target: Path, text: str) -> None:
        """Atomic as every write; the directory's fsync, which makes the rename itself
        survive a power cut, waits for :meth:`sync_dirs` (one per directory, not per file)."""
        atomic_write_text(target, text, sync_dir=False)
        self._unsynced_dirs.add(target.parent)

    def sync_dirs(self) -> None:
        """Make every write since the last call durable, renames included. Called before
        the state that says a step is done is saved, so a power cut never leaves a state
        naming files it lost, and at the end of the run."""
        for directory in sorted(self._unsynced_dirs):
            fsync_dir(directory)
        self._unsynced_dirs.clear()

    def read_json_opt(self, path: Path) -> Any | None:
        return self.read_json(path) if path.exists() else None

    def read_text(self, rel_or_abs: str | Path) -> str:
        path = Path(rel_or_abs)
        path = path if path.is_absolute() else self.root / path
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CorruptStateError(str(path), f"unreadable skill file ({exc})") from exc

    # -- state ----------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        return self.root / "runtime_state.json"

    @property
    def history_path(self) -> Path:
        return self.root / "history.json"

    def load_state(self) -> RunState | None:
        raw = self.read_json_opt(self.state_path)
        if raw is None:
            return None
        try:
            state = RunState.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise CorruptStateError(str(self.state_path), f"{where}: {first['msg']}") from exc
        if state.version != STATE_VERSION:
            raise CorruptStateError(str(self.state_path), f"unknown version {state.version}")
        return state

    def save_state(self, state: RunState) -> None:
        """Save the state (after everything written before it is durable), then publish
        ``best_skill.md`` from the file the state names."""
        self.sync_dirs()
        self.write_json(self.state_path, state.model_dump(mode="json"))
        self.sync_dirs()
        self.publish_best(state)

    def publish_best(self, state: RunState) -> None:
        """Make ``best_skill.md`` a copy of the state's best skill file (when they differ)."""
        best = self.root / "best_skill.md"
        source = self.root / state.best_skill_path
        if source == best:
            return
        text = self.read_text(state.best_skill_path)
        if not best.exists() or best.read_text(encoding="utf-8") != text:
            self.write_text(best, text)

    def load_history(self) -> list[dict[str, Any]]:
        raw = self.read_json_opt(self.history_path)
        if raw is None:
            return []
        if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
            raise CorruptStateError(str(self.history_path), "expected a list of step records")
        return raw

    def record_json(self, record: dict[str, Any]) -> str:
        """``record`` as :meth:`write_json` writes it (redacted), serialized once per record."""
        hit = self._record_texts.get(id(record))
        if hit is None or hit[0] is not record:
            hit = (record, dumps_json(redact_obj(record)))
            self._record_texts[id(record)] = hit
        return hit[1]

    def save_step_record(self, step: int, record: dict[str, Any]) -> None:
        self.put_text(self.step_dir(step) / "step_record.json", self.record_json(record))

    def save_history(self, history: list[dict[str, Any]]) -> None:
        """The same bytes as ``write_json(history_path, history)``, without serializing the
        earlier steps' records again after every step."""
        text = dumps_json_list(self.record_json(record) for record in history)
        self.put_text(self.history_path, text)
