"""`skillopt-sleep serve` as a real process on the loopback, driven over HTTP: the pages of
two projects, refusals that change nothing, GETs that never write, an adoption that needs
the token, the server's own Origin and a confirmation."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from skillopt_sleep.serve.projects import list_projects
from support.dashboard import Served, serve, snapshot, two_projects
from support.sleep_setup import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dashboard")
    two_projects(root)
    return root


@pytest.fixture(scope="module")
def served(root: Path) -> Iterator[Served]:
    with serve(root / "state", root / "state" / "demo" / "sleep.toml") as s:
        yield s


def _client(served: Served, *, token: bool = True) -> httpx2.Client:
    client = httpx2.Client(base_url=served.base, timeout=30)
    if token:  # the printed URL: sets the cookie, redirects to the page without the token
        first = client.get(served.url, follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == "/"
        assert "token" not in first.headers["location"]
    return client


def _form(client: httpx2.Client, confirm: str) -> dict[str, Any]:
    """The form a confirmation page holds (its own token and hidden fields), as a browser
    would send it."""
    page = client.get(confirm)
    assert page.status_code == 200, page.text[:300]
    fields: dict[str, Any] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page.text):
        fields.setdefault(name, []).append(value)
    return {k: v[0] if len(v) == 1 else v for k, v in fields.items()}


def _files(root: Path) -> dict[str, bytes]:
    return {**snapshot(root / "state"), **snapshot(root / "other")}


def _every_page(client: httpx2.Client, root: Path) -> list[str]:
    """Every page a user can reach, confirmations included (each only reads)."""
    pages = ["/"]
    for p in list_projects(root / "state"):
        pages.append(f"/p/{p.key}/")
        for run in p.runs():
            pages += [f"/p/{p.key}/runs/{run.name}/", f"/p/{p.key}/runs/{run.name}/report.md",
                      f"/p/{p.key}/confirm/adopt?run={run.name}"]  # fmt: skip
            edits = re.findall(r'name="edit" value="(\w+)"', client.get(pages[-3]).text)
            pages.append(f"/p/{p.key}/confirm/adopt?run={run.name}&edit={edits[0]}")
        pages.append(f"/p/{p.key}/confirm/night")
    return pages


def test_pages_of_both_projects_render(served: Served, root: Path) -> None:
    client = _client(served)
    projects = list_projects(root / "state")
    assert len(projects) == 2 and all(p.path is not None for p in projects)
    home = client.get("/")
    assert home.status_code == 200
    assert all(f'href="/p/{p.key}/"' in home.text for p in projects)
    csp = home.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "form-action 'self'" in csp
    for p in projects:
        page = client.get(f"/p/{p.key}/")
        assert page.status_code == 200, page.text
        assert "Learning curve" in page.text and "Every run" in page.text
        assert "Start a night" in page.text and "Adopt all of it" in page.text
        run = p.runs()[-1].name
        assert f'href="runs/{run}/"' in page.text  # the run's page, served, not the file
        night = client.get(f"/p/{p.key}/runs/{run}/")
        assert night.status_code == 200
        assert "Decision arithmetic" in night.text and 'name="edit"' in night.text
        assert "<script" not in night.text and "<script" not in page.text
        assert client.get(f"/p/{p.key}/runs/{run}/report.md").text.startswith("#")
    assert client.get("/p/nothing-here/").status_code == 404
    assert client.get(f"/p/{projects[0].key}/runs/no-such-run/").status_code == 404
    assert client.get(f"/p/{projects[0].key}/runs/{run}/run.json").status_code == 404


def test_refused_without_token_from_another_origin_or_host(served: Served, root: Path) -> None:
    before = _files(root)
    key = list_projects(root / "state")[0].key
    run = list_projects(root / "state")[0].runs()[-1].name
    user = _client(served)
    form = _form(user, f"/p/{key}/confirm/adopt?run={run}")
    assert form["token"] != served.token and form["confirm"] == "yes" and form["run"] == run
    stranger = _client(served, token=False)
    assert stranger.get("/").status_code == 403  # no token, no page
    assert stranger.post(f"/p/{key}/adopt", data=form, headers=served.origin).status_code == 403
    evil = {"Origin": "http://evil.example"}
    assert user.post(f"/p/{key}/adopt", data=form, headers=evil).status_code == 403
    assert user.post(f"/p/{key}/adopt", data=form).status_code == 403  # no Origin at all
    rebound = {**served.origin, "Host": "evil.example"}  # DNS rebinding
    assert user.post(f"/p/{key}/adopt", data=form, headers=rebound).status_code == 403
    assert user.get("/", headers={"Host": "evil.example"}).status_code == 403
    no_form_token = {k: v for k, v in form.items() if k != "token"}
    assert user.post(f"/p/{key}/adopt", data=no_form_token,
                     headers=served.origin).status_code == 403  # fmt: skip
    unconfirmed = {k: v for k, v in form.items() if k != "confirm"}
    assert user.post(f"/p/{key}/adopt", data=unconfirmed,
                     headers=served.origin).status_code == 400  # fmt: skip
    assert user.get(f"/p/{key}/adopt").status_code == 405  # no write from a GET
    assert _files(root) == before


def test_a_form_token_is_its_own_and_confirms_its_form_only(served: Served, root: Path) -> None:
    """The launch token (the cookie's value) was also the form token (issue 32, item 17)."""
    before = _files(root)
    project = list_projects(root / "state")[0]
    key, run = project.key, project.runs()[-1].name
    user = _client(served)
    launch = {"token": served.token, "confirm": "yes", "run": run}
    refused = user.post(f"/p/{key}/adopt", data=launch, headers=served.origin)
    assert refused.status_code == 403 and "token" in refused.text
    night = _form(user, f"/p/{key}/confirm/night")
    adopt = _form(user, f"/p/{key}/confirm/adopt?run={run}")
    assert night["token"] != adopt["token"] != _form(user, f"/p/{key}/confirm/night")["token"]
    elsewhere = {**night, "run": run}  # the night's token on the adoption
    assert user.post(f"/p/{key}/adopt", data=elsewhere, headers=served.origin).status_code == 403
    other = list_projects(root / "state")[1].key  # the same action, another project
    assert user.post(f"/p/{other}/adopt", data=adopt, headers=served.origin).status_code == 403
    changed = {**adopt, "run": "another-run"}  # the adoption's token, other fields
    assert user.post(f"/p/{key}/adopt", data=changed, headers=served.origin).status_code == 403
    assert _files(root) == before


def test_a_get_never_writes(served: Served, root: Path) -> None:
    client = _client(served)
    before = _files(root)
    pages = _every_page(client, root)
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, (page, response.text[:300])
    confirm = client.get(next(p for p in pages if "edit=" in p)).text
    assert 'method="post"' in confirm and 'name="confirm" value="yes"' in confirm
    assert "model call(s)" in confirm  # the cost is said before anything is spent
    assert _files(root) == before


def _wait(client: httpx2.Client, location: str) -> dict[str, Any]:
    """Poll the action's status endpoint until it ends."""
    for _ in range(600):
        job: dict[str, Any] = client.get(f"{location}.json").json()
        if job["state"] != "running":
            return job
        client.get(location)  # the page a browser refreshes
    raise AssertionError(f"{location} still running")


def test_adopt_with_token_and_confirmation_adopts(tmp_path: Path) -> None:
    state, config = two_projects(tmp_path)
    project = next(p for p in list_projects(state) if p.path and p.path.is_relative_to(state))
    run = project.runs()[-1]
    kept = json.loads((run / "report.json").read_text())["accepted_edits"]
    with serve(state, config) as served:
        client = _client(served)
        confirm = f"/p/{project.key}/confirm/adopt?run={run.name}"
        form, second_tab = _form(client, confirm), _form(client, confirm)
        done = client.post(f"/p/{project.key}/adopt", data=form, headers=served.origin)
        assert done.status_code == 303 and done.headers["location"].startswith("/jobs/")
        job = _wait(client, done.headers["location"])
        assert job["state"] == "done", job
        assert {a["name"] for a in job["result"]["adopted"]} >= {"CLAUDE"}
        replayed = client.post(f"/p/{project.key}/adopt", data=form, headers=served.origin)
        assert replayed.status_code == 403 and "sent already" in replayed.text
        again = client.post(f"/p/{project.key}/adopt", data=second_tab, headers=served.origin)
        twice = _wait(client, again.headers["location"])
        assert twice["state"] == "failed", twice
        assert "nothing" in twice["result"]["message"], twice
        page = client.get(f"/p/{project.key}/").text
        assert "No proposal is waiting" in page and "adopted" in page
    live = "\n".join(Path(a["live_path"]).read_text() for a in job["result"]["adopted"])
    assert all(e["content"] in live for e in kept)
    code, status = run_cli_status(config, project.path)
    assert code == 0 and status["pending_proposals"] == []


def run_cli_status(config: Path, project: Path | None) -> tuple[int, Any]:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "skillopt_sleep", "status", "--json", "--config", str(config),
         "--project", str(project)], capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return out.returncode, json.loads(out.stdout)


def test_a_host_other_than_the_loopback_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for host in ("0.0.0.0", "192.168.1.10", "example.com", "::"):
        code, text = run_cli(capsys, "serve", "--host", host, "--port", "0", "--json")
        assert code == 2 and text["error"] == "not_loopback", text


def test_a_night_and_a_restore_run_from_the_dashboard(tmp_path: Path) -> None:
    from skillopt_sleep.lock import project_lock

    state, config = two_projects(tmp_path)
    project = next(p for p in list_projects(state) if p.path and p.path.is_relative_to(state))
    assert project.path is not None
    with serve(state, config) as served:
        client = _client(served)
        confirm = f"/p/{project.key}/confirm/night"
        with project_lock(state, project.path, command="a test holding the lock"):
            held = client.post(
                f"/p/{project.key}/night", data=_form(client, confirm), headers=served.origin
            )
            job = _wait(client, held.headers["location"])
        assert job["state"] == "failed" and "a test holding the lock" in job["result"]["message"]
        assert len(project.runs()) == 1  # nothing ran
        night = client.post(
            f"/p/{project.key}/night", data=_form(client, confirm), headers=served.origin
        )
        job = _wait(client, night.headers["location"])
        assert job["state"] == "done", job
        assert any(line.startswith("rollouts:") for line in job["lines"])  # its progress
        assert len(project.runs()) == 2 and job["result"]["run_id"] == project.runs()[-1].name
        assert f'href="runs/{project.runs()[-1].name}/"' in client.get(f"/p/{project.key}/").text
        page = client.get(f"/p/{project.key}/").text
        skill, version = re.findall(r'name="skill" value="([^"]+)"><input type="hidden" '
                                    r'name="version" value="(\d+)"', page)[0]  # fmt: skip
        restore = _form(client, f"/p/{project.key}/confirm/restore?skill={skill}&version={version}")
        assert (restore["skill"], restore["version"]) == (skill, version)
        made_up = {**restore, "skill": "../../etc"}  # its token confirms the real skill only
        refused = client.post(f"/p/{project.key}/restore", data=made_up, headers=served.origin)
        assert refused.status_code == 403
        made_up_page = f"/p/{project.key}/confirm/restore?skill=../../etc&version={version}"
        assert client.get(made_up_page).status_code == 404
        done = client.post(f"/p/{project.key}/restore", data=restore, headers=served.origin)
        job = _wait(client, done.headers["location"])
        assert job["state"] == "done" and f"restored {skill} v{version}" in job["lines"][-1]
        stored = client.get(f"/p/{project.key}/").text
        assert f'name="version" value="{version}"><button' not in stored  # now the live one
