"""The HTML report in a real headless Chromium, opened from disk (file://), no network.

Skipped when no Chromium is installed (`make tools` installs Debian's where apt-get is
allowed). Set SKILLOPT_SCREENSHOT_DIR to keep the screenshots (docs/ has one).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from skillopt_sleep.html.svgchart import BASELINE_COLOUR, CANDIDATE_COLOUR, COUNT_COLOURS
from support.browser import Browser, chromium, find_chromium
from support.nights import Nights, three_nights
from support.png import Image, decode

EXECUTABLE = find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        EXECUTABLE is None,
        reason="no chromium on PATH (`make tools` installs it with apt-get where permitted)",
    ),
]


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> Nights:
    return three_nights(tmp_path_factory.mktemp("nights"))


@pytest.fixture(scope="module")
def browser() -> Browser:
    assert EXECUTABLE is not None
    with chromium(EXECUTABLE) as b:
        yield b  # type: ignore[misc]


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _near(pixel: tuple[int, int, int], colour: str, tolerance: int = 40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, _rgb(colour), strict=True))


def _keep(png: bytes, name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    path.write_bytes(png)
    keep = os.environ.get("SKILLOPT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


def _look(
    browser: Browser, page: Path, tmp_path: Path
) -> tuple[list[str], Image, dict[str, float]]:
    """Load ``page`` from disk; return its h1/h2 texts, a viewport screenshot, the chart box."""
    url = page.as_uri()
    session, load = browser.open(url, width=1200, height=1000)
    assert load.console_errors == [], load.console_errors
    assert load.failed_requests == [], load.failed_requests
    assert load.requests == [url]  # nothing else was fetched: no font, image, script or CSS
    assert browser.evaluate(session, "document.scripts.length") == 0
    headings = browser.evaluate(
        session, "[...document.querySelectorAll('h1, h2')].map(h => h.textContent.trim())"
    )
    box = json.loads(
        browser.evaluate(
            session,
            "JSON.stringify(document.querySelector('svg.chart').getBoundingClientRect())",
        )
    )
    label = browser.evaluate(
        session, "document.querySelector('svg.chart').getAttribute('aria-labelledby')"
    )
    assert label == "curve-title curve-desc"
    png = browser.screenshot(session)
    _keep(png, page.parent.name + "-" + page.stem + ".png", tmp_path)
    browser.close(session)
    return headings, decode(png), box


def _chart_pixels(image: Image, box: dict[str, float]) -> list[tuple[int, int, int]]:
    assert box["y"] + box["height"] <= image.height, "the chart is not in the first screen"
    return image.region(int(box["x"]), int(box["y"]), int(box["width"]), int(box["height"]))


def test_index_draws_the_curve_of_three_nights(
    nights: Nights, browser: Browser, tmp_path: Path
) -> None:
    headings, image, box = _look(browser, nights.project_dir / "index.html", tmp_path)
    # the nights adopted their edits, so the index watches the adopted lines too
    assert headings == [
        "skillopt nights for demo-project",
        "Learning curve",
        "Adopted lines, watched",
        "Every run",
    ]
    assert image.width == 1200 and box["width"] > 300 and box["height"] > 200
    pixels = _chart_pixels(image, box)
    inked = sum(1 for p in pixels if p != (255, 255, 255))
    assert inked / len(pixels) > 0.02, "the chart area is blank"
    assert sum(_near(p, BASELINE_COLOUR) for p in pixels) > 50  # the adopted-documents line
    assert sum(_near(p, CANDIDATE_COLOUR) for p in pixels) > 20  # the staged-documents line
    assert sum(_near(p, COUNT_COLOURS[0][1]) for p in pixels) > 50  # kept-edit bars


def test_night_page_loads_clean_with_every_section(
    nights: Nights, browser: Browser, tmp_path: Path
) -> None:
    headings, image, box = _look(browser, nights.runs[0] / "report.html", tmp_path)
    assert headings[0] == "Night 1 for demo-project"
    for section in ("In short", "Learning curve", "Tasks: adopted against tonight's documents",
                    "Every edit", "Gate trials", "Staged documents against the live ones",
                    "Spend"):  # fmt: skip
        assert section in headings
    pixels = _chart_pixels(image, box)
    assert sum(1 for p in pixels if p != (255, 255, 255)) / len(pixels) > 0.01
    assert any(_near(p, BASELINE_COLOUR) for p in pixels)
