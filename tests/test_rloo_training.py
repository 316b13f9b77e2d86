"""RLOO through `rlhf train-rloo` on CPU with tiny models: k responses per prompt, the leave-one-out baseline and no
critic learn the same known reward PPO's test uses; checkpoints judged on held-out prompts, the best kept."""

import json
from pathlib import Path

import pytest

from tests.conftest import query
from tests.test_ppo_training import build_liked_token_rm, rows_of, steps_of


@pytest.fixture(scope="module")
def liked_rm(tmp_path_factory, tiny_model_dir) -> Path:
    return build_liked_token_rm(tiny_model_dir, tmp_path_factory.mktemp("liked-rm"))


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(f"Tell me something about topic number {i}." for i in range(48)) + "\n")
    return path


def rloo(db: str, runs: Path, actor: Path, reward: Path, prompts: Path, *flags: str) -> Path:
    from app.cli import main

    args = ["--db", db, "train-rloo", "--actor", str(actor), "--reward", str(reward), "--prompts", str(prompts)]
    assert main([*args, "--runs-dir", str(runs), "--max-new-tokens", "16", *flags]) == 0
    (run,) = runs.iterdir()
    return run


@pytest.mark.integration
def test_rloo_learns_a_known_reward_with_no_critic(tmp_path, db, tiny_model_dir, liked_rm, prompts_file):
    flags = ["--k", "4", "--generation-batch-size", "4", "--max-steps", "8", "--epochs", "10", "--top-k", "20"]
    flags += ["--actor-lr", "3e-3", "--save-every", "4", "--eval-prompts", str(prompts_file), "--eval-limit", "8"]
    run = rloo(db, tmp_path / "runs", tiny_model_dir, liked_rm, prompts_file, *flags, "--keep-best")
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 9))
    assert steps[1]["reward/kl"] == pytest.approx(0.0, abs=1e-3)  # actor == reference before the first update
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-2:]) / 2 > sum(scores[:2]) / 2 + 0.5, scores  # measured: 0.9 -> 2.0
    assert all(steps[s]["rloo/advantage_abs_mean"] > 0 for s in steps)
    # 4 prompts x k = 4 responses a step, in minibatches of 8: two updates a step, each with its own forward
    assert steps[3]["perf/part/actor_step_s"] > 0 and "perf/part/critic_forward_s" not in steps[3]
    # no critic: three models, one optimizer
    final = json.loads((run / "status.json").read_text())["final"]
    assert "memory/critic_mb" not in final and final["memory/reference_mb"] == final["memory/actor_mb"] > 0
    # checkpoints at steps 4 and 8 judged on the held-out prompts; the best one is RUN/actor
    evaluated = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evaluated] == [4, 8] and all(r["prompts"] == 8 for r in evaluated)
    assert final["best/step"] in (4, 8) and (run / "actor" / "config.json").is_file()
    assert [r for r in rows_of(run) if r.get("event") == "final"]
    assert query(db, "SELECT kind FROM runs") == [("rloo",)]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--k", "1"], "k must be >= 2"),
        (["--loss", "ppo"], "loss must be clipped or reinforce"),
        (["--loss", "reinforce", "--update-epochs", "2"], "plain REINFORCE is on-policy"),
    ],
)
def test_bad_rloo_settings_are_one_error_line_and_no_run(cli, db, tmp_path, models, flags, message):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\n")
    args = ["train-rloo", "--actor", models["actor"], "--reward", models["reward"], "--prompts", str(prompts)]
    code, _, err = cli(*args, "--runs-dir", str(tmp_path / "runs"), *flags)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
