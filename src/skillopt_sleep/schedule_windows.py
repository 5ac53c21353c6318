"""Windows Task Scheduler: a task definition (XML) and the PowerShell helper it runs.

1. The task (``\\skillopt-sleep-<key>``) is registered with ``schtasks /Create /XML``: a
   daily calendar trigger at the machine-clock time (converted from ``daemon.timezone`` as
   for cron and launchd), a missed night started when the machine is back
   (``StartWhenAvailable``), never two at once (``IgnoreNew``), on battery too.
2. It runs as the user who installed it "whether they are signed in or not", without
   storing a password (``S4U``): in a session of its own, so no window opens on the desktop
   for anyone to close (closing PowerShell's window killed the night), and a night runs
   while the user is signed out. Such a logon has no Windows Credential Manager and no
   network shares: the night's keys come from the environment script (3).
3. Its one action starts ``powershell.exe -WindowStyle Hidden -File`` on the helper script
   beside it (hidden too, should the user switch the task to "only when signed in"),
   because Task Scheduler starts a program without the user's login environment: the
   helper first dot-sources ``skillopt-sleep-env.ps1`` from its folder when the user put
   one there (API keys, a PATH holding the agent CLIs), then runs the night and appends its
   output to the project's ``scheduled.log``.
4. The log is appended line by line as UTF-8 without a byte order mark, by .NET, not by
   PowerShell's ``>>``: Windows PowerShell 5.1 writes ``>>`` in UTF-16 and renders each
   line a program writes on stderr as an error record (``python.exe : ...`` and a
   ``CategoryInfo`` trailer). Each line is taken as its text; Python writes UTF-8
   (``PYTHONUTF8``) and PowerShell reads it as such.
5. The XML is UTF-16 with a byte order mark (what Task Scheduler exports and schtasks reads
   without complaint); the script is UTF-8 with a byte order mark (Windows PowerShell 5.1
   reads a file without one in the ANSI code page). Both use CRLF line ends.

Values are escaped for their reader: XML text escaping in the task, PowerShell
single-quoted strings (``'`` and the typographic single quotes doubled) in the script. A
double quote cannot be in a Windows path and would not survive Windows PowerShell's
passing of arguments to a program, so an argument holding one is refused.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence
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
    "signed_in_user",
    "task_name",
    "task_xml",
]

TASK_NAMESPACE = "http://schemas.microsoft.com/windows/2004/02/mit/task"
XML_ENCODING = "utf-16"  # Python writes the byte order mark first
SCRIPT_ENCODING = "utf-8-sig"
ENV_SCRIPT = "skillopt-sleep-env.ps1"
_SINGLE_QUOTES = ("'", "\u2018", "\u2019", "\u201a", "\u201b")  # all close a '...' string
_CRLF = "\r\n"
_EACH_LINE = '{ Write-Log "$_" }'  # an error record (a stderr line) as its text


def signed_in_user(environ: Mapping[str, str]) -> str:
    """The account the task runs as: ``DOMAIN\\user`` on Windows (from the environment
    Windows sets at sign-in), the login name elsewhere (rendering only)."""
    name = environ.get("USERNAME", "")
    domain = environ.get("USERDOMAIN", "")
    if name:
        return f"{domain}\\{name}" if domain else name
    return getpass.getuser()


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
            "# Appended as UTF-8 by .NET: Windows PowerShell 5.1's >> writes UTF-16 and turns",
            "# each line on stderr into an error record; here each line is kept as its text.",
            "$ErrorActionPreference = 'Continue'",
            "$utf8 = New-Object System.Text.UTF8Encoding $false",
            "function Write-Log([string]$line) {",
            "    [System.IO.File]::AppendAllText($log, $line + [Environment]::NewLine, $utf8)",
            "}",
            "$env:PYTHONUTF8 = '1'",
            "try { [Console]::OutputEncoding = $utf8 } catch { }",
            "try {",
            f"    & {powershell_quote(argv[0])} {words} 2>&1 | ForEach-Object {_EACH_LINE}",
            "} catch {",
            '    Write-Log "skillopt-sleep could not start: $_"',
            "    exit 1",
            "}",
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
    user: str,
) -> str:
    """The task definition ``schtasks /Create /XML`` registers (schema version 1.2)."""
    arguments = (
        f'-NoProfile -NonInteractive -WindowStyle Hidden -ExecutionPolicy Bypass -File "{script}"'
    )
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
        f"      <UserId>{xml_escape(user)}</UserId>",
        "      <LogonType>S4U</LogonType>",
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
