"""The HTML report: written at the end of a night, rebuilt by `report`, shown by `status`."""

from __future__ import annotations

import json
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from skillopt_sleep.cli import main
from skillopt_sleep.html.render import build_index, build_night, publish_night
from skillopt_sleep.html.svgchart import CurvePoint, describe, learning_curve
from support.nights import Nights, three_nights

pytestmark = pytest.mark.slow

SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> Nights:
    return three_nights(tmp_path_factory.mktemp("nights"))


class _Page(HTMLParser):
    """Headings, tables, and every URL-bearing attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("href", "src", "action", "srcset")]
        if tag in ("h1", "h2"):
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h1", "h2") and self._heading is not None:
            self.headings.append("".join(self._heading).strip())
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading.append(data)


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def assert_offline(page: _Page) -> None:
    """No script, and every link a relative file (or an in-page anchor)."""
    assert "script" not in page.tags and "iframe" not in page.tags
    assert all(not re.match(r"^[a-z][a-z0-9+.-]*:", u, re.I) for u in page.urls), page.urls


def test_every_night_writes_its_page_next_to_report_md(nights: Nights) -> None:
    for run in nights.runs:
        assert (run / "report.md").is_file() and (run / "report.html").is_file()
    page = parse(nights.runs[0] / "report.html")
    assert page.headings[:3] == ["Night 1 for demo-project", "In short", "Learning curve"]
    for heading in ("Tasks: adopted against tonight's documents", "Every edit", "Gate trials",
                    "Staged documents against the live ones", "Spend"):  # fmt: skip
        assert heading in page.headings
    assert_offline(page)
    assert "../../index.html" in page.urls


def test_night_page_shows_tasks_edits_arithmetic_diff_and_spend(nights: Nights) -> None:
    run = nights.runs[0]
    report = json.loads((run / "report.json").read_text())
    html = (run / "report.html").read_text()
    # per task: the intent, both scores and the change, changed tasks marked
    delta = next(d for d in report["task_deltas"] if d["status"] == "improved")
    intent = report["task_intents"][delta["task_id"]]
    row = re.search(
        r'<tr class="improved"><th scope="row">([^<]*)</th><td class="num">([\d.]+)</td>'
        r'<td class="num">([\d.]+)</td><td class="num">([+\-\d.]+)</td>',
        html,
    )
    assert row is not None
    assert "▲ improved" in html
    assert any(
        row.group(1) == _escaped(report["task_intents"][d["task_id"]])
        for d in report["task_deltas"]
        if d["status"] == "improved"
    )
    assert _escaped(intent) in html
    # every edit, with its verdict, motivating tasks and the decision arithmetic
    for edit in report["accepted_edits"]:
        kept = f'<span class="badge kept">kept</span> <code>{edit["id"]}</code>'
        assert f"{kept} {edit['target']}/{edit['op']}" in html
    for edit in report["rejected_edits"]:
        assert _escaped(edit["content"]) in html
    single = next(t for t in report["trials"] if t["kind"] == "single")
    assert f"Decision arithmetic for {single['name']}" in html
    assert single["decision"]["arithmetic"]["method"] in html
    assert "Motivated by the failures of" in html
    # the staged documents against the live ones, line by line
    assert "<ins>+ " in html and "SKILLOPT:LEARNED" in html
    # spend by stage and by member, with latency percentiles from the pool accounting
    assert "<caption>By stage</caption>" in html and "<caption>By pool member</caption>" in html
    assert re.search(r'<th scope="row">mock</th><td class="num">\d+</td>', html)
    assert "Latency p50" in html and " ms</td>" in html


def _escaped(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("'", "&#39;")
        .replace('"', "&#34;")
    )


def test_index_shows_one_curve_point_per_night(nights: Nights) -> None:
    index = nights.project_dir / "index.html"
    page = parse(index)
    assert page.headings == [
        "skillopt nights for demo-project",
        "Learning curve",
        "Adopted lines, watched",  # night 2's proposal was adopted before night 3
        "Every run",
    ]
    assert_offline(page)
    html = index.read_text()
    assert "Learning curve over 3 night(s)" in html  # the chart's description
    for night in (1, 2, 3):
        assert f"night {night}: adopted " in html
    assert html.count('<circle cx="') >= 3 + 1  # three points plus the legend's
    links = {u for u in page.urls if u.endswith("report.html")}  # "latest night" is one twice
    assert len(links) == 3 and all((nights.project_dir / u).is_file() for u in links)


def test_diff_states_follow_adoption(nights: Nights) -> None:
    build_night(nights.runs[1])  # the page as it is after night 2 was adopted
    second = (nights.runs[1] / "report.html").read_text()
    assert '<span class="badge adopted">adopted</span>' in second
    assert "before adoption (backup)" in second and "<ins>+ " in second
    build_night(nights.runs[0])  # night 1's proposal: the live files moved on since
    first = (nights.runs[0] / "report.html").read_text()
    assert '<span class="badge stale">stale</span>' in first and "adopt would refuse" in first


def test_no_secret_and_no_markup_from_the_run_files(nights: Nights, tmp_path: Path) -> None:
    run = tmp_path / "projects" / "p" / "runs" / nights.runs[0].name
    shutil.copytree(nights.runs[0], run)
    report = json.loads((run / "report.json").read_text())
    task = next(iter(report["task_intents"]))
    report["task_intents"][task] = f"<script>alert(1)</script> uses {SECRET}"
    report["notes"] = [f'key={SECRET} "><img src=x onerror=alert(2)>']
    report["rejected_edits"][0]["content"] = f"export OPENAI_API_KEY={SECRET}"
    (run / "report.json").write_text(json.dumps(report))
    page = build_night(run)
    html = page.read_text()
    assert SECRET not in html and SECRET[:20] not in html
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "[REDACTED" in html
    assert_offline(parse(page))


def test_a_night_renders_even_from_a_partial_report(tmp_path: Path) -> None:
    run = tmp_path / "projects" / "p" / "runs" / "20260101T000000Z-0001"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "status": "failed"}))
    (run / "report.json").write_text(json.dumps({"night": 4, "status": "failed",
                                                 "reason": "every model call failed"}))  # fmt: skip
    page = publish_night(run)
    assert page is not None and "every model call failed" in page.read_text()
    assert (tmp_path / "projects" / "p" / "index.html").is_file()


def test_publishing_never_fails_the_night(tmp_path: Path) -> None:
    (tmp_path / "projects").write_text("a file where the project folder should be")
    run = tmp_path / "projects" / "p" / "runs" / "r1"
    assert publish_night(run) is None  # logged, not raised: the night itself is done


def test_curve_breaks_where_a_night_has_no_score() -> None:
    points = [
        CurvePoint(night=1, baseline=0.5, candidate=0.7, kept=1),
        CurvePoint(night=2, baseline=None, candidate=None),
        CurvePoint(night=3, baseline=0.6, candidate=0.6, rejected=2),
        CurvePoint(night=4, baseline=0.7, candidate=0.9, untested=1),
    ]
    svg = str(learning_curve(points, title="t <b>"))
    assert svg.count("<polyline") == 2  # nights 3-4 for each series; 1 stands alone
    assert '<title id="curve-title">t &lt;b&gt;</title>' in svg
    assert 'role="img"' in svg and "aria-labelledby" in svg
    assert "night 2: adopted not measured" in describe(points)
    assert "no scored night yet" in str(learning_curve([], title="empty"))


def test_report_command_rebuilds_opens_and_status_shows_the_path(
    nights: Nights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    page = nights.runs[1] / "report.html"
    page.unlink()
    (nights.project_dir / "index.html").unlink()
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(f"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\n")
    monkeypatch.setenv("BROWSER", f"{sys.executable} {browser} %s")
    assert main(["report", *nights.args, "--night", "2", "--open", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["night_page"] == str(page) and page.is_file() and data["opened"]
    assert Path(data["index"]).is_file()
    assert opened.read_text() == page.as_uri()

    assert main(["report", *nights.args]) == 0
    out = capsys.readouterr().out
    assert f"night page: {nights.runs[-1] / 'report.html'}" in out

    assert main(["report", *nights.args, "--night", "99"]) == 2
    assert "no run matches '99'" in capsys.readouterr().err

    assert main(["status", *nights.args]) == 0
    out = capsys.readouterr().out
    assert f"report: {nights.project_dir / 'index.html'}" in out
    assert main(["status", *nights.args, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["report_index"] == str(nights.project_dir / "index.html")
    assert status["latest_report"] == str(nights.runs[-1] / "report.html")


def test_rebuilding_gives_the_same_page(nights: Nights) -> None:
    before = build_index(nights.project_dir).read_bytes()
    assert build_index(nights.project_dir).read_bytes() == before
