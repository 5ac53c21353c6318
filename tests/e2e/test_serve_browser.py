"""The dashboard in a real headless Chromium: the start URL logs the browser in, every
column of the index fits 1280 px (served and on disk), and a subset of a night's edits is
adopted by clicking through its confirmation (the browser's own Origin and form token)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillopt_sleep.edit_ids import edit_id
from skillopt_sleep.serve.projects import list_projects
from support.browser import Browser, chromium, find_chromium
from support.dashboard import serve, two_projects

EXECUTABLE = find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        EXECUTABLE is None,
        reason="no chromium on PATH (`make tools` installs it with apt-get where permitted)",
    ),
]

#: Each horizontally scrolling table: (content width, visible width).
_WIDTHS = "[...document.querySelectorAll('div.scroll')].map(d => [d.scrollWidth, d.clientWidth])"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert EXECUTABLE is not None
    with chromium(EXECUTABLE) as b:
        yield b


def _click(browser: Browser, session: str, selector: str) -> None:
    """Click ``selector`` and wait for the page it leads to."""
    browser.evaluate(session, f"document.querySelector({json.dumps(selector)}).click()")
    browser.wait_event("Page.loadEventFired", session)


def _text(browser: Browser, session: str) -> str:
    return str(browser.evaluate(session, "document.body.innerText"))


def test_every_column_fits_and_a_chosen_edit_is_adopted_by_clicking(
    browser: Browser, tmp_path: Path
) -> None:
    state, config = two_projects(tmp_path)
    project = next(p for p in list_projects(state) if p.path and p.path.is_relative_to(state))
    assert project.path is not None
    run = project.runs()[-1]
    on_disk, _ = browser.open((project.folder / "index.html").as_uri(), width=1280)
    assert all(full <= shown for full, shown in browser.evaluate(on_disk, _WIDTHS))
    browser.close(on_disk)
    with serve(state, config) as served:
        session, load = browser.open(served.url, width=1280, height=900)
        assert load.console_errors == [] and load.failed_requests == []
        assert "2 project(s)" in _text(browser, session)
        _click(browser, session, f'a[href="/p/{project.key}/"]')
        widths = browser.evaluate(session, _WIDTHS)
        assert widths and all(full <= shown for full, shown in widths), widths
        _click(browser, session, f'a[href="runs/{run.name}/"]')
        edit = browser.evaluate(session, "document.querySelector('input[name=edit]').value")
        browser.evaluate(session, "document.querySelector('input[name=edit]').checked = true")
        _click(browser, session, "form:not(.act) button")
        assert "model call(s)" in _text(browser, session)  # the confirmation says the cost
        _click(browser, session, "button.danger")  # the POST: token in the form, Origin ours
        for _ in range(300):  # the page refreshes itself while the action runs
            if "running" not in _text(browser, session):
                break
            browser.wait_event("Page.loadEventFired", session)
        said = _text(browser, session)
        assert f"adopted edits {edit}" in said, said
        _click(browser, session, f'a[href="/p/{project.key}/"]')
        row = (
            f"[...document.querySelectorAll('tr')].find(r => r.textContent.includes('{run.name}'))"
        )
        assert browser.evaluate(session, f"{row}.lastElementChild.textContent") == "adopted"
        browser.close(session)
    kept = json.loads((run / "report.json").read_text())["accepted_edits"]
    live = "\n".join(
        p.read_text() for p in [*state.glob("demo/claude-home/skills/*/SKILL.md"),
                                project.path / "CLAUDE.md"]
    )  # fmt: skip
    adopted = {str(e.get("id") or edit_id(e)) for e in kept if e["content"] in live}
    assert adopted == {edit}  # the one checked, not the others
