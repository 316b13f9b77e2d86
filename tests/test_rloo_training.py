"""RLOO through `rlhf train-rloo` on CPU with tiny models: k responses per prompt, the leave-one-out baseline and no
critic learn the same known reward PPO's test uses; checkpoints judged on held-out prompts, the best kept;
Stop and --resume."""

import json
import time

import pytest

from tests.builders import rows_of, steps_of
from tests.conftest import query


@pytest.mark.integration
def test_rloo_learns_a_known_reward_with_no_critic_and_stops_and_resumes(
    tmp_path,
    db,
    cli,
    tiny_model_dir,
    liked_rm,
    prompts_file,
):
    from app.jobs.training import follow, prepare_run
    from training.launcher import launch
    from training.rloo.config import RLOOConfig
    from training.runs import read_metrics, read_status

    heldout = tmp_path / "heldout.txt"  # prompts the run never trains on
    heldout.write_text("\n".join(f"Describe held-out subject {i} briefly." for i in range(8)) + "\n")
    cfg = RLOOConfig(
        actor=str(tiny_model_dir),
        reward=str(liked_rm),
        prompts=str(prompts_file),
        k=4,
        generation_batch_size=4,
        max_new_tokens=16,
        max_steps=8,
        epochs=10,
        top_k=20,
        actor_lr=3e-3,
        save_every=4,
        eval_prompts=str(heldout),
        eval_limit=8,
        keep_best=True,
    )
    runs = tmp_path / "runs"
    run = prepare_run(db, cfg, runs, str(prompts_file))
    proc = launch("rloo", run)
    deadline = time.monotonic() + 300
    while not any(r.get("step", 0) >= 2 and "loss/actor" in r for r in read_metrics(run)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    code, out, _ = cli("stop", run.name, "--runs-dir", str(runs))
    assert code == 0 and "stop" in out
    status = follow(run, proc, poll_s=0.2)
    stopped = next(r for r in read_metrics(run) if r.get("event") == "stopped")
    assert status["state"] == "stopped" and status["step"] == stopped["step"] < 8
    assert (run / "checkpoints" / "actor" / "latest").read_text().strip() == f"step{stopped['step']}"
    code, _, err = cli("train-rloo", "--resume", run.name, "--runs-dir", str(runs))
    assert code == 0, err
    assert read_status(run)["state"] == "finished"
    assert next(r for r in read_metrics(run) if r.get("event") == "resumed")["step"] == stopped["step"]
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 9))
    assert steps[1]["reward/kl"] == pytest.approx(0.0, abs=1e-3)  # actor == reference before the first update
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-2:]) / 2 > sum(scores[:2]) / 2 + 0.5, scores  # measured: 0.9 -> 2.0
    assert all(steps[s]["rloo/advantage_abs_mean"] > 0 for s in steps)
    # 4 prompts x k = 4 responses a step, in minibatches of 8: two updates a step, each with its own forward
    assert steps[3]["perf/part/actor_step_s"] > 0 and "perf/part/critic_forward_s" not in steps[3]
    # no critic: three models, one optimizer
    final = read_status(run)["final"]
    assert "memory/critic_mb" not in final and final["memory/reference_mb"] == final["memory/actor_mb"] > 0
    # checkpoints at steps 4 and 8 judged on the held-out prompts; the best one is RUN/actor
    evaluated = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evaluated] == [4, 8] and all(r["prompts"] == 8 for r in evaluated)
    assert all("Describe held-out subject 0 briefly." in r["first_prompt"] for r in evaluated)
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


@pytest.mark.integration
def test_plain_reinforce_learns_the_known_reward(tmp_path, db, cli, tiny_model_dir, liked_rm, prompts_file):
    runs = tmp_path / "runs"
    code, _, err = cli(
        "train-rloo", "--actor", str(tiny_model_dir), "--reward", str(liked_rm), "--prompts", str(prompts_file),
        "--loss", "reinforce", "--k", "4", "--generation-batch-size", "4", "--max-new-tokens", "16",
        "--max-steps", "8", "--epochs", "10", "--top-k", "20", "--actor-lr", "3e-3", "--runs-dir", str(runs),
    )  # fmt: skip
    assert code == 0, err
    (run,) = runs.iterdir()
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 9))
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-2:]) / 2 > sum(scores[:2]) / 2 + 0.5, scores
    assert json.loads((run / "config.json").read_text())["loss"] == "reinforce"
