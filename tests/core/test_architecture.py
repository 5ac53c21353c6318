"""The arrows docs/architecture.md says must never exist, checked on the source tree."""

from __future__ import annotations

from support.source_tree import SRC, arrows, imports, module_name, modules, text

BACKENDS = SRC / "skillopt" / "backends"
# What the backends package may import from the rest of skillopt: the shared foundations.
FOUNDATIONS = ("skillopt.atomicio", "skillopt.config", "skillopt.errors", "skillopt.logging",
               "skillopt.redact")  # fmt: skip
STACK = ("skillopt.backends.pool", "skillopt.backends.wrappers", "skillopt.backends.open")
GROUND_FLOOR = ("skillopt.errors", "skillopt.atomicio", "skillopt.redact", "skillopt.logging",
                "skillopt.types")  # fmt: skip
MEMBERS = ("cli.member", "cli.claude", "cli.codex", "cli.common", "cli.copilot", "cli.process",
           "factory", "harness.rollout", "harness.trace", "harness.workspace", "mock",
           "http.member", "cli.tool_shims")  # fmt: skip


def under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_core_never_imports_the_sleep_package() -> None:
    bad = [(a, b) for a, b in arrows(SRC / "skillopt") if under(b, "skillopt_sleep")]
    assert not bad


def test_backends_import_only_themselves_and_the_foundations() -> None:
    """The stack opener alone also reaches the executor: it puts agent CLI members on Ray."""
    bad = [
        (a, b)
        for a, b in arrows(BACKENDS)
        if under(b, "skillopt")
        and not under(b, "skillopt.backends")
        and not any(under(b, f) for f in FOUNDATIONS)
        and not (a == "skillopt.backends.open" and under(b, "skillopt.executor"))
    ]
    assert not bad


def test_members_and_wrappers_know_nothing_of_the_stack_above_them() -> None:
    members = {f"skillopt.backends.{m}" for m in MEMBERS}
    # every name is a module: a renamed or moved member must not leave the check empty
    assert members <= {module_name(p) for p in modules(BACKENDS)}, members
    bad = [(a, b) for a, b in arrows(BACKENDS) if a in members and b in STACK]
    bad += [
        (a, b)
        for a, b in arrows(BACKENDS)
        if a == "skillopt.backends.wrappers" and b == "skillopt.backends.pool"
    ]
    assert not bad


def test_only_the_daemon_package_imports_apscheduler() -> None:
    users = {a for a, b in arrows(SRC) if under(b, "apscheduler")}
    assert users == {"skillopt_sleep.daemon.service", "skillopt_sleep.daemon.cron"}


def test_the_daemon_package_face_imports_nothing() -> None:
    """``config.py`` reads ``daemon.settings``: that must not load the scheduler."""
    assert not imports(SRC / "skillopt_sleep" / "daemon" / "__init__.py")


def test_pools_are_built_only_where_the_stack_is_opened() -> None:
    """Entry points open the stack with ``open_completer``; the trainer's demo pool (an
    in-process world model) is built in trainer/build.py and handed to it."""
    allowed = {"skillopt.backends.pool", "skillopt.backends.open", "skillopt.trainer.build"}
    building = {
        module_name(p)
        for p in modules()
        if "BackendPool(" in text(p) or "BackendPool.from_config(" in text(p)
    }
    assert building <= allowed, building - allowed


def test_stop_signals_are_handled_only_by_the_shutdown_path() -> None:
    # anyio's receiver has one caller, which knows where signals cannot reach the loop.
    opened = {module_name(p) for p in modules() if "open_signal_receiver(" in text(p)}
    assert opened == {"skillopt.signals"}
    receivers = {module_name(p) for p in modules() if "signal_receiver(" in text(p)}
    # daemon/service.py listens for SIGHUP (reload) only; SIGTERM/SIGINT go through shutdown.py.
    # The trainer's CLI turns SIGTERM into a cancellation of the run (exit 130).
    assert receivers - {"skillopt.signals"} == {
        "skillopt_sleep.shutdown", "skillopt_sleep.daemon.service", "skillopt.cli"
    }  # fmt: skip
    daemon = (SRC / "skillopt_sleep" / "daemon" / "service.py").read_text(encoding="utf-8")
    assert "signal_receiver(signal.SIGHUP)" in daemon


def test_the_ground_floor_stands_on_nothing_above_it() -> None:
    bad = [
        (a, b)
        for a, b in arrows(SRC / "skillopt")
        if a in GROUND_FLOOR and under(b, "skillopt") and b not in GROUND_FLOOR
    ]
    assert not bad


def test_the_gate_knows_nothing_of_the_loops_that_use_it() -> None:
    """The rule has one home: ``skillopt.gate`` stands on the ground floor, the config base
    and the fan-out helper, never on the trainer, the optimizer, the stack or the night."""
    allowed = (*GROUND_FLOOR, "skillopt.config", "skillopt.concurrency")
    bad = [
        (a, b)
        for a, b in arrows(SRC / "skillopt" / "gate")
        if under(b, "skillopt") and not under(b, "skillopt.gate") and b not in allowed
    ]
    assert not bad
    assert not (SRC / "skillopt" / "gate.py").exists()


def test_harvest_reads_transcripts_and_knows_nothing_of_the_night() -> None:
    bad = [
        (a, b)
        for a, b in arrows(SRC / "skillopt_sleep" / "harvest")
        if (under(b, "skillopt_sleep") and not under(b, "skillopt_sleep.harvest"))
        or (under(b, "skillopt") and b not in GROUND_FLOOR)
    ]
    assert not bad


def test_the_html_report_never_calls_a_model() -> None:
    bad = [
        (a, b) for a, b in arrows(SRC / "skillopt_sleep" / "html") if under(b, "skillopt.backends")
    ]
    assert not bad


def test_only_the_faces_import_the_commands() -> None:
    faces = {"skillopt_sleep.cli", "skillopt_sleep.mcp_server", "skillopt_sleep.agent_summary",
             "skillopt_sleep.serve.app", "skillopt_sleep.serve.actions"}  # fmt: skip
    users = {
        a
        for a, b in arrows(SRC)
        if under(b, "skillopt_sleep.commands") and not under(a, "skillopt_sleep.commands")
    }
    assert users <= faces, users - faces


def test_no_test_code_ships() -> None:
    bad = [(a, b) for a, b in arrows(SRC) if under(b, "support") or under(b, "tests")]
    assert not bad
