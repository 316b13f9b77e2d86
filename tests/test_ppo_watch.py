"""The over-optimisation watch in a real PPO run on tiny models (training/watch.py, training/ppo/train.py): an
ensemble's held-out judge, the length-score correlation, the alarm at the checkpoint evaluations, and
--stop-on-overoptimization.

The hackable setup: the actor is the quick demo's talking model (it ends each reply with probability 0.15 per
token, so lengths vary); the reward model PPO optimises pays for length, and the held-out judge is the same
construction paying for brevity. PPO learns to hold EOS back; the optimised score rises, the judge's falls."""

import json
from pathlib import Path

import pytest
import torch

from tests.builders import HACK_SETTINGS, build_share_rm, hand_ensemble, ppo, rows_of, steps_of


@pytest.fixture(scope="module")
def length_ensemble(tmp_path_factory, talker) -> Path:
    """Member 0 pays for length, member 1 (the held-out judge) for brevity. The feature is 1 on every token but the
    talker's words and EOS: its mean is the prompt's share of the sequence, which falls as the reply grows."""
    from transformers import AutoTokenizer

    from training.tiny import word_tokens

    tok = AutoTokenizer.from_pretrained(talker)
    feature = torch.ones(len(tok))
    feature[word_tokens(tok, 48)] = 0.0
    feature[tok.eos_token_id] = 0.0
    tmp = tmp_path_factory.mktemp("length-rms")
    longer = build_share_rm(talker, tmp / "longer", feature, -0.5)
    shorter = build_share_rm(talker, tmp / "shorter", feature, 0.5)
    return hand_ensemble(tmp / "ensemble", [longer, shorter])


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("watch-prompts") / "prompts.txt"
    path.write_text("\n".join(f"Tell me something about topic number {i}." for i in range(48)) + "\n")
    return path


@pytest.mark.integration
def test_the_length_rm_scores_longer_replies_higher(talker, length_ensemble):
    from training.judges import reward_scores
    from training.loaders import load_scalar_model

    longer = load_scalar_model(str(length_ensemble / "members/0/model"), "fp32")
    judge = load_scalar_model(str(length_ensemble / "members/1/model"), "fp32")
    from transformers import AutoTokenizer

    from training.tiny import word_tokens

    tok = AutoTokenizer.from_pretrained(talker)
    prompt = tok("Tell me about", add_special_tokens=False)["input_ids"]
    word = word_tokens(tok, 48)[0]

    def score(model, n_words):
        ids = torch.tensor([prompt + [word] * n_words + [tok.eos_token_id]])
        return reward_scores(model, ids, torch.ones_like(ids), torch.tensor([ids.shape[1] - 1])).item()

    lengths = [score(longer, n) for n in (1, 4, 12)]
    assert lengths == sorted(lengths) and lengths[2] > lengths[0] + 0.5
    assert [score(judge, n) for n in (1, 4, 12)] == pytest.approx([-v for v in lengths], abs=1e-5)


HACK = [x for key, value in HACK_SETTINGS.items() for x in (f"--{key.replace('_', '-')}", str(value))]
MARGIN = 0.6  # the alarm must fire before the judge's best evaluation has been lost by more than this


@pytest.mark.integration
@pytest.mark.parametrize("seed", [0, 1])
def test_a_hackable_reward_sets_off_the_alarm_and_the_run_stops_resumably(
    tmp_path, talker, words_ensemble, prompts, held_prompts, seed
):
    """In every seed, the alarm fires at a checkpoint evaluation where the held-out judge fell beyond noise, and
    before its best had been lost by more than MARGIN; the run stops there, checkpointed, and resumes to the end."""
    flags = [*HACK, "--seed", str(seed), "--eval-prompts", str(held_prompts), "--stop-on-overoptimization"]
    run = ppo(tmp_path, talker, words_ensemble, prompts, *flags)
    status = json.loads((run / "status.json").read_text())
    alarm = next(r for r in rows_of(run) if r.get("event") == "alarm")
    assert status["state"] == "stopped" and status["alarm"] == alarm["reason"] and alarm["stopping"]
    assert "the held-out judge's score fell" in alarm["reason"] and "over 32 prompts" in alarm["reason"]
    evaluations = [json.loads(x) for x in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == list(range(2, alarm["step"] + 1, 2))  # it fired at an evaluation
    judged = [e["heldout_score_mean"] for e in evaluations]
    assert judged[-1] < max(judged) and max(judged) - judged[-1] < MARGIN
    assert evaluations[-1]["score_mean"] > evaluations[judged.index(max(judged))]["score_mean"]
    assert evaluations[-1]["length_mean"] > evaluations[0]["length_mean"]  # by making replies longer
    steps = steps_of(run)
    assert status["step"] == alarm["step"] == max(steps) < 24  # stopped at the alarm's step, checkpointed
    assert (run / "checkpoints" / "actor" / "latest").read_text().strip() == f"step{alarm['step']}"
    for row in steps.values():  # the per-step signals, for the plots
        assert {"watch/heldout_score_mean", "watch/length_score_corr", "watch/ref_logprob_mean"} <= row.keys()
    corr = [r["watch/length_score_corr"] for r in steps.values()]
    assert sum(corr) / len(corr) > 0.8  # the score is length, and the watch sees it
    assert steps[alarm["step"]]["watch/alarm"] == 1.0 and steps[1]["watch/alarm"] == 0.0
    if seed:
        return
    # resumable: the run continues from the checkpoint to the end (the watch replays its evaluations: the alarm
    # does not fire twice)
    from app.faces.cli import main

    resume = ["train-ppo", "--resume", run.name, "--runs-dir", str(tmp_path / "runs")]  # by its id, as `rlhf runs`
    assert main(["--db", str(tmp_path / "s.duckdb"), *resume]) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["alarm"] == alarm["reason"]
    assert sorted(steps_of(run)) == list(range(1, 25))
    assert sum(r.get("event") == "alarm" for r in rows_of(run)) == 1


@pytest.mark.integration
def test_no_alarm_when_the_judge_agrees(tmp_path, talker, words_ensemble, prompts, held_prompts):
    """The same run with a held-out judge that pays for length too (a second copy of the optimised member): the
    judge rises with the optimised score, and the alarm stays quiet."""
    agreeing = hand_ensemble(tmp_path / "agreeing", [words_ensemble / "members/0/model"] * 2)
    # half the hackable run (12 steps, 6 evaluations): the hackable runs' alarms fire at step 16, and a quiet run's
    # false-alarm rate is the simulation's (tests/test_watch.py)
    run = ppo(tmp_path, talker, agreeing, prompts, *HACK, "--max-steps", "12", "--eval-prompts", str(held_prompts))
    evaluations = [json.loads(x) for x in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert len(evaluations) == 6 and evaluations[-1]["heldout_score_mean"] > evaluations[0]["heldout_score_mean"]
    assert not any(r.get("event") == "alarm" for r in rows_of(run))
    assert "alarm" not in json.loads((run / "status.json").read_text())


@pytest.mark.integration
def test_a_single_reward_model_has_no_judge_but_still_the_watch(tmp_path, talker, length_ensemble, prompts):
    flags = ["--max-steps", "3", "--kl-budget", "1e-3", "--actor-lr", "1e-2"]
    run = ppo(tmp_path, talker, length_ensemble / "members/0/model", prompts, *flags)
    steps = steps_of(run)
    assert "watch/heldout_score_mean" not in steps[1] and "watch/length_score_corr" in steps[2]
    assert steps[2]["watch/ref_logprob_mean"] < 0  # a log-likelihood per token
    # the KL budget fires the alarm at the first step past it (step 1's KL is 0: actor = reference), and the run
    # goes on without --stop-on-overoptimization
    over = min(s for s, r in steps.items() if r["reward/kl"] > 1e-3)
    alarm = next(r for r in rows_of(run) if r.get("event") == "alarm")
    assert over > 1 and alarm["step"] == over and "passed the budget of 0.001" in alarm["reason"]
    assert not alarm["stopping"] and json.loads((run / "status.json").read_text())["state"] == "finished"


def test_the_best_checkpoint_by_hand():
    from training.rollouts.checkpoints import best_checkpoint

    rows = [
        {"step": 2, "score_mean": 1.0, "heldout_score_mean": 0.5},
        {"step": 4, "score_mean": 2.0, "heldout_score_mean": 0.7},
        {"step": 6, "score_mean": 3.0, "heldout_score_mean": 0.7},
        {"step": 8, "score_mean": 4.0, "heldout_score_mean": 0.1},
    ]
    assert best_checkpoint(rows)["step"] == 4  # the judge's best, the earlier of a tie; not the last
    assert best_checkpoint([{k: v for k, v in r.items() if k != "heldout_score_mean"} for r in rows])["step"] == 8
    assert best_checkpoint([]) is None


@pytest.mark.integration
def test_checkpoints_are_judged_on_held_out_prompts_and_the_best_is_kept(tmp_path, talker, length_ensemble, prompts):
    from safetensors.torch import load_file

    held = tmp_path / "held.txt"
    held.write_text("".join(f"A held-out question {i}?\n" for i in range(6)))
    flags = ["--max-steps", "6", "--save-every", "2", "--actor-lr", "3e-3", "--critic-lr", "1e-3"]
    flags += ["--eval-prompts", str(held), "--keep-best"]
    run = ppo(tmp_path, talker, length_ensemble, prompts, *flags)
    rows = [json.loads(x) for x in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6] and all(r["prompts"] == 6 for r in rows)
    for r in rows:
        assert {"score_mean", "heldout_score_mean", "kl", "length_mean"} <= r.keys()
        # the judge pays for brevity and the optimised model for length: on the same replies they are opposite
        assert r["heldout_score_mean"] == pytest.approx(-r["score_mean"], abs=1e-4)
    best = max(rows, key=lambda r: (r["heldout_score_mean"], -r["step"]))
    final = json.loads((run / "status.json").read_text())["final"]
    assert final["best/step"] == best["step"]
    events = [r for r in rows_of(run) if r.get("event") == "checkpoint"]
    assert [e["step"] for e in events] == [2, 4, 6] and "checkpoint/heldout_score_mean" in events[0]
    weights = lambda folder: load_file(str(folder / "model.safetensors"))  # noqa: E731
    if best["step"] != 6:  # --keep-best: RUN/actor is the best checkpoint, the last one is kept beside it
        kept, chosen = weights(run / "actor"), weights(run / "checkpoints" / f"actor-step{best['step']}")
        assert all(torch.equal(kept[k], chosen[k]) for k in kept)
        assert (run / "actor_last" / "model.safetensors").is_file()
        assert rows[-1]["actor"] == str(run / "actor_last")
    else:
        assert not (run / "actor_last").exists()
    assert (run / "checkpoints" / "actor-step2" / "config.json").is_file()  # Compare loads any of them


@pytest.mark.integration
def test_ppo_ptx_mixes_a_language_modelling_step_on_unlabelled_text(tmp_path, talker, length_ensemble, prompts, cli):
    """--unsupervised-data: after each actor step, an LM step on the text (weight --unsup-coef); its loss is in
    the metrics and falls as the actor learns the text; a bad file is one error line."""
    text = tmp_path / "text.txt"
    text.write_text("".join("the same short sentence about rivers and stones\n" for _ in range(8)))
    flags = ["--max-steps", "6", "--unsupervised-data", str(text), "--unsup-coef", "1.0", "--actor-lr", "3e-3"]
    run = ppo(tmp_path, talker, length_ensemble / "members/0/model", prompts, *flags)
    steps = steps_of(run)
    assert all("loss/unsup" in r for r in steps.values())
    assert steps[6]["loss/unsup"] < steps[1]["loss/unsup"]
    start = next(r for r in rows_of(run) if r.get("event") == "start")
    assert start["unsupervised_texts"] == 8
    code, _, err = cli("train-ppo", "--reward", str(length_ensemble), "--unsupervised-data", str(tmp_path / "x.csv"))
    assert code == 1 and "no such unsupervised data file" in err and len(err.strip().splitlines()) == 1
