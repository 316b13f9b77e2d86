"""Label Studio exports: every format and result shape the importer accepts, and what it refuses.

JSON_MIN, CSV and TSV files are made from the JSON fixtures by label-studio-sdk's own Converter, the code Label
Studio runs for those export formats."""

import copy
import json

import pytest
from label_studio_sdk.converter.converter import Format

from tests.builders import LS, RANKER, convert
from tests.conftest import query, store_rows

PAIRWISE = json.loads((LS / "pairwise.json").read_text())

# Hand-derived from ranker_rank.json. Task 17, annotation 101 (user 2): r2 > r0 > r3 > r1 -> 6 pairs;
# 102 is cancelled; 103 (c@example.org) keeps the shown order in 1.1 s -> 6 pairs, flagged. Task 18, 104: 3 pairs.
OVERFIT = {
    "r0": "Overfitting is when a model memorises noise in the training set.",
    "r1": "It is a kind of fitting.",
    "r2": "A model overfits when it fits training data so closely that it fails on new data, e.g. a high-degree "
    "polynomial through ten points.",
    "r3": "Overfitting means low training error but high test error.",
}
SLEEP = {
    "r0": "Keep a fixed wake-up time, even on weekends.",
    "r1": "Sleep.",
    "r2": "Avoid screens for an hour before bed.",
}


def _order_pairs(annotator, texts, order):
    return {(annotator, texts[a], texts[b]) for i, a in enumerate(order) for b in order[i + 1 :]}


RANKER_PAIRS = (
    _order_pairs("ls:2", OVERFIT, ["r2", "r0", "r3", "r1"])
    | _order_pairs("ls:c@example.org", OVERFIT, ["r0", "r1", "r2", "r3"])
    | _order_pairs("ls:2", SLEEP, ["r2", "r0", "r1"])
)
PAIRWISE_PAIRS = {
    ("ls:2", PAIRWISE[0]["data"]["answer1"], PAIRWISE[0]["data"]["answer2"]),  # left = answer1 chosen
    ("ls:5", PAIRWISE[1]["data"]["answer2"], PAIRWISE[1]["data"]["answer1"]),  # right = answer2 chosen
}


def pairs(db):
    return set(query(db, "SELECT annotator, chosen, rejected FROM pairs"))


def test_ranker_json(cli, db):
    code, out, err = cli("import-ls", str(LS / "ranker_rank.json"))
    assert code == 0, err
    assert out.strip() == (
        "tasks 2, annotations 4, rankings added 3, pairs added 15, already imported 0, skipped 1 (cancelled 1), "
        "flagged 1"
    )
    assert pairs(db) == RANKER_PAIRS
    flags = query(db, "SELECT annotator, flags, lead_time_s FROM rankings WHERE len(flags) > 0")
    assert flags == [("ls:c@example.org", ["shown_order", "fast"], 1.1)]
    keys = {k for (k,) in query(db, "SELECT external_key FROM rankings")}
    assert keys == {"ls:file/p5:17:101", "ls:file/p5:17:103", "ls:file/p5:18:104"}  # the file says project 5


@pytest.mark.parametrize("fmt", [Format.JSON_MIN, Format.CSV, Format.TSV])
def test_ranker_other_formats_give_the_same_pairs(cli, db, tmp_path, fmt):
    f = convert(tmp_path, RANKER, LS / "ranker_config.xml", fmt)
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert "rankings added 3, pairs added 15" in out
    assert pairs(db) == RANKER_PAIRS
    # the same annotations in JSON add nothing: JSON_MIN and CSV name no project, so the same task id, annotation
    # id and content is the same annotation
    before = store_rows(db)
    code, out, _ = cli("import-ls", str(LS / "ranker_rank.json"))
    assert "rankings added 0" in out and "already imported 3" in out
    assert store_rows(db) == before


@pytest.mark.parametrize("fmt", [Format.CSV, Format.TSV])
def test_a_csv_cell_over_the_csv_modules_default_limit_imports(cli, db, tmp_path, fmt):
    """csv refuses a cell over 131,072 characters unless told otherwise, and a Ranker task's items cell holds every
    response: long responses pass that. Such a cell is read (a cell is held only to the file's own size limit)."""
    tasks = copy.deepcopy(RANKER)
    long = "A long answer. " * 10_000  # 150,000 characters
    tasks[0]["data"]["items"][0]["body"] = long
    f = convert(tmp_path, tasks, LS / "ranker_config.xml", fmt)
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert "rankings added 3, pairs added 15" in out
    assert query(db, "SELECT count(*) FROM responses WHERE text = ?", [long]) == [(1,)]


def test_a_csv_export_with_carriage_return_line_ends_gives_the_same_pairs(cli, db, tmp_path):
    """Old Mac spreadsheets end lines with a lone CR; csv reads them as rows when given the text as it asks."""
    f = convert(tmp_path, RANKER, LS / "ranker_config.xml", Format.CSV)
    f.write_bytes(f.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert pairs(db) == RANKER_PAIRS


def test_a_lead_time_past_floats_range_is_unknown(cli, db, tmp_path):
    tasks = copy.deepcopy(RANKER)
    tasks[0]["annotations"][0]["lead_time"] = 10**400  # float() of it overflows
    f = tmp_path / "export.json"
    f.write_text(json.dumps(tasks))
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert query(db, "SELECT lead_time_s FROM rankings WHERE external_key = 'ls:file/p5:17:101'") == [(None,)]


@pytest.mark.parametrize("fmt", [None, Format.JSON_MIN, Format.CSV])
def test_pairwise(cli, db, tmp_path, fmt):
    f = LS / "pairwise.json" if fmt is None else convert(tmp_path, PAIRWISE, LS / "pairwise_config.xml", fmt)
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert "rankings added 2, pairs added 2" in out
    assert pairs(db) == PAIRWISE_PAIRS


def _unannotated(task_id, prompt):
    """A task nobody has annotated yet, as Label Studio exports it with "all tasks"."""
    items = [
        {"id": "r0", "title": "Response 1", "body": "Apple."},
        {"id": "r1", "title": "Response 2", "body": "Pear."},
    ]
    return {"id": task_id, "data": {"prompt": prompt, "items": items}, "annotations": [], "predictions": []}


# Two unannotated tasks around the ranker fixture. JSON keeps cancelled annotation 102 (4 annotations: 3 rankings,
# 1 cancelled); the SDK's converter drops cancelled annotations from JSON_MIN/CSV/TSV (3 annotations). Every format:
# 4 tasks, the 2 unannotated ones skipped, the same 3 rankings and 15 pairs (6 + 6 + 3).
ALL_TASKS = [_unannotated(16, "Name a fruit."), *RANKER, _unannotated(19, "Name a vegetable.")]
ALL_TASKS_SUMMARY = {
    None: "tasks 4, annotations 4, rankings added 3, pairs added 15, already imported 0, "
    "skipped 3 (cancelled 1, not annotated 2), flagged 1",
    Format.JSON_MIN: "tasks 4, annotations 3, rankings added 3, pairs added 15, already imported 0, "
    "skipped 2 (not annotated 2), flagged 1",
}


@pytest.mark.parametrize("fmt", [None, Format.JSON_MIN, Format.CSV, Format.TSV], ids=lambda f: f.name if f else "JSON")
def test_an_export_with_unannotated_tasks_imports_the_annotated_ones(cli, db, tmp_path, fmt):
    if fmt is None:
        f = tmp_path / "all.json"
        f.write_text(json.dumps(ALL_TASKS))
    else:
        f = convert(tmp_path, ALL_TASKS, LS / "ranker_config.xml", fmt)
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert out.strip() == ALL_TASKS_SUMMARY.get(fmt, ALL_TASKS_SUMMARY[Format.JSON_MIN])
    assert query(db, "SELECT count(*) FROM rankings") == [(3,)]
    assert pairs(db) == RANKER_PAIRS
    assert query(db, "SELECT count(*) FROM prompts WHERE text LIKE 'Name a %'") == [(0,)]


@pytest.mark.parametrize("fmt", [None, Format.JSON_MIN, Format.CSV], ids=lambda f: f.name if f else "JSON")
def test_a_pairwise_export_with_an_unannotated_task(cli, db, tmp_path, fmt):
    tasks = [*PAIRWISE, {"id": 99, "data": {"prompt": "p?", "answer1": "a", "answer2": "b"}, "annotations": []}]
    if fmt is None:
        f = tmp_path / "all.json"
        f.write_text(json.dumps(tasks))
    else:
        f = convert(tmp_path, tasks, LS / "pairwise_config.xml", fmt)
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert "tasks 3, annotations 2, rankings added 2, pairs added 2" in out and "skipped 1 (not annotated 1)" in out
    assert pairs(db) == PAIRWISE_PAIRS


def _with_value(value, task=0):
    tasks = copy.deepcopy(RANKER[task : task + 1])
    tasks[0]["annotations"] = tasks[0]["annotations"][:1]
    tasks[0]["annotations"][0]["result"][0]["value"] = value
    return tasks


def test_ranker_flat_list_shape(cli, db, tmp_path):
    f = tmp_path / "flat.json"
    f.write_text(json.dumps(_with_value({"ranker": ["r2", "r0", "r3", "r1"]})))
    assert cli("import-ls", str(f))[0] == 0
    assert pairs(db) == _order_pairs("ls:2", OVERFIT, ["r2", "r0", "r3", "r1"])


BUCKETS = {"ranker": {"_": ["r1"], "good": ["r2", "r0"], "bad": ["r3"]}}


def test_ranker_buckets_need_an_order(cli, db, tmp_path):
    f = tmp_path / "buckets.json"
    f.write_text(json.dumps(_with_value(BUCKETS)))
    before = store_rows(db)
    code, _, err = cli("import-ls", str(f))
    assert code == 1 and "uses Ranker buckets (bad, good); pass --bucket-order" in err
    assert store_rows(db) == before
    code, out, err = cli("import-ls", str(f), "--bucket-order", "good,bad")
    assert code == 0, err
    # good = {r2, r0} tie; bad = {r3}; r1 left in "_" is unranked: 2 pairs
    assert pairs(db) == {("ls:2", OVERFIT["r2"], OVERFIT["r3"]), ("ls:2", OVERFIT["r0"], OVERFIT["r3"])}


def test_bucket_missing_from_the_order(cli, db, tmp_path):
    f = tmp_path / "buckets.json"
    f.write_text(json.dumps(_with_value(BUCKETS)))
    code, _, err = cli("import-ls", str(f), "--bucket-order", "good")
    assert code == 1 and "bucket 'bad' is not in --bucket-order good" in err


def test_legacy_completions_and_single_task(cli, db, tmp_path):
    task = copy.deepcopy(RANKER[1])
    task["completions"] = task.pop("annotations")
    f = tmp_path / "one.json"
    f.write_text(json.dumps(task))
    code, out, err = cli("import-ls", str(f))
    assert code == 0, err
    assert pairs(db) == _order_pairs("ls:2", SLEEP, ["r2", "r0", "r1"])


def test_pairwise_fields_from_the_labeling_config(cli, db, tmp_path):
    task = copy.deepcopy(PAIRWISE[0])
    task["data"] = {"question": "q?", "x": "first answer", "y": "second answer", "note": "n"}
    task["annotations"][0]["result"][0]["from_name"] = "pick"
    f = tmp_path / "pw.json"
    f.write_text(json.dumps([task]))
    config = tmp_path / "config.xml"
    config.write_text(
        '<View><Text name="q" value="$question"/><Text name="tx" value="$x"/><Text name="ty" value="$y"/>'
        '<Pairwise name="pick" toName="tx,ty"/></View>'
    )
    # "left" is the first toName (tx -> data.x); the prompt field is named by the config's data, here 'question'
    code, _, err = cli("import-ls", str(f), "--config", str(config))
    assert code == 1 and "no 'prompt' text in the task data" in err
    task["data"]["prompt"] = task["data"].pop("question")
    f.write_text(json.dumps([task]))
    code, _, err = cli("import-ls", str(f), "--config", str(config))
    assert code == 0, err
    assert pairs(db) == {("ls:2", "first answer", "second answer")}


def test_empty_and_no_preference_are_skipped(cli, db, tmp_path):
    tasks = copy.deepcopy(PAIRWISE)
    tasks[0]["annotations"][0]["result"] = []
    tasks[1]["annotations"][0]["result"][0]["value"] = {"selected": "none"}
    f = tmp_path / "skips.json"
    f.write_text(json.dumps(tasks))
    code, out, _ = cli("import-ls", str(f))
    assert code == 0
    assert "rankings added 0" in out and "skipped 2 (empty 1, no preference 1)" in out
    assert query(db, "SELECT count(*) FROM imports") == [(0,)]


BAD = [
    ("truncated.json", (LS / "ranker_rank.json").read_text()[:500], "not valid JSON"),
    ("empty.json", "", "the file is empty"),
    ("tasks.json", json.dumps([{"data": {"prompt": "p", "items": []}}]), "tasks without annotations"),
    ("nothing.json", "[]", "the export holds no tasks"),
    ("scalar.json", "42", "expected a Label Studio export"),
    (
        "choices.json",
        json.dumps(
            [
                {
                    "id": 1,
                    "data": {"prompt": "p"},
                    "annotations": [
                        {
                            "id": 2,
                            "completed_by": 1,
                            "result": [
                                {
                                    "from_name": "c",
                                    "to_name": "prompt",
                                    "type": "choices",
                                    "value": {"choices": ["Good"]},
                                }
                            ],
                        }
                    ],
                }
            ]
        ),
        "unsupported Label Studio template (result types: choices)",
    ),
    ("unknown-item.json", json.dumps(_with_value({"ranker": {"rank": ["r2", "r9"]}})), "ranked item 'r9' is not"),
    ("nocol.csv", '"id","text"\n1,"hello"\n', "the CSV has no 'prompt' column (columns: id, text)"),
    ("badcell.csv", '"id","prompt","rank"\n1,"p","[{""ranker"": "\n', "not valid JSON"),
    (
        "badcell_after_unannotated.csv",
        '"annotation_id","id","prompt","rank"\n"",1,"p",""\n7,2,"q","[{""ranker"": "\n',
        "badcell_after_unannotated.csv row 3 column rank: not valid JSON",
    ),
]


@pytest.mark.parametrize("name, content, message", BAD, ids=[b[0] for b in BAD])
def test_bad_exports_change_nothing(cli, db, tmp_path, name, content, message):
    cli("import-ls", str(LS / "pairwise.json"))
    before = store_rows(db)
    f = tmp_path / name
    f.write_text(content)
    code, out, err = cli("import-ls", str(f))
    assert code == 1 and out == ""
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert message in err
    assert store_rows(db) == before
