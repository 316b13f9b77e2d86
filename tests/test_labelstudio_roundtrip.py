"""export-ls -> labelling in a real Label Studio server -> import-ls (live pull and exported file)."""

import json
import os
from pathlib import Path

import pytest

from store.conversations import conversation_text
from store.db import write
from store.prompts import prompt_ids
from store.responses import Sample, add_samples
from tests.conftest import query, store_rows
from tests.labelstudio_server import LS_BIN, LabelStudioServer

TURNS = [
    {"role": "system", "content": "Answer kindly."},
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "And another?"},
]
PROMPTS = {
    "Name a fruit.": ["Apple.", "A banana is a fruit.", "Pear", "Mango, sweet and ripe, is a tropical fruit."],
    "Say hello.": ["Hi", "Hello there, friend!", "Hello.", "Hey"],
    "Count to three.": ["1 2 3", "One, two, three.", "one two three!", "1, 2, 3"],
    conversation_text(TURNS): ["Red.", "Green, like grass.", "Teal blue", "Orange, as bright as the setting sun."],
}


@pytest.fixture(scope="module")
def ls_server(tmp_path_factory):
    if not LS_BIN.exists():
        if os.environ.get("CI"):
            pytest.fail(f"Label Studio is not installed at {LS_BIN}: `make test` installs it")
        pytest.skip(f"no Label Studio at {LS_BIN} (`make test` installs it)")
    server = LabelStudioServer(tmp_path_factory.mktemp("label-studio"))
    try:
        server.wait()
        server.token = server.personal_access_token()
        yield server
    finally:
        server.stop()


def _sampled_store(db):
    with write(db) as con:
        ids = prompt_ids(con, list(PROMPTS), "test")
        samples = [
            Sample(prompt_id=ids[p], text=t, position=j, n_tokens=len(t.split()), finish_reason="eos", seed=0)
            for p, texts in PROMPTS.items()
            for j, t in enumerate(texts)
        ]
        add_samples(con, samples, model_id="test")


def longest_first(items):
    """The scripted annotator: longer answers are better."""
    return [it["id"] for it in sorted(items, key=lambda it: -len(it["body"]))]


EDIT = "Hello there, my friend!"


def _answers(items: list[dict]) -> list[dict]:
    """Answers to the exported config's questions: each step 'better', an edit of the best, a tag on 'Hey'."""

    def choices(name: str, *chosen: str) -> dict:
        return {"from_name": name, "to_name": "answers", "type": "choices", "value": {"choices": list(chosen)}}

    hey = next(n for n, it in enumerate(items, 1) if it["body"] == "Hey")
    return [
        *(choices(f"strength_{i}", "better") for i in (1, 2, 3)),
        {"from_name": "edit", "to_name": "prompt", "type": "textarea", "value": {"text": [EDIT]}},
        choices(f"tags_{hey}", "off topic"),
    ]


@pytest.mark.integration
def test_round_trip_through_label_studio(cli, db, tmp_path, ls_server, monkeypatch):
    from label_studio_sdk import LabelStudio

    _sampled_store(db)
    code, out, err = cli("export-ls", str(tmp_path / "ls"))
    assert code == 0, err
    assert out.startswith("wrote 4 tasks")
    tasks = json.loads((tmp_path / "ls" / "tasks.json").read_text())
    # the conversation's task carries its turns, what Label Studio's dialogue view shows
    assert [t["data"]["turns"] for t in tasks if t["data"]["prompt"] == conversation_text(TURNS)] == [TURNS]
    config = (tmp_path / "ls" / "label_config.xml").read_text()

    client = LabelStudio(base_url=ls_server.url, api_key=ls_server.token)
    project = client.projects.create(title="rlhf-studio round trip", label_config=config)
    client.projects.import_tasks(id=project.id, request=tasks)
    ls_tasks = sorted(client.tasks.list(project=project.id), key=lambda t: t.id)
    assert len(ls_tasks) == 4 and sorted(len(t.data["turns"]) for t in ls_tasks) == [1, 1, 1, 4]
    for t in ls_tasks:
        order = longest_first(t.data["items"])
        result = [{"from_name": "rank", "to_name": "answers", "type": "ranker", "value": {"ranker": {"rank": order}}}]
        if t.data["prompt"] == "Say hello.":  # the questions beside the order, asked by the exported config
            result += _answers(t.data["items"])
        client.annotations.create(id=t.id, lead_time=15.0, result=result)
    # a second annotator skips the first task, and finds none of the second task's responses good (the Ranker as
    # Label Studio left it: empty)
    client.annotations.create(id=ls_tasks[0].id, was_cancelled=True, result=[])
    all_bad = {"from_name": "all_bad", "to_name": "prompt", "type": "choices"}
    all_bad["value"] = {"choices": ["None of these responses is good"]}
    client.annotations.create(id=ls_tasks[1].id, lead_time=9.0, result=[all_bad])

    responses_before = query(db, "SELECT count(*) FROM responses")[0][0]
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.token)
    code, out, err = cli("import-ls", "--url", ls_server.url, "--project", str(project.id))
    assert code == 0, err
    assert out.strip() == (
        "tasks 4, annotations 6, rankings added 5, pairs added 28, already imported 0, skipped 1 (cancelled 1), "
        "flagged 0"
    )
    # the access token is in no row, no file next to the store (WAL included) and no output
    assert ls_server.token not in repr(store_rows(db)) and ls_server.token not in out + err
    for f in Path(db).parent.rglob("*"):
        assert not f.is_file() or ls_server.token.encode() not in f.read_bytes(), f
    assert query(db, "SELECT skipped, skip_reason FROM rankings WHERE all_bad") == [(True, "all bad")]
    # every item mapped back to its sampled response: the one new response row is the edit
    assert query(db, "SELECT count(*) FROM responses") == [(responses_before + 1,)]
    expected = {(p, a, b) for p, texts in PROMPTS.items() for a in texts for b in texts if len(a) > len(b)}
    expected |= {("Say hello.", EDIT, b) for b in PROMPTS["Say hello."]}  # edited > chosen > rejected
    assert set(query(db, "SELECT prompt, chosen, rejected FROM pairs")) == expected
    # each step "better" (2): every pair of the shown responses has strength 2; the edit's pairs none
    strengths = query(db, "SELECT chosen = ?, strength FROM pairs WHERE prompt = 'Say hello.'", [EDIT])
    assert sorted(strengths) == [(False, 2)] * 6 + [(True, None)] * 4
    assert query(db, "SELECT r.text, t.tag FROM response_tags t JOIN responses r USING (response_id)") == [
        ("Hey", "off topic")
    ]
    # the order Label Studio showed (the shuffled export) is stored per item
    shown = query(
        db,
        "SELECT r.text, i.shown_position FROM ranking_items i JOIN responses r USING (response_id) "
        "WHERE r.model_id <> 'edit'",
    )
    shown_by_task = {it["body"]: n for t in tasks for n, it in enumerate(t["data"]["items"])}
    assert dict(shown) == shown_by_task

    # the same annotations as an exported file add nothing
    before = store_rows(db)
    export = tmp_path / "export.json"
    export.write_text(json.dumps(client.projects.exports.as_json(project.id)))
    code, out, _ = cli("import-ls", str(export))
    assert code == 0 and "rankings added 0" in out and "already imported 5" in out
    assert store_rows(db) == before


@pytest.mark.integration
def test_live_pull_with_a_bad_key_is_one_line(cli, db, ls_server, monkeypatch):
    before = store_rows(db)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "not-a-token")
    code, out, err = cli("import-ls", "--url", ls_server.url, "--project", "1")
    assert code == 1 and out == ""
    assert err.startswith(f"error: cannot pull project 1 from {ls_server.url}") and len(err.strip().splitlines()) == 1
    assert "not-a-token" not in err
    assert store_rows(db) == before


def test_live_pull_without_a_key(cli, db, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    code, _, err = cli("import-ls", "--url", "http://127.0.0.1:9", "--project", "1")
    assert code == 1 and "set LABEL_STUDIO_API_KEY" in err
