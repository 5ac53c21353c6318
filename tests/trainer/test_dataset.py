"""Data as users have it: JSONL or a JSON array, one file or three, fields mapped (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillopt.errors import ConfigError, DataError
from skillopt.trainer.config import load_trainer_config
from skillopt.trainer.dataset import DataSection, FieldMap, load_splits, ratio_split
from skillopt.types import Split

REPO = Path(__file__).resolve().parents[2]


def rows(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "question": f"Q{i}?", "answers": [f"a{i}"], **extra} for i in range(n)]


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    return path


def load(root: Path, **spec: Any) -> dict[Split, list[str]]:
    splits = load_splits(root, DataSection(**spec), default_dir=root)
    return {split: [i.id for i in items] for split, items in splits.items()}


def test_a_seeded_ratio_split_of_one_file_is_stable_and_disjoint(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "items.jsonl", rows(20))
    first = load(tmp_path, split="2:1:7", split_seed=3)
    assert [len(first[s]) for s in Split] == [4, 2, 14]
    assert first == load(tmp_path, split="2:1:7", split_seed=3)
    assert first != load(tmp_path, split="2:1:7", split_seed=4)
    ids = [i for s in Split for i in first[s]]
    assert sorted(ids) == sorted(f"q{i}" for i in range(20))
    for chosen in first.values():  # file order within a split
        assert chosen == sorted(chosen, key=lambda i: int(i[1:]))


@pytest.mark.parametrize(
    ("n", "ratio", "sizes"),
    [(10, "1:1:1", [4, 3, 3]), (3, "2:1:7", [1, 0, 2]), (7, "1:0:0", [7, 0, 0])],
)
def test_ratio_split_sizes_use_largest_remainders(n: int, ratio: str, sizes: list[int]) -> None:
    got = ratio_split([str(i) for i in range(n)], ratio, seed=0)
    assert [len(got[s]) for s in Split] == sizes


def test_a_json_array_file_with_mapped_fields_and_id_manifests(tmp_path: Path) -> None:
    items = [
        {"key": f"k{i}", "prompt": f"P{i}", "label": i, "options": ["x", "y"]} for i in range(6)
    ]
    (tmp_path / "items.json").write_text(json.dumps(items, indent=2), encoding="utf-8")
    (tmp_path / "train.txt").write_text("k0\nk1\nk2\n")
    (tmp_path / "val.txt").write_text('["k3"]')
    (tmp_path / "test.txt").write_text("k4\n\nk5\n")
    fields = FieldMap(id="key", question="prompt", answers="label", choices="options")
    spec = DataSection(
        manifests={"train": "train.txt", "val": "val.txt", "test": "test.txt"}, fields=fields
    )
    splits = load_splits(tmp_path, spec, default_dir=tmp_path)
    assert [[i.id for i in splits[s]] for s in Split] == [["k0", "k1", "k2"], ["k3"], ["k4", "k5"]]
    item = splits[Split.VAL][0]
    assert (item.data["question"], item.data["answers"], item.data["choices"]) == (
        "P3",
        ["3"],
        ["x", "y"],
    )
    assert item.data["prompt"] == "P3"  # the item keeps its own fields too


def test_three_files_named_in_config_and_json_arrays_by_default(tmp_path: Path) -> None:
    for split in Split:
        (tmp_path / f"{split.value}.json").write_text(
            json.dumps([{"id": f"{split.value}-1", "question": "q", "answers": "a"}])
        )
    assert load(tmp_path)[Split.TEST] == ["test-1"]
    sub = tmp_path / "named"
    sub.mkdir()
    for split in Split:
        write_jsonl(
            sub / f"my_{split.value}.jsonl",
            [{"id": f"{split.value}", "question": "q", "answers": "a"}],
        )
    got = load(sub, train="my_train.jsonl", val="my_val.jsonl", test="my_test.jsonl")
    assert got == {Split.TRAIN: ["train"], Split.VAL: ["val"], Split.TEST: ["test"]}


@pytest.mark.parametrize(
    ("content", "spec", "message"),
    [
        (
            '{"id": 1, "question": "q", "answers": ["a"]}\n{"id": 2, "question": "q"}\n',
            {"split": "1:1:1"},
            r"items\.jsonl:2: field 'answers' is missing",
        ),
        (
            '{"id": 1, "q": "q", "answers": ["a"]}\n\n{"id": 2, "q": 5, "answers": {}}\n',
            {"split": "1:1:1", "fields": {"question": "q"}},
            r"items\.jsonl:3: field 'answers' must be a string or a non-empty list",
        ),
        (
            '{"id": 1, "q": "q", "answers": ["a"]}\n{"id": 2, "q": ["x"], "answers": "b"}\n',
            {"split": "1:1:1", "fields": {"question": "q"}},
            r"items\.jsonl:2: field 'question' \(mapped to 'q'\) must be a string",
        ),
        (
            '{"id": 1, "question": "q", "answers": "a"}\n'
            '{"id": 1, "question": "q", "answers": "b"}\n',
            {"split": "1:1:1"},
            r"items\.jsonl:2: duplicate id '1' \(first on line 1\)",
        ),
        ('{"id": 1, "question": "q", "answers": "a"}\n', {}, r"set env\.data\.split"),
        ("{oops\n", {"split": "1:1:1"}, r"items\.jsonl:1: invalid JSON"),
    ],
)
def test_bad_items_name_the_file_line_and_field(
    tmp_path: Path, content: str, spec: dict[str, Any], message: str
) -> None:
    (tmp_path / "items.jsonl").write_text(content)
    with pytest.raises(DataError, match=message):
        load_splits(tmp_path, DataSection.model_validate(spec), default_dir=tmp_path)


def test_json_array_errors_carry_line_numbers(tmp_path: Path) -> None:
    text = '[\n  {"id": "a", "question": "q", "answers": "x"},\n  {"id": "b", "question": "q"}\n]\n'
    (tmp_path / "items.json").write_text(text)
    with pytest.raises(DataError, match=r"items\.json:3: field 'answers' is missing"):
        load(tmp_path, split="1:1:1")
    (tmp_path / "items.json").write_text('{"id": "a"}')
    with pytest.raises(DataError, match=r"items\.json:1: a \.json file must hold a JSON array"):
        load(tmp_path, split="1:1:1")


def test_manifest_problems_name_the_manifest_line(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "items.jsonl", rows(3))
    (tmp_path / "tr.txt").write_text("q0\nq9\n")
    with pytest.raises(DataError, match=r"tr\.txt:2: id 'q9' is not in the items file"):
        load(tmp_path, manifests={"train": "tr.txt"})
    (tmp_path / "tr.txt").write_text("q0\n")
    (tmp_path / "va.txt").write_text("q1\nq0\n")
    with pytest.raises(DataError, match=r"va\.txt:2: id 'q0' is also listed in .*tr\.txt"):
        load(tmp_path, manifests={"train": "tr.txt", "val": "va.txt"})


def test_an_id_in_two_split_files_is_refused(tmp_path: Path) -> None:
    for split in Split:
        write_jsonl(tmp_path / f"{split.value}.jsonl", rows(2))
    with pytest.raises(DataError, match=r"id 'q0' is in both the train and the val split"):
        load(tmp_path)


def test_config_names_the_bad_data_keys(tmp_path: Path) -> None:
    bad = [
        ('env.data.split="2:1"', r"env\.data\.split"),
        ('env.data.manifests={dev = "x"}', r"env\.data\.manifests"),
        ('env.data.required=["answer"]', r"env\.data\.required"),
        ('env.data.fields.questions="q"', r"env\.data\.fields\.questions"),
    ]
    for override, key in bad:
        with pytest.raises(ConfigError, match=key):
            load_trainer_config(REPO / "configs/trainer/qa_demo.toml", overrides=[override])


def test_the_trainer_config_reaches_the_qa_environment(tmp_path: Path) -> None:
    from skillopt.trainer.build import build_environment

    write_jsonl(
        tmp_path / "all.jsonl", [{"n": i, "prompt": f"p{i}", "gold": "x"} for i in range(9)]
    )
    cfg = load_trainer_config(
        REPO / "configs/trainer/qa_demo.toml",
        overrides=[
            f"env.data_dir={json.dumps(str(tmp_path))}",
            'env.data.file="all.jsonl"',
            'env.data.split="1:1:1"',
            'env.data.fields={id = "n", question = "prompt", answers = "gold"}',
        ],
    )
    env = build_environment(cfg)
    assert [len(env.items(s)) for s in Split] == [3, 3, 3]
    assert env.items(Split.TRAIN)[0].data["answers"] == ["x"]


def build(tmp_path: Path, demo: str, *overrides: str) -> Any:
    from skillopt.trainer.build import build_environment

    cfg = load_trainer_config(
        REPO / f"configs/trainer/{demo}",
        overrides=[f"env.data_dir={json.dumps(str(tmp_path))}", *overrides],
    )
    return build_environment(cfg)


def test_mcq_reads_a_json_array_with_mapped_fields_and_a_ratio_split(tmp_path: Path) -> None:
    items = [
        {"uid": f"m{i}", "stem": f"{i} + {i}?", "options": [str(2 * i), "x"], "label": "A"}
        for i in range(6)
    ]
    (tmp_path / "bench.json").write_text(json.dumps(items, indent=1))
    env = build(
        tmp_path,
        "mcq_demo.toml",
        'env.data.file="bench.json"',
        'env.data.split="1:1:1"',
        'env.data.fields={id = "uid", question = "stem", choices = "options", answers = "label"}',
    )
    assert [len(env.items(s)) for s in Split] == [2, 2, 2]
    item = env.items(Split.VAL)[0]
    assert item.task_type == "mcq" and item.data["choices"][1] == "x"
    items[4]["label"] = "C"  # no third option: the mcq check names the line
    (tmp_path / "bench.json").write_text(json.dumps(items, indent=1))
    with pytest.raises(DataError, match=r"bench\.json:\d+: 'answer' 'C' is neither"):
        build(
            tmp_path,
            "mcq_demo.toml",
            'env.data.file="bench.json"',
            'env.data.split="1:1:1"',
            'env.data.fields={id = "uid", question = "stem", choices = "options", '
            'answers = "label"}',
        )


def test_chat_reads_one_file_cut_by_manifests(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "items.jsonl", [
        {"id": f"r{i}", "ask": f"why {i}?", "rubric": ["mentions it"]} for i in range(4)
    ])  # fmt: skip
    for split, ids in (("train", "r0\nr1\n"), ("val", "r2\n"), ("test", "r3\n")):
        (tmp_path / f"{split}.ids").write_text(ids)
    env = build(
        tmp_path,
        "rubric_demo.toml",
        'env.data.manifests={train = "train.ids", val = "val.ids", test = "test.ids"}',
        'env.data.fields={question = "ask"}',
    )
    assert [[i.id for i in env.items(s)] for s in Split] == [["r0", "r1"], ["r2"], ["r3"]]
    assert env.items(Split.TEST)[0].data["rubric"] == ["mentions it"]


def test_exec_check_reads_mapped_instructions_and_file_objects(tmp_path: Path) -> None:
    rows = [
        {"id": f"t{i}", "task": "Write out.txt", "inputs": {"in.txt": "1"}, "output": "out.txt"}
        for i in range(3)
    ]
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    mapped = 'env.data.fields={instructions = "task", files = "inputs"}'
    env = build(
        tmp_path, "exec_check_demo.toml", 'env.data.file="tasks.json"',
        'env.data.split="1:1:1"', mapped,
    )  # fmt: skip
    item = env.items(Split.TRAIN)[0]
    assert item.data["instructions"] == "Write out.txt" and item.data["files"] == {"in.txt": "1"}
    rows[1]["inputs"] = {"../escape.txt": "x"}
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"tasks\.json:1: 'files' name '\.\./escape\.txt'"):
        build(
            tmp_path, "exec_check_demo.toml", 'env.data.file="tasks.json"',
            'env.data.split="1:1:1"', mapped,
        )  # fmt: skip
