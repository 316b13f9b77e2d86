"""The five malformed inputs of the foundation issue, through the real `rlhf` process: one line on stderr, a
non-zero exit, no traceback, and the store exactly as it was."""

import json
import subprocess
import sys

import pytest

from tests.conftest import DATA, store_rows
from training.registry import TRAINERS

CASES = [
    ("import-ls", "truncated.json", (DATA / "ls" / "ranker_rank.json").read_text()[:300], "not valid JSON"),
    (
        "import",
        "missing.jsonl",
        json.dumps({"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2, 3]}),
        "3 ranks for 2 responses",
    ),
    ("import-ls", "noprompt.csv", '"id","question","rank"\n1,"q","[]"\n', "the CSV has no 'prompt' column"),
    (
        "import-ls",
        "choices.json",
        json.dumps(
            [
                {
                    "id": 1,
                    "data": {"prompt": "p"},
                    "annotations": [
                        {"id": 1, "result": [{"from_name": "c", "type": "choices", "value": {"choices": ["A"]}}]}
                    ],
                }
            ]
        ),
        "unsupported Label Studio template",
    ),
    ("import", "empty.jsonl", "", "the file is empty"),
    ("prompts", "empty.txt", "", "the file is empty"),
]


@pytest.mark.integration
@pytest.mark.parametrize("command, name, content, message", CASES, ids=[c[1] for c in CASES])
def test_malformed_input_through_the_cli(db, tmp_path, command, name, content, message):
    subprocess.run(
        [sys.executable, "-m", "app.faces.cli", "--db", db, "import", str(DATA / "native_example.jsonl")],
        check=True,
        capture_output=True,
    )
    before = store_rows(db)
    (tmp_path / name).write_text(content)
    args = ["prompts", "add"] if command == "prompts" else [command]
    r = subprocess.run(
        [sys.executable, "-m", "app.faces.cli", "--db", db, *args, str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert store_rows(db) == before


def test_export_ls_with_nothing_sampled(cli):
    code, _, err = cli("export-ls", "out")
    assert code == 1 and "no prompt has two or more sampled responses yet" in err


def test_pairs_into_a_missing_folder_or_unknown_format(cli, tmp_path):
    code, _, err = cli("pairs", "--out", str(tmp_path / "nope" / "p.jsonl"))
    assert code == 1 and "folder" in err and "does not exist" in err
    code, _, err = cli("pairs", "--out", str(tmp_path / "p.xlsx"))
    assert code == 1 and "must end in .jsonl, .parquet or .csv" in err


# One argv per command, each with --db after the command's name (the README says every command takes it).
DB_AFTER = {
    "ui": ["ui"],
    "init": ["init"],
    "prompts": ["prompts", "add", "p.txt"],
    "sample": ["sample", "--k", "2"],
    "best-of-n": ["best-of-n", "--reward", "runs/rm"],
    "import": ["import", "r.jsonl"],
    "import-ls": ["import-ls", "e.json"],
    "export-ls": ["export-ls", "out"],
    **{t.command: [t.command] for t in TRAINERS.values()},  # every trainer's command, from the registry
    "backup": ["backup", "out"],
    "restore": ["restore", "b"],
    "demo": ["demo", "--quick"],
    "demo-seeds": ["demo-seeds", "demo-a", "--out", "o"],
    "demo-trials": ["demo-trials", "demo-a", "--out", "o"],
    "stop": ["stop", "runs/x"],
    "runs": ["runs"],
    "undone": ["undone"],
    "user": ["user", "add", "ann", "--file", "users.txt"],
    "rounds": ["rounds"],
    "round": ["round", "start", "--policy", "default"],
    "pairs": ["pairs", "--stats"],
    "annotators": ["annotators", "--json"],
    "rm-agreement": ["rm-agreement", "--reward", "rm-1"],
    "guideline": ["guideline", "--set", "g.md"],
    "gold": ["gold", "add", "3", "--annotator", "lead"],
}


@pytest.mark.parametrize("command", sorted(DB_AFTER))
def test_db_is_accepted_after_every_command(command, tmp_path):
    from app.faces.cli import build_parser, parse

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(commands) == set(DB_AFTER)  # a new command gets a case here
    after = str(tmp_path / "after.duckdb")
    assert parse([*DB_AFTER[command], "--db", after]).db == after
    assert parse(["--db", "before.duckdb", *DB_AFTER[command]]).db == "before.duckdb"  # before still works


@pytest.mark.store_file
def test_db_after_the_command_runs_on_that_store(db, tmp_path, capsys):
    from app.faces.cli import main

    assert main(["import", str(DATA / "native_example.jsonl"), "--db", db]) == 0
    capsys.readouterr()
    assert main(["pairs", "--stats", "--json", "--db", db]) == 0
    after = json.loads(capsys.readouterr().out)
    assert main(["--db", db, "pairs", "--stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == after and after["rankings"] > 0
