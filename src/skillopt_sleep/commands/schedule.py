"""`skillopt-sleep schedule install|remove|show`: nightly runs from systemd, cron, launchd or
Windows Task Scheduler.

Shows exactly what it writes. Without ``--activate`` it only writes files and prints the
``systemctl``/``crontab``/``launchctl``/``schtasks`` commands to run; with ``--activate`` it
runs them.
``--root`` (or ``$SKILLOPT_SLEEP_SCHEDULE_ROOT``) writes somewhere else, for a look: it is
refused with ``--activate``, which would still change the real scheduler.
Exit codes: 0 ok, 1 an activation command failed, 2 refused (foreign file, bad config).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skillopt.errors import ConfigError, RefusedError, SkillOptError
from skillopt.redact import sanitize
from skillopt_sleep.commands._common import add_config_args, emit_json, refuse, setup_logging

# The config (pydantic) and the planner are imported where they are used: `schedule
# --help` builds this command's parser and must start fast.
if TYPE_CHECKING:
    from skillopt_sleep.config import SleepConfig
    from skillopt_sleep.schedule import Invocation, Kind, Plan

__all__ = [
    "COMMAND_TIMEOUT_S",
    "HELP",
    "NAME",
    "ORDER",
    "build_plan",
    "cannot_run",
    "default_kind",
    "register",
    "run",
    "shown",
]

NAME = "schedule"
HELP = (
    "Install, remove or show a nightly schedule (systemd timer or daemon, cron, launchd, "
    "Windows Task Scheduler)."
)
ORDER = 40

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2
COMMAND_TIMEOUT_S = 30.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["install", "remove", "show"])
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--systemd",
        dest="kind",
        action="store_const",
        const="systemd",
        help="systemd user units (default on Linux)",
    )
    kind.add_argument(
        "--cron", dest="kind", action="store_const", const="cron", help="a crontab line"
    )
    kind.add_argument(
        "--launchd",
        dest="kind",
        action="store_const",
        const="launchd",
        help="a launchd agent (default on macOS)",
    )
    kind.add_argument(
        "--task-scheduler",
        dest="kind",
        action="store_const",
        const="task-scheduler",
        help="a Windows Task Scheduler task and its PowerShell helper (default on Windows)",
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="systemd: one long-running daemon service instead of a per-project timer",
    )
    add_config_args(parser)
    parser.add_argument(
        "--root", type=Path, help="write the files here instead, for a look (not with --activate)"
    )
    parser.add_argument(
        "--activate", action="store_true", help="also run systemctl/crontab/launchctl"
    )


def _err(text: str) -> None:
    sys.stderr.write(f"skillopt-sleep schedule: {sanitize(text)}\n")


class _Report:
    """What the command says: lines on stdout as it goes, or (``--json``) one document at
    the end. Errors go to stderr either way."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.data: dict[str, Any] = {"files": [], "notes": [], "warnings": [], "commands": []}
        self.elsewhere = ""  # --root: the files are written there, for a look

    def say(self, text: str) -> None:
        if not self.as_json:
            sys.stdout.write(sanitize(text) + "\n")

    def file(self, path: Path, **fields: Any) -> None:
        self.data["files"].append({"path": str(path), **fields})

    def finish(self, code: int) -> int:
        if self.as_json:
            emit_json({"ok": code == EXIT_OK, "exit_code": code, **self.data})
        return code


def default_kind(platform: str | None = None) -> str:
    """The scheduler of ``platform`` (default: this machine's)."""
    platform = platform or sys.platform
    if platform == "darwin":
        return "launchd"
    return "task-scheduler" if platform.startswith("win") else "systemd"


def shown(argv: Sequence[str], kind: Kind) -> str:
    """A command as its user would type it (Windows quoting for schtasks)."""
    from skillopt_sleep.schedule import Kind

    return subprocess.list2cmdline(argv) if kind is Kind.TASK_SCHEDULER else shlex.join(argv)


def build_plan(args: argparse.Namespace) -> tuple[Plan, list[str]]:
    """The plan, and why the scheduled command could not run (install refuses then)."""
    from skillopt_sleep.config import config_file, load_sleep_config
    from skillopt_sleep.schedule import Invocation, Kind, plan

    config_path = args.config.expanduser().resolve() if args.config else None
    state_dir = args.state_dir.expanduser().absolute() if args.state_dir else None
    cfg = load_sleep_config(config_path, overrides={"state_dir": state_dir and str(state_dir)})
    name = args.kind or default_kind()
    if args.daemon and name != "systemd":
        raise ConfigError("--daemon is a systemd option", key="daemon")
    kind = Kind.SYSTEMD_DAEMON if args.daemon else Kind(name)
    project = (args.project or Path.cwd()).expanduser().resolve()
    invocation = Invocation(
        python=Path(sys.executable).absolute(),
        project=project if kind is not Kind.SYSTEMD_DAEMON or args.project else None,
        config=config_path,
        state_dir=cfg.state_path().absolute(),
        pass_state_dir=state_dir is not None,
    )
    settings = cfg.daemon
    if args.action == "remove":  # which files to remove never depends on the time
        settings = settings.model_copy(update={"cron": None, "projects": []})
    the_plan = plan(kind, settings=settings, invocation=invocation, root=args.root)
    return the_plan, cannot_run(cfg, invocation, config_file(config_path), daemon=args.daemon)


def cannot_run(
    cfg: SleepConfig, invocation: Invocation, config: Path | None, *, daemon: bool
) -> list[str]:
    """What the scheduled command checks when it starts, checked now: a unit that can only
    exit 2 every night (or a daemon that exits 2 at once) is not worth installing."""
    from skillopt_sleep.config import DEFAULT_CONFIG_PATH

    where = str(config) if config is not None else f"the defaults (no {DEFAULT_CONFIG_PATH})"
    problems = []
    if cfg.pool is None:
        problems.append(
            f"no model endpoints in {where} (a [pool] section): every scheduled night would "
            "stop with exit 2; add them first (docs/endpoints.md)"
        )
    if invocation.project is not None and not invocation.project.is_dir():
        problems.append(f"the project {invocation.project} is not a directory")
    if daemon:
        from skillopt_sleep.daemon.cron import schedule_jobs
        from skillopt_sleep.daemon.service import utc_now

        extra = [invocation.project] if invocation.project is not None else []
        try:
            schedule_jobs(cfg.daemon.with_projects(extra), now=utc_now())
        except ConfigError as exc:
            fix = ""
            if exc.key == "daemon.projects":  # nothing to schedule
                fix = (
                    f': add a [[daemon.projects]] entry (path = "/abs/path/to/project") to '
                    f"{where}, or pass --project PATH to write that project into the unit"
                )
            problems.append(f"the daemon would exit 2 at start ({exc}){fix}")
    return problems


def run(args: argparse.Namespace) -> int:
    from skillopt_sleep.schedule import ROOT_ENV

    setup_logging(args)
    out = _Report(as_json=args.json)
    try:
        if args.activate and (args.root or os.environ.get(ROOT_ENV)):
            raise RefusedError(
                f"--root (or {ROOT_ENV}) writes the files elsewhere for a look, but "
                "--activate would still change your real scheduler (systemd, crontab, launchd, "
                "Task Scheduler): leave "
                "one of them out"
            )
        the_plan, problems = build_plan(args)
        out.data.update(action=args.action, kind=str(the_plan.kind))
        out.elsewhere = str(args.root or os.environ.get(ROOT_ENV) or "")
        if args.action == "show":
            for problem in problems:
                out.data["warnings"].append(f"install would refuse: {problem}")
                _err(f"warning: install would refuse: {problem}")
            return out.finish(_show(the_plan, out))
        if args.action == "install":
            if problems:
                raise RefusedError("; ".join(problems) + "; nothing was installed")
            return out.finish(_install(the_plan, out, activate=args.activate))
        return out.finish(_remove(the_plan, out, activate=args.activate))
    except (ConfigError, RefusedError) as exc:
        return refuse(args, type(exc).__name__, f"schedule: {exc}", EXIT_REFUSED)
    except SkillOptError as exc:
        return refuse(args, type(exc).__name__, f"schedule: {exc}", EXIT_FAILED)


def _say_notes(the_plan: Plan, out: _Report) -> None:
    for note in the_plan.notes:
        out.data["notes"].append(note)
        out.say(f"note: {note}")


def _show(the_plan: Plan, out: _Report) -> int:
    for unit in the_plan.files:
        out.file(unit.path, state=str(unit.state()), content=unit.content)
        out.say(f"== {unit.path} ({unit.state()})")
        out.say(unit.content.rstrip("\n"))
    _say_notes(the_plan, out)
    _print_commands("activate with", the_plan, out, install=True)
    return EXIT_OK


def _install(the_plan: Plan, out: _Report, *, activate: bool) -> int:
    from skillopt_sleep.schedule import install

    for change in install(the_plan):
        out.file(change.path, action=change.action)
        out.say(f"{change.action}: {change.path}")
    _say_notes(the_plan, out)
    if not activate:
        _print_commands("now activate it", the_plan, out, install=True)
        return EXIT_OK
    return _activate(the_plan, out, install=True)


def _remove(the_plan: Plan, out: _Report, *, activate: bool) -> int:
    from skillopt_sleep.schedule import remove

    if not activate:
        _print_commands("first stop it (if it was activated)", the_plan, out, install=False)
    code = _activate(the_plan, out, install=False) if activate else EXIT_OK
    for change in remove(the_plan):
        out.file(change.path, action=change.action)
        out.say(f"{change.action}: {change.path}")
    for argv in () if out.elsewhere else the_plan.after_remove:
        if activate:
            out.say(f"$ {shlex.join(argv)}")
            ok = _run(list(argv)) is not None
            out.data["commands"].append({"argv": list(argv), "ran": True, "ok": ok})
            code = code if ok else EXIT_FAILED
        else:
            out.data["commands"].append({"argv": list(argv), "ran": False})
            out.say(f"then: {shlex.join(argv)}")
    return code


def _print_commands(title: str, the_plan: Plan, out: _Report, *, install: bool) -> None:
    """The commands that activate (or stop) the scheduled files. Files written elsewhere
    (``--root``) are no real units: an install or remove there says so and prints none;
    ``show`` prints what an install without ``--root`` would need."""
    from skillopt_sleep.schedule import ROOT_ENV, Kind

    if out.elsewhere and out.data["action"] != "show":
        note = (
            f"the files were {'written' if install else 'removed'} under {out.elsewhere} for "
            "a look: systemd, crontab, launchd and Task Scheduler were not changed and need no "
            "command; run "
            f"`schedule {out.data['action']}` without --root (or {ROOT_ENV}) to do it for real"
        )
        out.data["notes"].append(note)
        out.say(f"note: {note}")
        return
    if out.elsewhere:
        title = "an install without --root would then be activated with"
    out.say(f"\n{title}:")
    if the_plan.kind is Kind.CRON:
        fragment = shlex.quote(str(the_plan.files[0].path))
        marker = shlex.quote(the_plan.crontab_marker)
        keep = f"crontab -l 2>/dev/null | grep -vF -- {marker}"
        add = f"; grep -v '^#' {fragment}" if install else ""
        out.data["commands"].append({"shell": f"({keep}{add}) | crontab -", "ran": False})
        out.say(f"  ({keep}{add}) | crontab -")
        return
    commands = the_plan.activate if install else the_plan.deactivate
    if the_plan.kind is Kind.LAUNCHD and install:
        commands = [*the_plan.deactivate, *commands]
        out.say("  (the first command fails harmlessly when the agent was not loaded)")
    for argv in commands:
        out.data["commands"].append({"argv": argv, "ran": False})
        out.say(f"  {shown(argv, the_plan.kind)}")


def _activate(the_plan: Plan, out: _Report, *, install: bool) -> int:
    """Run the activation (or deactivation) commands; report the first failure."""
    from skillopt_sleep.schedule import Kind, merge_crontab, strip_crontab

    if the_plan.kind is Kind.CRON:
        existing = _read_crontab()
        if existing is None:
            return EXIT_FAILED
        if install:
            new = merge_crontab(existing, the_plan.crontab_line, the_plan.crontab_marker)
        else:
            new = strip_crontab(existing, the_plan.crontab_marker)
        ok = _run(["crontab", "-"], stdin=new) is not None
        out.data["commands"].append({"argv": ["crontab", "-"], "ran": True, "ok": ok})
        return EXIT_OK if ok else EXIT_FAILED
    if the_plan.kind is Kind.LAUNCHD and install:
        # launchd refuses to bootstrap a loaded label and would keep the old schedule:
        # unload ours first (failing when it was not loaded is fine).
        for argv in the_plan.deactivate:
            _run(argv, quiet=True)
    commands = the_plan.activate if install else the_plan.deactivate
    for argv in commands:
        out.say(f"$ {shown(argv, the_plan.kind)}")
        ok = _run(argv) is not None
        out.data["commands"].append({"argv": argv, "ran": True, "ok": ok})
        if not ok:
            return EXIT_FAILED
    return EXIT_OK


def _read_crontab() -> str | None:
    """The user's crontab ("" when they have none); None when it could not be read.

    ``crontab -l`` fails both for "no crontab for <user>" and for real errors; only the
    first may be treated as empty, or writing our merged table back would wipe theirs.
    """

    async def go() -> str | None:
        try:
            with anyio.fail_after(COMMAND_TIMEOUT_S):
                done = await anyio.run_process(["crontab", "-l"], check=False)
        except (OSError, TimeoutError) as exc:
            _err(f"crontab -l failed: {exc}")
            return None
        if done.returncode == 0:
            return done.stdout.decode()
        why = done.stderr.decode(errors="replace").strip()
        if "no crontab" in why.lower():
            return ""
        _err(f"crontab -l exited {done.returncode} ({why[:300]}); your crontab was not changed")
        return None

    result: str | None = anyio.run(go)
    return result


def _run(argv: list[str], *, stdin: str | None = None, quiet: bool = False) -> str | None:
    """Run one scheduler command with a timeout; stdout, or None on failure (``quiet``:
    without reporting the failure)."""

    async def go() -> str | None:
        try:
            with anyio.fail_after(COMMAND_TIMEOUT_S):
                done = await anyio.run_process(
                    argv, input=stdin.encode() if stdin is not None else None, check=False
                )
        except (OSError, TimeoutError) as exc:
            if not quiet:
                _err(f"{argv[0]} failed: {exc}")
            return None
        if done.returncode != 0:
            if not quiet:
                why = done.stderr.decode(errors="replace")[:500]
                _err(f"{shlex.join(argv)} exited {done.returncode}: {why}")
            return None
        return done.stdout.decode()

    result: str | None = anyio.run(go)
    return result
