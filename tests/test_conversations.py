"""Conversations as prompts (store/conversations.py; issue 31): stored as one prompt, read back as turns by the store
and by training alike, templated whole for every model, shown turn by turn, carried by Label Studio's export and by
TRL's conversational format; malformed ones are one line each and change nothing."""

import json

import pytest

from annotation.response_html import prompt_html
from store.conversations import conversation_of, conversation_text, last_turn, messages_of
from store.errors import UserError
from tests.conftest import query, store_rows, write_jsonl
from training.models import prompt_messages

SYSTEM = {"role": "system", "content": "Answer in one word."}
TURNS = [
    SYSTEM,
    {"role": "user", "content": "Name a colour — any one."},
    {"role": "assistant", "content": "Blue."},
    {"role": "user", "content": "Another <b>one</b>?"},
]


def test_a_conversation_is_stored_as_its_canonical_json_and_reads_back():
    text = conversation_text(TURNS)
    assert text == json.dumps(TURNS, ensure_ascii=False)
    assert conversation_of(text) == TURNS and messages_of(text) == TURNS
    assert last_turn(text) == "Another <b>one</b>?"
    # one user turn is its text: a single-string prompt stays what it is
    assert conversation_text([{"role": "user", "content": "Hi"}]) == "Hi"
    assert messages_of("Hi") == [{"role": "user", "content": "Hi"}] and conversation_of("Hi") is None


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(TURNS),  # ASCII-escaped: not the canonical form, so it stays text
        json.dumps(TURNS, separators=(",", ":")),
        json.dumps(TURNS[:3], ensure_ascii=False),  # ends with the assistant's turn
        json.dumps([{"role": "user", "content": "Hi"}], ensure_ascii=False),  # one turn is stored as its text
        '[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]',
        '[{"role": "user", "content": "unclosed',
        "Explain [brackets] and {braces}.",
        # each breaks one rule of a conversation: a system turn after the first, an empty turn, content first
        '[{"role": "user", "content": "a"}, {"role": "system", "content": "s"}, {"role": "user", "content": "b"}]',
        '[{"role": "user", "content": " "}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]',
        '[{"role": "user", "content": "a"}, {"content": "b", "role": "assistant"}, {"role": "user", "content": "c"}]',
    ],
)
def test_text_that_only_looks_like_a_conversation_stays_text_for_store_and_training_alike(text):
    assert conversation_of(text) is None
    assert messages_of(text) == prompt_messages(text) == [{"role": "user", "content": text}]


def test_training_reads_a_conversation_as_the_store_writes_it():
    text = conversation_text(TURNS)
    assert prompt_messages(text) == messages_of(text) == TURNS


@pytest.mark.parametrize(
    "messages, problem",
    [
        ([], "a conversation must be a non-empty list of messages"),
        ([{"role": "user"}], "message 1 must be an object with exactly 'role' and 'content'"),
        ([{"role": "user", "content": "a", "name": "x"}], "message 1 must be an object with exactly"),
        ([{"role": "tool", "content": "a"}], "message 1 has role 'tool'; roles are system, user, assistant"),
        ([{"role": "user", "content": "a"}, SYSTEM, {"role": "user", "content": "b"}], "message 2 is a system"),
        ([{"role": "user", "content": "  "}], "message 1 has no text content"),
        (TURNS[:3], "the last message is the assistant's; a prompt ends with the user's turn"),
    ],
)
def test_a_malformed_conversation_says_what_is_wrong(messages, problem):
    with pytest.raises(UserError, match="^" + problem.replace("(", r"\(").replace("?", r"\?")):
        conversation_text(messages)


def test_the_models_see_the_whole_conversation_through_the_chat_template(tiny_model_dir):
    from training.loaders import load_tokenizer
    from training.models import chat_prompt, plain_chat

    tok = load_tokenizer(tiny_model_dir)
    text = conversation_text(TURNS)
    assert chat_prompt(tok, text) == tok.apply_chat_template(TURNS, add_generation_prompt=True, tokenize=False)
    assert "Name a colour — any one." in chat_prompt(tok, text) and "Blue." in chat_prompt(tok, text)
    # a text prompt is one user turn, as before
    one = [{"role": "user", "content": "Hi"}]
    assert chat_prompt(tok, "Hi") == tok.apply_chat_template(one, add_generation_prompt=True, tokenize=False)
    # without a template: one line per earlier turn, then the last turn's text
    assert (
        plain_chat(TURNS)
        == "system: Answer in one word.\nuser: Name a colour — any one.\nassistant: Blue.\nAnother <b>one</b>?"
    )


def test_the_ranker_shows_each_turn_escaped_and_folds_all_but_the_last_four():
    html = prompt_html(conversation_text(TURNS))
    assert html.count('class="turn ') == 4 and "<details>" not in html
    assert "&lt;b&gt;one&lt;/b&gt;" in html and "<b>one</b>" not in html  # the turns' own HTML is text
    long = [{"role": r, "content": f"turn {n}"} for n, r in enumerate(["user", "assistant"] * 3 + ["user"])]
    html = prompt_html(conversation_text(long))
    folded, shown = html.split("</details>")
    assert "3 earlier turns" in folded and folded.count('class="turn ') == 3 and shown.count('class="turn ') == 4
    assert prompt_html("Just text.") == "<p>Just text.</p>\n"


def test_prompt_files_take_conversations_and_a_bad_one_is_its_line(db, cli, tmp_path):
    path = write_jsonl(
        tmp_path / "prompts.jsonl",
        [{"prompt": "Plain."}, {"messages": TURNS}, {"prompt": TURNS[1:2]}],
    )
    code, out, err = cli("prompts", "add", str(path))
    assert code == 0, err
    texts = {t for (t,) in query(db, "SELECT text FROM prompts")}
    assert texts == {"Plain.", conversation_text(TURNS), "Name a colour — any one."}
    before = store_rows(db)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "Fine."}, {"messages": TURNS[:3]}])
    code, out, err = cli("prompts", "add", str(bad))
    assert code == 1
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith("bad.jsonl line 2: the last message is the assistant's; a prompt ends with the user's turn")
    )
    assert store_rows(db) == before


def test_native_and_trl_conversations_go_in_and_trl_pairs_come_out_conversational(db, cli, tmp_path):
    native = {"prompt": TURNS, "responses": ["Red.", "I cannot say."], "ranks": [1, 2], "annotator": "ann"}
    implicit = {  # TRL's implicit prompt: the turns both share
        "chosen": TURNS[1:] + [{"role": "assistant", "content": "Green."}],
        "rejected": TURNS[1:] + [{"role": "assistant", "content": "Colours are hard."}],
    }
    code, _, err = cli("import", str(write_jsonl(tmp_path / "n.jsonl", [native])))
    assert code == 0, err
    code, _, err = cli(
        "import", str(write_jsonl(tmp_path / "t.jsonl", [implicit, {"prompt": "Hi.", **_say("Hi!", "No.")}]))
    )
    assert code == 0, err
    assert {t for (t,) in query(db, "SELECT text FROM prompts")} == {
        conversation_text(TURNS),
        conversation_text(TURNS[1:]),
        "Hi.",
    }
    code, _, err = cli("pairs", "--format", "trl", "--out", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    said = lambda t: [{"role": "assistant", "content": t}]  # noqa: E731
    # any conversation makes the whole file conversational (a text prompt is one user turn)
    assert sorted(rows, key=json.dumps) == sorted(
        [
            {"prompt": TURNS, "chosen": said("Red."), "rejected": said("I cannot say.")},
            {"prompt": TURNS[1:], "chosen": said("Green."), "rejected": said("Colours are hard.")},
            {"prompt": [{"role": "user", "content": "Hi."}], "chosen": said("Hi!"), "rejected": said("No.")},
        ],
        key=json.dumps,
    )
    # the conversational file comes back in onto the same prompts and responses
    before = store_rows(db)
    code, out, err = cli("import", str(tmp_path / "out.jsonl"), "--annotator", "ann")
    assert code == 0, err
    after = store_rows(db)
    assert after["prompts"] == before["prompts"] and after["responses"] == before["responses"]
    # and Parquet holds the same rows, as lists of messages
    code, _, err = cli("pairs", "--format", "trl", "--out", str(tmp_path / "out.parquet"))
    assert code == 0, err
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert sorted(table, key=json.dumps) == sorted(rows * 2, key=json.dumps)


def _say(chosen: str, rejected: str) -> dict:
    return {"chosen": chosen, "rejected": rejected}


def test_label_studio_tasks_carry_the_turns(db, cli, tmp_path):
    from annotation.labelstudio_export import RANKER_CONFIG, ranker_tasks
    from store.responses import RankableSet

    sets = [
        RankableSet(prompt_id=1, prompt=conversation_text(TURNS), response_ids=[1, 2], texts=["Red.", "No."]),
        RankableSet(prompt_id=2, prompt="Plain.", response_ids=[3, 4], texts=["A", "B"]),
    ]
    tasks = ranker_tasks(sets)
    assert tasks[0]["data"]["turns"] == TURNS and tasks[0]["data"]["prompt"] == conversation_text(TURNS)
    assert tasks[1]["data"]["turns"] == [{"role": "user", "content": "Plain."}]
    assert 'value="$turns"' in RANKER_CONFIG and 'nameKey="role" textKey="content"' in RANKER_CONFIG


@pytest.mark.integration
def test_conversations_are_sampled_ranked_and_trained_on_by_the_reward_model_dpo_and_ppo(
    db, cli, tmp_path, tiny_model_dir
):
    from annotation.session import next_task, submit

    convs = [
        [{"role": "user", "content": f"Pick a number, {n}."}, {"role": "assistant", "content": str(n)}, *TURNS[3:]]
        for n in range(3)
    ]
    path = write_jsonl(tmp_path / "prompts.jsonl", [{"messages": c} for c in convs] + [{"prompt": "Plain one."}])
    assert cli("prompts", "add", str(path))[0] == 0
    code, _, err = cli("sample", "--model", str(tiny_model_dir), "--k", "3", "--max-new-tokens", "4", "--dtype", "fp32")
    assert code == 0, err
    while (task := next_task(db, "ann")) is not None:
        assert task.prompt in {conversation_text(c) for c in convs} | {"Plain one."}
        submit(db, "ann", task.assignment_id, list(range(1, len(task.response_ids) + 1)))
    prompts = {p for (p,) in query(db, "SELECT DISTINCT prompt FROM pairs")}
    assert prompts == {conversation_text(c) for c in convs} | {"Plain one."}

    runs = tmp_path / "runs"
    train = ["--runs-dir", str(runs), "--dtype", "fp32", "--max-steps", "2"]
    code, _, err = cli("train-rm", "--model", str(tiny_model_dir), *train)
    assert code == 0, err
    (rm,) = list(runs.iterdir())
    data = json.loads((rm / "config.json").read_text())["data"]
    import pyarrow.parquet as pq

    trained_on = {
        r["prompt"] for split in ("train", "eval") for r in pq.read_table(f"{data}/{split}.parquet").to_pylist()
    }
    assert trained_on == prompts  # the snapshot holds the conversations whole
    code, _, err = cli("train-dpo", "--model", str(tiny_model_dir), *train)
    assert code == 0, err
    ppo = ["--actor", str(tiny_model_dir), "--reward", str(rm), "--max-new-tokens", "4", "--generation-batch-size", "2"]
    code, _, err = cli("train-ppo", *ppo, *train)
    assert code == 0, err
    kinds = sorted(json.loads((r / "config.json").read_text())["kind"] for r in runs.iterdir())
    assert kinds == ["dpo", "ppo", "reward"]


def test_openrlhf_pairs_are_always_messages_and_what_its_chat_mode_builds_is_our_training_text(
    db, cli, tmp_path, tiny_model_dir
):
    """OpenRLHF's reward and DPO datasets (`--apply_chat_template`) template prompt + chosen messages and keep what
    follows the templated prompt: with our file that is the prompt our trainers see, then the answer."""
    rows = [{"prompt": "Say hi.", "responses": ["Hi!", "No."], "ranks": [1, 2]}]
    assert cli("import", str(write_jsonl(tmp_path / "n.jsonl", rows)))[0] == 0
    code, out, err = cli("pairs", "--format", "openrlhf", "--out", str(tmp_path / "o.jsonl"))
    assert code == 0 and "in OpenRLHF's chat form" in out, err
    (row,) = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert row == {
        "prompt": [{"role": "user", "content": "Say hi."}],
        "chosen": [{"role": "assistant", "content": "Hi!"}],
        "rejected": [{"role": "assistant", "content": "No."}],
    }
    from training.loaders import load_tokenizer
    from training.models import chat_prompt

    tok = load_tokenizer(tiny_model_dir)  # OpenRLHF's preprocess_data, chat mode, on this row:
    prompt = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    chosen = tok.apply_chat_template(row["prompt"] + row["chosen"], tokenize=False)[len(prompt) :]
    assert prompt == chat_prompt(tok, "Say hi.") and chosen.startswith("Hi!")
    code, _, _ = cli("pairs", "--format", "trl", "--out", str(tmp_path / "t.jsonl"))
    assert json.loads((tmp_path / "t.jsonl").read_text())["prompt"] == "Say hi."  # TRL's stays text


def test_a_snapshot_documents_its_columns_and_loads_with_datasets_as_it_is(db, cli, tmp_path):
    from datasets import load_dataset

    from store.db import write
    from store.snapshot import write_snapshot

    rows = [{"prompt": TURNS, "responses": ["Red.", "No.", "Blue again."], "ranks": [1, 3, 2], "annotator": "ann"}]
    assert cli("import", str(write_jsonl(tmp_path / "n.jsonl", rows)))[0] == 0
    with write(db) as con:
        folder = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.0, seed=0, drop_flagged=False)
    readme = (folder / "README.md").read_text()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert all(f"| {c} |" in readme or f" {c}," in readme or f", {c} |" in readme for c in manifest["columns"])
    data = load_dataset("parquet", data_files={"train": str(folder / "train.parquet")}, split="train")
    assert data.column_names == manifest["columns"] and len(data) == 3
    assert {r["prompt"] for r in data} == {conversation_text(TURNS)}
    assert sorted((r["chosen"], r["rejected"], r["margin"]) for r in data) == [
        ("Blue again.", "No.", 1),
        ("Red.", "Blue again.", 1),
        ("Red.", "No.", 2),
    ]


def test_a_label_studio_task_whose_prompt_is_messages_imports_as_the_conversation(db, cli, tmp_path):
    items = [{"id": "a", "body": "Red."}, {"id": "b", "body": "No idea."}]
    ranker = {"from_name": "rank", "type": "ranker", "value": {"ranker": {"rank": ["a", "b"]}}}
    task = {"id": 1, "data": {"prompt": TURNS, "items": items}, "annotations": [{"id": 9, "result": [ranker]}]}
    export = tmp_path / "e.json"
    export.write_text(json.dumps([task]))
    code, out, err = cli("import-ls", str(export))
    assert code == 0, err
    assert query(db, "SELECT DISTINCT prompt FROM pairs") == [(conversation_text(TURNS),)]
    task["data"]["prompt"] = TURNS[:3]  # ends with the assistant: no prompt
    export.write_text(json.dumps([{**task, "id": 2}]))
    before = store_rows(db)
    code, out, err = cli("import-ls", str(export))
    assert code == 1 and "task 2 annotation 9: 'prompt': the last message is the assistant's" in err
    assert store_rows(db) == before
