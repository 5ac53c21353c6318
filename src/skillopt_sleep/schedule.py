"""Render and (un)install OS schedulers for nightly runs: systemd user units, cron, launchd,
Windows Task Scheduler (:mod:`.schedule_windows`).

Pure rendering plus careful file handling; activating (``systemctl``, ``crontab``,
``launchctl``) is left to the command, which prints the commands or runs them on request.

Every file we write starts with :data:`MARKER_TEXT` and the exact ``schedule remove``
command that removes it; a file without the marker is foreign and is never
overwritten or removed. Installing twice is a no-op. Values are quoted for the consumer:
systemd's ExecStart rules (``"..."`` with C escapes, ``%%`` and ``$$``), POSIX shell via
:func:`shlex.quote` for cron (plus ``\\%``), XML escaping for launchd plists.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from datetime import time as _time
from enum import StrEnum
from importlib import resources
from pathlib import Path
from string import Template
from xml.sax.saxutils import escape as xml_escape

from skillopt.atomicio import atomic_write_bytes
from skillopt.errors import ConfigError, RefusedError
from skillopt_sleep import schedule_windows as windows
from skillopt_sleep.daemon.settings import DaemonSettings, parse_time
from skillopt_sleep.lock import project_key
from skillopt_sleep.schedule_zone import MachineTime, on_machine_clock

__all__ = [
    "EXAMPLE_PROJECT",
    "EXAMPLE_PYTHON",
    "EXAMPLE_STATE",
    "MARKER_TEXT",
    "ROOT_ENV",
    "Change",
    "FileState",
    "Invocation",
    "Kind",
    "Plan",
    "UnitFile",
    "cron_command",
    "default_root",
    "example_units",
    "install",
    "merge_crontab",
    "plan",
    "remove",
    "strip_crontab",
    "systemd_quote",
    "systemd_text",
    "write_examples",
]

MARKER_TEXT = "Managed by skillopt-sleep (schedule install)"
ROOT_ENV = "SKILLOPT_SLEEP_SCHEDULE_ROOT"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Kind(StrEnum):
    SYSTEMD = "systemd"  # oneshot service + timer per project
    SYSTEMD_DAEMON = "systemd-daemon"  # one long-running daemon service
    CRON = "cron"
    LAUNCHD = "launchd"
    TASK_SCHEDULER = "task-scheduler"  # Windows: a task and its PowerShell helper


class FileState(StrEnum):
    ABSENT = "absent"
    CURRENT = "current"  # ours, identical
    OUTDATED = "outdated"  # ours, different
    FOREIGN = "foreign"  # not written by us


@dataclass(frozen=True, kw_only=True)
class Invocation:
    """What the scheduled job runs: ``<python> -m skillopt_sleep <command> ...``."""

    python: Path
    project: Path | None
    config: Path | None
    state_dir: Path
    pass_state_dir: bool = False  # given on the command line: the scheduled command needs it
    user: str | None = None  # Task Scheduler's account; None: the signed-in user

    def argv(self, command: str, *extra: str) -> list[str]:
        args = [str(self.python), "-m", "skillopt_sleep", command, *extra]
        if self.config is not None:
            args += ["--config", str(self.config)]
        if self.pass_state_dir:
            args += ["--state-dir", str(self.state_dir)]
        if self.project is not None:
            args += ["--project", str(self.project)]
        return args


@dataclass(frozen=True, kw_only=True)
class UnitFile:
    path: Path
    content: str
    encoding: str = "utf-8"  # what the file's reader expects (Windows: a byte order mark)

    def data(self) -> bytes:
        return self.content.encode(self.encoding)

    def state(self) -> FileState:
        try:
            current = self.path.read_bytes().decode(self.encoding)
        except FileNotFoundError:
            return FileState.ABSENT
        except (OSError, UnicodeDecodeError):
            return FileState.FOREIGN
        if MARKER_TEXT not in current:
            return FileState.FOREIGN
        return FileState.CURRENT if current == self.content else FileState.OUTDATED


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The files one ``install`` writes and the commands that activate / deactivate them."""

    kind: Kind
    files: list[UnitFile]
    activate: list[list[str]]
    deactivate: list[list[str]]
    after_remove: tuple[tuple[str, ...], ...] = ()
    """Commands to run once our files are gone (e.g. ``systemctl --user daemon-reload``)."""
    crontab_line: str = ""
    crontab_marker: str = ""
    log_dirs: tuple[Path, ...] = ()
    wants_links: tuple[Path, ...] = ()
    """``systemctl enable`` symlinks; removed with our units so nothing dangles."""
    notes: tuple[str, ...] = ()
    """What the user should know about the schedule (e.g. a converted time zone)."""


# --------------------------------------------------------------------------- quoting


def _no_control(value: str, what: str) -> str:
    if _CONTROL.search(value):
        raise ConfigError(f"control characters are not allowed in {what}: {value!r}")
    return value


def systemd_quote(arg: str) -> str:
    """One ExecStart word: double-quoted, C-escaped, with specifier and variable escapes."""
    _no_control(arg, "a systemd command")
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_text(value: str) -> str:
    """Free text for Description=: no control characters, ``%`` escaped."""
    return _no_control(value, "a unit description").replace("%", "%%")


def cron_command(argv: Sequence[str]) -> str:
    """A shell command line for crontab: shlex-quoted, with cron's ``%`` escaped."""
    for arg in argv:
        _no_control(arg, "a cron command")
    return shlex.join(argv).replace("%", "\\%")


# --------------------------------------------------------------------------- rendering


def _template(name: str) -> Template:
    text = resources.files("skillopt_sleep.templates").joinpath(name).read_text(encoding="utf-8")
    return Template(text)


def default_root(kind: Kind) -> Path:
    """Where ``kind``'s files live; ``$SKILLOPT_SLEEP_SCHEDULE_ROOT`` overrides (tests)."""
    override = os.environ.get(ROOT_ENV)
    if override:
        return Path(override)
    home = Path.home()
    if kind in (Kind.SYSTEMD, Kind.SYSTEMD_DAEMON):
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        return config_home / "systemd" / "user"
    if kind is Kind.LAUNCHD:
        return home / "Library" / "LaunchAgents"
    if kind is Kind.TASK_SCHEDULER:
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "skillopt" / "schedule"
    return home / ".config" / "skillopt" / "cron"


def _daily_time(settings: DaemonSettings, project: Path | None) -> _time:
    """The daily time for ``project`` in ``daemon.timezone``; OS schedulers here support
    daily times only."""
    entry = next((p for p in settings.projects if p.path == project), None)
    key = "daemon.cron"
    if entry is not None and (entry.cron or entry.time):
        cron, time = entry.cron, entry.time
        key = f"daemon.projects.{settings.projects.index(entry)}.cron"
    else:
        cron, time = settings.cron, settings.time
    if cron is not None:
        raise ConfigError(
            "a cron expression is scheduled by the daemon only (`skillopt-sleep daemon`, or "
            "`schedule install --systemd --daemon`); for a timer, a cron line or a launchd "
            "agent set a daily time instead",
            key=key,
        )
    assert time is not None
    spec = parse_time(time)
    return _time(hour=int(spec.hour), minute=int(spec.minute), second=int(spec.second))


def _log_path(inv: Invocation, key: str) -> Path:
    return inv.state_dir / "projects" / key / "scheduled.log"


def plan(
    kind: Kind,
    *,
    settings: DaemonSettings,
    invocation: Invocation,
    root: Path | None = None,
    today: date | None = None,
    machine: tzinfo | None = None,
    now: datetime | None = None,
) -> Plan:
    """Everything ``install`` would write for ``kind``, rendered but not written.

    ``today`` (or ``now``: the entry's next night is the first after it; default the
    current time) and ``machine`` (the machine's zone; None = the process's local zone) are
    only used to convert a ``daemon.timezone`` time for cron and launchd.
    """
    base = root or default_root(kind)
    if kind is Kind.SYSTEMD_DAEMON:
        return _daemon_plan(settings, invocation, base)
    if invocation.project is None:
        raise ConfigError("a project is required for a nightly schedule", key="project")
    when = _daily_time(settings, invocation.project)
    if kind is Kind.SYSTEMD:
        return _timer_plan(settings, invocation, base, when)
    after = None if today is not None else (now or datetime.now(UTC))
    local = on_machine_clock(
        when, settings.timezone, today=today or date.today(), machine=machine, after=after
    )
    # cron and launchd start on the minute: the night waits out the jitter itself
    argv = invocation.argv("once", *_jitter_args(settings))
    if kind is Kind.CRON:
        return _cron_plan(invocation, argv, base, local)
    if kind is Kind.TASK_SCHEDULER:
        return _task_scheduler_plan(invocation, argv, base, local)
    return _launchd_plan(invocation, argv, base, local)


def _jitter_args(settings: DaemonSettings) -> tuple[str, ...]:
    return ("--jitter", str(settings.jitter_seconds)) if settings.jitter_seconds else ()


def _marker(*remove_args: str) -> str:
    """The first line of a file we write: the marker, and the command that removes it."""
    command = shlex.join(["skillopt-sleep", "schedule", "remove", *remove_args])
    return f"{MARKER_TEXT}; remove with: {_no_control(command, 'a comment')}"


def _daemon_plan(settings: DaemonSettings, invocation: Invocation, base: Path) -> Plan:
    name = "skillopt-sleep-daemon.service"
    argv = invocation.argv("daemon")
    content = _template("daemon.service.tmpl").substitute(
        marker="# " + _marker("--systemd", "--daemon"),
        exec_start=" ".join(systemd_quote(a) for a in argv),
        timeout_stop=f"{int(settings.shutdown_grace_seconds) + 15}s",
    )
    return Plan(
        kind=Kind.SYSTEMD_DAEMON,
        files=[UnitFile(path=base / name, content=content)],
        wants_links=(base / "default.target.wants" / name,),
        activate=[
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", name],
        ],
        deactivate=[["systemctl", "--user", "disable", "--now", name]],
        after_remove=(("systemctl", "--user", "daemon-reload"),),
    )


def _timer_plan(settings: DaemonSettings, invocation: Invocation, base: Path, when: _time) -> Plan:
    """A oneshot service and its timer; ``OnCalendar=`` carries the zone itself."""
    assert invocation.project is not None
    key = project_key(invocation.project)
    service, timer = f"skillopt-sleep-{key}.service", f"skillopt-sleep-{key}.timer"
    description = systemd_text(invocation.project.name or str(invocation.project))
    marker = "# " + _marker("--systemd", "--project", str(invocation.project))
    unit = _template("night.service.tmpl").substitute(
        marker=marker,
        project_comment=_no_control(str(invocation.project), "a project path"),
        timer_name=timer,
        description=description,
        exec_start=" ".join(systemd_quote(a) for a in invocation.argv("once")),
        timeout_stop=f"{int(settings.shutdown_grace_seconds) + 15}s",
    )
    zone = f" {settings.timezone}" if settings.timezone else ""
    timer_text = _template("night.timer.tmpl").substitute(
        marker=marker,
        service_name=service,
        description=description,
        on_calendar=f"*-*-* {when.strftime('%H:%M:%S')}{zone}",
        jitter=f"{settings.jitter_seconds}s",
    )
    return Plan(
        kind=Kind.SYSTEMD,
        files=[
            UnitFile(path=base / service, content=unit),
            UnitFile(path=base / timer, content=timer_text),
        ],
        activate=[
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", timer],
        ],
        deactivate=[["systemctl", "--user", "disable", "--now", timer]],
        after_remove=(("systemctl", "--user", "daemon-reload"),),
        wants_links=(base / "timers.target.wants" / timer,),
    )


def _cron_plan(invocation: Invocation, argv: list[str], base: Path, local: MachineTime) -> Plan:
    assert invocation.project is not None
    key = project_key(invocation.project)
    marker = f"# skillopt-sleep:{key}"
    line = _template("cron.tmpl").substitute(
        minute=local.minute,
        hour=local.hour,
        command=cron_command(argv),
        log=cron_command([str(_log_path(invocation, key))]),
        marker=marker,
    )
    note = f"# {_no_control(local.note, 'a note')}\n" if local.note else ""
    return Plan(
        kind=Kind.CRON,
        files=[
            UnitFile(
                path=base / f"skillopt-sleep-{key}.crontab",
                content="# "
                + _marker("--cron", "--project", str(invocation.project))
                + "\n"
                + note
                + line,
            )
        ],
        activate=[["crontab", "-"]],
        deactivate=[["crontab", "-"]],
        crontab_line=line.rstrip("\n"),
        crontab_marker=marker,
        log_dirs=(_log_path(invocation, key).parent,),
        notes=(local.note,) if local.note else (),
    )


def _xml_comment(text: str) -> str:
    """An XML comment: ``--`` may not appear inside one."""
    return "<!-- " + _no_control(text, "a comment").replace("--", "- -") + " -->"


def _launchd_plan(invocation: Invocation, argv: list[str], base: Path, local: MachineTime) -> Plan:
    assert invocation.project is not None
    key = project_key(invocation.project)
    label = f"com.skillopt.sleep.{key}"
    arguments = "\n".join(
        f"    <string>{xml_escape(_no_control(a, 'argv'))}</string>" for a in argv
    )
    # An XML comment cannot hold "--": on macOS launchd is the default kind and the
    # current directory the default project, so the command needs no option.
    marker = _xml_comment(
        f"{MARKER_TEXT}; remove with: cd {shlex.quote(str(invocation.project))} && "
        "skillopt-sleep schedule remove (launchd is the default on macOS)"
    )
    if local.note:
        marker += "\n" + _xml_comment(local.note)
    content = _template("launchd.plist.tmpl").substitute(
        marker=marker,
        label=label,
        arguments=arguments,
        hour=local.hour,
        minute=local.minute,
        log=xml_escape(str(_log_path(invocation, key))),
    )
    path = base / f"{label}.plist"
    return Plan(
        kind=Kind.LAUNCHD,
        files=[UnitFile(path=path, content=content)],
        activate=[["launchctl", "bootstrap", f"gui/{os.getuid()}", str(path)]],
        deactivate=[["launchctl", "bootout", f"gui/{os.getuid()}/{label}"]],
        log_dirs=(_log_path(invocation, key).parent,),
        notes=(local.note,) if local.note else (),
    )


def _task_scheduler_plan(
    invocation: Invocation, argv: list[str], base: Path, local: MachineTime
) -> Plan:
    assert invocation.project is not None
    key = project_key(invocation.project)
    task = windows.task_name(key)
    script = base / f"skillopt-sleep-{key}.ps1"
    definition = base / f"skillopt-sleep-{key}.xml"
    for arg in argv:
        _no_control(arg, "a scheduled command")
    helper = windows.helper_script(
        marker=_marker("--task-scheduler", "--project", str(invocation.project)),
        project=invocation.project,
        argv=argv,
        log=_log_path(invocation, key),
        task=task,
    )
    comments = [
        _xml_comment(f"{MARKER_TEXT}; remove with: {windows.remove_hint(invocation.project)}")
    ]
    if local.note:
        comments.append(_xml_comment(local.note))
    content = windows.task_xml(
        comments=comments,
        description="skillopt-sleep: a nightly run for "
        + _no_control(str(invocation.project), "a project path"),
        task=task,
        hour=local.hour,
        minute=local.minute,
        script=script,
        project=invocation.project,
        user=_no_control(invocation.user or windows.signed_in_user(os.environ), "a user name"),
    )
    return Plan(
        kind=Kind.TASK_SCHEDULER,
        files=[
            UnitFile(path=script, content=helper, encoding=windows.SCRIPT_ENCODING),
            UnitFile(path=definition, content=content, encoding=windows.XML_ENCODING),
        ],
        activate=[["schtasks", "/Create", "/TN", task, "/XML", str(definition), "/F"]],
        deactivate=[["schtasks", "/Delete", "/TN", task, "/F"]],
        log_dirs=(_log_path(invocation, key).parent,),
        notes=(local.note,) if local.note else (),
    )


# --------------------------------------------------------------------------- files


@dataclass(frozen=True, kw_only=True)
class Change:
    path: Path
    action: str  # "write", "unchanged", "remove", "absent"


def _refuse_foreign(files: Sequence[UnitFile]) -> None:
    foreign = [f.path for f in files if f.state() is FileState.FOREIGN]
    if foreign:
        names = ", ".join(str(p) for p in foreign)
        raise RefusedError(f"refusing to touch files not written by skillopt-sleep: {names}")


def install(plan_: Plan) -> list[Change]:
    """Write the plan's files (refusing foreign ones first, all or nothing); idempotent."""
    _refuse_foreign(plan_.files)
    for directory in plan_.log_dirs:
        directory.mkdir(parents=True, exist_ok=True)
    changes = []
    for unit in plan_.files:
        if unit.state() is FileState.CURRENT:
            changes.append(Change(path=unit.path, action="unchanged"))
            continue
        atomic_write_bytes(unit.path, unit.data())
        changes.append(Change(path=unit.path, action="write"))
    return changes


def remove(plan_: Plan) -> list[Change]:
    """Delete the plan's files if they are ours (any version); idempotent."""
    _refuse_foreign(plan_.files)
    changes = []
    targets = {unit.path.resolve() for unit in plan_.files}
    for link in plan_.wants_links:
        if link.is_symlink() and link.resolve() in targets:
            link.unlink()
            changes.append(Change(path=link, action="remove"))
    for unit in plan_.files:
        if unit.state() is FileState.ABSENT:
            changes.append(Change(path=unit.path, action="absent"))
            continue
        unit.path.unlink()
        changes.append(Change(path=unit.path, action="remove"))
    return changes


def merge_crontab(existing: str, line: str, marker: str) -> str:
    """``existing`` with our entry for ``marker`` replaced by ``line`` (or appended)."""
    kept = [row for row in existing.splitlines() if not row.rstrip().endswith(marker)]
    return "\n".join([*kept, line]) + "\n"


def strip_crontab(existing: str, marker: str) -> str:
    kept = [row for row in existing.splitlines() if not row.rstrip().endswith(marker)]
    return "\n".join(kept) + "\n" if kept else ""


# --------------------------------------------------------------------------- examples

EXAMPLE_PYTHON = Path("/home/you/.venvs/skillopt/bin/python")
EXAMPLE_PROJECT = Path("/home/you/code/my-project")
EXAMPLE_STATE = Path("/home/you/.local/state/skillopt-sleep")
EXAMPLE_USER = r"YOUR-PC\you"


def _example_root(kind: Kind) -> Path:
    """Where ``kind``'s example would be installed: a real folder, since the Windows task
    names its helper by path (it named one in the filesystem root)."""
    if kind is Kind.TASK_SCHEDULER:  # %LOCALAPPDATA%\skillopt\schedule, in the example's paths
        return Path("/home/you/AppData/Local/skillopt/schedule")
    return Path("/home/you/.config/skillopt/scheduler")


def example_units() -> list[UnitFile]:
    """The examples under ``scheduler/``, rendered from the same templates (each in the
    encoding its scheduler reads)."""
    inv = Invocation(
        python=EXAMPLE_PYTHON,
        project=EXAMPLE_PROJECT,
        config=None,
        state_dir=EXAMPLE_STATE,
        user=EXAMPLE_USER,
    )
    settings = DaemonSettings(jitter_seconds=900)
    return [
        unit
        for kind in Kind
        for unit in plan(kind, settings=settings, invocation=inv, root=_example_root(kind)).files
    ]


def write_examples(directory: Path) -> None:
    """Regenerate ``scheduler/``: ``python -c 'import skillopt_sleep.schedule as s;
    s.write_examples(__import__("pathlib").Path("scheduler"))'``."""
    for unit in example_units():
        atomic_write_bytes(directory / unit.path.name, unit.data())
