"""`schedule install|remove|show`: rendering, quoting of nasty paths, ownership, round trips."""

from __future__ import annotations

import json
import plistlib
import shlex
import shutil
import subprocess
import sys
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from skillopt.errors import ConfigError
from skillopt_sleep.cli import main
from skillopt_sleep.daemon.settings import DaemonSettings
from skillopt_sleep.lock import project_key
from skillopt_sleep.schedule import (
    MARKER_TEXT,
    Invocation,
    Kind,
    cron_command,
    example_units,
    merge_crontab,
    plan,
    strip_crontab,
    systemd_quote,
)
from support.sleep_setup import MOCK_POOL

pytest.importorskip("skillopt_sleep.config", reason="the sleep config loader has not landed yet")

REPO = Path(__file__).resolve().parents[2]
NASTY = [
    "plain",
    "with space",
    "quote\"double and 'single'",
    "back\\slash",
    "$HOME ${X} $(rm -rf ~) `id`",
    "50% done %n %%",
    "semi;colon & amp | pipe > gt < lt * glob ? # hash",
    "",
    "ünïcödé",
]


def parse_systemd_words(line: str) -> list[str]:
    """An independent reading of systemd's ExecStart rules for double-quoted words."""
    line = line.replace("$$", "\x00DOLLAR\x00").replace("%%", "\x00PCT\x00")
    assert "$" not in line and "%" not in line, f"unescaped $ or % in {line!r}"
    words: list[str] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        assert line[i] == '"', f"unquoted word at {line[i:]!r}"
        i += 1
        word = ""
        while line[i] != '"':
            if line[i] == "\\":
                word += {"\\": "\\", '"': '"'}[line[i + 1]]
                i += 2
            else:
                word += line[i]
                i += 1
        i += 1
        words.append(word.replace("\x00DOLLAR\x00", "$").replace("\x00PCT\x00", "%"))
    return words


@pytest.mark.parametrize("arg", NASTY)
def test_systemd_quote_round_trips(arg: str) -> None:
    assert parse_systemd_words(systemd_quote(arg)) == [arg]


def test_control_characters_are_refused() -> None:
    with pytest.raises(ConfigError):
        systemd_quote("line\nbreak")
    with pytest.raises(ConfigError):
        cron_command(["a\rb"])


def test_cron_command_survives_cron_and_a_real_shell() -> None:
    echo = "import json, sys; print(json.dumps(sys.argv[1:]))"
    line = cron_command([sys.executable, "-c", echo, *NASTY])
    assert "%" not in line.replace("\\%", "")  # every % escaped for cron
    as_cron_runs_it = line.replace("\\%", "%")  # cron drops the backslash before %
    out = subprocess.run(
        ["/bin/sh", "-c", as_cron_runs_it], capture_output=True, text=True, check=True, timeout=20
    )
    assert json.loads(out.stdout) == NASTY


def _invocation(tmp_path: Path, project: Path) -> Invocation:
    return Invocation(
        python=Path(sys.executable),
        project=project,
        config=tmp_path / "conf dir" / "sleep.toml",
        state_dir=tmp_path / "state $dir",
    )


def test_launchd_plist_parses_back_to_argv(tmp_path: Path) -> None:
    project = tmp_path / "a <b> & 'c' \"d\""
    inv = _invocation(tmp_path, project)
    p = plan(Kind.LAUNCHD, settings=DaemonSettings(time="04:05"), invocation=inv, root=tmp_path)
    data = plistlib.loads(p.files[0].content.encode())
    assert data["ProgramArguments"] == inv.argv("once")
    assert data["StartCalendarInterval"] == {"Hour": 4, "Minute": 5}
    assert data["Label"] == f"com.skillopt.sleep.{project_key(project)}"


def test_timer_uses_project_time_and_jitter(tmp_path: Path) -> None:
    project = tmp_path / "p"
    settings = DaemonSettings.model_validate(
        {"jitter_seconds": 600, "projects": [{"path": str(project), "time": "23:45:10"}]}
    )
    p = plan(Kind.SYSTEMD, settings=settings, invocation=_invocation(tmp_path, project))
    timer = p.files[1].content
    assert "OnCalendar=*-*-* 23:45:10" in timer and "RandomizedDelaySec=600s" in timer
    assert "Persistent=true" in timer


TOKYO = {"time": "03:15", "timezone": "Asia/Tokyo"}


def test_timer_keeps_the_configured_zone(tmp_path: Path) -> None:
    settings = DaemonSettings.model_validate(TOKYO)
    p = plan(Kind.SYSTEMD, settings=settings, invocation=_invocation(tmp_path, tmp_path / "p"))
    timer = p.files[1].content
    assert "OnCalendar=*-*-* 03:15:00 Asia/Tokyo\n" in timer
    tool = shutil.which("systemd-analyze")
    if tool is not None:  # systemd itself reads the zone the way we wrote it
        spec = timer.split("OnCalendar=")[1].splitlines()[0]
        done = subprocess.run([tool, "calendar", spec], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "Asia/Tokyo" in done.stdout, done.stderr


@pytest.mark.parametrize("kind", [Kind.CRON, Kind.LAUNCHD])
def test_cron_and_launchd_get_the_zone_converted_with_a_dst_note(
    tmp_path: Path, kind: Kind
) -> None:
    """03:15 in Tokyo is 19:15 in Paris in winter, 20:15 in summer: the files carry the
    winter time and say when to install again."""
    settings = DaemonSettings.model_validate(TOKYO)
    paris = ZoneInfo("Europe/Paris")
    inv = _invocation(tmp_path, tmp_path / "p")
    p = plan(kind, settings=settings, invocation=inv, today=date(2026, 11, 26), machine=paris)
    content = p.files[0].content
    if kind is Kind.CRON:
        assert p.crontab_line.startswith("15 19 * * * ")
    else:
        calendar = plistlib.loads(content.encode())["StartCalendarInterval"]
        assert calendar == {"Hour": 19, "Minute": 15}
    [note] = p.notes
    assert "03:15 Asia/Tokyo" in note and "19:15" in note and "20:15" in note
    assert "2027-03-28" in note and "schedule install" in note
    assert "19:15" in content and "2027-03-28" in content  # the file says it too


def test_converted_time_is_when_the_daemon_would_fire(tmp_path: Path) -> None:
    """The same config fires the daemon and a cron line at the same instant."""
    from skillopt_sleep.daemon.cron import build_trigger, next_fire_after

    project = tmp_path / "p"
    settings = DaemonSettings.model_validate({**TOKYO, "projects": [{"path": str(project)}]})
    machine = ZoneInfo("America/New_York")
    for today in (date(2026, 1, 10), date(2026, 7, 10)):
        p = plan(
            Kind.CRON,
            settings=settings,
            invocation=_invocation(tmp_path, project),
            today=today,
            machine=machine,
        )
        minute, hour = p.crontab_line.split()[:2]
        trigger = build_trigger(settings, settings.projects[0], jitter=False)
        start = datetime.combine(today, datetime.min.time(), tzinfo=ZoneInfo("Asia/Tokyo"))
        fire = next_fire_after(trigger, start)
        assert fire is not None
        local = fire.astimezone(machine)
        assert (local.hour, local.minute) == (int(hour), int(minute))


def test_same_zone_as_the_machine_needs_no_note(tmp_path: Path) -> None:
    settings = DaemonSettings.model_validate({"time": "03:15", "timezone": "Europe/Paris"})
    p = plan(Kind.CRON, settings=settings, invocation=_invocation(tmp_path, tmp_path / "p"),
             today=date(2026, 11, 26), machine=ZoneInfo("Europe/Paris"))  # fmt: skip
    assert p.crontab_line.startswith("15 3 * * * ") and p.notes == ()


def test_cron_schedules_are_daemon_only(tmp_path: Path) -> None:
    settings = DaemonSettings(cron="0 3 * * 1-5")
    with pytest.raises(ConfigError):
        plan(Kind.SYSTEMD, settings=settings, invocation=_invocation(tmp_path, tmp_path))


def test_crontab_merge_keeps_other_lines_and_is_idempotent() -> None:
    mine = "30 2 * * * run # skillopt-sleep:k1"
    existing = "MAILTO=me\n0 1 * * * backup\n15 2 * * * old # skillopt-sleep:k1\n"
    merged = merge_crontab(existing, mine, "# skillopt-sleep:k1")
    assert merged == "MAILTO=me\n0 1 * * * backup\n" + mine + "\n"
    assert merge_crontab(merged, mine, "# skillopt-sleep:k1") == merged
    other = merge_crontab(merged, "0 4 * * * x # skillopt-sleep:k2", "# skillopt-sleep:k2")
    assert strip_crontab(other, "# skillopt-sleep:k1").count("skillopt-sleep:") == 1
    assert strip_crontab(mine + "\n", "# skillopt-sleep:k1") == ""


def test_scheduler_examples_match_the_templates() -> None:
    rendered = {unit.path.name: unit.data() for unit in example_units()}  # bytes: BOM, CRLF
    shipped = {p.name: p.read_bytes() for p in (REPO / "scheduler").iterdir() if p.is_file()}
    shipped.pop("README.md", None)
    hint = "regenerate: python -c 'import pathlib, skillopt_sleep.schedule as s; "
    hint += 's.write_examples(pathlib.Path("scheduler"))\''
    assert shipped == rendered, hint


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    state = tmp_path / "state"
    config = tmp_path / "sleep.toml"
    config.write_text(
        f'state_dir = {json.dumps(str(state))}\n\n[daemon]\ntime = "03:10"\n'
        "shutdown_grace_seconds = 40\n" + MOCK_POOL
    )
    project = tmp_path / "my project; $(touch pwned) 100%"
    project.mkdir()
    root = tmp_path / "units"
    monkeypatch.delenv("SKILLOPT_SLEEP_SCHEDULE_ROOT", raising=False)
    return {"state": state, "config": config, "project": project, "root": root}


def _cli(env: dict[str, Path], *extra: str) -> int:
    return main(
        [
            "schedule",
            *extra,
            "--project",
            str(env["project"]),
            "--config",
            str(env["config"]),
            "--root",
            str(env["root"]),
        ]
    )


def _verify(paths: list[Path]) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        print("systemd-analyze not found: skipping unit verification")
        return
    done = subprocess.run(
        [tool, "verify", *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_systemd_install_verify_and_remove_round_trip(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(env, "show", "--systemd") == 0
    shown = capsys.readouterr().out
    assert "(absent)" in shown and "systemctl --user enable --now" in shown
    assert not env["root"].exists()  # show writes nothing

    assert _cli(env, "install", "--systemd") == 0
    out = capsys.readouterr().out
    assert "systemctl" not in out and f"written under {env['root']} for a look" in out
    files = sorted(env["root"].iterdir())
    assert [f.suffix for f in files] == [".service", ".timer"]
    assert out.count("write: ") == 2
    service = files[0].read_text()
    assert MARKER_TEXT in service
    exec_line = next(x for x in service.splitlines() if x.startswith("ExecStart="))
    argv = parse_systemd_words(exec_line.removeprefix("ExecStart="))
    assert argv == [
        str(Path(sys.executable).absolute()),
        "-m",
        "skillopt_sleep",
        "once",
        "--config",
        str(env["config"]),
        "--project",
        str(env["project"]),
    ]
    assert "TimeoutStopSec=55s" in service
    assert "OnCalendar=*-*-* 03:10:00" in files[1].read_text()
    _verify(files)

    assert _cli(env, "install", "--systemd") == 0  # idempotent
    assert capsys.readouterr().out.count("unchanged: ") == 2

    wants = env["root"] / "timers.target.wants"
    wants.mkdir()
    (wants / files[1].name).symlink_to(files[1])
    assert _cli(env, "remove", "--systemd") == 0
    out = capsys.readouterr().out  # units under --root are no real units: nothing to stop
    assert "systemctl" not in out and "were not changed and need no command" in out
    assert sorted(p.name for p in env["root"].rglob("*")) == ["timers.target.wants"]
    assert _cli(env, "remove", "--systemd") == 0  # idempotent
    assert capsys.readouterr().out.count("absent: ") == 2
    assert not (env["project"] / "pwned").exists()


def test_daemon_service_install_verifies(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(env, "install", "--systemd", "--daemon") == 0
    [unit] = list(env["root"].iterdir())
    text = unit.read_text()
    assert unit.name == "skillopt-sleep-daemon.service"
    assert "Restart=on-failure" in text and "KillSignal=SIGTERM" in text
    assert "TimeoutStopSec=55s" in text  # above the 40 s grace
    assert '"daemon"' in text
    _verify([unit])


def test_foreign_file_is_never_overwritten_or_removed(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(env, "install", "--launchd") == 0
    [plist] = list(env["root"].iterdir())
    plist.write_text("<plist>the user's own</plist>\n")
    assert _cli(env, "install", "--launchd") == 2
    assert "refusing" in capsys.readouterr().err
    assert _cli(env, "remove", "--launchd") == 2
    assert plist.read_text() == "<plist>the user's own</plist>\n"


def test_outdated_file_of_ours_is_rewritten(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(env, "install", "--cron") == 0
    [fragment] = list(env["root"].iterdir())
    fragment.write_text(fragment.read_text().replace("10 3", "11 4"))
    assert _cli(env, "install", "--cron") == 0
    out = capsys.readouterr().out
    assert out.count("write: ") == 2 and "crontab -" not in out  # --root: no real crontab
    line = fragment.read_text().splitlines()[1]
    assert line.startswith("10 3 * * * ")
    assert line.endswith(f"# skillopt-sleep:{project_key(env['project'])}")
    # the cron entry's command splits back to the right argv
    command = line.split(" >> ")[0].split(" ", 5)[5].replace("\\%", "%")
    assert shlex.split(command)[-2:] == ["--project", str(env["project"])]
    assert (env["state"] / "projects" / project_key(env["project"])).is_dir()  # log dir


def test_bad_combination_exits_2(env: dict[str, Path]) -> None:
    assert _cli(env, "install", "--cron", "--daemon") == 2


def test_install_converts_the_zone_and_says_so(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    text = (
        env["config"]
        .read_text()
        .replace('time = "03:10"', 'time = "03:15"\ntimezone = "Asia/Tokyo"')
    )
    env["config"].write_text(text)
    try:
        assert _cli(env, "install", "--cron") == 0
    finally:
        monkeypatch.undo()
        time.tzset()
    out = capsys.readouterr().out
    [fragment] = list(env["root"].iterdir())
    assert fragment.read_text().splitlines()[-1].startswith("15 18 * * * ")
    assert "note: 03:15 Asia/Tokyo (daemon.timezone) is 18:15" in out and "all year" in out


def test_a_daemon_without_a_project_is_not_installed(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The daemon would exit 2 ("no enabled project") and never be restarted."""
    argv = ["schedule", "install", "--systemd", "--daemon", "--config", str(env["config"])]
    assert main([*argv, "--root", str(env["root"])]) == 2
    err = capsys.readouterr().err
    assert "no enabled project" in err and "[[daemon.projects]]" in err and "--project" in err
    assert not env["root"].exists()
    # with --project the project goes into the unit, and the daemon has something to run
    assert _cli(env, "install", "--systemd", "--daemon") == 0


def test_show_warns_about_what_install_would_refuse(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["schedule", "show", "--systemd", "--daemon", "--config", str(env["config"])]
    assert main([*argv, "--root", str(env["root"])]) == 0
    assert "warning: install would refuse" in capsys.readouterr().err


def test_nights_without_a_pool_or_a_project_are_not_scheduled(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    env["config"].write_text(env["config"].read_text().split("\n[[pool.members]]")[0])
    assert _cli(env, "install", "--cron") == 2
    assert "[pool]" in capsys.readouterr().err
    env["config"].write_text(env["config"].read_text() + MOCK_POOL)
    env["project"] = env["project"].parent / "gone"
    assert _cli(env, "install", "--cron") == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not env["root"].exists()


def test_json_and_state_dir_work_for_schedule_too(
    env: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other state"
    assert _cli(env, "install", "--cron", "--json", "--state-dir", str(other)) == 0
    data = json.loads(capsys.readouterr().out)  # exactly one document
    assert data["ok"] is True and data["kind"] == "cron"
    assert [f["action"] for f in data["files"]] == ["write"]
    line = Path(data["files"][0]["path"]).read_text().splitlines()[-1]
    argv = shlex.split(line.split(" >> ")[0].split(" ", 5)[5].replace("\\%", "%"))
    assert argv[argv.index("--state-dir") + 1] == str(other)  # the night uses it too
    assert str(other / "projects") in line  # and so does the log
    assert _cli(env, "install", "--launchd", "--daemon", "--json") == 2
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_daemon_takes_a_state_dir(env: dict[str, Path], tmp_path: Path) -> None:
    from skillopt_sleep.commands.daemon import make_loader

    other = tmp_path / "daemon state"
    loaded = make_loader(env["config"], [env["project"]], state_dir=other)()
    assert loaded.state_dir == other


def test_the_example_configs_cron_line_says_what_uses_it(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Uncommenting the example's daemon-level cron: the daemon takes it, the OS
    schedulers refuse it with a message that names the way that works."""
    example = (REPO / "configs" / "sleep.example.toml").read_text()
    assert '# cron = "0 3 * * 1-5"' in example and "daemon only" in example
    text = example.replace('# cron = "0 3 * * 1-5"', 'cron = "0 3 * * 1-5"')
    env["config"].write_text(f"state_dir = {json.dumps(str(env['state']))}\n{text}")
    assert _cli(env, "install", "--systemd", "--daemon") == 0
    assert _cli(env, "install", "--cron") == 2
    err = capsys.readouterr().err
    assert "daemon.cron" in err and "--systemd --daemon" in err and "daily time" in err


def _remove_command(text: str) -> list[str]:
    """The command a file's marker says removes it."""
    line = next(x for x in text.splitlines() if "remove with: " in x)
    command = line.split("remove with: ", 1)[1].removesuffix(" -->")
    return shlex.split(command.split(" (")[0])


@pytest.mark.parametrize("kind", ["--systemd", "--cron", "--launchd", "--task-scheduler"])
def test_the_remove_command_in_each_file_removes_it(
    env: dict[str, Path],
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _cli(env, "install", kind) == 0
    files = sorted(env["root"].iterdir())
    argv = _remove_command(files[0].read_text())
    if argv[0] == "cd":  # launchd: run in the project, where macOS defaults to launchd
        assert argv[1] == str(env["project"]) and argv[2] == "&&"
        monkeypatch.chdir(argv[1])
        monkeypatch.setattr(sys, "platform", "darwin")
        argv = argv[3:]
    assert argv[:3] == ["skillopt-sleep", "schedule", "remove"]
    assert main([*argv[1:], "--root", str(env["root"])]) == 0
    assert not [p for p in env["root"].iterdir() if p.is_file()]


def test_the_daemon_units_remove_command_removes_it(env: dict[str, Path]) -> None:
    assert _cli(env, "install", "--systemd", "--daemon") == 0
    [unit] = list(env["root"].iterdir())
    argv = _remove_command(unit.read_text())
    assert main([*argv[1:], "--root", str(env["root"])]) == 0
    assert not unit.exists()


def test_root_is_a_look_and_never_activates(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(env, "install", "--cron", "--activate") == 2
    assert "--root" in capsys.readouterr().err and not env["root"].exists()
    monkeypatch.setenv("SKILLOPT_SLEEP_SCHEDULE_ROOT", str(env["root"]))
    argv = ["schedule", "remove", "--cron", "--activate", "--project", str(env["project"])]
    assert main(argv) == 2


def test_cron_and_launchd_wait_out_the_jitter_themselves(tmp_path: Path) -> None:
    """cron and launchd fire on the minute; the night they start waits 0..jitter itself,
    as the systemd timer (RandomizedDelaySec) and the daemon do."""
    import random

    from skillopt_sleep.cli import build_parser
    from skillopt_sleep.commands.once import start_delay

    settings = DaemonSettings(jitter_seconds=600)
    inv = _invocation(tmp_path, tmp_path / "p")
    cron = plan(Kind.CRON, settings=settings, invocation=inv, root=tmp_path)
    launchd = plan(Kind.LAUNCHD, settings=settings, invocation=inv, root=tmp_path)
    timer = plan(Kind.SYSTEMD, settings=settings, invocation=inv, root=tmp_path)
    command = cron.crontab_line.split(" >> ")[0].split(" ", 5)[5]
    argvs = [
        shlex.split(command),
        plistlib.loads(launchd.files[0].content.encode())["ProgramArguments"],
    ]
    for argv in argvs:
        assert argv[3:6] == ["once", "--jitter", "600"]
        assert build_parser().parse_args(argv[3:]).jitter == 600  # the real flag
    assert "--jitter" not in timer.files[0].content and "RandomizedDelaySec=600s" in (
        timer.files[1].content
    )
    rng = random.Random(7)
    delays = [start_delay(600, rng) for _ in range(200)]
    assert all(0 <= d <= 600 for d in delays) and max(delays) > 300
    assert start_delay(0) == 0.0
    assert main(["once", "--jitter", "-1"]) == 2


@pytest.mark.parametrize(
    ("zone", "machine", "today", "window", "next_time"),
    [
        # Paris goes to summer time on 2027-03-28: its 19:15 that evening is already 02:15 in
        # Tokyo, so the reinstall must come before it, not on the 29th (Tokyo's date)
        (
            "Asia/Tokyo",
            "Europe/Paris",
            date(2026, 11, 26),
            "between 2027-03-27 19:15 and 2027-03-28 19:15",
            (20, 15),
        ),
        # New York's 03:15 moves from 08:15 to 07:15 UTC on 2027-03-14: before 07:15 that day
        (
            "America/New_York",
            "UTC",
            date(2026, 11, 26),
            "between 2027-03-13 08:15 and 2027-03-14 07:15",
            (7, 15),
        ),
    ],
)
def test_the_dst_note_asks_to_reinstall_before_the_first_wrong_night_and_that_works(
    tmp_path: Path,
    zone: str,
    machine: str,
    today: date,
    window: str,
    next_time: tuple[int, int],
) -> None:
    settings = DaemonSettings.model_validate({"time": "03:15", "timezone": zone})
    inv = _invocation(tmp_path, tmp_path / "p")
    here = ZoneInfo(machine)
    [note] = plan(Kind.CRON, settings=settings, invocation=inv, today=today, machine=here).notes
    assert f"again {window} on this machine's clock" in note, note
    start, end = (
        datetime.fromisoformat(part).replace(tzinfo=here)
        for part in window.removeprefix("between ").split(" and ")
    )
    # installing again anywhere inside the window converts for the new offset
    for moment in (start + timedelta(minutes=1), end - timedelta(minutes=1)):
        again = plan(Kind.CRON, settings=settings, invocation=inv, machine=here, now=moment)
        minute, hour = again.crontab_line.split()[:2]
        assert (int(hour), int(minute)) == next_time, moment
