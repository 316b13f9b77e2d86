"""Online DPO through `rlhf train-online-dpo` on CPU with tiny models: the policy's own k samples per prompt, the
reward model's best against its worst as DPO pairs, learn the known reward PPO's and RLOO's tests use; and RLOO's
pairwise group reward (win fractions) learns it too."""

import json

import pytest

from tests.builders import rows_of, steps_of
from tests.conftest import query


@pytest.mark.integration
def test_online_dpo_learns_a_known_reward_from_its_own_samples(
    tmp_path, db, cli, tiny_model_dir, liked_rm, prompts_file
):
    runs = tmp_path / "runs"
    code, out, err = cli(
        "train-online-dpo", "--actor", str(tiny_model_dir), "--reward", str(liked_rm), "--prompts", str(prompts_file),
        "--k", "4", "--generation-batch-size", "4", "--max-new-tokens", "16", "--max-steps", "8", "--epochs", "10",
        "--top-k", "20", "--actor-lr", "3e-3", "--beta", "0.1", "--save-every", "4", "--eval-prompts",
        str(prompts_file), "--eval-limit", "8", "--runs-dir", str(runs),
    )  # fmt: skip
    assert code == 0, err
    (run,) = runs.iterdir()
    assert run.name.startswith("odpo-") and f"policy in {run / 'actor'}" in out
    config = json.loads((run / "config.json").read_text())
    assert config["kind"] == "online_dpo" and config["k"] == 4 and config["beta"] == 0.1
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 9))
    assert steps[1]["reward/kl"] == pytest.approx(0.0, abs=1e-3)  # actor == reference before the first update
    # 4 prompts a step, one pair each unless all four samples scored the same
    assert all(1 <= steps[s]["online_dpo/pairs"] <= 4 and steps[s]["online_dpo/score_gap"] > 0 for s in steps)
    # the first update starts where DPO does: h = 0, loss log 2
    assert steps[1]["loss/actor"] == pytest.approx(0.6931, abs=1e-3)
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-2:]) / 2 > sum(scores[:2]) / 2 + 0.5, scores
    assert steps[8]["reward/kl"] > 0
    evaluated = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evaluated] == [4, 8]
    assert (run / "actor" / "config.json").is_file()
    assert query(db, "SELECT kind FROM runs") == [("online_dpo",)]


@pytest.mark.integration
@pytest.mark.parametrize("shape", ["win_fraction", "quantile"])
def test_rloo_on_a_scale_free_reward_learns_the_known_reward(
    tmp_path, db, cli, tiny_model_dir, liked_rm, prompts_file, shape
):
    runs = tmp_path / "runs"
    code, _, err = cli(
        "train-rloo", "--actor", str(tiny_model_dir), "--reward", str(liked_rm), "--prompts", str(prompts_file),
        "--reward-shape", shape, "--k", "4", "--generation-batch-size", "4", "--max-new-tokens", "16",
        "--max-steps", "8", "--epochs", "10", "--top-k", "20", "--actor-lr", "3e-3", "--kl-ctl", "0.01",
        "--runs-dir", str(runs),
    )  # fmt: skip
    assert code == 0, err
    (run,) = runs.iterdir()
    assert json.loads((run / "config.json").read_text())["reward_shape"] == shape
    steps = steps_of(run)
    if shape == "win_fraction":  # 4 win fractions sum to 2: the mean reward before the KL penalty is exactly 1/2
        assert steps[1]["reward/total_mean"] == pytest.approx(0.5, abs=1e-3)
    else:  # the reference's own samples, drawn each step beside the actor's
        assert steps[1]["perf/part/reference_decode_s"] > 0 and 0 <= steps[1]["reward/total_mean"] <= 1
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-2:]) / 2 > sum(scores[:2]) / 2 + 0.5, scores


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--k", "1"], "k must be >= 2"),
        (["--beta", "0"], "beta must be > 0"),
        (["--min-gap", "-1"], "min_gap must be >= 0"),
    ],
)
def test_bad_online_dpo_settings_are_one_error_line_and_no_run(cli, db, tmp_path, models, flags, message):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\n")
    args = ["train-online-dpo", "--actor", models["actor"], "--reward", models["reward"], "--prompts", str(prompts)]
    code, _, err = cli(*args, "--runs-dir", str(tmp_path / "runs"), *flags)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_rloo_refuses_an_unknown_reward_shape(cli, db, tmp_path, models):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\n")
    args = ["train-rloo", "--actor", models["actor"], "--reward", models["reward"], "--prompts", str(prompts)]
    code, _, err = cli(*args, "--reward-shape", "rank", "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and "reward_shape must be score, win_fraction or quantile" in err


@pytest.mark.integration
def test_two_ranks_weigh_every_pair_alike_and_report_all_of_them(
    tmp_path, db, cli, tiny_model_dir, liked_rm, prompts_file
):
    runs = tmp_path / "runs"
    code, _, err = cli(
        "train-online-dpo", "--actor", str(tiny_model_dir), "--reward", str(liked_rm), "--prompts", str(prompts_file),
        "--k", "4", "--generation-batch-size", "4", "--max-new-tokens", "12", "--max-steps", "2", "--epochs", "10",
        "--top-k", "20", "--actor-lr", "3e-3", "--num-accelerators", "2", "--runs-dir", str(runs),
    )  # fmt: skip
    assert code == 0, err
    (run,) = runs.iterdir()
    assert next(r for r in rows_of(run) if r.get("event") == "start")["world_size"] == 2
    steps = steps_of(run)
    # 4 prompts on each of 2 ranks: more than one rank's 4 pairs are counted (ties aside), never more than 8
    assert all(4 < steps[s]["online_dpo/pairs"] <= 8 for s in steps), steps
    assert steps[1]["loss/actor"] == pytest.approx(0.6931, abs=1e-3)  # the mean over every pair, h = 0 at the start
    assert sorted(p.name for p in (run / "actor").glob("*.safetensors")) == ["model.safetensors"]
