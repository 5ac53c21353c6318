"""Synthetic QA items about invented towns, for demos, tests and benchmarks.

Every answer is stated in the item's context, so a careful reader always gets it right; the
task types differ in the answer *format* they expect (a bare number, a year, a full name,
yes/no, a place, a colour), which is what a skill can teach. The bundled set
(``envs/data/qa_synth``) is ``write_synthetic_qa(dir, 60, 30, 30, seed=7)``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from skillopt.atomicio import atomic_write_text

__all__ = ["TASK_TYPES", "synthetic_items", "write_synthetic_qa"]

TASK_TYPES = ("count", "year", "person", "yesno", "place", "plain")

_TOWNS = [
    "Brelmor",
    "Castavel",
    "Ostrin",
    "Kelvara",
    "Durnmoor",
    "Halvik",
    "Ysolde",
    "Tamberlin",
    "Quenford",
    "Morrowgate",
    "Silvane",
    "Ardley",
    "Pellham",
    "Varnok",
    "Eskerby",
    "Lintmouth",
    "Gorsemere",
    "Vellhaven",
    "Rushwick",
    "Thornfell",
]
_FIRST = [
    "Ada",
    "Bruno",
    "Celia",
    "Dmitri",
    "Elin",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Lucan",
    "Mirela",
    "Nils",
    "Oona",
    "Pavel",
    "Rosa",
    "Soren",
    "Talia",
    "Viggo",
]
_LAST = [
    "Ostrander",
    "Bellweather",
    "Kovac",
    "Lindqvist",
    "Marchetti",
    "Okafor",
    "Haldane",
    "Vasquez",
    "Thornbury",
    "Achterberg",
    "Novak",
    "Delacroix",
    "Ferreira",
    "Granholm",
    "Ibarra",
    "Juniper",
]
_THINGS = [
    "wells",
    "bridges",
    "windmills",
    "lighthouses",
    "libraries",
    "orchards",
    "bakeries",
    "schools",
]
_CRAFTS = [
    "pottery",
    "weaving",
    "glassblowing",
    "clockmaking",
    "bookbinding",
    "shipbuilding",
    "cheesemaking",
    "dyeing",
]
_COLOURS = ["crimson", "amber", "violet", "emerald", "ochre", "cobalt", "silver", "saffron"]


def _item(kind: str, rng: random.Random) -> tuple[str, str, list[str]]:
    town = rng.choice(_TOWNS)
    if kind == "count":
        n, thing = rng.randint(3, 480), rng.choice(_THINGS)
        return (
            f"How many {thing} did the survey count in {town}?",
            f"A survey of {town} in the old records counted {n} {thing} within the town walls.",
            [str(n)],
        )
    if kind == "year":
        year, craft = rng.randint(1420, 1990), rng.choice(_CRAFTS)
        return (
            f"When did the {craft} guild of {town} receive its charter?",
            f"The {craft} guild of {town} received its charter in {year}, after years of "
            "petitions.",
            [str(year)],
        )
    if kind == "person":
        name, craft = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", rng.choice(_CRAFTS)
        return (
            f"Who was the first master of {craft} in {town}?",
            f"The first master of {craft} in {town} was {name}, who trained forty apprentices.",
            [name],
        )
    if kind == "yesno":
        thing, yes = rng.choice(_THINGS), rng.random() < 0.5
        return (
            f"Does {town} have {thing} built of stone?",
            f"{town} {'has' if yes else 'has never had'} {thing} built of stone.",
            ["yes" if yes else "no"],
        )
    if kind == "place":
        origin, market = rng.sample(_TOWNS, 2)
        craft = rng.choice(_CRAFTS)
        return (
            f"Where was the market that received {craft} goods from {origin}?",
            f"Traders carried {craft} goods from {origin} to the market of {market} every spring.",
            [market],
        )
    colour, craft = rng.choice(_COLOURS), rng.choice(_CRAFTS)
    return (
        f"What colour is the banner of the {craft} guild in {town}?",
        f"The banner of the {craft} guild in {town} is {colour} with a white border.",
        [colour],
    )


def synthetic_items(n: int, *, seed: int) -> list[dict[str, Any]]:
    """``n`` items cycling through the task types, then shuffled."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        kind = TASK_TYPES[i % len(TASK_TYPES)]
        question, context, answers = _item(kind, rng)
        items.append(
            {
                "id": f"qa-{i + 1:03d}",
                "task_type": kind,
                "question": question,
                "context": context,
                "answers": answers,
            }
        )
    rng.shuffle(items)
    return items


def write_synthetic_qa(
    out_dir: str | Path, n_train: int, n_val: int, n_test: int, *, seed: int
) -> Path:
    """Write ``train.jsonl`` / ``val.jsonl`` / ``test.jsonl`` under ``out_dir``."""
    root = Path(out_dir)
    items = synthetic_items(n_train + n_val + n_test, seed=seed)
    parts = {
        "train": items[:n_train],
        "val": items[n_train : n_train + n_val],
        "test": items[n_train + n_val :],
    }
    for name, part in parts.items():
        text = "".join(json.dumps(item, sort_keys=True) + "\n" for item in part)
        atomic_write_text(root / f"{name}.jsonl", text)
    return root
