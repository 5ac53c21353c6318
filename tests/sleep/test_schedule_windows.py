"""Windows Task Scheduler, as far as Linux can check it: the task XML read back against the
task schema's structure, the PowerShell helper's quoting read back by an independent
reader, Windows paths (``PureWindowsPath``), encodings, line ends, and the command's
Windows branch selected by the platform. Registering with ``schtasks`` and running
PowerShell need Windows: not verified here."""

from __future__ import annotations

import codecs
import re
import subprocess
import xml.etree.ElementTree as ET
from datetime import date
from pathlib import Path, PurePath, PureWindowsPath
from typing import cast
from zoneinfo import ZoneInfo

import pytest

from skillopt.errors import ConfigError
from skillopt_sleep.cli import main
from skillopt_sleep.commands.schedule import default_kind, shown
from skillopt_sleep.daemon.settings import DaemonSettings
from skillopt_sleep.lock import project_key
from skillopt_sleep.schedule import MARKER_TEXT, Invocation, Kind, Plan, plan
from skillopt_sleep.schedule_windows import TASK_NAMESPACE, powershell_quote, signed_in_user
from skillopt_sleep.scheduled import find_schedulers
from support.sleep_setup import MOCK_POOL

NS = {"t": TASK_NAMESPACE}
REPO = Path(__file__).resolve().parents[2]
PROJECT = PureWindowsPath(r"C:\Users\Zoë O'Brien\code\my proj & <co> 100%")
PYTHON = PureWindowsPath(r"C:\Program Files\Python312\python.exe")
STATE = PureWindowsPath(r"C:\Users\Zoë O'Brien\AppData\Local\skillopt-sleep")
ROOT = PureWindowsPath(r"C:\Users\Zoë O'Brien\AppData\Local\skillopt\schedule")
# The elements the task schema (MS-TSCH 2.5) allows in these parts; a trigger's children
# come in this order (a sequence in the schema).
SETTINGS = {
    "AllowStartOnDemand", "RestartOnFailure", "MultipleInstancesPolicy",
    "DisallowStartIfOnBatteries", "StopIfGoingOnBatteries", "AllowHardTerminate",
    "StartWhenAvailable", "NetworkProfileName", "RunOnlyIfNetworkAvailable", "WakeToRun",
    "Enabled", "Hidden", "DeleteExpiredTaskAfter", "IdleSettings", "NetworkSettings",
    "ExecutionTimeLimit", "Priority", "RunOnlyIfIdle", "UseUnifiedSchedulingEngine",
    "DisallowStartOnRemoteAppSession", "Volatile", "MaintenanceSettings",
}  # fmt: skip
TRIGGER_ORDER = [
    "Repetition", "StartBoundary", "EndBoundary", "ExecutionTimeLimit", "Enabled",
    "RandomDelay", "ScheduleByDay", "ScheduleByWeek", "ScheduleByMonth",
    "ScheduleByMonthDayOfWeek",
]  # fmt: skip


def _windows_plan(*argv_extra: str, settings: DaemonSettings | None = None) -> Plan:
    invocation = Invocation(
        python=cast(Path, PYTHON),
        project=cast(Path, PROJECT),
        config=cast(Path, PROJECT / "sleep.toml"),
        state_dir=cast(Path, STATE),
    )
    return plan(
        Kind.TASK_SCHEDULER,
        settings=settings or DaemonSettings(time="03:10", jitter_seconds=600),
        invocation=invocation,
        root=cast(Path, ROOT),
        today=date(2026, 11, 27),
        machine=ZoneInfo("UTC"),
    )


def _files(the_plan: Plan) -> tuple[bytes, bytes]:
    script, task = the_plan.files
    assert script.path.suffix == ".ps1" and task.path.suffix == ".xml"
    return script.data(), task.data()


def _read_powershell_words(line: str) -> list[str]:
    """An independent reader of PowerShell single-quoted words (any of the four single
    quote characters delimits one; two in a row stand for one)."""
    quotes = "'\u2018\u2019\u201a\u201b"
    words, i = [], 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        assert line[i] in quotes, f"unquoted text at {line[i:]!r}"
        i += 1
        word = ""
        while True:
            assert i < len(line), "unterminated string"
            if line[i] in quotes:
                if i + 1 < len(line) and line[i + 1] in quotes:
                    word += line[i]
                    i += 2
                    continue
                i += 1
                break
            word += line[i]
            i += 1
        words.append(word)
    return words


def test_the_task_is_utf16_crlf_and_follows_the_task_schema() -> None:
    _, raw = _files(_windows_plan())
    assert raw.startswith(codecs.BOM_UTF16_LE)
    text = raw.decode("utf-16")
    assert "\n" not in text.replace("\r\n", "")  # CRLF only
    assert MARKER_TEXT in text and " -- " not in text.split("<Task")[0]
    root = ET.fromstring(raw)  # the parser reads the BOM and the declared encoding
    assert root.tag == f"{{{TASK_NAMESPACE}}}Task" and root.get("version") == "1.2"
    top = {child.tag.split("}")[1] for child in root}
    assert top <= {"RegistrationInfo", "Triggers", "Settings", "Data", "Principals", "Actions"}
    assert "Actions" in top  # the one part the schema requires
    (trigger,) = root.findall("t:Triggers/t:CalendarTrigger", NS)
    names = [child.tag.split("}")[1] for child in trigger]
    assert names == sorted(names, key=TRIGGER_ORDER.index)
    assert trigger.findtext("t:StartBoundary", namespaces=NS) == "2000-01-01T03:10:00"
    assert trigger.findtext("t:ScheduleByDay/t:DaysInterval", namespaces=NS) == "1"
    settings = {child.tag.split("}")[1] for child in root.findall("t:Settings/*", NS)}
    assert settings <= SETTINGS
    limit = root.findtext("t:Settings/t:ExecutionTimeLimit", namespaces=NS) or ""
    assert re.fullmatch(r"PT\d+H", limit)
    exec_ = root.find("t:Actions/t:Exec", NS)
    assert exec_ is not None and exec_.findtext("t:Command", namespaces=NS) == "powershell.exe"
    script = ROOT / "skillopt-sleep-"
    arguments = exec_.findtext("t:Arguments", namespaces=NS) or ""
    assert arguments.startswith("-NoProfile -NonInteractive -WindowStyle Hidden ")
    assert " -ExecutionPolicy Bypass -File " in arguments
    assert arguments.endswith('.ps1"') and f'"{script}' in arguments
    assert exec_.findtext("t:WorkingDirectory", namespaces=NS) == str(PROJECT)


def test_the_task_runs_hidden_whether_the_user_is_signed_in_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It ran with the interactive token, in a PowerShell window that killed the night when
    closed, and only while the user was signed in (issue 32, item 18)."""
    monkeypatch.setenv("USERDOMAIN", "DESK-7")
    monkeypatch.setenv("USERNAME", "zoë")
    _, raw = _files(_windows_plan())
    principal = ET.fromstring(raw).find("t:Principals/t:Principal", NS)
    assert principal is not None
    assert principal.findtext("t:LogonType", namespaces=NS) == "S4U"  # no password stored
    assert principal.findtext("t:UserId", namespaces=NS) == "DESK-7\\zoë"
    assert principal.findtext("t:RunLevel", namespaces=NS) == "LeastPrivilege"
    assert "-WindowStyle Hidden" in (
        ET.fromstring(raw).findtext(".//t:Arguments", namespaces=NS) or ""
    )
    assert signed_in_user({"USERNAME": "ann"}) == "ann"


def test_the_helper_appends_utf8_text_lines_not_powershell_records() -> None:
    """Windows PowerShell 5.1's ``*>>`` wrote scheduled.log in UTF-16 and each stderr line as
    an error record (issue 32, item 18)."""
    text = _files(_windows_plan())[0].decode("utf-8-sig")
    code = [x for x in text.split("\r\n") if not x.startswith("#")]
    assert not any(">>" in x or re.search(r"(^|\s)[*2]?>\s", x) for x in code), code
    assert "$utf8 = New-Object System.Text.UTF8Encoding $false" in code  # no byte order mark
    assert (
        "    [System.IO.File]::AppendAllText($log, $line + [Environment]::NewLine, $utf8)" in code
    )
    (run,) = [x.strip() for x in code if x.strip().startswith("& ")]
    assert run.endswith(' 2>&1 | ForEach-Object { Write-Log "$_" }')  # each record as its text
    assert "$env:PYTHONUTF8 = '1'" in code and "$ErrorActionPreference = 'Continue'" in code
    assert code[-2:] == ["exit $LASTEXITCODE", ""]


def test_the_example_task_runs_a_helper_in_its_folder_not_the_filesystem_root() -> None:
    (example,) = (REPO / "scheduler").glob("*.xml")
    arguments = ET.fromstring(example.read_bytes()).findtext(".//t:Arguments", namespaces=NS)
    helper = PurePath((arguments or "").split(" -File ")[1].strip('"'))
    assert len(helper.parts) > 2 and (REPO / "scheduler" / helper.name).is_file()


def test_the_helper_runs_the_night_exactly_and_loads_the_users_environment() -> None:
    raw, _ = _files(_windows_plan())
    assert raw.startswith(codecs.BOM_UTF8)
    text = raw.decode("utf-8-sig")
    assert "\n" not in text.replace("\r\n", "")
    lines = text.split("\r\n")
    assert MARKER_TEXT in lines[0]
    assert any("skillopt-sleep-env.ps1" in x and "Join-Path $PSScriptRoot" in x for x in lines)
    assert "if (Test-Path -LiteralPath $envScript) { . $envScript }" in lines
    (run,) = [x.strip() for x in lines if x.strip().startswith("& ")]
    tail = ' 2>&1 | ForEach-Object { Write-Log "$_" }'
    argv = _read_powershell_words(run.removeprefix("& ").removesuffix(tail))
    assert argv == [
        str(PYTHON), "-m", "skillopt_sleep", "once", "--jitter", "600",
        "--config", str(PROJECT / "sleep.toml"), "--project", str(PROJECT),
    ]  # fmt: skip
    (log,) = [x for x in lines if x.startswith("$log = ")]
    key = project_key(str(PROJECT))
    assert _read_powershell_words(log.removeprefix("$log = ")) == [
        str(STATE / "projects" / key / "scheduled.log")
    ]
    assert lines[-2:] == ["exit $LASTEXITCODE", ""]


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "it's",
        "\u2018curly\u2019 \u201aquotes\u201b",
        "$env:HOME $(Get-Item x) `n",
        "a;b|c",
    ],
)
def test_powershell_quoting_round_trips(value: str) -> None:
    assert _read_powershell_words(powershell_quote(value)) == [value]


def test_a_double_quote_is_refused() -> None:
    invocation = Invocation(
        python=cast(Path, PYTHON),
        project=cast(Path, PureWindowsPath(r'C:\odd"name')),
        config=None,
        state_dir=cast(Path, STATE),
    )
    with pytest.raises(ConfigError, match="double quote"):
        plan(
            Kind.TASK_SCHEDULER,
            settings=DaemonSettings(time="03:10"),
            invocation=invocation,
            root=cast(Path, ROOT),
            today=date(2026, 11, 27),
        )


def test_registering_and_removing_use_schtasks() -> None:
    the_plan = _windows_plan()
    task = the_plan.activate[0][3]
    assert task.startswith("\\skillopt-sleep-")
    assert the_plan.activate == [
        ["schtasks", "/Create", "/TN", task, "/XML", str(the_plan.files[1].path), "/F"]
    ]
    assert the_plan.deactivate == [["schtasks", "/Delete", "/TN", task, "/F"]]
    line = shown(the_plan.activate[0], Kind.TASK_SCHEDULER)
    assert f'"{the_plan.files[1].path}"' in line  # Windows quoting around a path with spaces
    assert shown(["a b"], Kind.CRON) == "'a b'"


def test_the_default_scheduler_follows_the_platform() -> None:
    assert default_kind("win32") == "task-scheduler"
    assert default_kind("darwin") == "launchd"
    assert default_kind("linux") == "systemd"


def test_install_on_windows_writes_both_files_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sleep.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[daemon]\ntime = "03:10"\n' + MOCK_POOL)
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.delenv("SKILLOPT_SLEEP_SCHEDULE_ROOT", raising=False)
    monkeypatch.setattr("sys.platform", "win32")  # no flag: the Windows default
    argv = ["schedule", "install", "--project", str(project), "--config", str(config)]
    argv += ["--root", str(tmp_path / "units")]
    assert main(argv) == 0
    files = sorted((tmp_path / "units").iterdir())
    assert [f.suffix for f in files] == [".ps1", ".xml"]
    assert files[1].read_bytes().startswith(codecs.BOM_UTF16_LE)
    assert main(argv) == 0
    assert capsys.readouterr().out.count("unchanged: ") == 2
    assert main([*argv[:1], "show", *argv[2:]]) == 0
    assert "schtasks /Create /TN" in capsys.readouterr().out
    assert main([*argv[:1], "remove", *argv[2:]]) == 0
    assert not any(p.is_file() for p in (tmp_path / "units").iterdir())


def test_windows_paths_are_windows_paths() -> None:
    script, task = _windows_plan().files
    assert isinstance(script.path, PurePath) and str(script.path).startswith(str(ROOT) + "\\")
    assert str(task.path).endswith(".xml") and "/" not in str(task.path)
    assert subprocess.list2cmdline([str(PROJECT)]) == f'"{PROJECT}"'


def test_status_finds_an_installed_windows_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "sleep.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[daemon]\ntime = "03:10"\n' + MOCK_POOL)
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("SKILLOPT_SLEEP_SCHEDULE_ROOT", str(tmp_path / "units"))
    argv = ["schedule", "install", "--task-scheduler", "--project", str(project)]
    assert main([*argv, "--config", str(config)]) == 0
    found = find_schedulers(
        DaemonSettings(), project, daemon_pid=None, daemon_knows=False, crontab=lambda: ""
    )
    assert [(s.kind, s.daily) for s in found] == [("task-scheduler", (3, 10, 0))]
