"""The docs and the product agree: documented flags exist, config keys are documented.

Each test reads the documentation as a user would and checks it against the real argparse
parsers and config models, so a renamed flag or a new key fails here before it misleads
anyone.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from skillopt.backends.http.request_settings import RequestSettings
from skillopt.cli import build_parser as skillopt_parser
from skillopt.config import (
    AzureAuth,
    AzureChatMember,
    AzureCliAuth,
    AzureDefaultAuth,
    AzureKeyAuth,
    AzureManagedIdentityAuth,
    AzureResponsesMember,
    BreakerConfig,
    CacheConfig,
    ClaudeCliMember,
    CodexCliMember,
    CopilotCliMember,
    MemberConfig,
    MockMember,
    OpenAIChatMember,
    OpenAIResponsesMember,
    PoolConfig,
    RetryConfig,
    RolesConfig,
)
from skillopt.errors import ConfigError
from skillopt.trainer.config import TrainerConfig, load_trainer_config
from skillopt_sleep.cli import build_parser as sleep_parser
from skillopt_sleep.config import SleepConfig, load_sleep_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_common_flags_are_where_the_docs_say() -> None:
    """night.md: every command takes --config, --state-dir and --log-level; every command
    but daemon --project and --json (README says the same about --json)."""
    night = one_line((DOCS / "night.md").read_text())
    assert "Every command takes `--config`, `--state-dir` and `--log-level`." in night
    assert "Every command but `daemon` also takes `--project`" in night
    assert "every command but the long-running `daemon`" in one_line(
        (ROOT / "README.md").read_text()
    )
    commands = subcommands(sleep_parser())
    assert {"once", "dry-run", "status", "adopt", "harvest", "schedule", "daemon"} <= set(commands)
    for name, parser in commands.items():
        have = flags(parser)
        assert {"--config", "--state-dir", "--log-level"} <= have, name
        if name != "daemon":
            assert {"--project", "--json"} <= have, name


# ----------------------------------------------------------------------- config keys


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def row_keys(cell: str) -> list[str]:
    """``a.b` / `c`` -> ``["a.b", "a.c"]`` (a later name is a sibling of the first)."""
    names = [part.strip().strip("`").strip("[]") for part in cell.split(" / ")]
    parent = names[0].rpartition(".")[0]
    return [names[0], *(f"{parent}.{n}" if parent and "." not in n else n for n in names[1:])]


def leaves(model: BaseModel, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> default value of every key a user can write (nested models flattened)."""
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.update(leaves(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def sleep_table() -> dict[str, str]:
    """night.md's configuration reference: dotted key -> documented default."""
    rows = table_rows((DOCS / "night.md").read_text(), "| Key | Default |")
    out: dict[str, str] = {}
    for cells in rows:
        keys = row_keys(cells[0])
        defaults = cells[1].split(" / ") if len(keys) > 1 else [cells[1]]
        assert len(defaults) == len(keys), cells
        out.update(zip(keys, defaults, strict=True))
    return out


def test_every_sleep_config_key_is_in_the_reference_table_and_back() -> None:
    documented = set(sleep_table())
    keys = set(leaves(SleepConfig()))
    assert keys - documented == set(), "keys missing from docs/night.md's table"
    assert documented - keys == set(), "docs/night.md documents keys that do not exist"


def same_default(doc: str, default: Any) -> bool | None:
    """Whether the documented default is the model's; None when the doc describes it in
    words (e.g. ``<project>/CLAUDE.md``) instead of giving a value."""
    text = doc.strip().strip("`")
    first = text.split()[0] if text.split() else ""
    if isinstance(default, bool):
        return first == str(default).lower()
    if isinstance(default, int | float):
        return float(first) == default
    if isinstance(default, Path):
        return text == str(default)
    if isinstance(default, str):
        return text.strip('"') == default
    if isinstance(default, list) and text.startswith("["):
        return bool(json.loads(text) == default)
    if default is None and first.lower().startswith("none"):
        return True
    return None


def test_documented_defaults_are_the_defaults() -> None:
    defaults = leaves(SleepConfig())
    wrong = {
        key: (doc, defaults[key])
        for key, doc in sleep_table().items()
        if same_default(doc, defaults[key]) is False
    }
    assert wrong == {}


def example_lines(path: Path) -> dict[str, str]:
    """Dotted key -> its whole line (comment included) in a TOML example file."""
    section, out = "", {}
    for line in path.read_text().splitlines():
        header = re.match(r"^\[+([\w.]+)\]+", line)
        if header:
            section = header.group(1) + "."
        elif re.match(r"^\w+ = ", line):
            out[section + line.split(" = ")[0]] = line
    return out


def test_the_sleep_example_says_where_it_differs_from_the_defaults() -> None:
    """A value in the example that is not the default says so in its comment (or in its
    section header's), so nobody copies it believing it is the default."""
    path = ROOT / "configs" / "sleep.example.toml"
    loaded = load_sleep_config(path, environ={})
    defaults = leaves(SleepConfig())
    values = leaves(loaded)
    lines = example_lines(path)
    text = path.read_text()
    undeclared = []
    for key, line in lines.items():
        if key.startswith("pool.") or key not in defaults or values[key] == defaults[key]:
            continue
        header = next(h for h in text.splitlines() if h.startswith(f"[{key.rpartition('.')[0]}]"))
        if "default" not in line.partition("#")[2] and "default" not in header:
            undeclared.append(line)
    assert undeclared == []


def test_the_removed_debug_key_is_not_a_user_key(tmp_path: Path) -> None:
    for text in ("debug_kill_after = 3\n", "[night]\ndebug_kill_after = 3\n"):
        path = tmp_path / "sleep.toml"
        path.write_text(text)
        with pytest.raises(ConfigError, match="debug_kill_after: unknown key"):
            load_sleep_config(path, environ={})


def backticked_outside_parens(cell: str) -> list[str]:
    """The `names` of a table cell, leaving out what parentheses say about them."""
    depth, kept = 0, []
    for char in cell:
        depth += char == "("
        if depth == 0:
            kept.append(char)
        depth -= char == ")" and depth > 0
    return re.findall(r"`\[?([\w.]+)\]?`", "".join(kept))


MEMBER_MODELS = {
    "openai": OpenAIChatMember,
    "openai_responses": OpenAIResponsesMember,
    "azure": AzureChatMember,
    "azure_responses": AzureResponsesMember,
    "mock": MockMember,
    "claude": ClaudeCliMember,
    "codex": CodexCliMember,
    "copilot": CopilotCliMember,
}


def test_every_member_key_is_in_the_endpoints_table_for_its_kind_and_back() -> None:
    rows = table_rows((DOCS / "endpoints.md").read_text(), "| Kinds | Keys |")
    documented: dict[str, set[str]] = {kind: set() for kind in MEMBER_MODELS}
    for first, keys in rows:
        kinds = list(MEMBER_MODELS) if first == "every kind" else backticked_outside_parens(first)
        for kind in kinds:
            documented[kind] |= set(backticked_outside_parens(keys))
    assert {k: set(m.model_fields) for k, m in MEMBER_MODELS.items()} == documented


def test_every_pool_table_key_is_in_the_endpoints_table_and_back() -> None:
    rows = table_rows((DOCS / "endpoints.md").read_text(), "| Table | Keys |")
    documented = {
        backticked_outside_parens(a)[0]: set(backticked_outside_parens(b)) for a, b in rows
    }
    auth = set().union(
        *(m.model_fields for m in (AzureKeyAuth, AzureDefaultAuth, AzureCliAuth,
                                   AzureManagedIdentityAuth))
    )  # fmt: skip
    pool = {"retry": RetryConfig, "breaker": BreakerConfig, "cache": CacheConfig}
    tables = {name: set(model.model_fields) for name, model in pool.items()}
    request = set(RequestSettings.model_fields)
    roles = set(RolesConfig.model_fields)
    assert documented == {"auth": auth, "request": request, "roles": roles, **tables}
    assert set(PoolConfig.model_fields) == {"members", "roles", "retry", "breaker", "cache"}


def toml_blocks(path: Path) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", path.read_text(), re.DOTALL)


def test_every_endpoints_example_is_a_valid_piece_of_an_endpoints_file() -> None:
    """A documented key exists where the example puts it: each block validates."""
    member = TypeAdapter(MemberConfig)
    sections = {"roles": RolesConfig, "retry": RetryConfig, "breaker": BreakerConfig,
                "cache": CacheConfig}  # fmt: skip
    checked = 0
    for block in toml_blocks(DOCS / "endpoints.md"):
        if block.lstrip().startswith("auth = "):  # alternatives, one per line
            for line in block.splitlines():
                if line.startswith("auth = "):
                    TypeAdapter(AzureAuth).validate_python(tomllib.loads(line)["auth"])
                    checked += 1
            continue
        data = tomllib.loads(block)
        for raw in data.pop("members", []):
            member.validate_python(raw)
            checked += 1
        for name, value in data.items():
            sections[name].model_validate(value)
            checked += 1
    assert checked >= 12


def test_every_trainer_key_is_in_the_trainer_table_and_back() -> None:
    rows = table_rows((DOCS / "trainer.md").read_text(), "| section | keys |")
    documented = {
        (first.strip("`") if first != "(top)" else ""): set(backticked_outside_parens(keys))
        for first, keys in rows
    }
    defaults = TrainerConfig()
    expected = {
        "": {
            n for n in TrainerConfig.model_fields if not isinstance(getattr(defaults, n), BaseModel)
        }
    }
    for name in TrainerConfig.model_fields:
        section = getattr(defaults, name)
        if isinstance(section, BaseModel):
            expected[name] = set(type(section).model_fields)
    assert documented == expected


def test_trainer_base_toml_is_every_key_at_its_default_but_the_gate_choices() -> None:
    """trainer.md: configs/trainer/base.toml lists every key with its default (a key unset
    by default, such as env.data.required, is a comment there: TOML has no null), except the
    gate's metric and confidence: the trainer's own choices over the one set of defaults."""
    base = tomllib.loads((ROOT / "configs" / "trainer" / "base.toml").read_text())
    defaults = TrainerConfig().model_dump(mode="json", exclude_none=True)
    assert (base["gate"].pop("metric"), base["gate"].pop("confidence")) == ("hard", 0.95)
    for key in ("metric", "confidence"):
        defaults["gate"].pop(key)
    assert base == defaults
    for path in (ROOT / "configs" / "trainer").glob("*.toml"):
        load_trainer_config(path)  # every shipped trainer config loads


# ----------------------------------------------------------------------- CLI flags

PROGRAM = re.compile(r"(?<![\w-])(skillopt-sleep|skillopt_sleep|skillopt)\s+([a-z][a-z-]*)(.*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
OTHER_PROGRAMS = {"systemctl", "journalctl", "crontab", "launchctl", "loginctl", "codex",
                  "claude", "copilot", "make", "npm", "git", "pi", "opencode"}  # fmt: skip
DOCUMENTED = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def code_pieces(text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks, cut at shell separators and
    comments, so each piece holds at most one command."""
    pieces: list[str] = []
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)
    outside = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.DOTALL)
    spans = re.findall(r"`([^`\n]+)`", outside)
    for chunk in [*spans, *(line for block in fenced for line in block.splitlines())]:
        pieces += re.split(r"\s(?:&&|\|\||\||;)\s|\s#\s|^#", chunk)
    return [p.strip() for p in pieces if p.strip()]


def test_every_flag_the_docs_show_exists() -> None:
    """A flag written after a command exists on that command; a flag named on its own
    exists on some command (cli-backends.md names the agent CLIs' own flags)."""
    parsers = {
        "skillopt-sleep": subcommands(sleep_parser()),
        "skillopt": subcommands(skillopt_parser()),
    }
    known = set().union(*(flags(p) for cmds in parsers.values() for p in cmds.values()))
    problems = []
    for path in DOCUMENTED:
        for piece in code_pieces(path.read_text()):
            found = PROGRAM.search(piece)
            if found is not None:
                program = "skillopt-sleep" if "sleep" in found.group(1) else "skillopt"
                command = parsers[program].get(found.group(2))
                if command is None:
                    problems.append(f"{path.name}: no command {program} {found.group(2)}")
                    continue
                problems += [
                    f"{path.name}: {program} {found.group(2)} has no {flag}"
                    for flag in FLAG.findall(found.group(3))
                    if flag not in flags(command)
                ]
            elif (
                path.name != "cli-backends.md"
                and piece.split()[0] not in OTHER_PROGRAMS
                and not piece.startswith("bench/")  # a benchmark script has its own flags
            ):
                problems += [f"{path.name}: no command has {f}" for f in FLAG.findall(piece)
                             if f not in known]  # fmt: skip
    assert problems == []


def test_a_documented_demo_command_finds_the_demo_it_ran(tmp_path: Path) -> None:
    """``once --demo --state-dir DIR`` keeps its demo in ``DIR/demo``: the commands the docs
    show after it name that folder's config and project."""
    from skillopt_sleep.demo import demo_in

    kept = demo_in(tmp_path)
    where = {"sleep.toml": kept.root / "sleep.toml", "demo-project": kept.project}
    shown = 0
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for state in set(re.findall(r"once --demo --state-dir (\S+)", text)):
            for flag, path in re.findall(rf"--(config|project) ({re.escape(state)}/\S+)", text):
                name = path.removeprefix(f"{state}/")
                expected = where["sleep.toml" if flag == "config" else "demo-project"]
                assert tmp_path / name == expected, f"{doc.name}: --{flag} {path}"
                shown += 1
    assert shown >= 2
