"""`once && adopt` every night, as a crontab runs it: the night after an adoption, with no
new session, has nothing left to learn; it says so in one line of its output and spends at
most the drift check's few calls (the learning night sampled the documents it staged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.demo import prepare_demo
from support.sleep_setup import write_config


@pytest.mark.slow
def test_the_night_after_an_adoption_is_quiet_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = prepare_demo(tmp_path)
    args = ["--config", str(write_config(setup)), "--project", str(setup.project)]
    assert main(["once", *args, "--json"]) == 0  # a night that learns
    learned = json.loads(capsys.readouterr().out)
    assert learned["spend"]["calls"] > 5
    assert main(["adopt", *args, "--json"]) == 0
    capsys.readouterr()
    assert main(["once", *args]) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "quiet night" in line]
    assert len(said) == 1, out
    assert said[0].strip().startswith("quiet night: no new session;")
    assert said[0].rstrip().endswith("2 model calls)")  # the drift check: one rubric task
    assert ": no_edits" in out.splitlines()[0]
    assert "estimated spend" not in out
    assert main(["once", *args, "--json"]) == 0
    night = json.loads(capsys.readouterr().out)
    assert night["ok"] and night["status"] == "complete"
    assert 0 < night["spend"]["calls"] <= 5, night["spend"]
