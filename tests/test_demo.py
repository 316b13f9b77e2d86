"""`rlhf demo`: the scripted annotator's rule and the evaluation's arithmetic by hand, then `rlhf demo --quick` end to
end on tiny models (sampling, ranking, reward model and PPO through DeepSpeed, held-out evaluation, report)."""

import dataclasses
import datetime as dt
import json
import math
import re
import subprocess
import time
from pathlib import Path

import pytest

from annotation import scripted
from app.studies.demo_common import Judging, pair_accuracy, pair_counts, split_prompts, win_rates
from app.studies.demo_taste import Taste
from app.studies.prompt_split import template_of, topic_of
from store.errors import UserError
from tests.conftest import query


def words(n: int) -> str:
    return " ".join(["word"] * n)


def test_the_concise_annotator_counts_words_in_steps_and_puts_non_answers_last():
    assert [scripted.concise_key(words(n)) for n in (3, 9, 10, 19, 20, 2, 0)] == [0, 0, 1, 1, 2, 10**6, 10**6]
    # 12 and 15 words share a step (tie), 4 words wins, 1 word is not an answer
    assert scripted.rank([words(12), words(4), words(15), words(1)]) == [2, 1, 2, 3]
    assert scripted.judge(words(4), words(12)) == 1.0
    assert scripted.judge(words(12), words(15)) == 0.5
    assert scripted.judge(words(2), words(40)) == 0.0
    assert scripted.rankable(["a b c", "", "a b c", "  ", "d e f"]) == [0, 4]


def test_held_out_accuracy_and_win_rate_by_hand():
    texts = [[words(4), words(25), words(14)], [words(5), words(6)]]
    # prompt 1: pairs (4<25), (4<14), (14<25); prompt 2: 5 and 6 words tie, no pair
    scores = [[1.0, 0.0, 0.5], [3.0, 2.0]]
    concise, prompts = Taste("concise"), ["p1", "p2"]
    assert pair_accuracy(prompts, texts, scores, concise) == (1.0, 3)
    scores = [[0.2, 0.0, 0.5], [3.0, 2.0]]  # 14 words scored above 4 words: 2 of 3 right
    assert pair_accuracy(prompts, texts, scores, concise) == (pytest.approx(2 / 3), 3)
    assert pair_counts(prompts, texts, scores, concise) == [(2, 3), (0, 0)]
    actor = [[words(4), words(30)], [words(5)]]
    reference = [[words(14), words(4)], [words(25)]]
    # prompt 1: (4 vs 14) 1, (4 vs 4) 0.5, (30 vs 14) 0, (30 vs 4) 0 -> 1.5 / 4; prompt 2: 1
    assert win_rates(actor, reference, Judging(prompts, concise)) == [0.375, 1.0]


def test_pair_accuracy_interval_resamples_prompts():
    from annotation.winrate import ratio_bootstrap_ci

    # every prompt at 2 of 3: every resample is 2/3; prompts with no pair are left out
    assert ratio_bootstrap_ci([(2, 3), (4, 6), (0, 0)]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    # one prompt all right (3/3), one all wrong (0/1): resamples give 0, 3/4 or 1; the 95% interval spans 0..1
    lo, hi = ratio_bootstrap_ci([(3, 3), (0, 1)], seed=1)
    assert (lo, hi) == (0.0, 1.0)


def test_too_few_prompts_to_hold_some_out_is_one_error():
    with pytest.raises(UserError, match="cannot give 10 held-out"):
        split_prompts([f"p{i}" for i in range(20)], 10)
    train, held = split_prompts([f"p{i}" for i in range(30)], 10)
    assert held == [f"p{i}" for i in range(20, 30)] and len(train) == 20


@pytest.mark.integration
def test_quick_demo_runs_end_to_end_and_moves_every_quantity_the_right_way(tmp_path, capsys):
    from app.faces.cli import main

    flags = ["demo", "--quick", "--methods", "ppo,dpo,kto,rloo,rloo_pairwise,online_dpo", "--runs-dir", str(tmp_path)]
    assert main(["--db", str(tmp_path / "unused.duckdb"), *flags]) == 0
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("demo-")]
    out = capsys.readouterr().out
    assert "PASS  the actor's mean reward-model score rose" in out and "FAIL" not in out
    r = json.loads((folder / "results.json").read_text())
    assert all(r["checks"].values())
    assert r["rm_accuracy_heldout_prompts"] > 0.5 and r["rm_accuracy_pairs"] >= 20
    assert r["score_actor"] > r["score_reference"] and r["win_rate"] > 0.5
    assert len(r["kl_per_step"]) == r["ppo_steps"] >= 10
    assert len(r["length_per_step"]) == r["ppo_steps"]  # the report's PPO table reads results.json alone
    # what made it: this command, this checkout's commit, the machine's CPU model
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    made = r["provenance"]
    assert made["command"] == "rlhf --db " + str(tmp_path / "unused.duckdb") + " " + " ".join(flags)
    assert made["commit"].split("+")[0] == head and made["cpu"] not in ("", "unknown")
    assert abs(dt.datetime.fromisoformat(made["date"]).timestamp() - time.time()) < 3600
    assert f"Made by `{made['command']}` at commit {made['commit']}" in (folder / "report.md").read_text()
    # the population ranked (one annotator a prompt, in turn), and the panel judged the test split's prompts
    db = str(folder / "store.duckdb")
    names = {a for (a,) in query(db, "SELECT DISTINCT annotator FROM rankings")}
    assert names == {f"annotator-{i}" for i in range(1, r["config"]["annotators"] + 1)}
    split = json.loads((folder / "split.json").read_text())
    assert r["split"] == split and (split["split"], split["evaluate_on"], split["judged"]) == ("topic", "test", 24)
    trained = [t for (t,) in query(db, "SELECT text FROM prompts")]
    assert len(trained) == r["train_prompts"] == split["train"]
    assert not {topic_of(t) for t in trained} & set(split["test_topics"])
    assert not {template_of(t) for t in trained} & set(split["test_templates"])
    assert all(0 <= r[f"off_topic_{m}"] <= 1 for m in ("reference", "actor", "dpo", "kto", "rloo", "online_dpo"))
    assert all(0 <= p["off_topic"] <= 1 for p in r["best_of_n"])
    assert query(db, "SELECT count(*) FROM pairs")[0][0] == r["pairs"] > 0
    held = (folder / "heldout_prompts.txt").read_text().splitlines()
    assert len(held) == r["heldout_prompts"]
    assert query(db, "SELECT count(*) FROM prompts WHERE text IN (SELECT unnest(?::VARCHAR[]))", [held])[0][0] == 0
    report = (folder / "report.md").read_text()
    for png in ("reward_model.png", "ppo.png", "heldout_lengths.png"):
        assert f"({png})" in report
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.count("\n| ") == r["ppo_steps"] + 1  # one table row per PPO step, KL in each
    # the watch: the ensemble's judge scored every checkpoint; best-of-N for N = 1..16; the plots are in the report
    assert [p["n"] for p in r["best_of_n"]] == [1, 2, 4, 8, 16]
    assert [p["kl"] for p in r["best_of_n"]] == pytest.approx([0.0, 0.1931, 0.6363, 1.2044, 1.8351], abs=1e-4)
    steps = [p["step"] for p in r["checkpoints"]]
    assert steps == sorted(steps) and steps[-1] == r["ppo_steps"] and len(steps) >= 3
    assert sum(p["chosen"] for p in r["checkpoints"]) == 1
    assert all(p["heldout_score_mean"] is not None and 0 <= p["win_rate"] <= 1 for p in r["checkpoints"])
    assert r["checkpoints"][-1]["win_rate"] == r["win_rate"]  # the last checkpoint is the actor the demo judged
    assert r["watch"]["chosen_step"] in steps and "checkpoint chosen by the held-out judge" in out
    # the reward model's report: best-of-K rows exported in RewardBench 2's shape, spread, strength, length
    m = r["reward_model"]
    rows = [json.loads(line) for line in (folder / "rm_best_of_k.jsonl").open()]
    assert len(rows) == m["best_of_k_prompts"] > 0 and m["k"] == r["config"]["k"]
    assert m["best_of_k_accuracy"] == pytest.approx(sum(row["correct"] for row in rows) / len(rows))
    assert all(row["chosen"] and row["rejected"] for row in rows) and len(m["accuracy_by_strength"]) == 3
    assert m["score_std_within_prompt"] > 0 and -1 <= m["length_correlation"] <= 1
    assert "best-of-4 accuracy" in report
    # one sample of each trained policy against best-of-N, by samples drawn at inference
    v = r["one_sample"]
    assert v["best_of"] == "best-of-16" and v["verdict"] in ("above", "within", "below")
    from app.studies.demo_samples import policy_rows

    assert (v["policy"], v["win_rate"]) == ("PPO", r["win_rate"]) and len(policy_rows(r)) >= 5  # --recommend ppo
    assert "## One sample against best-of-N" in report and "|best-of-16|16|1.84|" in report
    for png in ("win_rate_vs_kl.png", "watch.png", "win_rate_vs_samples.png"):
        assert f"({png})" in report and (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # RLOO on the same reward model and prompts, PPO's sequences per step, judged the same way
    from training.registry import run_config

    rloo, ppo = run_config(folder / "runs" / r["rloo_run"]), run_config(folder / "runs" / r["ppo_run"])
    assert rloo["reward"] == ppo["reward"] and Path(rloo["prompts"]).read_text() == Path(ppo["prompts"]).read_text()
    assert rloo["k"] * rloo["generation_batch_size"] == ppo["generation_batch_size"]
    assert rloo["max_steps"] == r["ppo_steps"]  # as many sequences sampled as PPO
    assert 0 <= r["rloo_vs_reference"]["win_rate"] <= 1 and r["rloo_kl"] > 0
    assert "|RLOO actor vs reference|" in report and "|PPO actor vs RLOO actor|" in report
    # online DPO and RLOO on win fractions: the same reward model, prompts, sequences and steps
    odpo = run_config(folder / "runs" / r["online_dpo_run"])
    pairwise = run_config(folder / "runs" / r["rloo_pairwise_run"])
    assert odpo["kind"] == "online_dpo" and odpo["reward"] == ppo["reward"] and odpo["max_steps"] == r["ppo_steps"]
    assert odpo["k"] * odpo["generation_batch_size"] == ppo["generation_batch_size"]
    assert odpo["actor_lr"] == r["config"]["online_dpo_lr"] and odpo["beta"] == r["config"]["online_dpo_beta"]
    assert pairwise["reward_shape"] == "win_fraction" and rloo["reward_shape"] == "score"
    for title in ("Online DPO", "RLOO (win fractions)"):
        assert f"|{title} actor vs reference|" in report and f"|PPO actor vs {title} actor|" in report
    # every method on one win-rate-against-KL plot: RLOO's checkpoints as PPO's, DPO's policy measured the same way
    assert [p["step"] for p in r["rloo_checkpoints"]][-1] == r["rloo_checkpoints"][-1]["step"] >= 1
    assert len(r["rloo_checkpoints"]) >= 2 and all(0 <= p["win_rate"] <= 1 for p in r["rloo_checkpoints"])
    assert r["dpo_point"]["win_rate"] == r["dpo_vs_reference"]["win_rate"] and math.isfinite(r["dpo_point"]["kl"])
    # KTO on the reward model's snapshot, read as thumbs (net wins), with the demo's own KTO settings
    kto = run_config(folder / "runs" / r["kto_run"])
    assert kto["kind"] == "kto" and kto["data"] == run_config(folder / "runs" / r["reward_run"])["data"]
    assert kto["lr"] == r["config"]["kto_lr"] and kto["beta"] == r["config"]["kto_beta"]
    # (that KTO learns is tests/test_kto_training.py's: on the quick demo's tiny models its held-out accuracy is noise)
    assert r["kto_point"]["win_rate"] == r["kto_vs_reference"]["win_rate"] and 0 <= r["kto_eval_accuracy"] <= 1
    assert "|KTO policy vs reference|" in report and "|PPO actor vs KTO policy|" in report
    methods = {"PPO", "best-of-N", "RLOO", "RLOO (win fractions)", "Online DPO", "DPO", "KTO"}
    assert set(r["equal_kl"]["win_rates"]) == methods and r["equal_kl"]["kl"] > 0
    assert "at equal KL (" in report and "at equal KL (" in out
    samples = [json.loads(line) for line in (folder / "samples.jsonl").open()]
    k = r["config"]["k"]
    assert all(
        len(s["rloo"]) == len(s["online_dpo"]) == len(s["kept_checkpoint"]) == len(s["kto"]) == k for s in samples
    )
    # the checkpoint the held-out judge kept meets DPO too, on its own samples
    from app.studies.demo_common import compare, judging
    from app.studies.demo_config import DemoConfig

    kept, dpo = [s["kept_checkpoint"] for s in samples], [s["dpo"] for s in samples]
    judge = judging(DemoConfig(**r["config"]), held)
    assert (
        r["kept_vs_dpo"] == compare(kept, dpo, r["config"]["seed"], judge)
        and "|PPO's kept checkpoint vs DPO policy|" in report
    )
    # the labeling campaign (on in --quick): the dashboard flags the noisy annotator (and whichever careful one
    # the panel disagrees with), and the gold-filtered reward model left out the flagged ones' pairs
    c = r["campaign"]
    assert "noisy" in c["flagged"] and c["taste"] == "population"
    under = {n for n, d in c["dashboard"].items() if (d["gold_accuracy"] or 1) < c["min_gold_accuracy"]}
    left_out = c["arms"]["gold-filtered"]["left_out"]
    assert "noisy" in left_out and set(left_out) == under and c["arms"]["all"]["left_out"] == []
    removed = c["arms"]["gold-filtered"]["pairs_removed"]
    assert removed > 0 and c["arms"]["all"]["pairs"] - c["arms"]["gold-filtered"]["pairs"] == removed
    assert all(0 <= a["accuracy"] <= 1 and a["ci95"][0] <= a["accuracy"] <= a["ci95"][1] for a in c["arms"].values())
    assert "## Labeling campaign" in report and "labeling campaign: the dashboard flags" in out
    # --resume: a demo that stopped after PPO trained but before its stage was recorded, and before the evaluation,
    # goes on without training anything again (app/studies/demo_stages.py)
    stages = json.loads((folder / "stages.json").read_text())
    assert list(stages["done"]) == [
        "set-up",
        "sampling",
        "reward",
        "ppo",
        "evaluation",
        "checkpoints and best-of-N",
        "dpo",
        "kto",
        "rloo",
        "rloo_pairwise",
        "online_dpo",
        "campaign",
    ]
    del stages["done"]["ppo"], stages["done"]["evaluation"]
    stages["sittings"][0]["stages"] = [s for s in stages["sittings"][0]["stages"] if s not in ("ppo", "evaluation")]
    stages["started"]["ppo"] = r["ppo_run"]
    # and whose checkpoints and DPO stages were kept before the kept checkpoint's samples were (2026-12-06)
    done = stages["done"]
    done["checkpoints and best-of-N"]["value"] = done["checkpoints and best-of-N"]["value"][0]
    del done["dpo"]["value"][0]["kept_vs_dpo"]
    (folder / "stages.json").write_text(json.dumps(stages))
    (folder / "results.json").unlink()
    run_folders = sorted(p.name for p in (folder / "runs").iterdir())
    assert main(["demo", "--resume", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"{r['ppo_run']}: trained before, kept" in out and "reward: done before" in out
    assert sorted(p.name for p in (folder / "runs").iterdir()) == run_folders  # nothing trained again
    again = json.loads((folder / "results.json").read_text())
    assert again["ppo_run"] == r["ppo_run"] and again["win_rate"] == r["win_rate"]  # the same seeded samples
    assert again["timings_s"].keys() == r["timings_s"].keys() and all(again["checks"].values())
    assert again["kept_vs_dpo"] == r["kept_vs_dpo"]  # its samples drawn again from its weights, judged again
    # each sitting with its command and commit, and the stages it ran (this one: the two the edit above undid)
    assert [s["command"] for s in again["sittings"]] == [made["command"], again["provenance"]["command"]]
    assert again["sittings"][0]["stages"] == [s for s in r["timings_s"] if s not in ("ppo", "evaluation")]
    assert again["sittings"][1]["stages"] == [
        "ppo",
        "evaluation",
    ]
    assert "Its stages ran in these sittings" in (folder / "report.md").read_text()
    assert "the kept checkpoint (step" in out and "as the checkpoints stage recorded" in out
    assert [json.loads(line)["kept_checkpoint"] for line in (folder / "samples.jsonl").open()] == kept
    # --fork: a new demo on this one's prompts, rankings and reward model with another PPO setting trains PPO
    # alone; DPO's run is kept (its settings are the same) and judged against the new PPO; the source is untouched
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and p.suffix != ".duckdb"}
    fork_flags = ["--methods", "ppo,dpo,kto", "--no-campaign", "--ppo-settings", "whiten_advantages=true"]
    assert main(["demo", "--fork", str(folder), "--runs-dir", str(tmp_path / "forks"), *fork_flags]) == 0
    out = capsys.readouterr().out
    assert "reward: done before" in out and f"{r['dpo_run']}: trained before, kept" in out
    assert f"{r['kto_run']}: trained before, kept" in out
    (fork,) = (tmp_path / "forks").iterdir()
    f = json.loads((fork / "results.json").read_text())
    assert (f["reward_run"], f["dpo_run"], f["rankings"], f["pairs"]) == (
        r["reward_run"],
        r["dpo_run"],
        r["rankings"],
        r["pairs"],
    )
    kept_runs = [r["reward_run"], r["dpo_run"], r["kto_run"], f["ppo_run"]]
    assert sorted(p.name for p in (fork / "runs").iterdir()) == sorted(kept_runs) and f["kto_run"] == r["kto_run"]
    fork_ppo = run_config(fork / "runs" / f["ppo_run"])
    assert fork_ppo["whiten_advantages"] is True and fork_ppo["reward"] == str(fork / "runs" / r["reward_run"])
    assert f["forked"] == {"from": str(folder), "kept": ["set-up", "sampling", "reward"]}
    assert "rlhf demo --fork" in (fork / "report.md").read_text()
    assert f["ppo_vs_dpo"]["win_rate"] != r["ppo_vs_dpo"]["win_rate"] or f["words_actor"] != r["words_actor"]
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and p.suffix != ".duckdb"} == before


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--model", "/no/such/model"], "/no/such/model"),
        (["--k", "1"], "--k must be at least 2"),
        (["--split", "tail", "--heldout", "490"], "cannot give 490 held-out"),
        (["--n-prompts", "12"], "12 prompts split by topic give"),
        (["--split", "random"], "--split must be topic or tail"),
        (["--evaluate-on", "train"], "--evaluate-on test or validation"),
        (["--taste", "sweet"], "--taste must be population or concise, got 'sweet'"),
        (["--annotators", "0"], "--annotators must be at least 1"),
        (["--recommend", "rloo"], "--recommend must be one of the demo's --methods (ppo, dpo), got rloo"),
        (["--methods", "ppo,online_dpo", "--online-dpo-beta", "0"], "--online-dpo-*: beta must be > 0"),
        (["--dtype", "fp16"], "--dtype must be auto, fp32 or bf16"),
        (["--min-new-tokens", "64"], "--min-new-tokens must be"),
        (["--ppo-settings", "whiten=true"], "'whiten=true' is not key=value with a PPO setting"),
        (["--ppo-settings", "actor_lr=1"], "actor_lr is the demo's own flag (--actor-lr)"),
        (["--ppo-settings", "rollout_engine=hf"], "rollout_engine is the demo's own flag (--engine)"),
        (["--ppo-settings", "epochs=3"], "epochs is the demo's own flag (--ppo-epochs)"),
        (["--engine", "trt"], "--engine must be auto, vllm or hf, got trt"),
        (["--ppo-settings", "generation_batch_size=many"], "generation_batch_size must be int, got 'many'"),
        (["--ppo-settings", "whiten_advantages=maybe"], "whiten_advantages must be bool"),
        (["--ppo-settings", "ema_beta=1.5"], "ema_beta must be in [0, 1)"),
    ],
)
def test_bad_demo_settings_are_one_error_line_and_no_demo_folder(tmp_path, capsys, flags, message):
    from app.faces.cli import main

    assert main(["--db", str(tmp_path / "unused.duckdb"), "demo", "--runs-dir", str(tmp_path / "runs"), *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_ppo_settings_reach_the_demos_ppo_config():
    from app.studies.demo_common import ppo_config
    from app.studies.demo_config import DemoConfig

    cfg = DemoConfig(ppo_settings="whiten_advantages=true, generation_batch_size=16,ema-beta=0.9")
    ppo = ppo_config(cfg, "tiny", Path("rm"), 10, 3, save_every=5)
    assert (ppo.whiten_advantages, ppo.generation_batch_size, ppo.ema_beta) == (True, 16, 0.9)
    assert (ppo.max_steps, ppo.seed, ppo.save_every, ppo.actor_lr) == (10, 3, 5, cfg.actor_lr)  # the demo's own
    assert ppo_config(DemoConfig(), "tiny", Path("rm"), 10, 3) == dataclasses.replace(ppo, **PLAIN)


def test_the_demos_engine_reaches_every_sampler_and_the_rollouts_and_picks_the_quick_actors_heads(
    tmp_path, monkeypatch
):
    import json

    from app.studies.demo_common import ppo_config, sampling_config, set_up, wants_vllm
    from app.studies.demo_config import QUICK, DemoConfig

    cfg = DemoConfig(engine="vllm")
    assert (
        sampling_config(cfg, "m").engine == "vllm" and ppo_config(cfg, "m", Path("rm"), 1, 0).rollout_engine == "vllm"
    )
    monkeypatch.setenv("RLHF_ENGINE", "vllm")
    assert [wants_vllm(DemoConfig(engine=e)) for e in ("auto", "hf", "vllm")] == [True, False, True]
    monkeypatch.delenv("RLHF_ENGINE")
    heads = {}
    for engine in ("auto", "vllm"):
        quick = DemoConfig(**{**QUICK, "engine": engine})
        model = set_up(quick, tmp_path / engine)[0]
        config = json.loads((Path(model) / "config.json").read_text())
        heads[engine] = config["hidden_size"] // config["num_attention_heads"]
    assert heads == {"auto": 16, "vllm": 32}  # vLLM's CPU kernels take 32 and wider (training/sampling/vllm_engine.py)


PLAIN = {"whiten_advantages": True, "generation_batch_size": 32, "ema_beta": 0.0, "save_every": 0}  # PPO's defaults


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--quick"], {"model": "tiny", "dtype": "fp32", "n_prompts": 120, "kl_ctl": 0.1}),  # the preset
        # --ppo-settings on top of the preset's: the quick demo's batch kept, its whitening given
        (
            ["--quick", "--ppo-settings", "whiten-advantages=true,ema_beta=0.9"],
            {"ppo_settings": "whiten_advantages=true,generation_batch_size=8,ema_beta=0.9"},
        ),
        (["--ppo-settings", "ema_beta=0.9"], {"ppo_settings": "ema_beta=0.9", "kl_ctl": 0.05, "actor_lr": 2e-5}),
        (["--quick", "--dtype", "bf16"], {"model": "tiny", "dtype": "bf16"}),  # was the default, lost to the preset
        (["--quick", "--model", "default"], {"model": "default", "dtype": "fp32"}),
        (["--dtype", "fp32"], {"model": "default", "dtype": "fp32", "n_prompts": 0}),
        ([], {"model": "default", "dtype": "auto", "n_prompts": 0, "save_every": 4}),  # the defaults
        (["--rounds", "3"], {"n_prompts": 264, "label_budget": 120, "ppo_steps": 48, "actor_lr": 2e-5}),  # rounds
        (["--rounds", "3"], {"kl_ctl": 0.1, "ppo_settings": "whiten_advantages=false,generation_batch_size=8"}),
        (["--rounds", "3", "--label-budget", "240"], {"n_prompts": 264, "label_budget": 240}),
        (["--quick", "--rounds", "2"], {"model": "tiny", "n_prompts": 120, "label_budget": 0, "ppo_steps": 0}),
    ],
)
def test_flags_on_the_command_line_win_over_the_quick_preset(flags, expected):
    from app.faces.cli import demo_config, parse

    cfg = demo_config(parse(["demo", *flags]))
    assert {k: getattr(cfg, k) for k in expected} == expected


def _fake_ppo_run(folder, status_step: int, rows: list[dict]):
    folder.mkdir()
    (folder / "status.json").write_text(json.dumps({"state": "finished", "step": status_step}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"loss/actor": 0.1, **r}) + "\n" for r in rows))
    return folder


GOOD = {"rm_accuracy_heldout_prompts": 0.7, "score_actor": 1.0, "score_reference": 0.0, "win_rate": 0.6}
KL = "KL to the reference reported at every PPO step"


@pytest.mark.parametrize(
    "status_step, rows, kl_ok",
    [
        (2, [{"step": 1, "reward/kl": 0.1}, {"step": 2, "reward/kl": 0.2}], True),
        (3, [{"step": 1, "reward/kl": 0.1}, {"step": 2}, {"step": 3, "reward/kl": 0.3}], False),  # no KL at step 2
        (3, [{"step": 1, "reward/kl": 0.1}, {"step": 2, "reward/kl": 0.2}], False),  # step 3 logged nothing
        (2, [{"step": 1, "reward/kl": 0.1}, {"step": 2, "reward/kl": float("nan")}], False),
        (0, [], False),  # no PPO step at all
    ],
)
def test_the_kl_check_fails_on_a_run_where_kl_is_missing(tmp_path, status_step, rows, kl_ok):
    from app.studies.demo import QUICK_BARS, checks, ppo_curve
    from app.studies.demo_report import headline

    curve = ppo_curve(_fake_ppo_run(tmp_path / "ppo", status_step, rows))
    assert curve["ppo_steps"] == status_step and len(curve["kl_per_step"]) == status_step
    r = {**GOOD, **curve}
    assert checks(r, QUICK_BARS)[KL] is kl_ok
    r.update(checks=checks(r, QUICK_BARS), rm_accuracy_pairs=1, heldout_prompts=1, rm_accuracy_eval_split=1.0)
    r.update(words_reference=1.0, words_actor=1.0, win_rate_ci95=[0.0, 1.0], folder=str(tmp_path), total_s=1.0)
    assert any(line.startswith("KL to the reference") for line in headline(r))  # the headline survives a gap


@pytest.mark.parametrize(
    "win_rate, quick_ok, full_ok", [(0.5, False, False), (0.51, True, False), (0.65, True, True), (0.4, False, False)]
)
def test_the_win_rate_check_fails_at_chance(win_rate, quick_ok, full_ok):
    from app.studies.demo import FULL_BARS, QUICK_BARS, checks

    r = {**GOOD, "win_rate": win_rate, "ppo_steps": 1, "kl_per_step": [0.1]}
    (quick,) = [ok for name, ok in checks(r, QUICK_BARS).items() if name.startswith("win rate")]
    (full,) = [ok for name, ok in checks(r, FULL_BARS).items() if name.startswith("win rate")]
    assert (quick, full) == (quick_ok, full_ok)


@pytest.mark.parametrize("methods", ["dpo", "ppo,orpo", ""])
def test_demo_methods_must_name_ppo_and_may_add_dpo(tmp_path, capsys, methods):
    from app.faces.cli import main

    assert main(["demo", "--runs-dir", str(tmp_path / "runs"), "--methods", methods]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --methods must name ppo") and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_the_methods_table_by_hand():
    from app.studies.demo_methods import method_rows, method_table

    r = {
        "win_rate": 0.75,
        "win_rate_ci95": [0.6, 0.9],
        "dpo_vs_reference": {"win_rate": 0.625, "ci95": [0.5, 0.75]},
        "ppo_vs_dpo": {"win_rate": 0.5, "ci95": [0.25, 0.75]},
    }
    assert [name for name, *_ in method_rows(r)] == [
        "PPO actor vs reference",
        "DPO policy vs reference",
        "PPO actor vs DPO policy",
    ]
    table = method_table(r).splitlines()
    assert table[2] == "|PPO actor vs reference|75.0%|60.0%-90.0%|"
    assert table[4] == "|PPO actor vs DPO policy|50.0%|25.0%-75.0%|"
    assert len(method_rows({"win_rate": 0.7, "win_rate_ci95": [0.5, 0.8]})) == 1  # --methods ppo: one row
    r["rloo_vs_reference"] = {"win_rate": 0.875, "ci95": [0.75, 1.0]}
    r["ppo_vs_rloo"] = {"win_rate": 0.25, "ci95": [0.0, 0.5]}
    table = method_table(r).splitlines()
    assert table[5:] == ["|RLOO actor vs reference|87.5%|75.0%-100.0%|", "|PPO actor vs RLOO actor|25.0%|0.0%-50.0%|"]


def test_a_dpo_at_chance_fails_its_check():
    from app.studies.demo import QUICK_BARS, checks

    r = {**GOOD, "ppo_steps": 1, "kl_per_step": [0.1], "dpo_vs_reference": {"win_rate": 0.5, "ci95": [0.4, 0.6]}}
    (dpo,) = [ok for name, ok in checks(r, QUICK_BARS).items() if name.startswith("DPO")]
    assert dpo is False
    r["dpo_vs_reference"]["win_rate"] = 0.55
    assert all(checks(r, QUICK_BARS).values())


def test_best_of_n_points_and_the_findings_by_hand():
    from app.studies.demo_watch import best_of_ns, findings, interpolate, watch_checks

    assert best_of_ns(16) == [1, 2, 4, 8, 16] and best_of_ns(6) == [1, 2, 4, 6] and best_of_ns(1) == [1]
    # best-of-N at sqrt(KL) 0, 1 and 2 with win rates 0.5, 0.7 and 0.8
    bon = [{"kl": 0.0, "win_rate": 0.5}, {"kl": 1.0, "win_rate": 0.7}, {"kl": 4.0, "win_rate": 0.8}]
    assert interpolate(bon, 0.25) == pytest.approx(0.6)  # sqrt 0.5: halfway from 0.5 to 0.7
    assert interpolate(bon, 2.25) == pytest.approx(0.75)  # sqrt 1.5: halfway from 0.7 to 0.8
    assert interpolate(bon, -0.1) == 0.5  # a sampled KL below 0 reads as 0
    assert interpolate(bon, 9.0) is None  # beyond best-of-N's reach

    def ckpt(step, kl, win, chosen=False):
        return {"step": step, "kl": kl, "win_rate": win, "chosen": chosen}

    # PPO peaks at step 20 (KL 2.25: best-of-N there 0.75), the held-out judge chose step 20, the last is worse
    points = [ckpt(10, 0.25, 0.62), ckpt(20, 2.25, 0.78, chosen=True), ckpt(30, 9.0, 0.70)]
    f = findings(points, bon, {"step": 25, "reason": "held-out judge fell"})
    assert (f["chosen_step"], f["last_step"], f["peak_step"]) == (20, 30, 20)
    assert f["chosen_at_least_last"] and f["best_of_n_at_peak_kl"] == pytest.approx(0.75)
    assert f["ppo_beats_best_of_n"] and not f["peak_kl_beyond_best_of_n"] and f["alarm_step"] == 25
    assert all(watch_checks(f).values())
    # the peak beyond best-of-N's KL is compared with its largest N, and said so; a last checkpoint that wins more
    points = [ckpt(10, 0.25, 0.55, chosen=True), ckpt(20, 9.0, 0.79)]
    f = findings(points, bon, None)
    assert f["peak_kl_beyond_best_of_n"] and f["best_of_n_at_peak_kl"] == 0.8 and not f["ppo_beats_best_of_n"]
    assert not f["chosen_at_least_last"] and f["alarm_step"] is None
    # 0.3 points below the last one, inside its interval (the default-model trial's step 64 against step 94): as
    # good as the evaluation can tell; below the interval's low end it is worse
    last = {**ckpt(94, 9.2, 0.9375), "ci95": [0.912, 0.959]}
    assert findings([{**ckpt(64, 8.5, 0.9351), "chosen": True}, last], bon, None)["chosen_at_least_last"]
    assert not findings([{**ckpt(64, 8.5, 0.9110), "chosen": True}, last], bon, None)["chosen_at_least_last"]
    assert watch_checks(f) == {
        "the held-out judge's checkpoint wins as often as the last one (within its 95% interval)": False,
        "PPO's checkpoint the judge scored highest (picked by that judge) beats best-of-N at the same KL, or "
        "best-of-N's largest N at a lower KL where PPO's is beyond its bound": False,
        "the watch's alarm fires only after PPO's win rate peaked, if at all": True,
    }
    # the demo's first default-model run: the alarm fired at step 7, the win rate rose to the last checkpoint
    f = findings([ckpt(16, 0.3, 0.47, chosen=True), ckpt(94, 1.77, 0.77)], bon, {"step": 7, "reason": "noise"})
    assert not watch_checks(f)["the watch's alarm fires only after PPO's win rate peaked, if at all"]


def test_methods_at_equal_kl_by_hand():
    from app.studies.demo_watch import at_equal_kl, equal_kl_lines

    def point(kl, win, lo, hi):
        return {"kl": kl, "win_rate": win, "ci95": [lo, hi]}

    ppo = [point(1.0, 0.7, 0.6, 0.8), point(4.0, 0.8, 0.7, 0.9)]  # sqrt(KL) 1 and 2
    bon = [point(0.0, 0.5, 0.4, 0.6), point(1.0, 0.6, 0.5, 0.7), point(2.25, 0.65, 0.55, 0.75)]
    dpo = [point(9.0, 0.9, 0.85, 0.95)]  # one point at sqrt(KL) 3
    e = at_equal_kl({"PPO": ppo, "best-of-N": bon, "DPO": dpo})
    assert e["kl"] == 2.25  # best-of-N reached the least: sqrt 1.5 is where all are compared
    assert e["win_rates"]["PPO"] == pytest.approx([0.75, 0.65, 0.85])  # halfway from sqrt 1 to sqrt 4, +-0.1 both
    lopsided = [point(1.0, 0.7, 0.6, 0.72), point(4.0, 0.8, 0.78, 0.9)]  # the wider side of each, below and above
    assert at_equal_kl({"PPO": lopsided, "best-of-N": bon})["win_rates"]["PPO"] == pytest.approx([0.75, 0.65, 0.85])
    assert e["win_rates"]["best-of-N"] == pytest.approx([0.65, 0.55, 0.75])  # its last point
    # halfway from the reference (0.5, not measured: no interval) to 0.9, with 0.9's own interval's width, +-0.05
    # (interpolating toward a zero-width point would give +-0.025, narrower than anything measured)
    assert e["win_rates"]["DPO"] == pytest.approx([0.7, 0.65, 0.75])
    assert e["winner"] == "PPO" and not e["clear"]  # PPO's 0.65 low end does not clear best-of-N's 0.65
    (line,) = equal_kl_lines(e)
    assert line.startswith("at equal KL (2.25 nats") and "PPO 75.0% (65.0%-85.0%), DPO 70.0%" in line
    tight = [point(1.0, 0.7, 0.68, 0.72), point(4.0, 0.8, 0.78, 0.82)]
    assert at_equal_kl({"PPO": tight, "best-of-N": bon})["clear"]  # 0.73 at sqrt 1.5 clears best-of-N's 0.65
    assert at_equal_kl({"PPO": ppo, "RLOO": []}) == {}  # a method with no point: no comparison
    assert at_equal_kl({"PPO": [point(-0.1, 0.5, 0.4, 0.6)], "best-of-N": bon}) == {}  # no KL spent
    assert equal_kl_lines({}) == ["no KL every method reached: no comparison at equal KL"]


def test_the_rounds_study_splits_its_budget_and_answers_its_two_questions_by_hand():
    from app.studies.demo_rounds import Arm, answer_lines, answers, shares

    assert shares(10, 3) == [3, 3, 4] and shares(40, 2) == [20, 20] and sum(shares(97, 4)) == 97

    def pt(labels, acc, win, lo, hi):
        rm_ci = [acc - 0.05, acc + 0.05]
        return {"labels": labels, "rm_accuracy": acc, "rm_ci95": rm_ci, "win_rate": win, "ci95": [lo, hi], "round": 0}

    one = Arm("1 round", 1, "random", [pt(40, 0.80, 0.60, 0.55, 0.65)])
    rand = Arm("2 rounds, random", 2, "random", [pt(20, 0.70, 0.55, 0.5, 0.6), pt(40, 0.82, 0.70, 0.66, 0.74)])
    unc = Arm("2 rounds, uncertain", 2, "uncertain", [pt(20, 0.70, 0.55, 0.5, 0.6), pt(40, 0.85, 0.66, 0.6, 0.7)])
    a = answers([one, rand, unc])
    assert a["rounds_vs_one"]["rounds_win"] and not a["rounds_vs_one"]["intervals_overlap"]  # 0.66 > 0.65
    # uncertain reaches random's final accuracy (0.82) only with its last round: 40 labels, the same budget
    assert a["selection"] == {
        "uncertain": {
            "target": 0.82,
            "target_ci95": [pytest.approx(0.77), 0.87],
            "final": 0.85,
            "final_ci95": [pytest.approx(0.80), 0.90],
            "budget": 40,
            "labels_to_reach": 40,
        }
    }
    unc.points[0]["rm_accuracy"] = 0.83  # now after 20 labels: half of random's
    assert answers([one, rand, unc])["selection"]["uncertain"]["labels_to_reach"] == 20
    unc.points = [pt(20, 0.7, 0.5, 0.4, 0.6), pt(40, 0.75, 0.5, 0.4, 0.6)]
    r = {"answers": answers([one, rand, unc]), "config": {"rounds": 2}, "label_budget": 40}
    lines = answer_lines(r)
    assert lines[0].startswith("2 rounds beat 1 round at 40 labels: win rate 70.0% (66.0%-74.0%) against 60.0%")
    assert lines[1] == (
        "uncertain: random's final held-out reward-model accuracy is 82.0% (77.0%-87.0%); uncertain did not reach it "
        "within 40 labels; uncertain's is 75.0% (70.0%-80.0%) at 40 labels"
    )


def test_ppo_settings_on_top_of_a_preset_are_checked_and_keep_the_order():
    from app.studies.demo_common import merged_ppo_settings
    from store.errors import UserError

    base = "whiten_advantages=false,generation_batch_size=8"
    assert merged_ppo_settings(base, "") == base
    assert merged_ppo_settings(base, " generation-batch-size = 16 , ema_beta=0.9") == (
        "whiten_advantages=false,generation_batch_size=16,ema_beta=0.9"
    )
    with pytest.raises(UserError, match="'colour=red' is not key=value with a PPO setting"):
        merged_ppo_settings(base, "colour=red")
    with pytest.raises(UserError, match="kl_ctl is the demo's own flag"):
        merged_ppo_settings(base, "kl_ctl=0.2")


def test_rloo_settings_are_checked_and_reach_rloo_over_ppos():
    from app.studies.demo_common import rloo_settings
    from app.studies.demo_config import DemoConfig

    assert rloo_settings("kl_ctl=0.2, actor_lr=1e-5,k=8") == {"kl_ctl": 0.2, "actor_lr": 1e-5, "k": 8}
    for text, message in (
        ("colour=red", "'colour=red' is not key=value with an RLOO setting"),
        ("reward_shape=quantile", "reward_shape is the demo's own flag (--methods)"),
        ("max_steps=9", "max_steps is the demo's own flag (--method-steps)"),
        ("actor=/tmp/x", "actor is the demo's own to set"),
        ("k=many", "k must be int, got 'many'"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            rloo_settings(text)
    assert rloo_settings("") == {}
    from app.studies.demo import check

    with pytest.raises(UserError, match="--rloo-settings: "):
        check(DemoConfig(methods="ppo,rloo", rloo_settings="k=1"))  # RLOO's own check: k >= 2


def test_on_prompts_config_puts_rloo_settings_over_ppos(tmp_path):
    from app.studies.demo_config import DemoConfig
    from app.studies.demo_methods import on_prompts_config

    ppo_run = tmp_path / "ppo"
    ppo_run.mkdir()
    ppo = {"generation_batch_size": 32, "max_new_tokens": 64, "min_new_tokens": 8, "actor_lr": 2e-5, "kl_ctl": 0.05}
    ppo |= {"dtype": "bf16", "seed": 0, "rollout_engine": "hf", "save_every": 4, "eval_prompts": "", "eval_limit": 0}
    ppo |= {"keep_best": True, "kind": "ppo"}
    (ppo_run / "config.json").write_text(json.dumps(ppo))
    (ppo_run / "status.json").write_text(json.dumps({"state": "finished", "total_steps": 14}))
    cfg = DemoConfig(methods="ppo,rloo,rloo_pairwise", rloo_settings="kl_ctl=0.2")
    for method, shape in (("rloo", "score"), ("rloo_pairwise", "win_fraction")):
        c = on_prompts_config(method, cfg, "m", tmp_path / "rm", ppo_run)
        assert (c.kl_ctl, c.actor_lr, c.reward_shape, c.max_steps, c.generation_batch_size) == (0.2, 2e-5, shape, 14, 8)
