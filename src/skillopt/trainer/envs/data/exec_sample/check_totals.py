"""Checker of the exec_check sample: is the per-group totals CSV the item expects there?

Run by the ``program`` scorer in the agent's workspace; the item (with its expected rows)
is the JSON file ``$SKILLOPT_ITEM``. Writes one line per problem, then the share of the
expected rows (header included) that are right; exits 0 only when everything is right.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from typing import Any

__all__ = ["main", "problems_in"]


def problems_in(rows: list[list[str]], header: list[str], expected: list[Any]) -> list[str]:
    problems = []
    has_header = bool(rows) and [cell.strip() for cell in rows[0]] == header
    if not has_header:
        first = ",".join(rows[0]) if rows else "(empty file)"
        problems.append(f"the first row is {first!r}, expected the header {','.join(header)!r}")
    body = rows[1:] if has_header else rows
    for index, (group, total) in enumerate(expected):
        if index >= len(body):
            problems.append(f"row for {group!r} is missing")
            continue
        row = [cell.strip() for cell in body[index]]
        try:
            ok = len(row) == 2 and row[0] == group and abs(float(row[1]) - total) <= 0.005
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"row {index + 1} is {','.join(row)!r}, expected {group},{total:.2f}")
    if len(body) > len(expected):
        problems.append(f"{len(body) - len(expected)} extra row(s)")
    return problems


def main() -> int:
    with open(os.environ["SKILLOPT_ITEM"], encoding="utf-8") as handle:
        item = json.load(handle)
    output, expected = item["output"], item["expected"]
    try:
        with open(output, newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.reader(handle) if row]
    except FileNotFoundError:
        sys.stdout.write(f"{output} was not written\n0\n")
        return 1
    problems = problems_in(rows, expected["header"], expected["rows"])
    wrong = sum(1 for p in problems if not p.endswith("extra row(s)"))
    share = max(0.0, 1.0 - wrong / (len(expected["rows"]) + 1))
    sys.stdout.write("".join(f"{p}\n" for p in problems) + f"{share:.4f}\n")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
