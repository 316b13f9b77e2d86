"""The Train and Compare tabs in a real browser (Debian's chromium through Playwright), on tiny models: load both
configs, click "Reward model then PPO", watch the plots fill and both runs finish, then chat side by side, vote,
and find the vote in the store."""

import json
import re

import pytest

from bench.app_server import AppServer
from tests.builders import ARTIFACTS, HACK_SETTINGS, numbered_prompts_file, separable_pairs
from tests.conftest import query, write_jsonl
from training.ppo.config import PPOConfig
from training.reward.config import RewardConfig


def native_rankings(n: int) -> list[dict]:
    return [
        {"prompt": p["prompt"], "responses": [p["chosen"], p["rejected"]], "ranks": [1, 2], "annotator": "ann"}
        for p in separable_pairs(n)
    ]


def runs_table(page) -> list[list[str]]:
    """The runs table's rows (its text is one cell per line, headers first). Gradio's status overlay ('processing |
    0.1/0.1s', 'queue: 1/2 | 0.3s') shows inside the component while the 2 s refresh runs: not a cell."""
    busy = ("processing", "queue:")
    lines = page.inner_text("#runs-table").split("\n")
    cells = [c.strip() for c in lines if c.strip() and not c.strip().startswith(busy)]
    assert cells[:7] == ["run", "kind", "started", "state", "step", "headline", "folder"], cells[:7]
    return [cells[i : i + 7] for i in range(7, len(cells), 7)]


def choose_chain(page, title: str) -> None:
    """Pick the trainer the one-click path runs after the reward model, and wait for the button to name it."""
    page.click("#chain-method input")
    page.get_by_role("option", name=title, exact=True).click()
    page.wait_for_function(f"document.querySelector('#rm-then-policy').innerText.endsWith('then {title}')")


@pytest.mark.browser
def test_reward_model_then_ppo_then_compare_and_vote(browser, cli, db, tmp_path, tiny_model_dir):
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", native_rankings(64))))[0] == 0
    rm_cfg, ppo_cfg = tmp_path / "rm.json", tmp_path / "ppo.json"
    RewardConfig(model=str(tiny_model_dir), max_steps=4, lr=1e-3).save(rm_cfg)
    PPOConfig(actor=str(tiny_model_dir), max_steps=3, max_new_tokens=8, sample_every=1).save(ppo_cfg)
    app = AppServer(db, "--runs-dir", str(tmp_path / "runs"))
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    try:
        page.goto(app.page_url)
        page.get_by_role("tab", name="Train").click()
        page.get_by_text("Reward model settings").click()
        page.get_by_text("PPO settings").click()
        page.set_input_files("#rm-config-file input[type=file]", str(rm_cfg))
        page.set_input_files("#ppo-config-file input[type=file]", str(ppo_cfg))
        page.wait_for_function(
            "document.querySelector('#ppo-max-steps input').value === '3'"
            " && document.querySelector('#rm-max-steps input').value === '4'"
        )
        choose_chain(page, "PPO")  # the one-click default is RLOO
        page.click("#rm-then-policy")
        page.wait_for_function("document.querySelector('#train-action').innerText.includes('started rm-')")
        # the reward run is selected: its plots fill while it trains (the first DeepSpeed run on a machine also
        # builds DeepSpeed's communication op, about a minute, more on a busy machine)
        page.wait_for_selector("#plot-0 canvas, #plot-0 svg", timeout=900_000)
        page.wait_for_function(
            "() => { const t = document.querySelector('#runs-table').innerText;"
            " return (t.match(/finished/g) || []).length === 2; }",
            timeout=900_000,
        )
        rows = runs_table(page)
        assert [r[1] for r in rows[:2]] == ["ppo", "reward"] and all(r[3] == "finished" for r in rows[:2])
        page.click("#runs-table [data-testid=cell-0-0]")  # select the newest run: the PPO one
        page.wait_for_function("document.querySelector('#run-status').innerText.includes('ppo-')")
        page.wait_for_selector("#plot-6 canvas, #plot-6 svg", timeout=30_000)  # all seven PPO plots drawn
        page.wait_for_function("document.querySelector('#run-samples').innerText.includes('step')")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train.png"), full_page=True)
        ppo_run = rows[0][6]

        page.get_by_role("tab", name="Compare").click()
        page.fill("#cmp-actor input", ppo_run)
        page.keyboard.press("Enter")
        page.wait_for_function(
            "document.querySelector('#cmp-reference textarea').value.length > 0"
            " && document.querySelector('#cmp-reward textarea').value.includes('model')"
        )
        page.fill("#cmp-message textarea", "Tell me about the sea")
        page.click("#cmp-send")
        page.wait_for_selector("#vote-left:not([disabled])", timeout=180_000)  # enabled once both replies end
        for side in ("#cmp-left", "#cmp-right"):
            assert "Tell me about the sea" in page.inner_text(side)
        # blind: the scores wait for the vote and come with the names
        page.wait_for_function("document.querySelector('#cmp-reveal').innerText.includes('after your vote')")
        assert "reward model score" not in page.inner_text("#cmp-left-score")
        page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
        page.click("#vote-left")
        page.wait_for_function("document.querySelector('#cmp-reveal').innerText.includes('Left was')")
        page.wait_for_function("document.querySelector('#cmp-left-score').innerText.includes('reward model score')")
        assert page.inner_text("#cmp-reveal").count("reward model score") == 2
        page.wait_for_function(
            "document.querySelector('#cmp-wins').innerText.includes('1.00') "
            "|| document.querySelector('#cmp-wins').innerText.includes('0.00')"
        )
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train-compare-failure.png"), full_page=True)
        raise
    finally:
        page.close()
        app.stop()
    ((choice, flags, left_model, right_model),) = query(db, "SELECT choice, flags, left_model, right_model FROM votes")
    assert choice == "left" and flags == ["blind"]
    models = {left_model, right_model}
    assert any(re.search(r"ppo-.*/actor$", m) for m in models) and len(models) == 2
    assert query(db, "SELECT count(*) FROM rankings WHERE source = 'compare'") == [(0,)]
    assert json.loads((tmp_path / "runs").joinpath(ppo_run.split("/")[-1], "config.json").read_text())["max_steps"] == 3


@pytest.mark.browser
def test_one_click_chain_with_dpo_then_dpo_against_ppo_blind(browser, cli, db, tmp_path, tiny_model_dir):
    """'Reward model then PPO' with 'then DPO from the same snapshot': three runs from one click, the DPO run on the
    reward model's own snapshot; then the Compare tab puts the DPO policy against the PPO actor, blind, and the vote
    lands in the store with both models named."""
    from training.dpo.config import DPOConfig

    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", native_rankings(64))))[0] == 0
    cfgs = {"rm": tmp_path / "rm.json", "ppo": tmp_path / "ppo.json", "dpo": tmp_path / "dpo.json"}
    RewardConfig(model=str(tiny_model_dir), max_steps=2, lr=1e-3).save(cfgs["rm"])
    PPOConfig(actor=str(tiny_model_dir), max_steps=2, max_new_tokens=8).save(cfgs["ppo"])
    DPOConfig(model=str(tiny_model_dir), max_steps=3, lr=1e-3).save(cfgs["dpo"])
    app = AppServer(db, "--runs-dir", str(tmp_path / "runs"))
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    try:
        page.goto(app.page_url)
        page.get_by_role("tab", name="Train").click()
        for title in ("Reward model settings", "PPO settings", "DPO settings"):  # not "Online DPO settings"
            page.get_by_role("button", name=re.compile(f"^{title}")).click()
        for prefix, path in cfgs.items():
            page.set_input_files(f"#{prefix}-config-file input[type=file]", str(path))
        page.wait_for_function(
            "document.querySelector('#dpo-max-steps input').value === '3'"
            " && document.querySelector('#ppo-max-steps input').value === '2'"
            " && document.querySelector('#rm-max-steps input').value === '2'"
        )
        page.check("#chain-dpo input")
        choose_chain(page, "PPO")  # the one-click default is RLOO
        page.click("#rm-then-policy")
        page.wait_for_function("document.querySelector('#train-action').innerText.includes('started rm-')")
        page.wait_for_function(
            "() => { const t = document.querySelector('#runs-table').innerText;"
            " return (t.match(/finished/g) || []).length === 3; }",
            timeout=900_000,
        )
        rows = runs_table(page)
        assert [r[1] for r in rows[:3]] == ["dpo", "ppo", "reward"] and all(r[3] == "finished" for r in rows[:3])
        assert "eval accuracy" in rows[0][5]  # the DPO run's headline
        dpo_run, ppo_run, rm_run = (r[6] for r in rows[:3])
        page.click("#runs-table [data-testid=cell-0-0]")
        page.wait_for_function("document.querySelector('#run-status').innerText.includes('dpo-')")
        page.wait_for_selector("#plot-0 canvas, #plot-0 svg", timeout=30_000)

        page.get_by_role("tab", name="Compare").click()
        page.fill("#cmp-actor input", ppo_run)
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#cmp-reward textarea').value.includes('model')")
        page.fill("#cmp-reference textarea", dpo_run)
        page.fill("#cmp-message textarea", "Tell me about the sea")
        page.click("#cmp-send")
        page.wait_for_selector("#vote-left:not([disabled])", timeout=180_000)
        page.wait_for_function("document.querySelector('#cmp-reveal').innerText.includes('after your vote')")
        page.click("#vote-right")
        page.wait_for_function("document.querySelector('#cmp-reveal').innerText.includes('Left was')")
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dpo-chain-failure.png"), full_page=True)
        raise
    finally:
        page.close()
        app.stop()
    dpo_config = json.loads((tmp_path / "runs" / dpo_run.split("/")[-1] / "config.json").read_text())
    rm_config = json.loads((tmp_path / "runs" / rm_run.split("/")[-1] / "config.json").read_text())
    assert dpo_config["kind"] == "dpo" and dpo_config["data"] == rm_config["data"]  # the same snapshot
    ((choice, flags, left_model, right_model),) = query(db, "SELECT choice, flags, left_model, right_model FROM votes")
    assert choice == "right" and flags == ["blind"]  # the right side won
    models = {left_model, right_model}
    assert any(re.search(r"ppo-.*/actor$", m) for m in models) and any(re.search(r"dpo-.*/policy$", m) for m in models)


@pytest.mark.browser
def test_the_watch_plots_fill_live_and_the_alarm_shows(
    browser,
    cli,
    db,
    tmp_path,
    talker,
    words_ensemble,
    held_prompts,
):
    """A PPO run started from the Train tab on the hackable setup of tests/test_ppo_watch.py (the optimised reward
    model pays for length, the held-out judge for brevity): the watch's plots draw while it runs, and the alarm
    appears in the run's status line when it fires at a checkpoint evaluation (--stop-on-overoptimization stops
    the run there)."""
    from training.registry import trainer

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"Tell me something about topic number {i}.\n" for i in range(48)))
    assert cli("prompts", "add", str(prompts))[0] == 0
    cfg = tmp_path / "ppo.json"
    PPOConfig(
        actor=str(talker),
        reward=str(words_ensemble),
        **HACK_SETTINGS,
        max_new_tokens=16,
        eval_prompts=str(held_prompts),
        stop_on_overoptimization=True,
    ).save(cfg)
    plots = trainer("ppo").plots
    watch_plots = [plots.index(k) for k in ("watch/heldout_score_mean", "watch/length_score_corr")]
    app = AppServer(db, "--runs-dir", str(tmp_path / "runs"))
    page = browser.new_page(viewport={"width": 1400, "height": 2600})
    try:
        page.goto(app.page_url)
        # nothing ranked yet: the page opens on the Data tab once its load answers (tests/test_browser.py)
        page.wait_for_selector("button[role=tab][aria-selected=true]:has-text('Data')", timeout=10_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.get_by_role("tab", name="Train").click()
        page.get_by_text("PPO settings").click()
        page.set_input_files("#ppo-config-file input[type=file]", str(cfg))
        page.wait_for_function("document.querySelector('#ppo-max-steps input').value === '24'")
        page.click("#run-ppo")
        page.wait_for_function("document.querySelector('#train-action').innerText.includes('started ppo-')")
        # once the run has logged a step, the watch's plots are there under their names (steps take about a
        # second here and the tab polls every 2 s: the alarm may already have stopped it by then)
        page.wait_for_function(
            "/(running|stopped), step [1-9]/.test(document.querySelector('#run-status').innerText)", timeout=900_000
        )
        for i, key in zip(watch_plots, ("watch/heldout_score_mean", "watch/length_score_corr"), strict=True):
            page.wait_for_function(f"document.querySelector('#plot-{i}').innerText.includes('{key}')")
        page.screenshot(path=str(ARTIFACTS / "train-watch-live.png"), full_page=True)
        page.wait_for_function(
            "document.querySelector('#run-status').innerText.includes('over-optimisation alarm')", timeout=900_000
        )
        status = page.inner_text("#run-status")
        assert "the held-out judge's score fell" in status
        page.wait_for_function("document.querySelector('#run-status').innerText.includes('stopped')", timeout=120_000)
        page.screenshot(path=str(ARTIFACTS / "train-watch.png"), full_page=True)
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "train-watch-failure.png"), full_page=True)
        raise
    finally:
        page.close()
        app.stop()


@pytest.mark.browser
def test_the_next_round_starts_from_the_train_tab_and_is_ranked_in_the_annotate_tab(
    browser,
    cli,
    db,
    tmp_path,
    tiny_model_dir,
):
    """Round 1 (SFT samples, ranked, a reward model and PPO on it) through the CLI; then in the browser: select the
    PPO run, start round 2 from its actor with the SFT model's samples mixed in, and rank one of its prompts."""
    from annotation.session import next_task, submit

    runs, sample = tmp_path / "runs", ["--max-new-tokens", "6", "--dtype", "fp32"]
    assert cli("prompts", "add", str(numbered_prompts_file(tmp_path, 14)))[0] == 0
    assert cli("round", "start", "--policy", str(tiny_model_dir), "--k", "3", "--n", "4", *sample)[0] == 0
    while (task := next_task(db, "ann")) is not None:
        submit(db, "ann", task.assignment_id, list(range(1, len(task.response_ids) + 1)))
    train = ["--runs-dir", str(runs), "--dtype", "fp32", "--max-steps", "1"]
    assert cli("train-rm", "--model", str(tiny_model_dir), *train)[0] == 0
    (rm,) = runs.iterdir()
    ppo_flags = ["--actor", str(tiny_model_dir), "--reward", str(rm), "--max-new-tokens", "6", *train]
    code, _, err = cli("train-ppo", *ppo_flags)
    assert code == 0, err
    (ppo,) = [p for p in runs.iterdir() if p.name.startswith("ppo-")]
    app = AppServer(db, "--runs-dir", str(runs))
    page = browser.new_page(viewport={"width": 1400, "height": 2000})
    try:
        page.goto(app.page_url)
        page.get_by_role("tab", name="Train").click()
        page.wait_for_function("document.querySelector('#runs-table').innerText.includes('ppo-')")
        page.click("#runs-table [data-testid=cell-0-0]")  # the newest run: PPO's
        page.wait_for_function(f"document.querySelector('#selected-run textarea').value.endsWith({ppo.name!r})")
        for field, value in (("#round-k input", "2"), ("#round-n input", "4")):
            page.fill(field, value)
            page.locator(field).blur()  # Gradio takes a number when its field loses focus
        page.wait_for_function(
            "document.querySelector('#round-k input').value === '2'"
            " && document.querySelector('#round-n input').value === '4'"
        )
        page.click("#next-round")
        page.wait_for_function(
            "document.querySelector('#train-action').innerText.includes('Round 2 started')", timeout=120_000
        )
        assert "4 of 10 prompts, 12 responses" in page.inner_text("#train-action")
        page.get_by_role("tab", name="Annotate").click()
        page.fill("#annotator-name textarea", "ann")
        page.click("#annotate-start")
        page.wait_for_selector("#ranker .card", timeout=30_000)
        assert len(page.query_selector_all("#ranker .card")) == 3  # 2 from the actor, 1 from the SFT model
        page.focus(":nth-match(#ranker .card, 3)")
        page.keyboard.press("1")
        page.click("#annotate-submit")
        page.wait_for_selector("#annotate-progress:has-text('you: 5 ranked')", timeout=30_000)
        page.reload()  # the Data tab's rounds table, as a fresh page shows it
        page.get_by_role("tab", name="Data").click()
        page.wait_for_function(f"document.querySelector('#rounds-table').innerText.includes({ppo.name!r})")
    finally:
        page.close()
        app.stop()
    ((ranking,),) = query(db, "SELECT ranking_id FROM ranking_round WHERE round = 2")
    models = query(
        db,
        "SELECT rr.model_id, count(*) FROM ranking_items i JOIN response_round rr USING (response_id) "
        "WHERE i.ranking_id = ? GROUP BY ALL ORDER BY 2",
        [ranking],
    )
    assert models == [(str(tiny_model_dir.resolve()), 1), (str((ppo / "actor").resolve()), 2)]
