"""`skillopt` command line: ``train`` (the ReflACT loop) and ``eval`` (score one skill).

Exit codes: 0 done, 1 a run error (the message names the cause; a run in which no step
could update the skill is one, naming the stage), 2 bad usage or config,
130 interrupted (the run directory is consistent; the same command resumes it).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from skillopt.cli_support import log_level, quiet_broken_pipe
from skillopt.errors import ConfigError, RunFailedError, SkillOptError
from skillopt.logging import configure_logging
from skillopt.progress import Progress, terminal_progress
from skillopt.signals import signal_receiver

__all__ = ["build_parser", "main"]

T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skillopt", description="ReflACT skill training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser("train", help="optimize a skill over a benchmark environment")
    train.add_argument("--config", required=True, help="trainer TOML file")
    train.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key (repeatable), e.g. --set train.num_epochs=3",
    )  # fmt: skip
    train.add_argument(
        "--log-level", type=log_level, default=None,
        help="default INFO; WARNING on a terminal, where a live progress line is shown instead",
    )  # fmt: skip

    ev = sub.add_parser("eval", help="score a skill file on a split")
    ev.add_argument("--config", required=True, help="trainer TOML file")
    ev.add_argument("--skill", required=True, help="skill document to score")
    ev.add_argument("--split", default="test", help="train | val | test (default test)")
    ev.add_argument("--out", default="", help="directory for the rollouts (default: a temp dir)")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--log-level", type=log_level, default="WARNING")
    return parser


async def _train(
    args: argparse.Namespace, progress: Progress | None
) -> tuple[dict[str, Any], Path]:
    """The run's summary and its directory."""
    from skillopt.trainer.build import open_environment, open_pool
    from skillopt.trainer.config import load_trainer_config
    from skillopt.trainer.loop import Trainer

    cfg = load_trainer_config(args.config, overrides=args.overrides)
    async with open_environment(cfg) as env, open_pool(cfg) as pool:
        trainer = Trainer(cfg, env, pool, pool_accounting=pool.accounting, progress=progress)
        summary = await _until_sigterm(trainer.run)
    if summary is None:  # raised here, after every resource above was closed
        raise KeyboardInterrupt
    return summary, trainer.core.run_dir.root


async def _until_sigterm(run: Callable[[], Awaitable[T]]) -> T | None:
    """``await run()``, or None when SIGTERM ended it as Ctrl-C would: the work in flight is
    cancelled (Ray tasks with it), the run directory stays resumable (exit 130)."""
    result: list[T] = []
    terminated = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal terminated
        with signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                terminated = True
                scope.cancel()

    async def work(scope: anyio.CancelScope) -> None:
        result.append(await run())
        scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            tg.start_soon(work, tg.cancel_scope)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    return None if terminated or not result else result[0]


def _read_skill(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read skill file: {exc}", key="--skill") from exc


async def _eval(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from skillopt.trainer.build import open_environment, open_pool
    from skillopt.trainer.config import load_trainer_config
    from skillopt.trainer.envs.base import parse_split
    from skillopt.trainer.evaluate import evaluate_skill

    cfg = load_trainer_config(args.config, overrides=args.overrides)
    split = parse_split(args.split)
    skill = _read_skill(args.skill)
    async with open_environment(cfg) as env, open_pool(cfg) as pool:
        if args.out:
            return await evaluate_skill(cfg, env, pool, skill, split, Path(args.out))
        with tempfile.TemporaryDirectory(prefix="skillopt-eval-") as tmp:
            return await evaluate_skill(cfg, env, pool, skill, split, Path(tmp))


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [
        f"steps {summary['total_steps']}: {summary['total_accepts']} accepted, "
        f"{summary['total_rejects']} rejected, {summary['total_skips']} skipped",
        f"val gate score: baseline {summary['baseline_gate_score']:.3f} -> best "
        f"{summary['best_gate_score']:.3f} (step {summary['best_step']})",
    ]
    if "test_hard" in summary:
        lines.append(
            f"test hard: baseline {summary['baseline_test_hard']:.3f}, best "
            f"{summary['test_hard']:.3f}, final {summary['final_test_hard']:.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    progress = terminal_progress() if args.command == "train" else None
    level = args.log_level or ("WARNING" if progress is not None else "INFO")
    configure_logging(level=level)
    try:
        if args.command == "train":
            summary, run_dir = anyio.run(_train, args, progress)
            for line in _summary_lines(summary):
                print(line)
            print(f"run directory: {run_dir} (summary.json, history.json)")
            print(f"best skill: {run_dir / 'best_skill.md'}")
        else:
            print(json.dumps(anyio.run(_eval, args), indent=2, sort_keys=True))
    except ConfigError as exc:
        print(f"skillopt: config error: {exc}", file=sys.stderr)
        return 2
    except RunFailedError as exc:
        print(f"skillopt: the run failed during {exc.stage}: {exc.cause}", file=sys.stderr)
        return 1
    except SkillOptError as exc:
        print(f"skillopt: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return quiet_broken_pipe()
    except KeyboardInterrupt:
        print("skillopt: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
