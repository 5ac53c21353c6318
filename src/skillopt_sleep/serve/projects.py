"""The projects of a state directory: ``<state_dir>/projects/<key>/``, each naming its own
folder in ``state.json`` (a project with no readable state is listed, with no actions)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skillopt.atomicio import read_json_object
from skillopt_sleep.rundir import RunDir

__all__ = ["Project", "find_project", "list_projects"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Project:
    key: str
    folder: Path  # <state_dir>/projects/<key>
    path: Path | None  # the project's own directory, as its state records it

    @property
    def name(self) -> str:
        return self.path.name if self.path else self.key

    def runs(self) -> list[Path]:
        return RunDir.list_runs(self.folder / "runs")

    def run(self, run_id: str) -> Path | None:
        """A run of this project by directory name (never an arbitrary path)."""
        return next((r for r in self.runs() if r.name == run_id), None)


def _project(folder: Path) -> Project:
    recorded = read_json_object(folder / "state.json").get("project")
    return Project(
        key=folder.name, folder=folder, path=Path(recorded) if isinstance(recorded, str) else None
    )


def list_projects(state_dir: Path) -> list[Project]:
    root = state_dir / "projects"
    if not root.is_dir():
        return []
    return [_project(f) for f in sorted(root.iterdir()) if f.is_dir()]


def find_project(state_dir: Path, key: str) -> Project | None:
    return next((p for p in list_projects(state_dir) if p.key == key), None)
