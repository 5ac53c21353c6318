"""`skillopt-sleep` command line (subcommands are filled in by the night and daemon modules)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skillopt-sleep",
        description="Nightly, validation-gated improvement of your coding agent's skill documents.",
    )
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
