"""``program``: a checker command scores what an attempt left in its workspace.

The command comes from the item's ``checker`` field or the config's ``checker`` option: a
string split like a shell would (no shell runs it) or a list. ``{python}`` (this
interpreter), ``{data_dir}`` (the dataset directory) and ``{workspace}`` are substituted.
It runs with the workspace as its directory, a minimal environment (``PATH``, ``LANG``, a
scratch ``HOME``, ``SKILLOPT_ITEM`` = a JSON file holding the item, ``SKILLOPT_WORKSPACE``)
and a timeout after which its whole process group is killed.

Score: exit code 0 passes (hard 1), any other code fails; the last line of stdout, when it
is a number in 0..1, is the soft score (else soft = hard); the rest of stdout is the
feedback the analysts read. A checker that times out or cannot start scores 0 with the
reason said.

Network: with ``isolate_network = "auto"`` (default) the checker runs in a private network
namespace (``unshare -rn``: only an unconfigured loopback) when the machine allows it; where
it does not, isolating the checker is the checker's own responsibility. ``"require"`` makes
a machine without it an error; ``"off"`` runs the checker as is.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import anyio

from skillopt.atomicio import atomic_write_text
from skillopt.backends.cli.process import run_process
from skillopt.errors import BackendError, ConfigError, DataError
from skillopt.logging import get_logger
from skillopt.redact import sanitize
from skillopt.trainer.scorers.base import ScoreContext, Verdict

__all__ = [
    "CheckOutcome",
    "NetworkIsolation",
    "ProgramScorer",
    "checker_argv",
    "network_prefix",
    "verdict_from_check",
]

_log = get_logger(__name__)

_FEEDBACK_CHARS = 1500
_UNSHARE = ("unshare", "--user", "--map-root-user", "--net")
_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_probe: dict[str, bool] = {}


class NetworkIsolation(StrEnum):
    AUTO = "auto"  # a private network namespace when the machine allows it
    REQUIRE = "require"  # refuse to run a checker without one
    OFF = "off"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckOutcome:
    returncode: int | None  # None: it did not finish (timeout) or did not start
    stdout: str
    stderr: str
    problem: str = ""  # why there is no exit code


def checker_argv(command: str | Sequence[str], substitutions: Mapping[str, str]) -> list[str]:
    """The checker's argv with ``{name}`` placeholders substituted (after splitting, so a
    substituted path with spaces stays one argument)."""
    parts = shlex.split(command) if isinstance(command, str) else [str(p) for p in command]
    if not parts:
        raise DataError("the checker command is empty")
    out = []
    for part in parts:
        for name, value in substitutions.items():
            part = part.replace("{" + name + "}", value)
        out.append(part)
    return out


def verdict_from_check(outcome: CheckOutcome) -> Verdict:
    """Exit code 0 passes; stdout's last line, when a number in 0..1, is the soft score."""
    lines = [line.strip() for line in outcome.stdout.splitlines() if line.strip()]
    if outcome.returncode is None:
        return Verdict(
            hard=0.0,
            soft=0.0,
            reason=f"checker_failed: {outcome.problem}",
            check=f"checker: {outcome.problem}",
        )
    hard = 1.0 if outcome.returncode == 0 else 0.0
    soft = hard
    if lines:
        try:
            value = float(lines[-1])
        except ValueError:
            value = -1.0
        if 0.0 <= value <= 1.0:
            soft = value
            lines = lines[:-1]
    feedback = sanitize("\n".join(lines))[-_FEEDBACK_CHARS:]
    if not feedback and hard == 0.0:
        feedback = sanitize(outcome.stderr.strip())[-_FEEDBACK_CHARS:]
    return Verdict(
        hard=hard,
        soft=soft,
        reason="" if hard else f"check_failed: exit {outcome.returncode}: {feedback}",
        check=f"checker exit {outcome.returncode}, score {soft:.2f}"
        + (f": {feedback}" if feedback else ""),
        extras={"checker_exit": outcome.returncode},
    )


async def _unshare_works() -> bool:
    if "ok" not in _probe:
        found = shutil.which(_UNSHARE[0])
        ok = False
        if found is not None:
            try:
                done = await anyio.run_process([found, *_UNSHARE[1:], "true"], check=False)
                ok = done.returncode == 0
            except OSError:
                ok = False
        _probe["ok"] = ok
        if not ok:
            _log.info("checker_network_not_isolated", why="unshare -rn is not permitted here")
    return _probe["ok"]


async def network_prefix(mode: NetworkIsolation) -> list[str]:
    """The argv prefix that takes the network away from the checker (may be empty)."""
    if mode is NetworkIsolation.OFF:
        return []
    if await _unshare_works():
        return list(_UNSHARE)
    if mode is NetworkIsolation.REQUIRE:
        raise ConfigError(
            "isolate_network = 'require' but this machine does not allow a private network "
            "namespace (unshare -rn)",
            key="env.options.isolate_network",
        )
    return []


@dataclass(frozen=True, slots=True)
class ProgramScorer:
    name: ClassVar[str] = "program"
    checker: str | tuple[str, ...] = ""  # the default when an item has no "checker"
    data_dir: str = ""
    timeout_s: float = 60.0
    isolate_network: NetworkIsolation = NetworkIsolation.AUTO

    async def score(self, reply: str, item: Mapping[str, Any], ctx: ScoreContext) -> Verdict:
        if ctx.workspace is None or ctx.rollout_dir is None:
            raise DataError("the program scorer needs the attempt's workspace")
        command = item.get("checker") or self.checker
        if not isinstance(command, str | list | tuple) or not command:
            raise DataError(
                f"item {item.get('id')!r}: needs a 'checker' command (or options.checker)"
            )
        scratch = ctx.rollout_dir / "checker"
        (scratch / "home").mkdir(parents=True, exist_ok=True)
        item_file = scratch / "item.json"
        atomic_write_text(item_file, json.dumps(dict(item), sort_keys=True, default=str))
        argv = checker_argv(
            command,
            {"python": sys.executable, "data_dir": self.data_dir, "workspace": str(ctx.workspace)},
        )
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), *_SYSTEM_PATH]),
            "LANG": "C.UTF-8",
            "HOME": str(scratch / "home"),
            "SKILLOPT_ITEM": str(item_file),
            "SKILLOPT_WORKSPACE": str(ctx.workspace),
        }
        prefix = await network_prefix(self.isolate_network)
        try:
            done = await run_process(
                [*prefix, *argv],
                cwd=ctx.workspace,
                env=env,
                time_limit=self.timeout_s,
                max_output_bytes=256 * 1024,
                member="checker",
            )
        except BackendError as exc:
            outcome = CheckOutcome(returncode=None, stdout="", stderr="", problem=str(exc))
        else:
            outcome = CheckOutcome(
                returncode=done.returncode, stdout=done.stdout, stderr=done.stderr
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # the item (expected values) goes too
        return verdict_from_check(outcome)
