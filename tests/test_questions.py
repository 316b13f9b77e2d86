"""The questions asked beside a ranking (annotation/questions/; issue 30's "answers as kinds"): strengths, the edit
and tags come in through one seam, from the Annotate tab's widget, native lines and Label Studio annotations alike,
and land as the Annotate tab stores them: the edit ranked above all (edited > chosen > rejected), each pair's
strength, each response's tags. A malformed answer is one line and nothing is stored."""

import json

import pytest

from annotation.labelstudio_export import ranker_config
from annotation.questions import QUESTIONS
from tests.builders import exported_ls_task
from tests.builders import ls_choices as _choices
from tests.conftest import query, store_rows, write_jsonl

LINE = {
    "prompt": "Name a fruit.",
    "responses": ["Banana.", "A pear, I think.", "Rocks."],
    "ranks": [2, 1, 3],
    "annotator": "ann",
    "strengths": [1, 3],  # pear slightly better than banana, banana significantly better than rocks
    "edit": "A pear.",
    "tags": [[], [], ["off topic", "factually wrong"]],
}
# the edit over each response, then the annotator's order below it: 3 + 3 pairs
PAIRS = {
    ("A pear.", "A pear, I think."),
    ("A pear.", "Banana."),
    ("A pear.", "Rocks."),
    ("A pear, I think.", "Banana."),
    ("A pear, I think.", "Rocks."),
    ("Banana.", "Rocks."),
}


def _stored(db) -> dict:
    pairs = query(db, "SELECT chosen, rejected, margin, strength FROM pairs")
    return {
        "pairs": {(c, r) for c, r, _, _ in pairs},
        # the edit's pairs have no strength: the steps are the annotator's between the shown responses
        "strengths": {(c, r): s for c, r, _, s in pairs if s is not None},
        "margins": {(c, r): m for c, r, m, _ in pairs},
        "edit": query(
            db,
            "SELECT r.text, o.text, e.annotator, r.model_id FROM edits e JOIN responses r USING (response_id) "
            "JOIN responses o ON o.response_id = e.edit_of",
        ),
        "tags": sorted(query(db, "SELECT r.text, t.tag FROM response_tags t JOIN responses r USING (response_id)")),
    }


def _check_answers_stored(db, annotator: str = "ann") -> None:
    got = _stored(db)
    assert got["pairs"] == PAIRS
    # hand-computed: the largest step between the two: pear>banana 1, banana>rocks 3, pear>rocks max(1, 3) = 3
    assert got["strengths"] == {
        ("A pear, I think.", "Banana."): 1,
        ("Banana.", "Rocks."): 3,
        ("A pear, I think.", "Rocks."): 3,
    }
    assert got["margins"][("A pear.", "Rocks.")] == 3 and got["margins"][("A pear.", "A pear, I think.")] == 1
    assert got["edit"] == [("A pear.", "A pear, I think.", annotator, "edit")]
    assert got["tags"] == [("Rocks.", "factually wrong"), ("Rocks.", "off topic")]


def test_a_native_line_brings_strengths_an_edit_and_tags_and_a_reimport_adds_nothing(db, cli, tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [LINE])
    code, out, err = cli("import", str(path))
    assert code == 0, err
    _check_answers_stored(db)
    assert query(db, "SELECT count(*) FROM responses") == [(4,)]  # the edit is a response of its own
    before = store_rows(db)
    assert cli("import", str(path))[0] == 0 and store_rows(db) == before


@pytest.mark.parametrize(
    "change, message",
    [
        ({"strengths": [1]}, "1 strengths for 2 steps between the 3 ranks given"),
        ({"strengths": "big"}, "'strengths' must be a list of levels 0..3"),
        ({"edit": 5}, "'edit' must be the text of the corrected best response"),
        ({"edit": "Banana."}, "the edit is the same as response 1: change it, or clear it"),
        ({"ranks": [1, 1, 2], "strengths": [2]}, "rank one response best to edit it (the best rank is tied)"),
        ({"tags": [[], ["rude"], []]}, "response 2: 'rude' is not a tag (unsafe, factually wrong, off topic, other)"),
        ({"tags": [[]]}, "tags for 1 responses, but 3 were shown"),
    ],
)
def test_a_bad_answer_is_one_line_naming_the_line_and_nothing_is_stored(db, cli, tmp_path, change, message):
    cli("init")
    before = store_rows(db)
    path = write_jsonl(tmp_path / "r.jsonl", [{**LINE, "prompt": "Other."}, {**LINE, **change}])
    code, out, err = cli("import", str(path))
    assert code == 1 and err.strip() == f"error: r.jsonl line 2: {message}"
    assert store_rows(db) == before


def _ls_task(results: list[dict]) -> list[dict]:
    return exported_ls_task(LINE["prompt"], LINE["responses"], results)


LS_ANSWERS = [
    _choices("strength_1", "slightly better"),
    _choices("strength_2", "significantly better"),
    {"from_name": "edit", "to_name": "prompt", "type": "textarea", "value": {"text": ["A pear."]}},
    _choices("tags_3", "off topic", "factually wrong"),
]


def test_a_label_studio_annotation_brings_the_same_answers(db, cli, tmp_path):
    export = tmp_path / "export.json"
    export.write_text(json.dumps(_ls_task(LS_ANSWERS)))
    code, out, err = cli("import-ls", str(export))
    assert code == 0 and "rankings added 1, pairs added 6" in out, err
    _check_answers_stored(db, "ls:ann")
    assert query(db, "SELECT DISTINCT annotator FROM pairs") == [("ls:ann",)]


@pytest.mark.parametrize(
    "results, message",
    [
        ([_choices("strength_1", "slightly better")], "give one strength (negligibly better or unsure, slightly"),
        ([_choices("tags_2", "rude")], "response 2: 'rude' is not a tag"),
        ([{"from_name": "edit", "value": {"text": ["Banana."]}}], "the edit is the same as response 1"),
        ([{"from_name": "tags_1", "value": {"choices": "unsafe"}}], "the tags_1 result holds no list of choices"),
    ],
)
def test_a_bad_label_studio_answer_is_one_line_and_nothing_is_stored(db, cli, tmp_path, results, message):
    cli("init")
    before = store_rows(db)
    export = tmp_path / "export.json"
    export.write_text(json.dumps(_ls_task(results)))
    code, out, err = cli("import-ls", str(export))
    assert code == 1 and err.startswith(f"error: task 7 annotation 70: {message}"), err
    assert store_rows(db) == before


def test_the_ranker_template_asks_every_question_for_the_tasks_k():
    config = ranker_config(3)
    assert [q.name for q in QUESTIONS] == ["strengths", "edit", "tags", "best_good", "all_bad"]
    assert config.count('<Choices name="strength_') == 2 and config.count('<Choices name="tags_') == 3
    assert '<Choices name="all_bad" toName="prompt" choice="single"' in config
    assert '<TextArea name="edit" toName="prompt"' in config and config.count("<Choice value=") == 2 * 4 + 3 * 4 + 2 + 1
    from annotation.labelstudio import parse_label_config

    parse_label_config(config)  # well-formed XML, as the importer reads it


def test_a_projects_own_controls_of_the_same_names_are_not_read_as_answers(db, cli, tmp_path):
    """Only tasks `rlhf export-ls` wrote (their data has `turns`) carry our questions: another project's 'edit' or
    'tags_1' control means something else there."""
    task = _ls_task([{"from_name": "edit", "value": {"text": ["Banana."]}}, _choices("tags_1", "rude")])
    del task[0]["data"]["turns"]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(task))
    code, out, err = cli("import-ls", str(export))
    assert code == 0 and "rankings added 1, pairs added 3" in out, err
    assert query(db, "SELECT count(*) FROM edits") == [(0,)] and query(db, "SELECT count(*) FROM response_tags") == [
        (0,)
    ]


@pytest.mark.parametrize("fmt", ["JSON_MIN", "CSV", "TSV"])
def test_json_min_csv_and_tsv_exports_bring_the_same_answers(db, cli, tmp_path, fmt):
    """Label Studio's own converter flattens the answers into the record (a choice as its text, several choices as
    {"choices": [...]}, the text area's text); they are read as the JSON export's."""
    from label_studio_sdk.converter.converter import Format

    from tests.builders import convert

    config = tmp_path / "config.xml"
    config.write_text(ranker_config(3))
    export = convert(tmp_path, _ls_task(LS_ANSWERS), config, Format[fmt])
    code, out, err = cli("import-ls", str(export))
    assert code == 0 and "rankings added 1, pairs added 6" in out, err
    _check_answers_stored(db, "ls:ann")
