import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from app.faces.cli import main
from store.db import MemoryStore, connect
from tests.builders import build_liked_token_rm, build_share_rm, hand_ensemble

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# `auto` dtypes mean fp32 in the tests: the same numbers on a CPU with bf16 and one without (test_precision clears it)
os.environ.setdefault("RLHF_DTYPE", "fp32")
DATA = Path(__file__).parent / "data"
# The fast lane, `pytest -m "not integration and not browser"`, starts no process: a test that starts one (DeepSpeed's
# launcher, the demo, an app or Label Studio server, a fresh interpreter, chromium) carries one of these marks.
PROCESS_MARKS = ("integration", "browser")
_running: dict = {"item": None}


class _MarkedPopen(subprocess.Popen):
    """subprocess.Popen that refuses to start a process for a test without a PROCESS_MARKS mark (fixtures too)."""

    def __init__(self, args, *rest, **kwargs):
        _check_marked(str(args)[:80])
        super().__init__(args, *rest, **kwargs)


def _check_marked(what: str) -> None:
    item = _running["item"]
    if item is not None and not any(item.get_closest_marker(m) for m in PROCESS_MARKS):
        raise AssertionError(f"{item.nodeid} starts a process ({what}): mark it integration")


def pytest_configure(config):
    import multiprocessing.process

    # matplotlib builds its font cache on first import by running fc-list: on a fresh machine that would be the
    # first plotting test's process; build it here, before processes are checked
    import matplotlib.font_manager  # noqa: F401

    subprocess.Popen = _MarkedPopen
    start = multiprocessing.process.BaseProcess.start

    def marked_start(self):  # the chat's worker: a child from multiprocessing is a process too
        _check_marked(f"multiprocessing: {self.name}")
        start(self)

    multiprocessing.process.BaseProcess.start = marked_start


# The integration lane's longest files (minutes each here), in the order they are handed out: the lane gives each of
# its two workers a whole file at a time (--dist loadfile, --no-loadscope-reorder keeps this order), so a long file
# handed out last runs alone at the end while the other worker idles.
LONGEST_FIRST = (
    "test_demo.py",
    "test_demo_rounds.py",
    "test_ppo_watch.py",
    "test_browser_train.py",
    "test_ppo_training.py",
    "test_two_hosts.py",
    "test_vllm_engine.py",
)


def longest_first(items: list) -> list:
    """The items with LONGEST_FIRST's files first, in its order; every other file after them, as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_modifyitems(config, items):
    """RLHF_TEST_STORE=memory runs the tests that have a store (the `db` fixture) and leaves out the rest, which
    the file run covers the same. The longest files come first (LONGEST_FIRST)."""
    if ON_MEMORY:
        kept = [i for i in items if "db" in getattr(i, "fixturenames", ())]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
    items[:] = longest_first(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _running["item"] = item  # before its fixtures are set up: a module's server fixture is checked too


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    _running["item"] = None  # a fixture torn down after its last test may stop (not start) processes


TABLES = (
    "prompts",
    "responses",
    "rankings",
    "ranking_items",
    "imports",
    "snapshots",
    "assignments",
    "runs",
    "rounds",
    "round_prompts",
    "response_rounds",
)


@pytest.fixture(scope="session")
def _empty_store(tmp_path_factory) -> Path:
    """A new store, made once: a copy of it is a test's fresh store (a third of the time of making one)."""
    path = tmp_path_factory.mktemp("template") / "store.duckdb"
    with connect(str(path)):
        pass
    return path


# RLHF_TEST_STORE=memory: every test's store is the second backend (store.db.MemoryStore, an in-memory DuckDB behind
# the same connection protocol) instead of a file; a test that needs a file (the CLI's --db, a copy, a second
# process) is skipped there (the `store_file` mark). `make test` runs the store's suite this way too (Makefile).
ON_MEMORY = os.environ.get("RLHF_TEST_STORE") == "memory"


@pytest.fixture
def db(request, tmp_path, _empty_store):
    if ON_MEMORY:
        if request.node.get_closest_marker("store_file"):
            pytest.skip("needs the store as a file")
        return MemoryStore()
    path = tmp_path / "store.duckdb"
    shutil.copyfile(_empty_store, path)
    return str(path)


def store_rows(path: str) -> dict:
    """Every row of every table, for 'the store is exactly as it was' checks."""
    with connect(path, create=False) as con:  # asks a running app for the file, as the CLI does
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}


def query(path: str, sql: str, params=None) -> list[tuple]:
    with connect(path, create=False) as con:
        return con.execute(sql, params or []).fetchall()


@pytest.fixture
def cli(db, capsys):
    """Run `rlhf --db <db> ARGS` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        # on the in-memory backend the command runs on the test's store object; --db only satisfies the parser
        code = main(["--db", ":memory:", *args], store=db) if ON_MEMORY else main(["--db", db, *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def models(tmp_path) -> dict[str, str]:
    """A folder that passes the model checks (config.json + a valid, empty safetensors file); never loaded."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    return {"actor": str(folder), "reward": str(folder)}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The default SmolLM2 model converted to a plain HF folder (converted once, then cached)."""
    from training.models import resolve_model

    return resolve_model("default")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, default_model_dir) -> Path:
    """A 2-layer, hidden-32 random Llama with the default model's real tokenizer and chat template."""
    from training.tiny import build_plain_model

    return build_plain_model(tmp_path_factory.mktemp("tiny-model"), hidden=32, seed=0)


# fixtures more than one test file uses (issue 28: no test file imports another); they start nothing until asked for


@pytest.fixture(scope="module")
def liked_rm(tmp_path_factory, tiny_model_dir) -> Path:
    return build_liked_token_rm(tiny_model_dir, tmp_path_factory.mktemp("liked-rm"))


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(f"Tell me something about topic number {i}." for i in range(48)) + "\n")
    return path


@pytest.fixture(scope="module")
def talker(tmp_path_factory) -> Path:
    from training.tiny import build_talking_model

    return build_talking_model(tmp_path_factory.mktemp("talker"), n_words=48, eos_rate=0.15)


@pytest.fixture(scope="module")
def words_ensemble(tmp_path_factory, talker) -> Path:
    """A hackable pair that feels length more: member 0 pays for the share of the talker's words in the sequence
    (it grows as the reply does), member 1 (the held-out judge) is its negative, paying for brevity."""
    import torch
    from transformers import AutoTokenizer

    from training.tiny import word_tokens

    tok = AutoTokenizer.from_pretrained(talker)
    feature = torch.zeros(len(tok))
    feature[word_tokens(tok, 48)] = 1.0
    tmp = tmp_path_factory.mktemp("word-rms")
    longer = build_share_rm(talker, tmp / "longer", feature, 0.5)
    shorter = build_share_rm(talker, tmp / "shorter", feature, -0.5)
    return hand_ensemble(tmp / "ensemble", [longer, shorter])


@pytest.fixture(scope="module")
def held_prompts(tmp_path_factory) -> Path:
    """32 held-out prompts (the default --eval-limit) like the training ones, never trained on."""
    path = tmp_path_factory.mktemp("watch-held") / "held.txt"
    path.write_text("".join(f"Tell me something about topic number {i}.\n" for i in range(100, 132)))
    return path


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, launched when a (browser-marked) test first asks for it."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make test` installs Debian's chromium")
        pytest.skip("no chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        yield b
        b.close()


def dead_pid() -> int:
    """A pid no process has now (from the top of the range down: handed out last)."""
    from training.runs import process_alive

    return next(pid for pid in range(4_194_303, 1, -1) if not process_alive(pid))
