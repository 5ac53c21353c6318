"""Config loading: precedence, error key paths, redacted dump, the example file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from skillopt.config import (
    AzureChatMember,
    AzureManagedIdentityAuth,
    ClaudeCliMember,
    MockMember,
    PoolConfig,
    load_pool_config,
    load_toml_model,
    redacted_dump,
)
from skillopt.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

BASE = """
[[members]]
kind = "openai"
name = "local"
base_url = "http://127.0.0.1:8000/v1"
model = "m"
api_key_env = "LOCAL_KEY"

[roles]
target = ["local"]
optimizer = ["local"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "endpoints.toml"
    path.write_text(text)
    return path


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hour: int = Field(default=2, ge=0, le=23)
    tags: list[str] = Field(default_factory=list)


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "default"
    schedule: _Inner = Field(default_factory=_Inner)


def test_precedence_overrides_env_file_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "file"\n[schedule]\nhour = 4\n')
    assert load_toml_model(None, _Settings).schedule.hour == 2
    assert load_toml_model(path, _Settings).schedule.hour == 4
    env = {"APP_SCHEDULE__HOUR": "5", "APP_NAME": "env", "OTHER_NAME": "x"}
    loaded = load_toml_model(path, _Settings, env_prefix="APP_", environ=env)
    assert (loaded.name, loaded.schedule.hour) == ("env", 5)
    loaded = load_toml_model(
        path,
        _Settings,
        env_prefix="APP_",
        environ=env,
        overrides={"schedule.hour": 6, "name": None},
    )
    assert (loaded.name, loaded.schedule.hour) == ("env", 6)
    nested = load_toml_model(path, _Settings, overrides={"schedule": {"tags": ["a", "b"]}})
    assert nested.schedule.tags == ["a", "b"] and nested.schedule.hour == 4


def test_env_values_parse_as_toml_literals_else_strings(tmp_path: Path) -> None:
    env = {"APP_SCHEDULE__TAGS": '["x", "y"]', "APP_NAME": "plain words"}
    loaded = load_toml_model(None, _Settings, env_prefix="APP_", environ=env)
    assert loaded.schedule.tags == ["x", "y"] and loaded.name == "plain words"
    dated = load_toml_model(None, _Settings, env_prefix="APP_", environ={"APP_NAME": "2024-10-21"})
    assert dated.name == "2024-10-21"


def test_env_override_indexes_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLOPT_POOL__MEMBERS__0__MAX_CONCURRENCY", "3")
    cfg = load_pool_config(write(tmp_path, BASE))
    assert cfg.members[0].max_concurrency == 3
    monkeypatch.setenv("SKILLOPT_POOL__MEMBERS__4__MODEL", "x")
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, BASE))
    assert caught.value.key == "members.4"


@pytest.mark.parametrize(
    ("edit", "key", "reason"),
    [
        (('kind = "openai"', 'kind = "openai"\nbogus = 1'), "members.0.bogus", "unknown key"),
        (("http://127.0.0.1:8000/v1", "ftp://host/v1"), "members.0.base_url", "http"),
        (("http://127.0.0.1:8000/v1", "not a url"), "members.0.base_url", "URL"),
        (("http://127.0.0.1:8000/v1", "http://127.0.0.1:99999/v1"), "members.0.base_url", "URL"),
        (("http://127.0.0.1:8000/v1", "http://[::1/v1"), "members.0.base_url", "URL"),
        (('kind = "openai"', 'kind = "gemini"'), "members.0.kind", "unknown kind 'gemini'"),
        (('target = ["local"]', 'target = ["nope"]'), "roles.target.0", "unknown member 'nope'"),
        (('target = ["local"]', "target = []"), "roles.target", "at least 1"),
        (('"LOCAL_KEY"', '"sk-live-abcdefghijklmnopqrstuvwxyz"'), "members.0.api_key_env", "NAME"),
        (
            ('model = "m"', 'model = "m"\nmax_concurrency = 0'),
            "members.0.max_concurrency",
            "greater",
        ),
        (("[roles]", "[retry]\nmax_attempts = 0\n[roles]"), "retry.max_attempts", "greater"),
        (("[roles]", "[wat]\n[roles]"), "wat", "unknown key"),
    ],
)
def test_bad_values_name_the_key(
    tmp_path: Path, edit: tuple[str, str], key: str, reason: str
) -> None:
    old, new = edit
    assert old in BASE
    path = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(ConfigError) as caught:
        load_pool_config(path)
    assert caught.value.key == key
    assert reason in str(caught.value)
    assert str(path) in str(caught.value)
    assert "sk-live" not in str(caught.value)


def test_duplicate_member_names(tmp_path: Path) -> None:
    text = BASE + '\n[[members]]\nkind = "mock"\nname = "local"\n'
    # The [[members]] after [roles] still appends to the members array.
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, text))
    assert caught.value.key == "members.1.name" and "duplicate" in str(caught.value)


def test_nested_auth_errors_name_the_path(tmp_path: Path) -> None:
    text = """
[[members]]
kind = "azure"
name = "az"
endpoint = "https://example.openai.azure.com"
deployment = "d"
auth = { method = "managed_identity", client_id = "abc", tenant = "t" }
[roles]
target = ["az"]
optimizer = ["az"]
"""
    with pytest.raises(ConfigError) as caught:
        load_pool_config(write(tmp_path, text))
    assert caught.value.key == "members.0.auth.tenant"
    fixed = load_pool_config(write(tmp_path, text.replace(', tenant = "t"', "")))
    member = fixed.members[0]
    assert isinstance(member, AzureChatMember)
    assert isinstance(member.auth, AzureManagedIdentityAuth) and member.auth.client_id == "abc"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (None, "file not found"),
        ("x = ", "invalid TOML"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_unreadable_files(tmp_path: Path, text: str | bytes | None, needle: str) -> None:
    path = tmp_path / "c.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as caught:
        load_pool_config(path)
    assert caught.value.source == str(path)


def test_redacted_dump_shows_env_names_and_hides_url_credentials(tmp_path: Path) -> None:
    text = BASE.replace("http://127.0.0.1:8000/v1", "http://user:hunter2pass@127.0.0.1:8000/v1")
    cfg = load_pool_config(write(tmp_path, text))
    dumped = redacted_dump(cfg)
    member = dumped["members"][0]
    assert member["api_key_env"] == "LOCAL_KEY"
    assert "hunter2pass" not in str(dumped)
    assert dumped["roles"] == {"target": ["local"], "optimizer": ["local"]}


def test_cli_and_mock_members_parse() -> None:
    cfg = PoolConfig.model_validate(
        {
            "members": [
                {"kind": "mock", "name": "mock", "options": {"seed": 3}},
                {
                    "kind": "claude",
                    "name": "cl",
                    "model": "sonnet",
                    "isolated_home": True,
                    "extra_args": ["--verbose"],
                    "provider_base_url": "http://127.0.0.1:9/v1",
                },
            ],
            "roles": {"target": ["cl"], "optimizer": ["mock"]},
        }
    )
    assert isinstance(cfg.members[0], MockMember) and cfg.members[0].options == {"seed": 3}
    assert isinstance(cfg.members[1], ClaudeCliMember) and cfg.members[1].timeout == 240.0
    assert cfg.member("cl").name == "cl"


def test_paths_expand_the_home_directory(tmp_path: Path) -> None:
    cfg = load_pool_config(
        write(tmp_path, BASE), overrides={"cache.dir": "~/skillopt-cache"}, env_prefix=None
    )
    assert cfg.cache.dir == Path.home() / "skillopt-cache"


def test_example_file_loads() -> None:
    cfg = load_pool_config(REPO / "configs" / "endpoints.example.toml", env_prefix=None)
    kinds = {m.kind for m in cfg.members}
    assert {"openai", "azure", "azure_responses", "mock"} <= kinds
    assert cfg.roles.target and cfg.roles.optimizer


# ----------------------------------------------------------------- environment overrides
SLEEP_POOL = BASE.replace("[[members]]", "[[pool.members]]").replace("[roles]", "[pool.roles]")


def test_sleep_toml_reads_its_pool_from_its_own_prefix_and_reports_the_other(
    tmp_path: Path,
) -> None:
    """docs/endpoints.md: one prefix per file; the other file's prefix is reported."""
    from structlog.testing import capture_logs

    from skillopt_sleep.config import load_sleep_config

    path = write(tmp_path, SLEEP_POOL)
    env = {
        "SKILLOPT_POOL__RETRY__MAX_ATTEMPTS": "6",
        "SKILLOPT_SLEEP__POOL__BREAKER__COOLDOWN": "5",
        "SKILLOPT_SLEEPNIGHT__ROUNDS": "2",
        "SKILLOPT_TEST_KEY": "not an override",
    }
    with capture_logs() as logs:
        cfg = load_sleep_config(path, environ=env)
    assert cfg.pool is not None and cfg.pool.breaker.cooldown == 5
    assert cfg.pool.retry.max_attempts == 4  # not applied, but said:
    reported = {e["variable"]: e["reason"] for e in logs if e["event"] == "config.env_not_read"}
    assert set(reported) == {"SKILLOPT_POOL__RETRY__MAX_ATTEMPTS", "SKILLOPT_SLEEPNIGHT__ROUNDS"}
    assert (
        "SKILLOPT_SLEEP__POOL__RETRY__MAX_ATTEMPTS"
        in reported["SKILLOPT_POOL__RETRY__MAX_ATTEMPTS"]
    )
    # an endpoints file reads SKILLOPT_POOL__ and leaves sleep.toml's variables alone
    with capture_logs() as logs:
        pool = load_pool_config(write(tmp_path, BASE), environ=env)
    assert pool.retry.max_attempts == 6 and pool.breaker.cooldown == 30
    assert [e["variable"] for e in logs] == ["SKILLOPT_SLEEPNIGHT__ROUNDS"]


def test_a_bad_override_names_its_variable(tmp_path: Path) -> None:
    from skillopt_sleep.config import load_sleep_config

    path = write(tmp_path, SLEEP_POOL)
    for name, value in [
        ("SKILLOPT_SLEEP__NIGHT__ROUNDZ", "2"),
        ("SKILLOPT_SLEEP__NIGHT__ROUNDS", "0"),
        ("SKILLOPT_SLEEP__NIGHT____ROUNDS", "2"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_sleep_config(path, environ={name: value})
        assert str(caught.value).startswith(f"environment variable {name}: "), caught.value
    with pytest.raises(ConfigError, match=r"night\.roundz: unknown key"):
        load_sleep_config(path, environ={"SKILLOPT_SLEEP__NIGHT__ROUNDZ": "2"})


def test_endpoint_tables_pasted_into_sleep_toml_say_where_they_go(tmp_path: Path) -> None:
    from skillopt_sleep.config import load_sleep_config

    with pytest.raises(ConfigError) as caught:
        load_sleep_config(write(tmp_path, BASE), environ={})
    assert caught.value.key == "members" and "write [[pool.members]]" in str(caught.value)
    roles_only = 'state_dir = "/tmp/x"\n[roles]\ntarget = ["a"]\n'
    with pytest.raises(ConfigError, match=r"write \[pool.roles\]"):
        load_sleep_config(write(tmp_path, roles_only), environ={})


def test_pool_errors_in_sleep_toml_keep_the_pool_prefix(tmp_path: Path) -> None:
    from skillopt_sleep.config import load_sleep_config

    twice = SLEEP_POOL + '\n[[pool.members]]\nkind = "mock"\nname = "local"\n'
    with pytest.raises(ConfigError) as caught:
        load_sleep_config(write(tmp_path, twice), environ={})
    assert caught.value.key == "pool.members.1.name"
    unknown = SLEEP_POOL.replace('target = ["local"]', 'target = ["nope"]')
    with pytest.raises(ConfigError) as caught:
        load_sleep_config(write(tmp_path, unknown), environ={})
    assert caught.value.key == "pool.roles.target.0" and "unknown member 'nope'" in str(
        caught.value
    )


def test_a_set_typo_is_an_unknown_key_blamed_on_the_set(tmp_path: Path) -> None:
    from skillopt.trainer.config import load_trainer_config

    path = REPO / "configs" / "trainer" / "qa_demo.toml"
    with pytest.raises(ConfigError) as caught:
        load_trainer_config(path, overrides=["train.num_epoch=3"])
    assert str(caught.value) == "--set train.num_epoch=3: train.num_epoch: unknown key"
    with pytest.raises(ConfigError) as caught:
        load_trainer_config(path, overrides=["train.num_epochs=0"])
    assert caught.value.key == "train.num_epochs" and "--set" in str(caught.value)
