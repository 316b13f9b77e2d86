"""The bad-input corpus, tests/data/bad/cases.json: every malformed or hostile file through the `rlhf` command it is
meant for (and the uploadable ones through the app's own endpoints). Each case: exit status 1, one `error:` line
that says what is wrong, and the store exactly as it was (every row of every table)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client import handle_file

from app.faces.cli import main
from bench.app_server import AppServer
from tests.conftest import DATA, store_rows, write_jsonl

BAD = DATA / "bad"
CASES = json.loads((BAD / "cases.json").read_text())
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> str:
    """A store with prompts, rankings and a Label Studio import in it: the rows a bad input must not touch."""
    tmp = tmp_path_factory.mktemp("seeded")
    db = str(tmp / "store.duckdb")
    assert main(["--db", db, "import", str(DATA / "native_example.jsonl")]) == 0
    assert main(["--db", db, "import-ls", str(DATA / "ls" / "ranker_rank.json")]) == 0
    (tmp / "p.txt").write_text("A prompt nobody has ranked yet\n")
    assert main(["--db", db, "prompts", "add", str(tmp / "p.txt")]) == 0
    return db


@pytest.fixture
def store(seeded, tmp_path) -> str:
    db = str(tmp_path / "store.duckdb")
    shutil.copy(seeded, db)
    return db


def test_the_corpus_covers_every_entry_point():
    assert len(CASES) >= 30
    kinds = {c["file"].split("/")[0] for c in CASES}
    assert kinds == {"prompts", "native", "ls", "config", "models", "auth", "backup"}
    for c in CASES:
        assert (BAD / c["file"]).exists(), c["file"]


def refused(store: str, tmp_path: Path, capsys, args: list[str], message: str) -> None:
    """`rlhf --db STORE ARGS` run in tmp_path: exit 1, one `error:` line holding `message`, nothing changed."""
    before = store_rows(store)
    files_before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["--db", store, *args])
    out = capsys.readouterr()
    assert code == 1
    assert out.err.startswith("error: ") and len(out.err.strip().splitlines()) == 1, out.err
    assert message in out.err
    assert "Traceback" not in out.err + out.out
    assert store_rows(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files_before  # no restored store, no file a backup asked for
    assert not Path("/tmp/pwned").exists()  # the pickle and the remote code were never run


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_each_bad_input_is_one_line_exit_1_and_no_change(case, store, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a hostile file might make lands here, where we look for it
    args = [a.format(file=BAD / case["file"], bad=BAD, tmp=tmp_path) for a in case["args"]]
    refused(store, tmp_path, capsys, args, case["message"])


# Cases too big to keep in the corpus, written at test time: (file name, its text, `rlhf` args, the message).
BUILT = [
    (
        "big_cell.csv",  # one cell over csv's default field limit (131,072 characters)
        "prompt\n" + "x" * 131_073 + "\n",
        ["prompts", "add", "{file}"],
        "big_cell.csv line 2: prompt of 131073 characters is over 20000",
    ),
]


@pytest.mark.parametrize("name, text, args, message", BUILT, ids=[b[0] for b in BUILT])
def test_each_built_bad_input_is_one_line_exit_1_and_no_change(store, tmp_path, capsys, name, text, args, message):
    (tmp_path / name).write_text(text)
    refused(store, tmp_path, capsys, [a.format(file=tmp_path / name) for a in args], message)


@pytest.mark.parametrize(
    "name, text, args",
    [
        ("prompts.csv", "prompt\n" + "x" * 1_001 + "\n", ["prompts", "add"]),
        ("export.csv", "id,prompt,rank\n1,p," + "x" * 1_001 + "\n", ["import-ls"]),
    ],
)
def test_a_csv_the_csv_module_cannot_read_is_one_line_naming_file_and_row(
    store, tmp_path, capsys, monkeypatch, name, text, args
):
    """A cell over the field limit is csv's one error left once the limit is the file's own size (which no cell
    can pass), so the limit is lowered here to reach it."""
    import csv

    from annotation import files

    monkeypatch.setattr(files, "MAX_CSV_CELL_CHARS", 1_000)
    (tmp_path / name).write_text(text)
    limit = csv.field_size_limit()  # process-wide: put back for whatever reads CSV next
    try:
        refused(store, tmp_path, capsys, [*args, str(tmp_path / name)], f"{name} row 2: not readable as CSV")
    finally:
        csv.field_size_limit(limit)


# `rlhf ARGS` in a child that writes its own peak resident memory (KB) to a file when it exits. (The children's
# figure from getrusage would be the largest of every process this pytest ever reaped, the apps included.)
MEASURED = """
import resource, runpy, sys
out, sys.argv = sys.argv[1], ["rlhf", *sys.argv[2:]]
try:
    runpy.run_module("app.faces.cli", run_name="__main__")
finally:
    open(out, "w").write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def _rss_mb(args: list[str], out: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run `rlhf ARGS` in a child and return it with the child's own peak resident memory in MB."""
    cmd = [sys.executable, "-c", MEASURED, str(out), *args]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r, int(out.read_text()) / 1024


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("huge.txt", ["prompts", "add"], "500 MB is over the 200 MB import limit"),
        ("huge.jsonl", ["import"], "500 MB is over the 200 MB import limit"),
        ("huge.json", ["import-ls"], "500 MB is over the 200 MB import limit"),
        ("huge.json", ["train-rm", "--config"], "is not a config file (limit 1048576)"),
    ],
)
@pytest.mark.integration
def test_a_500_mb_file_is_refused_by_its_size_without_reading_it(store, tmp_path, name, args, message):
    huge = tmp_path / name
    with huge.open("wb") as f:  # sparse: 500 MB long, no disk used
        f.truncate(500 * 2**20)
    before = store_rows(store)
    r, peak_mb = _rss_mb(["--db", store, *args, str(huge)], tmp_path / "rss.txt")
    assert r.returncode == 1 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # the same command on a missing file: same process, same imports (torch's alone vary by 100s of MB between
    # machines), nothing read
    _, baseline_mb = _rss_mb(["--db", store, *args, str(tmp_path / "missing" / name)], tmp_path / "rss0.txt")
    assert peak_mb < baseline_mb + 100  # reading the file would have added 500 MB
    assert store_rows(store) == before


@pytest.fixture(scope="module")
def app(seeded, tmp_path_factory):
    """The app on a copy of the seeded store, with a 1 MB upload limit (the default is 200 MB)."""
    db = str(tmp_path_factory.mktemp("app") / "store.duckdb")
    shutil.copy(seeded, db)
    server = AppServer(db, env={"RLHF_MAX_UPLOAD_MB": "1"})
    yield server, db, server.client()
    server.stop()


UPLOADS = [c for c in CASES if c.get("ui")]


@pytest.mark.integration
@pytest.mark.parametrize("case", UPLOADS, ids=[c["file"] for c in UPLOADS])
def test_each_bad_upload_is_an_error_in_the_page_and_no_change(app, case):
    server, db, client = app
    before = store_rows(db)
    args = [handle_file(str(BAD / case["file"]))] + ([""] if case["ui"] == "import_ls" else [])
    with pytest.raises(Exception) as err:
        client.predict(*args, api_name=f"/{case['ui']}")
    assert case.get("ui_message", case["message"]) in str(err.value)
    assert store_rows(db) == before


@pytest.mark.integration
def test_an_upload_over_the_limit_is_refused_before_it_is_stored(app, tmp_path):
    server, db, client = app
    before = store_rows(db)
    big = tmp_path / "big.txt"
    big.write_text("A prompt that is long enough to count.\n" * 60_000)  # 2.3 MB, over the 1 MB limit
    with pytest.raises(Exception, match="(?i)too large|exceeds|maximum"):
        client.predict(handle_file(str(big)), api_name="/add_prompts")
    small = write_jsonl(tmp_path / "ok.jsonl", [{"prompt": "A fresh prompt from an upload"}])
    assert client.predict(handle_file(str(small)), api_name="/add_prompts").startswith("prompts: 1 added")
    after = store_rows(db)
    assert len(after["prompts"]) == len(before["prompts"]) + 1


@pytest.mark.integration
def test_an_upload_named_with_a_path_stays_inside_the_apps_upload_folder(app, tmp_path):
    """A multipart file name of ../../../ cannot place a file outside Gradio's upload folder."""
    import urllib.request
    import uuid

    server, db, client = app
    target = tmp_path / "escaped.txt"
    boundary = uuid.uuid4().hex
    name = "../" * 12 + str(target).lstrip("/")
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        f"Content-Type: text/plain\r\n\r\nWhat is a river?\n\r\n--{boundary}--\r\n"
    ).encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", **server.headers}
    req = urllib.request.Request(server.url + "gradio_api/upload", data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        (stored,) = json.loads(resp.read())
    assert not target.exists()
    assert Path(stored).name == "escaped.txt" and "/../" not in stored
    assert os.path.realpath(stored).startswith(os.path.realpath(Path(stored).parents[1]))


def test_csv_export_never_starts_a_formula(store, tmp_path, capsys):
    """Rankings whose texts are spreadsheet formulas import as data (they are someone's text); the CSV export shows
    each one with a leading ' so a spreadsheet displays it instead of running it. JSONL keeps the text as it was."""
    import csv

    assert main(["--db", store, "import", str(BAD / "export" / "formulas.jsonl")]) == 0
    assert main(["--db", store, "pairs", "--out", str(tmp_path / "p.csv")]) == 0
    assert main(["--db", store, "pairs", "--out", str(tmp_path / "p.jsonl")]) == 0
    capsys.readouterr()
    with (tmp_path / "p.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    plain = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(rows) == len(plain) > 0
    for row, original in zip(rows, plain, strict=True):
        for col in ("prompt", "chosen", "rejected", "annotator"):
            text = original[col]
            assert row[col] == ("'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text)
            assert not row[col].startswith(("=", "+", "-", "@", "\t", "\r"))
    evil = [r for r in rows if r["annotator"] == "'=ann"]  # the 3-response ranking: 3 pairs
    assert len(evil) == 3 and {r["prompt"][:11] for r in evil} == {"'=HYPERLINK"}
