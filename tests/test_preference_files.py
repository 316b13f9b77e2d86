"""Preference data in the ecosystem's shapes (annotation/preference_files.py; issue 31): TRL's pairs (explicit and
implicit prompt, strings and conversations) and per-response scores into the store, and the store's pairs out in
TRL's format, round trip; .jsonl, .json, .parquet and a datasets folder; every malformed row one line naming it,
with nothing imported."""

import json

import pytest

from annotation.preference_files import ranks_by_score, split_implicit
from tests.conftest import query, store_rows, write_jsonl

TRL_ROWS = [
    {"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "I like turtles."},
    {"prompt": "Say hi.", "chosen": "Hi!", "rejected": "No."},
    {"prompt": "Say hi.", "chosen": "Hello there!", "rejected": "No."},
]


def _out_rows(cli, tmp_path, name="out.jsonl") -> list[dict]:
    code, out, err = cli("pairs", "--format", "trl", "--out", str(tmp_path / name))
    assert code == 0, err
    return [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]


def _key(rows):
    return sorted((r["prompt"], r["chosen"], r["rejected"]) for r in rows)


def test_trl_pairs_in_then_out_are_the_same_pairs_and_a_reimport_adds_nothing(db, cli, tmp_path):
    path = write_jsonl(tmp_path / "prefs.jsonl", TRL_ROWS)
    code, out, err = cli("init")
    code, out, err = cli("import", str(path))
    assert code == 0, err
    assert query(db, "SELECT count(*), min(source), min(annotator) FROM rankings") == [(3, "dataset", "prefs.jsonl")]
    assert _key(_out_rows(cli, tmp_path)) == _key(TRL_ROWS)
    before = store_rows(db)
    code, out, _ = cli("import", str(path))
    assert code == 0 and store_rows(db) == before  # the same rows again add nothing
    # the import says where each ranking came from
    assert query(db, "SELECT DISTINCT i.origin FROM rankings r JOIN imports i USING (import_id)") == [(str(path),)]


def test_conversations_explicit_and_implicit_come_in_as_their_texts(db, cli, tmp_path):
    user = {"role": "user", "content": "Name a colour."}
    rows = [
        {
            "prompt": [user],
            "chosen": [{"role": "assistant", "content": "Blue."}],
            "rejected": [{"role": "assistant", "content": "Turtles."}],
        },
        {  # implicit: the prompt is the turns both share
            "chosen": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}],
            "rejected": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "No."}],
        },
        {  # implicit plain text, HH-RLHF's way: the prompt ends at the last "Assistant:"
            "chosen": "\n\nHuman: Say bye.\n\nAssistant: Bye, see you.",
            "rejected": "\n\nHuman: Say bye.\n\nAssistant: Bye?",
        },
    ]
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(rows))
    code, _, err = cli("import", str(path), "--annotator", "vendor")
    assert code == 0, err
    assert _key(_out_rows(cli, tmp_path)) == sorted(
        [
            ("Name a colour.", "Blue.", "Turtles."),
            ("Say hi.", "Hi!", "No."),
            ("\n\nHuman: Say bye.\n\nAssistant:", "Bye, see you.", "Bye?"),
        ]
    )
    assert query(db, "SELECT DISTINCT annotator FROM rankings") == [("vendor",)]


def test_the_implicit_split_by_hand():
    assert split_implicit("Q: 2+2?\nA: four", "Q: 2+2?\nA: five") == ("Q: 2+2?\nA:", "four", "five")
    # both answers begin with "Ye": the prompt ends at the word boundary before it, not inside the answers (a whole
    # first word both share would go to the prompt: plain text cannot say where a turn ends without a marker)
    assert split_implicit("Tell me. Yes indeed", "Tell me. Yellow") == ("Tell me.", "Yes indeed", "Yellow")


def test_scores_rank_each_prompts_responses_ties_where_equal(db, cli, tmp_path):
    assert ranks_by_score([7.5, 9, 7.5, 2]) == [2, 1, 2, 3]
    rows = [
        {"prompt": "Pick one.", "responses": ["a", "b", "c", "d"], "scores": [7.5, 9, 7.5, 2]},
        {  # UltraFeedback's shape
            "instruction": "Count to two.",
            "completions": [{"response": "1 2", "overall_score": 8}, {"response": "one", "overall_score": 3}],
        },
    ]
    code, _, err = cli("import", str(write_jsonl(tmp_path / "scored.jsonl", rows)))
    assert code == 0, err
    # b over a, c, d; a and c (tied) over d: 5 pairs, none between a and c; then 1 pair of the second prompt
    assert _key(_out_rows(cli, tmp_path)) == sorted(
        [("Pick one.", c, r) for c, r in [("b", "a"), ("b", "c"), ("b", "d"), ("a", "d"), ("c", "d")]]
        + [("Count to two.", "1 2", "one")]
    )


def test_a_parquet_file_and_a_datasets_folder_import_and_pairs_go_out_to_both(db, cli, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, load_from_disk

    pq.write_table(pa.Table.from_pylist(TRL_ROWS[:2]), tmp_path / "a.parquet")
    Dataset.from_list(TRL_ROWS[2:]).save_to_disk(str(tmp_path / "ds"))
    for src in ("a.parquet", "ds"):
        code, _, err = cli("import", str(tmp_path / src))
        assert code == 0, err
    code, _, err = cli("pairs", "--format", "trl", "--out", str(tmp_path / "out-ds"))
    assert code == 0, err
    assert _key(load_from_disk(str(tmp_path / "out-ds")).to_list()) == _key(TRL_ROWS)
    code, _, err = cli("pairs", "--format", "trl", "--out", str(tmp_path / "out.parquet"))
    assert code == 0, err
    assert _key(pq.read_table(tmp_path / "out.parquet").to_pylist()) == _key(TRL_ROWS)


def test_a_datasets_folder_reads_nothing_outside_itself_and_no_fifo(db, cli, tmp_path):
    """Issue 51 item 10: `datasets` opens every data file its state.json names, `../` included, and a FIFO in the
    folder hung the import. Now a folder is checked before it is opened; each case is one line, nothing stored."""
    import os

    from datasets import Dataset

    outside = tmp_path / "elsewhere"
    Dataset.from_list(TRL_ROWS[:1]).save_to_disk(str(outside))
    escaping = tmp_path / "escaping"
    Dataset.from_list(TRL_ROWS[2:]).save_to_disk(str(escaping))
    state = json.loads((escaping / "state.json").read_text())
    state["_data_files"] = [{"filename": "../elsewhere/data-00000-of-00001.arrow"}]
    (escaping / "state.json").write_text(json.dumps(state))
    fifo = tmp_path / "fifo"
    Dataset.from_list(TRL_ROWS[2:]).save_to_disk(str(fifo))
    os.mkfifo(fifo / "extra.arrow")
    linked = tmp_path / "linked"
    Dataset.from_list(TRL_ROWS[2:]).save_to_disk(str(linked))
    (linked / "extra.arrow").symlink_to(outside / "data-00000-of-00001.arrow")
    before = store_rows(db)
    for folder, line in [
        (escaping, "state.json names a data file outside the folder ('../elsewhere/data-00000-of-00001.arrow')"),
        (fifo, "extra.arrow is not a plain file or folder (a link, FIFO or device)"),
        (linked, "extra.arrow is not a plain file or folder (a link, FIFO or device)"),
    ]:
        code, _, err = cli("import", str(folder))  # (the folders' own saving wrote progress bars before it)
        assert code == 1 and err.splitlines()[-1] == f"error: {folder}: {line}"
    assert store_rows(db) == before


def test_a_small_parquet_file_that_decodes_to_a_lot_is_refused_as_it_is_read(db, cli, tmp_path, monkeypatch):
    """Issue 51 item 10: a 100 KB Parquet file took 2.75 GB and 59 s to refuse: one long string repeated in every
    row is stored once in a dictionary page. The rows are decoded a batch at a time and counted (here against a
    1 MB limit: 400 rows of the same 100 KB string decode to 40 MB)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from annotation import preference_files

    monkeypatch.setattr(preference_files, "MAX_FILE_BYTES", 1 << 20)
    long = "x" * 100_000
    rows = [{"prompt": f"p{i}", "chosen": long, "rejected": "short"} for i in range(400)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bomb.parquet", use_dictionary=True, compression="zstd")
    assert (tmp_path / "bomb.parquet").stat().st_size < 100_000
    before = store_rows(db)
    code, _, err = cli("import", str(tmp_path / "bomb.parquet"))
    assert code == 1 and err == "error: bomb.parquet: decodes to over the 1 MB import limit\n"
    assert store_rows(db) == before


BAD_ROWS = [
    ({"prompt": "p", "chosen": "a"}, "row 2: fields chosen, prompt: not a preference row"),
    ({"prompt": "p", "chosen": "a", "rejected": "a"}, "row 2: responses 1 and 2 are identical"),
    ({"prompt": "p", "chosen": 3, "rejected": "a"}, "row 2: 'chosen' must be a string or one assistant message"),
    ({"prompt": "", "chosen": "a", "rejected": "b"}, "row 2: the prompt is empty"),
    (
        {
            "prompt": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "s"}],
            "chosen": "a",
            "rejected": "b",
        },
        "row 2: the last message is the assistant's; a prompt ends with the user's turn",
    ),
    ({"chosen": "abc", "rejected": "xyz"}, "row 2: 'chosen' and 'rejected' share no beginning"),
    ({"prompt": "p", "responses": ["a", "b"], "scores": [1]}, "row 2: 'responses' and 'scores' must be lists"),
    ({"prompt": "p", "responses": ["a", "b"], "scores": [1, "high"]}, "row 2: score 'high' is not a number"),
    ({"prompt": "p", "completions": [{"response": "a"}]}, "row 2: a completion has no 'overall_score'"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "annotator": 5}, "row 2: 'annotator' must be a string"),
]


@pytest.mark.parametrize("bad, message", BAD_ROWS)
def test_a_malformed_row_is_one_line_naming_it_and_nothing_is_imported(db, cli, tmp_path, bad, message):
    cli("init")
    path = write_jsonl(tmp_path / "bad.jsonl", [TRL_ROWS[0], bad, TRL_ROWS[1]])
    before = store_rows(db)
    code, out, err = cli("import", str(path))
    assert code != 0 and f"bad.jsonl {message}" in err and len(err.strip().splitlines()) == 1, err
    assert store_rows(db) == before


def test_the_same_rows_under_another_name_add_nothing_and_a_bad_row_is_named_by_its_line(db, cli, tmp_path):
    cli("init")
    a = write_jsonl(tmp_path / "a.jsonl", TRL_ROWS)
    b = tmp_path / "copy.jsonl"
    b.write_text(a.read_text())
    assert cli("import", str(a))[0] == 0
    before = store_rows(db)
    assert cli("import", str(b))[0] == 0 and store_rows(db) == before  # the same rankings, whatever the file's name
    gappy = tmp_path / "gappy.jsonl"
    gappy.write_text(json.dumps(TRL_ROWS[0]) + "\n\n\n" + json.dumps({"prompt": "p", "chosen": "x"}) + "\n")
    code, _, err = cli("import", str(gappy))
    assert code != 0 and "gappy.jsonl row 4: " in err  # its line, blank lines counted
    code, _, err = cli("import", str(tmp_path / "missing.parquet"))
    assert code != 0 and err.strip() == f"error: {tmp_path / 'missing.parquet'}: no such file"


def test_annotator_names_the_native_rows_that_name_nobody(db, cli, tmp_path):
    rows = [{"prompt": "Say hi.", "responses": ["hi", "yo"], "ranks": [1, 2]}]
    code, _, err = cli("import", str(write_jsonl(tmp_path / "n.jsonl", rows)), "--annotator", "vendor")
    assert code == 0, err
    assert query(db, "SELECT annotator, source FROM rankings") == [("vendor", "native")]
