"""`rlhf train-ppo --prompts FILE` reads the file with the reader `rlhf prompts add` uses (annotation.prompt_files):
the same formats, the same limits, the same error lines. Only the preparation step runs here; nothing is launched."""

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, store_rows


@pytest.fixture
def no_launch(monkeypatch):
    """`rlhf train-ppo` must fail before training starts; if it ever got that far, the test fails instead."""
    import app.jobs.training

    def refuse(*args, **kwargs):
        raise AssertionError("training was launched")

    monkeypatch.setattr(app.jobs.training, "run_training", refuse)


def _frozen_prompts(run: Path) -> list[str]:
    """The prompts the run's ranks will read, through the trainer's own reader."""
    from training.rollouts.prompt_data import read_prompts

    return read_prompts(json.loads((run / "config.json").read_text())["prompts"])


WANT = ["What is a river?", "Name a colour, please.", 'Say "hi"']
GOOD = [
    ("prompts.txt", 'What is a river?\n\nName a colour, please.\n  Say "hi"  \n'),
    ("prompts.jsonl", "".join(json.dumps({"prompt": p}) + "\n" for p in WANT)),
    # the header is not a prompt; the other columns are ignored; an empty cell is no prompt; quotes are CSV's
    ("prompts.csv", 'id,prompt,topic\n1,What is a river?,geo\n2,"Name a colour, please.",art\n3,,x\n4,"Say ""hi""",\n'),
    ("PROMPTS.CSV", 'prompt\nWhat is a river?\n"Name a colour, please."\n"Say ""hi"""\n'),
]


@pytest.mark.parametrize("name, content", GOOD, ids=[g[0] for g in GOOD])
def test_train_ppo_trains_on_the_prompts_that_prompts_add_reads(db, tmp_path, models, name, content):
    from annotation.prompt_files import read_prompts
    from app.jobs.training import prepare_run
    from training.ppo.config import PPOConfig

    f = tmp_path / name
    f.write_text(content)
    assert read_prompts(f) == WANT
    run = prepare_run(db, PPOConfig(**models), tmp_path / "runs", str(f))
    assert _frozen_prompts(run) == WANT
    # the same file gives the same frozen copy, so two runs' configs name the same prompts
    again = prepare_run(db, PPOConfig(**models), tmp_path / "runs", str(f))
    assert (
        json.loads((again / "config.json").read_text())["prompts"]
        == json.loads((run / "config.json").read_text())["prompts"]
    )


def test_a_snapshot_folder_is_still_taken_as_it_is(cli, db, tmp_path, models):
    from app.jobs.training import prepare_run
    from store.db import write
    from store.snapshot import write_snapshot
    from training.ppo.config import PPOConfig

    assert cli("import", str(DATA / "native_example.jsonl"))[0] == 0
    with write(db) as con:
        folder = write_snapshot(con, tmp_path / "snapshots", eval_fraction=0.0, seed=0)
    run = prepare_run(db, PPOConfig(**models), tmp_path / "runs", str(folder))
    assert json.loads((run / "config.json").read_text())["prompts"] == str(folder.resolve())
    assert _frozen_prompts(run)


BAD = [
    # (file name, content (None: a 3 MB file of prompts, over a 1 MB limit), the error both commands give)
    ("long.txt", "A short one.\n" + "x" * 20_001 + "\n", "long.txt line 2: prompt of 20001 characters is over 20000"),
    ("big.txt", None, "3 MB is over the 1 MB import limit"),
    ("prompts.xlsx", "prompt\nWhat is a river?\n", "prompts.xlsx: prompts come from .txt, .jsonl or .csv files"),
    ("prompts", "What is a river?\n", "prompts: prompts come from .txt, .jsonl or .csv files"),
    ("question.csv", "id,question\n1,What is a river?\n", "the CSV has no 'prompt' column (columns: id, question)"),
    ("header_only.csv", "id,prompt\n", "header_only.csv: no prompts in the file"),
    ("bad.jsonl", '{"prompt": "ok"}\n{"prompt": \n', "bad.jsonl line 2: not valid JSON"),
    ("latin1.txt", "caf\xe9\n".encode("latin-1"), "not UTF-8 text (byte 3); save it as UTF-8"),
]


@pytest.mark.parametrize("name, content, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_prompts_file_is_the_prompts_add_error_and_no_run(
    cli, db, tmp_path, models, no_launch, monkeypatch, name, content, message
):
    monkeypatch.setattr("annotation.files.MAX_FILE_BYTES", 2**20)  # the app's 1 MB upload limit
    f = tmp_path / name
    if content is None:
        f.write_text("What is a river?\n" * (3 * 2**20 // 17 + 1))
    elif isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    before = store_rows(db)
    code, _, added_err = cli("prompts", "add", str(f))
    assert code == 1 and message in added_err
    runs = tmp_path / "runs"
    flags = ["--actor", models["actor"], "--reward", models["reward"], "--runs-dir", str(runs)]
    code, out, err = cli("train-ppo", "--prompts", str(f), *flags)
    assert (code, out) == (1, "")
    assert err == added_err and len(err.strip().splitlines()) == 1, err
    assert not runs.exists() or not any(runs.iterdir())
    assert store_rows(db) == before


def test_a_missing_prompts_file_is_one_line(cli, db, tmp_path, models, no_launch):
    flags = ["--actor", models["actor"], "--reward", models["reward"], "--runs-dir", str(tmp_path / "runs")]
    code, _, err = cli("train-ppo", "--prompts", str(tmp_path / "nope.csv"), *flags)
    assert code == 1 and err.strip() == f"error: {tmp_path / 'nope.csv'}: no such prompts file or snapshot folder"


@pytest.mark.parametrize("name", ["prompts.csv", "prompts.xlsx", "prompts"])
def test_the_trainer_never_reads_another_kind_of_file_as_lines(tmp_path, name):
    """A config written by hand and launched directly names its prompts file too: a CSV there is refused, not read
    line by line with its header (`rlhf train-ppo` hands the ranks a frozen .jsonl)."""
    from training.models import DataError
    from training.rollouts.prompt_data import read_prompts

    f = tmp_path / name
    f.write_text("id,prompt\n1,What is a river?\n")
    with pytest.raises(DataError, match="prompts for training come from a .jsonl or .txt file or a snapshot folder"):
        read_prompts(str(f))


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "is not a snapshot: no manifest.json"),
        ("{not json", "manifest.json names no train file"),
        ('{"splits": {"eval": {"file": "eval.parquet"}}}', "manifest.json names no train file"),
    ],
)
def test_a_folder_without_a_readable_manifest_is_one_error_for_pairs_and_prompts(tmp_path, manifest, message):
    """The trainers read a snapshot's files through one reader of its manifest
    (training/pairwise/pairs.py::snapshot_file), so a folder that is not a snapshot is the same one line to a trainer
    on pairs and to one on prompts."""
    from training.models import DataError
    from training.pairwise.pairs import load_pairs
    from training.rollouts.prompt_data import read_prompts

    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    for read in (load_pairs, read_prompts):
        with pytest.raises(DataError, match=message) as e:
            read(str(tmp_path))
        assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize(
    "n_prompts, batch, world, buffers, fitted",
    [
        (100, 32, 1, 1, 32),  # enough: the setting
        (20, 32, 1, 1, 20),  # fewer than one batch: every prompt in the epoch's one batch
        (20, 32, 2, 1, 10),  # two ranks share them
        (20, 8, 1, 2, 8),  # two batches of 8 fit in 20
        (20, 32, 1, 2, 10),  # a buffer of two batches: 10 each
        (3, 8, 4, 1, 0),  # not one prompt a rank
    ],
)
def test_the_rollout_batch_fits_the_prompts(n_prompts, batch, world, buffers, fitted):
    from training.rollouts.prompt_data import fitted_batch, prompt_batches

    assert fitted_batch(n_prompts, batch, world, buffers) == fitted
    if fitted:  # each epoch then has a buffer of batches for every rank
        assert len(prompt_batches(n_prompts, fitted, world, 0, 0)) >= buffers
