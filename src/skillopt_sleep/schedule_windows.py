"""Windows Task Scheduler: a task definition (XML) and the PowerShell helper it runs.

1. The task (``\\skillopt-sleep-<key>``) is registered with ``schtasks /Create /XML``: a
   daily calendar trigger at the machine-clock time (converted from ``daemon.timezone`` as
   for cron and launchd), the signed-in user's own token (it runs while they are signed
   in, like a launchd agent), a missed night started when the machine is back
   (``StartWhenAvailable``), never two at once (``IgnoreNew``), on battery too.
2. Its one action starts ``powershell.exe -File`` on the helper script beside it, because
   Task Scheduler starts a program without the user's login environment: the helper first
   dot-sources ``skillopt-sleep-env.ps1`` from its folder when the user put one there (API
   keys, a PATH holding the agent CLIs), then runs the night and appends its output to the
   project's ``scheduled.log``.
3. The XML is UTF-16 with a byte order mark (what Task Scheduler exports and schtasks reads
   without complaint); the script is UTF-8 with a byte order mark (Windows PowerShell 5.1
   reads a file without one in the ANSI code page). Both use CRLF line ends.

Values are escaped for their reader: XML text escaping in the task, PowerShell
single-quoted strings (``'`` and the typographic single quotes doubled) in the script. A
double quote cannot be in a Windows path and would not survive Windows PowerShell's
passing of arguments to a program, so an argument holding one is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from xml.sax.saxutils import escape as xml_escape

from skillopt.errors import ConfigError

__all__ = [
    "ENV_SCRIPT",
    "SCRIPT_ENCODING",
    "TASK_NAMESPACE",
    "XML_ENCODING",
    "helper_script",
    "powershell_quote",
    "remove_hint",
    "task_name",
    "task_xml",
]

TASK_NAMESPACE = "http://schemas.microsoft.com/windows/2004/02/mit/task"
XML_ENCODING = "utf-16"  # Python writes the byte order mark first
SCRIPT_ENCODING = "utf-8-sig"
ENV_SCRIPT = "skillopt-sleep-env.ps1"
_SINGLE_QUOTES = ("'", "\u2018", "\u2019", "\u201a", "\u201b")  # all close a '...' string
_CRLF = "\r\n"


def task_name(key: str) -> str:
    return f"\\skillopt-sleep-{key}"


def powershell_quote(value: str) -> str:
    """A PowerShell single-quoted string: nothing inside is expanded."""
    for quote in _SINGLE_QUOTES:
        value = value.replace(quote, quote * 2)
    return f"'{value}'"


def _crlf(lines: Sequence[str]) -> str:
    return _CRLF.join(lines) + _CRLF


def helper_script(
    *, marker: str, project: PurePath, argv: Sequence[str], log: PurePath, task: str
) -> str:
    """The script the task runs: the user's environment, then the night, logged."""
    for arg in argv:
        if '"' in arg:
            raise ConfigError(f"a scheduled Windows command cannot hold a double quote: {arg!r}")
    words = " ".join(powershell_quote(a) for a in argv[1:])
    return _crlf(
        [
            f"# {marker}",
            f"# Runs one skillopt-sleep night for {project} (task {task}).",
            "# Task Scheduler starts it without your login environment: put what the night",
            f"# needs (API keys, a PATH with the agent CLIs) in {ENV_SCRIPT} beside this",
            "# file, one line each, e.g.  $env:OPENAI_API_KEY = '...'",
            f"$envScript = Join-Path $PSScriptRoot {powershell_quote(ENV_SCRIPT)}",
            "if (Test-Path -LiteralPath $envScript) { . $envScript }",
            f"$log = {powershell_quote(str(log))}",
            "New-Item -ItemType Directory -Force -Path (Split-Path -Parent $log) | Out-Null",
            f"& {powershell_quote(argv[0])} {words} *>> $log",
            "exit $LASTEXITCODE",
        ]
    )


def task_xml(
    *,
    comments: Sequence[str],
    description: str,
    task: str,
    hour: int,
    minute: int,
    script: PurePath,
    project: PurePath,
) -> str:
    """The task definition ``schtasks /Create /XML`` registers (schema version 1.2)."""
    arguments = f'-NoProfile -NonInteractive -ExecutionPolicy Bypass -File "{script}"'
    lines = [
        '<?xml version="1.0" encoding="UTF-16"?>',
        *comments,
        f'<Task version="1.2" xmlns="{TASK_NAMESPACE}">',
        "  <RegistrationInfo>",
        f"    <Description>{xml_escape(description)}</Description>",
        f"    <URI>{xml_escape(task)}</URI>",
        "  </RegistrationInfo>",
        "  <Triggers>",
        "    <CalendarTrigger>",
        f"      <StartBoundary>2000-01-01T{hour:02d}:{minute:02d}:00</StartBoundary>",
        "      <Enabled>true</Enabled>",
        "      <ScheduleByDay>",
        "        <DaysInterval>1</DaysInterval>",
        "      </ScheduleByDay>",
        "    </CalendarTrigger>",
        "  </Triggers>",
        "  <Principals>",
        '    <Principal id="Author">',
        "      <LogonType>InteractiveToken</LogonType>",
        "      <RunLevel>LeastPrivilege</RunLevel>",
        "    </Principal>",
        "  </Principals>",
        "  <Settings>",
        "    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>",
        "    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>",
        "    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>",
        "    <StartWhenAvailable>true</StartWhenAvailable>",
        "    <ExecutionTimeLimit>PT23H</ExecutionTimeLimit>",
        "    <Enabled>true</Enabled>",
        "  </Settings>",
        '  <Actions Context="Author">',
        "    <Exec>",
        "      <Command>powershell.exe</Command>",
        f"      <Arguments>{xml_escape(arguments)}</Arguments>",
        f"      <WorkingDirectory>{xml_escape(str(project))}</WorkingDirectory>",
        "    </Exec>",
        "  </Actions>",
        "</Task>",
    ]
    return _crlf(lines)


def remove_hint(project: PurePath) -> str:
    """How to remove the task, without ``--`` (an XML comment cannot hold it): Task
    Scheduler is the default kind on Windows, the current folder the default project."""
    return f"cd {powershell_quote(str(project))}; skillopt-sleep schedule remove"
