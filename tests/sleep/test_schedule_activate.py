"""`schedule ... --activate` against fake scheduler tools on PATH (never the real ones).

The fakes are small shell scripts that keep their crontab in a file and log every call, so
the test sees exactly what our command would have done to the user's real crontab.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from support.sleep_setup import MOCK_POOL

FAKE_CRONTAB = """#!/bin/sh
# A fake crontab(1): the table lives in $FAKE_CRON_TABLE; a failing read is scriptable.
echo "crontab $*" >> "$FAKE_CRON_LOG"
if [ "$1" = "-l" ]; then
    if [ -n "$FAKE_CRON_READ_FAILS" ]; then
        echo "crontab: cannot open your crontab: Permission denied" >&2
        exit 1
    fi
    if [ ! -f "$FAKE_CRON_TABLE" ]; then
        echo "no crontab for $(id -un)" >&2
        exit 1
    fi
    cat "$FAKE_CRON_TABLE"
    exit 0
fi
if [ "$1" = "-" ]; then
    cat > "$FAKE_CRON_TABLE"
    exit 0
fi
exit 2
"""


@pytest.fixture
def cron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "crontab"
    tool.write_text(FAKE_CRONTAB)
    tool.chmod(0o755)
    table, log = tmp_path / "table", tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CRON_TABLE", str(table))
    monkeypatch.setenv("FAKE_CRON_LOG", str(log))
    monkeypatch.delenv("FAKE_CRON_READ_FAILS", raising=False)
    monkeypatch.delenv("SKILLOPT_SLEEP_SCHEDULE_ROOT", raising=False)
    # --activate refuses --root: the files go where they would for real, under a fake home
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    config = tmp_path / "sleep.toml"
    config.write_text(f"state_dir = {json.dumps(str(tmp_path / 'state'))}\n{MOCK_POOL}")
    project = tmp_path / "project"
    project.mkdir()
    return {"table": table, "log": log, "config": config, "project": project, "tmp": tmp_path}


def _cron(env: dict[str, Path], action: str) -> int:
    return main(
        [
            "schedule", action, "--cron", "--activate",
            "--project", str(env["project"]),
            "--config", str(env["config"]),
        ]
    )  # fmt: skip


def test_activate_merges_into_the_crontab_and_remove_strips_it(
    cron: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = "0 6 * * * backup.sh\n"
    cron["table"].write_text(theirs)
    assert _cron(cron, "install") == 0
    table = cron["table"].read_text()
    assert table.startswith(theirs) and table.count("# skillopt-sleep:") == 1
    assert _cron(cron, "install") == 0  # idempotent
    assert cron["table"].read_text() == table
    assert _cron(cron, "remove") == 0
    assert cron["table"].read_text() == theirs


def test_first_crontab_is_created(cron: dict[str, Path]) -> None:
    assert _cron(cron, "install") == 0  # "no crontab for <user>" is an empty table
    assert cron["table"].read_text().count("# skillopt-sleep:") == 1


def test_unreadable_crontab_is_never_overwritten(
    cron: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = "0 6 * * * backup.sh\n"
    cron["table"].write_text(theirs)
    monkeypatch.setenv("FAKE_CRON_READ_FAILS", "1")
    assert _cron(cron, "install") == 1
    assert cron["table"].read_text() == theirs
    assert "crontab -" not in cron["log"].read_text().splitlines()
    assert "Permission denied" in capsys.readouterr().err
    assert _cron(cron, "remove") == 1
    assert cron["table"].read_text() == theirs


def test_systemd_units_read_an_optional_env_file_and_do_not_restart_on_exit_2(
    cron: dict[str, Path],
) -> None:
    root = cron["tmp"] / "units"
    common = ["--project", str(cron["project"]), "--config", str(cron["config"])]
    assert main(["schedule", "install", "--systemd", "--root", str(root), *common]) == 0
    assert main(["schedule", "install", "--systemd", "--daemon", "--root", str(root), *common]) == 0
    services = sorted(root.glob("*.service"))
    assert len(services) == 2
    for service in services:
        # a scheduled night does not see the shell's environment: keys come from this file
        assert "\nEnvironmentFile=-%h/.config/skillopt/sleep.env\n" in service.read_text()
    daemon = root / "skillopt-sleep-daemon.service"
    assert "\nRestartPreventExitStatus=2\n" in daemon.read_text()


FAKE_LAUNCHCTL = """#!/bin/sh
# A fake launchctl(1): loaded labels live in $FAKE_LAUNCHD_LOADED, one per line.
echo "launchctl $*" >> "$FAKE_LAUNCHD_LOG"
touch "$FAKE_LAUNCHD_LOADED"
case "$1" in
bootstrap)
    label=$(basename "$3" .plist)
    if grep -qxF "$label" "$FAKE_LAUNCHD_LOADED"; then
        echo "Bootstrap failed: 5: Input/output error" >&2
        exit 5
    fi
    echo "$label" >> "$FAKE_LAUNCHD_LOADED"
    ;;
bootout)
    label=${2##*/}
    if ! grep -qxF "$label" "$FAKE_LAUNCHD_LOADED"; then
        echo "Boot-out failed: 3: No such process" >&2
        exit 3
    fi
    grep -vxF "$label" "$FAKE_LAUNCHD_LOADED" > "$FAKE_LAUNCHD_LOADED.new"
    mv "$FAKE_LAUNCHD_LOADED.new" "$FAKE_LAUNCHD_LOADED"
    ;;
*) exit 2 ;;
esac
"""


def test_launchd_reinstall_reloads_the_agent(
    cron: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = cron["tmp"] / "bin" / "launchctl"
    tool.write_text(FAKE_LAUNCHCTL)
    tool.chmod(0o755)
    loaded = cron["tmp"] / "loaded"
    monkeypatch.setenv("FAKE_LAUNCHD_LOADED", str(loaded))
    monkeypatch.setenv("FAKE_LAUNCHD_LOG", str(cron["tmp"] / "launchd.log"))
    argv = ["--launchd", "--activate", "--project", str(cron["project"]),
            "--config", str(cron["config"])]  # fmt: skip
    assert main(["schedule", "install", *argv]) == 0
    assert capsys.readouterr().err == ""  # the not-loaded bootout is not reported
    assert len(loaded.read_text().split()) == 1
    # after a change of time, installing again must replace the loaded agent
    cron["config"].write_text(cron["config"].read_text() + '\n[daemon]\ntime = "04:00"\n')
    assert main(["schedule", "install", *argv]) == 0
    assert len(loaded.read_text().split()) == 1
    calls = (cron["tmp"] / "launchd.log").read_text().splitlines()
    assert [c.split()[1] for c in calls] == ["bootout", "bootstrap", "bootout", "bootstrap"]
    assert main(["schedule", "remove", *argv]) == 0
    assert loaded.read_text().split() == []
