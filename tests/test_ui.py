"""The app's Data tab through its HTTP API (gradio_client), and `make run` bringing the app up on 127.0.0.1."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from gradio_client import Client, handle_file

from app.faces.data_tab import ANNOTATOR_WIDTHS
from app.faces.logins import read_users
from app.faces.ui import AppContext, build_app, is_loopback
from bench.app_server import free_port
from store.errors import UserError
from tests.conftest import DATA, dead_pid, query, store_rows
from training.sampling.generation import SamplingConfig

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def app(db, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    sampling = SamplingConfig(model=str(tiny_model_dir), max_new_tokens=8)
    demo = build_app(AppContext(db, model=str(tiny_model_dir), sampling=sampling))
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield Client(f"http://127.0.0.1:{port}/", verbose=False)
    finally:
        demo.close()


@pytest.mark.integration
def test_data_tab_end_to_end(app, db, tmp_path):
    assert "The store is empty" in app.predict(api_name="/counts")[0]
    assert app.predict(api_name="/load_examples") == "prompts: 40 added, 0 already in the store"
    (tmp_path / "mine.txt").write_text("My own prompt\n")
    assert app.predict(handle_file(str(tmp_path / "mine.txt")), api_name="/add_prompts") == (
        "prompts: 1 added, 0 already in the store"
    )
    assert app.predict(2, 3, api_name="/sample").startswith("sampled 6 responses for 3 prompts")
    assert query(db, "SELECT count(*) FROM responses") == [(6,)]
    out = app.predict(handle_file(str(DATA / "ls" / "pairwise.json")), "", api_name="/import_ls")
    assert "rankings added 2, pairs added 2" in out
    path = app.predict("jsonl", api_name="/download_pairs")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(rows) == 2 and {"prompt", "chosen", "rejected"} <= set(rows[0])
    files = app.predict(api_name="/export_ls")
    names = sorted(Path(f).name for f in files)
    assert names == ["label_config.xml", "tasks.json"]
    tasks = json.loads(Path(next(f for f in files if f.endswith("tasks.json"))).read_text())
    # 3 sampled prompts + the 2 pairwise prompts imported above, each with 2 responses
    assert len(tasks) == 5 and all(len(t["data"]["items"]) == 2 for t in tasks)
    counts, agreement = app.predict(api_name="/counts")
    assert agreement["data"] == []  # nobody shares a prompt yet
    assert "prompts 43 (5 with responses, 38 pending)" in counts and "pairs 2" in counts
    dashboard, _ = app.predict(api_name="/annotators")  # the two imported rankings, by their annotators
    assert dashboard["headers"][:4] == ["annotator", "look at", "rankings", "skips"]
    assert len(ANNOTATOR_WIDTHS) == len(dashboard["headers"]) and sum(int(w[:-1]) for w in ANNOTATOR_WIDTHS) == 100
    assert sum(row[2] for row in dashboard["data"]) == 2


@pytest.mark.integration
def test_rounds_table_and_project_id_on_a_store_with_prompts_but_no_round(app):
    """The Data tab's rounds table on a store with prompts and nothing sampled yet was a red "Error" (one round start
    too many for no round); a negative project id is one line now that the box no longer carries the bound."""
    assert app.predict(api_name="/load_examples").startswith("prompts: 40 added")
    assert app.predict(api_name="/counts_by_round")["data"] == []
    with pytest.raises(Exception, match="a Label Studio project id is a positive whole number, got -1"):
        app.predict("http://127.0.0.1:9", -1, "", "", api_name="/pull_ls")


def test_a_bad_upload_is_an_error_message_and_changes_nothing(app, db, tmp_path):
    before = store_rows(db)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": 1, "annotations": [')
    with pytest.raises(Exception, match="not valid JSON"):
        app.predict(handle_file(str(bad)), "", api_name="/import_ls")
    assert store_rows(db) == before


def test_auth_file_and_bind_rules(tmp_path):
    f = tmp_path / "users.txt"
    f.write_text("# team\nann:pw1\nbob:p:w2\n")
    f.chmod(0o600)
    assert read_users(f).secrets == {"ann": "pw1", "bob": "p:w2"}
    f.write_text("ann\n")
    with pytest.raises(UserError, match="line 1: expected user:password"):
        read_users(f)
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.7")


@pytest.mark.integration
def test_refuses_a_public_bind_without_auth(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "app.faces.cli", "--db", str(tmp_path / "s.duckdb"), "ui", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "error: refusing to listen on 0.0.0.0 without --auth: anyone on the network could read the store"
    )


@pytest.mark.integration
def test_make_run_brings_the_app_up_on_loopback(tmp_path):
    port = free_port()
    env = {**os.environ, "RLHF_DB": str(tmp_path / "run.duckdb")}
    proc = subprocess.Popen(
        ["make", "-s", "run", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url = _printed_url(proc, deadline=time.monotonic() + 240)
        assert url.startswith(f"http://127.0.0.1:{port}/?token=")
        with _browser_like().open(url, timeout=10) as r:  # the token becomes a cookie; the address loses it
            page = r.read().decode()
            assert r.url == f"http://127.0.0.1:{port}/"
        assert "rlhf-studio" in page
        assert (tmp_path / "run.duckdb").exists()
        # the same page without the token: refused, with the one line that says where the token is
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert refused.value.code == 401 and b"open the URL `rlhf ui` printed at start" in refused.value.read()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _browser_like():
    """An opener that keeps cookies and follows redirects, as a browser does."""
    import http.cookiejar

    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def _printed_url(proc, deadline: float) -> str:
    """The URL with the token that `rlhf ui` prints once it serves (read from its output)."""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            pytest.fail("the app exited before printing its URL")
        if line.startswith("* rlhf-studio: open "):
            url = line.split("open ", 1)[1].strip()
            for _ in range(240):  # the line comes just before Gradio starts answering
                try:
                    with _browser_like().open(url, timeout=2):
                        return url
                except OSError:
                    time.sleep(0.5)
    pytest.fail("the app did not print its URL")


@pytest.mark.integration
def test_sampling_in_the_app_does_not_block_annotators(app, db):
    """While the app samples the 40 example prompts, an annotator still submits and gets the next prompt."""
    from tests.builders import seed_store

    seed_store(db, 3)
    app.predict(api_name="/load_examples")
    job = app.submit(4, 0, api_name="/sample")  # K = 4 for every pending prompt, in the background
    prompt, value, *_ = app.predict("ann", api_name="/annotate_next")
    ranked = {"items": [{**it, "rank": len(value["items"]) - it["pos"]} for it in value["items"]]}
    _, _, progress, status, _ = app.predict("ann", ranked, api_name="/annotate_submit")
    assert status == "Saved. Next prompt." and progress.startswith("you: 1 ranked")
    assert not job.done()  # the annotator did not wait for the sampling run
    assert job.result().startswith("sampled 160 responses for 40 prompts")


def test_admins_need_logins_and_must_be_among_them(tmp_path, capsys):
    from app.faces.cli import main

    users = tmp_path / "users.txt"
    users.write_text("ann:pw1\nbob:pw2\n")
    users.chmod(0o600)  # rlhf ui refuses a users file others can read
    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "ui", "--admins", "ann"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: --admins needs --auth: without logins everyone using the app is its admin"
    )
    assert main(["--db", db, "ui", "--auth", str(users), "--admins", "ann,zed"]) == 1
    assert capsys.readouterr().err.strip() == "error: --admins names zed, who is not in the auth file"


def test_who_is_an_admin():
    class Req:
        def __init__(self, username):
            self.username = username

    solo = AppContext(":memory:")  # no --auth: one person on loopback, everything is theirs
    assert solo.is_admin(Req(None))
    team = AppContext(":memory:", auth=True, admins={"ann"})
    assert team.is_admin(Req("ann")) and not team.is_admin(Req("bob")) and not team.is_admin(Req(None))
    with pytest.raises(UserError, match="bob is an annotator: the Data and Train tabs are for admins"):
        team.check_admin(Req("bob"))


def test_the_train_tabs_timer_redraws_only_what_changed(db, tmp_path, tiny_model_dir):
    """Every open page polls the runs every 2 s; a tick whose runs table, status line and run folder are as the page
    last drew them sends nothing to redraw (gr.skip), and one after a change (a log line, another run) draws."""
    import gradio as gr

    from app.faces.train_tab import PLOTS, refresh_view
    from app.jobs.training import prepare_pairs_run
    from tests.builders import separable_pairs
    from tests.conftest import write_jsonl
    from training.reward.config import RewardConfig

    pairs = str(write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(16)))
    run = prepare_pairs_run(db, RewardConfig(model=str(tiny_model_dir), max_steps=1), tmp_path / "runs", pairs)
    ctx = AppContext(db, runs_dir=tmp_path / "runs")
    drawn = refresh_view(ctx, run.name)
    assert len(drawn) == 5 + PLOTS and drawn[0][0][0] == run.name and drawn[1].startswith(f"**{run.name}**")
    idle = refresh_view(ctx, run.name, drawn[-1])
    assert idle[-1] == drawn[-1] and idle[:-1] == [gr.skip()] * (4 + PLOTS)
    (run / "train.log").write_text("step 1 of 1\n")
    logged = refresh_view(ctx, run.name, drawn[-1])
    assert logged[-1] != drawn[-1] and logged[3] == "step 1 of 1" and logged[0] == drawn[0]
    assert refresh_view(ctx, run.name, logged[-1])[:-1] == [gr.skip()] * (4 + PLOTS)
    other = refresh_view(ctx, "", logged[-1])  # no run selected: the table stays, the run's views empty
    assert other[-1] != logged[-1] and other[1] == "" and other[0] == drawn[0]


@pytest.mark.integration
def test_blind_compare_shows_the_scores_with_the_names_after_the_vote(app, db, tiny_model_dir, tmp_path):
    """Through the app's endpoints (one client, one session): blind, the scores endpoint answers the line saying
    when the scores come, not the scores; the vote answers the names with the scores."""
    import shutil

    from tests.builders import build_liked_token_rm

    reference = shutil.copytree(tiny_model_dir, tmp_path / "reference")
    rm = build_liked_token_rm(tiny_model_dir, tmp_path / "rm")
    app.predict("hi", str(tiny_model_dir), str(reference), True, 0.8, 0.95, 4, 0, api_name="/compare_send")
    left, right, line, *_ = app.predict(str(rm), api_name="/compare_scores")
    assert (left, right) == ("", "")
    assert line == "Blind: the reward model's scores are shown with the names after your vote."
    reveal, left, right, *_ = app.predict(str(tiny_model_dir), api_name="/vote_left")
    assert left.startswith("reward model score: **") and right.startswith("reward model score: **")
    assert reveal.startswith("Left was **") and reveal.count("reward model score") == 2
    assert query(db, "SELECT count(*) FROM votes") == [(1,)]  # (a tie: one model's weights on both sides)
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]  # a vote is not a ranking


def test_downloads_do_not_pile_up(tmp_path):
    """Each pairs or Label Studio download wrote a folder in /tmp that stayed for good; now a new one removes the
    ones over ten minutes old."""
    import os

    from app.faces.data_tab import DOWNLOAD_AGE_S, _out_dir

    first, second = _out_dir(tmp_path), _out_dir(tmp_path)
    (first / "pairs.jsonl").write_text("{}\n")
    old = os.stat(first).st_mtime - DOWNLOAD_AGE_S - 1
    os.utime(first, (old, old))
    third = _out_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([second.name, third.name])


def test_a_planted_download_root_is_refused_and_only_our_old_download_folders_go(tmp_path):
    """Issue 51 item 3: the download root in /tmp had a fixed name; a symlink planted there made one pairs download
    delete an unrelated two-hour-old folder it pointed to. Now the root is made fresh and private, a given one is
    checked (a real folder, ours, mode 700), and a clean-up removes only old `download-*` folders."""

    from app.faces.data_tab import _out_dir
    from store.errors import UserError

    victim = tmp_path / "victim"
    (victim / "two-hours-old").mkdir(parents=True)
    old = time.time() - 7200
    os.utime(victim / "two-hours-old", (old, old))
    planted = tmp_path / "planted-root"
    planted.symlink_to(victim)
    with pytest.raises(UserError, match="is not a real folder"):
        _out_dir(planted)
    open_root = tmp_path / "open"
    open_root.mkdir(mode=0o755)
    open_root.chmod(0o755)
    with pytest.raises(UserError, match=r"can be read by others \(mode drwxr-xr-x\)"):
        _out_dir(open_root)
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    for name in ("download-old", "not-ours-old"):
        (root / name).mkdir()
        os.utime(root / name, (old, old))
    (root / "download-link").symlink_to(victim)
    _out_dir(root)
    assert (victim / "two-hours-old").is_dir()  # never touched
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith("download-") or p.is_symlink()) == [
        "download-link",
        "not-ours-old",
    ]
    assert not (root / "download-old").exists()
    from app.faces.private_files import private_root

    default = _out_dir()
    assert default.parent.parent == private_root() and (default.parent.stat().st_mode & 0o777) == 0o700


def test_a_sampler_in_use_is_closed_only_when_its_sampling_ends(db, tiny_model_dir, tmp_path):
    """A training launch (release_models) or a new sampling config retires the app's sampler; one still sampling
    closes when that sampling ends (a vLLM engine would otherwise shut down under it), an idle one at once."""
    ctx = AppContext(db, model=str(tiny_model_dir), runs_dir=tmp_path / "runs", max_engines=1)
    closed = []
    config = SamplingConfig(model=str(tiny_model_dir), max_new_tokens=2, engine="hf")
    with ctx.sampler(config) as first:
        first.close = lambda: closed.append("first")  # a real sampler; its close is watched
        with ctx.sampler(config) as again:
            assert again is first  # kept between uses
        ctx.release_models()  # a training starts while the first sampling still runs
        assert closed == []
        assert first(["Hi"], 1, 0)[0][0].n_tokens >= 1  # and it goes on sampling
    assert closed == ["first"]  # closed when that sampling ended
    with ctx.sampler(config) as second:
        second.close = lambda: closed.append("second")
    assert second is not first
    with ctx.sampler(SamplingConfig(model=str(tiny_model_dir), max_new_tokens=3, engine="hf")) as third:
        assert closed == ["first", "second"]  # an idle sampler closes as soon as a new config replaces it
        assert third is not second


def test_the_app_keeps_an_engine_per_model_warm_for_clicks_and_rounds(db, tiny_model_dir, tmp_path, monkeypatch):
    """The Sample button's engine and a round's policy's are both kept between uses (each click or round pays no
    engine start); a third model retires the least recently used; --warm-engine starts the Sample button's at launch;
    a training launch frees them all."""
    from app.jobs.round_config import RoundConfig
    from app.jobs.rounds import draw

    monkeypatch.setenv("RLHF_ENGINE", "hf")  # transformers' generate: no engine process in the fast lane
    ctx = AppContext(db, model=str(tiny_model_dir), runs_dir=tmp_path / "runs")
    ctx.sampling = SamplingConfig(model=str(tiny_model_dir), max_new_tokens=2)
    ctx.warm().join(timeout=120)
    (button,) = ctx._samplers.values()  # up before the first click
    closed = []
    button.close = lambda: closed.append("button")
    with ctx.sampler(ctx.sampling) as clicked:
        assert clicked is button
    cfg = RoundConfig(policy=str(tiny_model_dir), max_new_tokens=2, temperature=0.7)  # not the button's settings
    for seed in (0, 1):  # two rounds from one policy: one engine, opened by the first
        replies, model_id, _ = draw(str(tiny_model_dir), cfg, ["Hi", "Bye"], 2, seed, samplers=ctx.sampler)
        assert [len(r) for r in replies] == [2, 2] and len(ctx._samplers) == 2
    policy = list(ctx._samplers.values())[-1]
    policy.close = lambda: closed.append("policy")
    with ctx.sampler(ctx.sampling) as clicked:  # the button again: still warm, now the most recently used
        assert clicked is button and closed == []
    with ctx.sampler(SamplingConfig(model=str(tiny_model_dir), max_new_tokens=5)):
        assert closed == ["policy"]  # a third model: the least recently used engine goes
    ctx.release_models()  # a training starts: every idle engine closes
    assert closed == ["policy", "button"] and ctx._samplers == {}


def test_the_apps_engine_samples_every_click_and_a_click_waits_for_its_start(db, tiny_model_dir, tmp_path, monkeypatch):
    """On a CPU under `auto`, a command's job too small to pay for starting vLLM samples with generate, but the
    app's Sample button starts the engine for the same job: the app keeps it for every click after. A click while
    --warm-engine's start runs waits for that start (no second one); an engine up after a training launched is
    closed, not kept."""
    import threading
    import time

    import training.sampling.generation as generation
    import training.sampling.vllm_engine as ve
    from training.sampling.generation import Sampler, open_sampler

    started = threading.Event()  # the stand-in engine's start lasts until the test lets it end
    starts, closed = [], []

    class EngineStandIn(Sampler):  # generate under the vLLM sampler's name: which engine is chosen, not how it samples
        engine = "vllm"

        def __init__(self, *args, **kwargs):
            self.name = f"{threading.current_thread().name} {len(starts)}"  # which start made it
            starts.append(threading.current_thread().name)
            assert started.wait(timeout=120)
            super().__init__(*args, **kwargs)

        def close(self):
            closed.append(self.name)
            super().close()

    monkeypatch.delenv("RLHF_ENGINE", raising=False)
    monkeypatch.setattr(ve, "vllm_installed", lambda: True)
    monkeypatch.setattr(ve, "unsupported", lambda folder: None)
    monkeypatch.setattr(ve, "_on_gpu", lambda: False)
    monkeypatch.setattr(ve, "CPU_ENGINE_PAYS_FROM", 40)
    monkeypatch.setattr(generation, "VllmSampler", EngineStandIn)
    config = SamplingConfig(model=str(tiny_model_dir), max_new_tokens=2)
    started.set()
    with open_sampler(config, sequences=16) as alone:  # `rlhf sample`'s job of 4 prompts x 4
        assert alone.engine == "hf" and "16 sequences, fewer than the 40" in alone.engine_line
    assert starts == []
    from app.faces.data_tab import sample_from_app
    from store.db import write
    from store.prompts import add_prompts

    with write(db) as con:
        add_prompts(con, [f"Prompt {i}" for i in range(8)], source="test")
    ctx = AppContext(db, model=str(tiny_model_dir), runs_dir=tmp_path / "runs", sampling=config)
    line = sample_from_app(ctx, 4, 4)  # the Sample button, for the same job
    assert line.startswith("sampled 16 responses for 4 prompts") and f"vllm ({ve.AUTO_VLLM})" in line
    (clicked,) = ctx._samplers.values()
    assert sample_from_app(ctx, 4, 4).startswith("sampled 16 responses for 4 prompts")
    assert ctx._samplers == {repr(config): clicked} and starts == [
        "MainThread"
    ]  # kept: the second click starts nothing

    ctx.release_models()
    assert closed == ["MainThread 0"]
    started.clear()
    ctx.warm(config)  # rlhf ui --warm-engine
    got = []

    def click():
        with ctx.sampler(config) as sampler:
            got.append(sampler)

    job = threading.Thread(target=click)
    job.start()
    time.sleep(0.5)
    assert got == [] and job.is_alive()  # the click waits for the start under way, rather than start its own
    started.set()
    job.join(timeout=120)
    (warm,) = ctx._samplers.values()
    assert got == [warm] and warm.name == "warm-engine 1" and starts == ["MainThread", "warm-engine"]  # one start

    ctx.release_models()
    started.clear()
    warming = ctx.warm(config)
    ctx.release_models()  # a training launches while the engine starts
    started.set()
    warming.join(timeout=120)
    assert ctx._samplers == {} and closed == ["MainThread 0", "warm-engine 1", "warm-engine 2"]  # closed on arrival


def test_a_killed_apps_private_folder_is_removed_by_the_next_one_and_nothing_else(tmp_path):
    """The app's private folder (downloads, uploads, Gradio's cache) goes at a normal exit; a killed app's stayed.
    The next process to make one removes those of processes that are gone, and only those: its user's real
    folders named with a dead pid."""
    import os

    from app.faces.private_files import PREFIX, remove_orphans

    dead = dead_pid()
    orphan, alive, odd = tmp_path / f"{PREFIX}{dead}-x", tmp_path / f"{PREFIX}{os.getpid()}-y", tmp_path / "keep"
    for folder in (orphan, alive, odd):
        folder.mkdir()
        (folder / "pairs.jsonl").write_text("{}\n")
    (tmp_path / f"{PREFIX}{dead}-link").symlink_to(odd)
    assert remove_orphans(tmp_path) == [orphan]
    assert not orphan.exists() and alive.exists() and (odd / "pairs.jsonl").exists()
