"""`once && adopt` every night, as a crontab runs it: once nothing is left to learn, the
night says so in one line of its output and spends nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import prepare_demo
from support.sleep_setup import write_config


@pytest.mark.slow
def test_a_quiet_night_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path)
    args = ["--config", str(write_config(setup)), "--project", str(setup.project)]
    calls = []
    for _ in range(2):  # a night that learns, then one that checks the adopted documents
        assert main(["once", *args, "--json"]) == 0
        calls.append(json.loads(capsys.readouterr().out)["spend"]["calls"])
        assert main(["adopt", *args, "--json"]) == 0
        capsys.readouterr()
    assert main(["once", *args]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "quiet night" in line]
    assert len(said) == 1, out
    assert said[0].strip().startswith("quiet night: no new session;")
    assert said[0].rstrip().endswith("no model call")
    assert ": no_edits" in out.splitlines()[0]
    assert main(["once", *args, "--json"]) == 0
    night = json.loads(capsys.readouterr().out)
    assert night["ok"] and night["status"] == "complete" and night["spend"]["calls"] == 0
    assert calls[0] > calls[1] > 0
