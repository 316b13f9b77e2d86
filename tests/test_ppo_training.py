"""PPO through the DeepSpeed launcher on CPU with tiny models: one and two ranks, a reward that is a known function
of the text, every metric, the saved folders, a frozen reference, and a killed run that resumes."""

import json
import math
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.builders import ppo, rows_of, steps_of
from tests.conftest import query

METRICS = (
    "reward/score_mean",
    "reward/kl_penalty",
    "policy/approx_kl",
    "policy/clipfrac",
    "loss/actor",
    "loss/critic",
    "value/mean",
    "response/length_mean",
    "response/eos_rate",
    "perf/gen_s",
    "perf/train_s",
    "perf/tokens_per_s",
)
PARTS = ("decode", "actor_forward", "critic_forward", "reference_forward", "reward_forward")
PARTS += ("actor_backward", "actor_step", "critic_backward", "critic_step")


def test_the_hand_built_reward_model_scores_the_share_of_liked_tokens(liked_rm):
    from training.judges import reward_scores
    from training.loaders import load_scalar_model

    model = load_scalar_model(str(liked_rm), "fp32")

    def score(seq):  # 2 = EOS
        ids = torch.tensor([seq])
        return reward_scores(model, ids, torch.ones_like(ids), torch.tensor([len(seq) - 1])).item()

    # m = (1 + 1 + 1 + 0) / 4 = .75: 0.5 * 3 * sqrt(32) / sqrt(1 + 9) = 2.6833
    assert score([4, 6, 8, 2]) == pytest.approx(2.6833, abs=1e-3)
    # m = 1/4: 0.5 * 1 * sqrt(32) / sqrt(2) = 2.0
    assert score([4, 5, 8, 2]) == pytest.approx(2.0, abs=1e-3)
    assert score([5, 7, 9, 2]) == pytest.approx(-2.6833, abs=1e-3)


def assert_trained_and_reference_frozen(run: Path, actor: Path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from training.loaders import load_causal_lm, param_fingerprint

    before = AutoModelForCausalLM.from_pretrained(actor).state_dict()
    after = AutoModelForCausalLM.from_pretrained(run / "actor").state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the actor did not change"
    AutoModelForSequenceClassification.from_pretrained(run / "critic")  # the critic saves as a plain HF model
    final = json.loads((run / "status.json").read_text())["final"]
    original = param_fingerprint(load_causal_lm(str(actor), "fp32"))
    assert final["reference/sha256_start"] == final["reference/sha256_end"] == original


def assert_memory_per_model(run: Path, actor: Path):
    """The final line's MB per model, worked out from the parameter count: weights at 2 (bf16) or 4 (fp32) bytes;
    the optimizer AdamW's two fp32 moments, plus an fp32 master copy in bf16 (and 4 bytes of step count per
    tensor)."""
    from transformers import AutoModelForCausalLM

    params = list(AutoModelForCausalLM.from_pretrained(actor).parameters())
    n = sum(p.numel() for p in params)
    final = json.loads((run / "status.json").read_text())["final"]
    width = final["memory/actor_mb"] * 2**20 / n
    assert width in (2.0, 4.0) and final["memory/reference_mb"] == final["memory/actor_mb"]
    optimizer = n * (8 + (4 if width == 2 else 0)) + 4 * len(params)
    assert final["memory/actor_optimizer_mb"] == pytest.approx(optimizer / 2**20)
    assert final["memory/critic_mb"] == final["memory/reward_mb"] > 0  # the critic starts as the reward model


@pytest.mark.integration
def test_one_rank_learns_a_known_reward(tmp_path, tiny_model_dir, liked_rm, prompts_file):
    run = ppo(
        tmp_path,
        tiny_model_dir,
        liked_rm,
        prompts_file,
        "--critic",
        str(liked_rm),
        "--max-steps",
        "24",
        "--epochs",
        "10",
        "--top-k",
        "20",
        "--actor-lr",
        "3e-3",
        "--critic-lr",
        "1e-3",
    )
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 25))
    assert next(r for r in rows_of(run) if r.get("event") == "start")["generation_batch_size"] == 32  # the default
    for row in steps.values():
        missing = [k for k in METRICS if k not in row]
        assert not missing, missing
        assert math.isfinite(row["policy/approx_kl"]) and all(math.isfinite(row[k]) for k in METRICS)
    assert_memory_per_model(run, tiny_model_dir)
    parts = {k for k in steps[3] if k.startswith("perf/part/")}  # where the step's time went (the bench's profile)
    assert parts == {f"perf/part/{p}_s" for p in PARTS}
    assert sum(steps[3][p] for p in parts) <= steps[3]["perf/step_s"]
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    last = sum(scores[-5:]) / 5  # step 1's rollouts are the untrained actor's
    assert last > scores[0] + 0.5, scores  # measured: 0.2 -> 1.6 at DS-Chat's settings, 0.7 -> 2.0 at PPO's defaults
    assert steps[1]["reward/kl"] == pytest.approx(0.0, abs=1e-3)  # actor == reference before the first update
    assert steps[24]["reward/kl"] > 0.1  # ... and it moved away, with the KL reported
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == set(range(1, 25)) and all(s["response"] for s in samples)
    assert_trained_and_reference_frozen(run, tiny_model_dir)


@pytest.mark.integration
def test_two_ranks_learn_as_one_and_end_with_one_actor(tmp_path, tiny_model_dir, liked_rm, prompts_file):
    flags = ["--critic", str(liked_rm), "--max-steps", "12", "--epochs", "10", "--top-k", "20"]
    run = ppo(
        tmp_path,
        tiny_model_dir,
        liked_rm,
        prompts_file,
        *flags,
        "--actor-lr",
        "3e-3",
        "--critic-lr",
        "1e-3",
        "--num-accelerators",
        "2",
    )
    start = next(r for r in rows_of(run) if r.get("event") == "start")
    # 48 prompts do not fill PPO's default batch of 32 for each of 2 ranks: 24 each, every prompt in a step
    assert start["world_size"] == 2 and start["generation_batch_size"] == 24
    steps = steps_of(run)
    assert sorted(steps) == list(range(1, 13)) and all(k in steps[12] for k in METRICS)
    # it learns the known reward from both ranks' rollouts (the metrics are the mean over ranks)
    scores = [steps[s]["reward/score_mean"] for s in sorted(steps)]
    assert sum(scores[-4:]) / 4 > scores[0] + 0.5, scores
    # what two ranks must agree on: after the last update each rank's actor is the same, bit for bit
    final = next(r for r in rows_of(run) if r.get("event") == "final")
    by_rank = final["actor/sha256_by_rank"]
    assert len(by_rank) == 2 and by_rank[0] == by_rank[1]
    assert sorted(p.name for p in (run / "actor").glob("*.safetensors")) == ["model.safetensors"]
    assert_trained_and_reference_frozen(run, tiny_model_dir)


@pytest.mark.integration
def test_a_killed_run_resumes_and_matches_an_uninterrupted_one(tmp_path, tiny_model_dir, liked_rm, prompts_file):
    from app.jobs.training import prepare_run, resume_run, run_training
    from training.launcher import launch
    from training.ppo.config import PPOConfig
    from training.runs import effective_status, read_metrics

    cfg = PPOConfig(
        actor=str(tiny_model_dir),
        reward=str(liked_rm),
        max_new_tokens=12,
        max_steps=6,
        save_every=2,
        actor_lr=3e-3,
        critic_lr=1e-3,
        top_k=20,
        ppo_epochs=2,
        minibatch_size=4,
    )
    db = str(tmp_path / "s.duckdb")
    whole = prepare_run(db, cfg, tmp_path / "runs", str(prompts_file))
    assert run_training("ppo", whole)["state"] == "finished"

    cut = prepare_run(db, cfg, tmp_path / "runs", str(prompts_file))
    proc = launch("ppo", cut)
    deadline = time.monotonic() + 300
    while not any(r.get("step", 0) >= 3 and "loss/actor" in r for r in read_metrics(cut)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while effective_status(cut)["state"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert effective_status(cut)["state"] == "failed"
    assert resume_run(cut)["state"] == "finished"
    resumed = next(r for r in read_metrics(cut) if r.get("event") == "resumed")
    assert resumed["step"] >= 2
    a, b = steps_of(whole), steps_of(cut)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in range(resumed["step"] + 1, 7):  # the steps run again after the restart
        for key in ("reward/score_mean", "loss/actor", "loss/critic", "policy/approx_kl", "response/length_mean"):
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-3, abs=1e-5), (step, key)


def test_rollout_logprobs_equal_a_fresh_forward(tiny_model_dir):
    """The log-probs read off the decode loop's raw logits are the policy's own (whatever the sampling filters), so
    in fp32 the trainer may skip the actor's scoring forward."""
    from training.kernels.logprobs import response_logprobs
    from training.loaders import load_causal_lm, load_tokenizer
    from training.rollouts.prompt_data import encode_prompts
    from training.rollouts.rollout import rollout

    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(str(tiny_model_dir), "fp32").eval()
    prompts, _ = encode_prompts(tok, ["hello there", "a much longer prompt about the sea and the sky"], 256)
    cfg = SimpleNamespace(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=10, min_new_tokens=10)
    torch.manual_seed(0)
    batch = rollout(model, prompts, tok, cfg, want_logprobs=True)
    with torch.no_grad():
        fresh = response_logprobs(model, batch["ids"], batch["attention_mask"], batch["prompt_len"], batch["held"])
    mask = batch["mask"].bool()
    assert batch["held"] == (tok.eos_token_id, 9)  # min_new_tokens 10: EOS held back at the first 9
    assert torch.allclose(batch["logprobs"][mask], fresh[mask], atol=1e-4)
    assert batch["ids"][0, : batch["prompt_len"]].tolist().count(tok.pad_token_id) > 0  # left padding was there


def test_sampled_kl_is_the_kl_of_the_distribution_sampled_from(tiny_model_dir):
    """With --min-new-tokens the sampler draws from the policy with EOS removed; the KL it reports is between the
    two models' distributions as sampled, for the old log-probs and the reference's alike. A reference that differs
    from the actor only in its EOS logit (+12) has, with EOS held back, exactly the actor's distribution: KL 0 at
    every held position. Read without the mask (the code before), each held token would count
    log(1 - p_eos) - log(1 - q_eos) with q_eos = p_eos e^12 / (1 - p_eos + p_eos e^12), by hand below."""
    from training.kernels.logprobs import response_logprobs
    from training.loaders import load_causal_lm, load_tokenizer
    from training.rollouts.prompt_data import encode_prompts
    from training.rollouts.rollout import rollout, score

    tok = load_tokenizer(tiny_model_dir)
    eos = tok.eos_token_id
    actor = load_causal_lm(str(tiny_model_dir), "fp32").eval()
    ref = load_causal_lm(str(tiny_model_dir), "fp32").eval()
    shift = torch.zeros(actor.config.vocab_size)
    shift[eos] = 12.0
    ref.lm_head.register_forward_hook(lambda mod, inp, out: out + shift)  # the reference: EOS's logit + 12
    seen = {}
    actor.lm_head.register_forward_hook(lambda mod, inp, out: seen.update(logits=out.detach()))
    prompts, _ = encode_prompts(tok, ["hello there", "tell me about the sea", "why is the sky blue"], 256)
    cfg = SimpleNamespace(
        temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8, min_new_tokens=8, missing_eos_penalty=0
    )
    torch.manual_seed(0)
    batch = rollout(actor, prompts, tok, cfg, want_logprobs=True)
    exp = score(batch, actor, ref, None, lambda ids, attn, last: (torch.zeros(len(ids)), None), (0.0, 1.0), cfg)
    kl = exp.logprobs - exp.ref_logprobs  # k1 per token, as the reward and the watch read it
    assert exp.mask[:, :7].all()  # no EOS before the 8th token
    assert kl[:, :7].abs().max() < 1e-5
    # the 8th token may be EOS, so the two models differ there, and the reading is the plain one
    assert kl[:, 7].abs().min() > 0.1
    # what the unmasked reading gives at a held position, from the actor's EOS probability there
    with torch.no_grad():
        plain_actor = response_logprobs(actor, exp.ids, exp.attention_mask, exp.prompt_len)
        plain_ref = response_logprobs(ref, exp.ids, exp.attention_mask, exp.prompt_len)
    p_eos = seen["logits"][:, :-1].softmax(-1)[..., eos][:, :7]  # the actor's, at the held positions
    q_eos = p_eos * math.e**12 / (1 - p_eos + p_eos * math.e**12)
    by_hand = torch.log1p(-p_eos) - torch.log1p(-q_eos)
    assert torch.allclose((plain_actor - plain_ref)[:, :7], by_hand, atol=1e-5)
    assert by_hand.min() > 0.5  # a bias the old reading added to every held token
    assert exp.held == (eos, 7)


def test_move_toward_by_hand():
    from training.ppo.train import move_toward

    target, source = (
        [torch.tensor([1.0, 2.0]), torch.tensor([[0.0]])],
        [torch.tensor([3.0, 2.0]), torch.tensor([[4.0]])],
    )
    move_toward(target, source, 0.75)  # 0.75 * 1 + 0.25 * 3 = 1.5; 2 stays; 0.25 * 4 = 1
    assert target[0].tolist() == [1.5, 2.0] and target[1].tolist() == [[1.0]]
    with pytest.raises(ValueError, match="2 tensors cannot follow 1"):
        move_toward(target, source[:1], 0.5)


@pytest.mark.integration
def test_a_moving_reference_follows_the_actor_and_is_checkpointed(tmp_path, tiny_model_dir, liked_rm, prompts_file):
    """--ref-ema-beta: after every step the reference is beta ref + (1 - beta) actor; it is checkpointed with the
    run (RUN/checkpoints/ref-stepN.pt, which a resume loads)."""
    from safetensors.torch import load_file

    held = tmp_path / "held.txt"
    held.write_text("A held-out question?\nAnother one?\n")  # evaluated checkpoints: saved as plain HF folders
    flags = ["--max-steps", "2", "--actor-lr", "3e-3", "--ref-ema-beta", "0.5", "--save-every", "1"]
    run = ppo(tmp_path, tiny_model_dir, liked_rm, prompts_file, *flags, "--eval-prompts", str(held))
    final = json.loads((run / "status.json").read_text())["final"]
    assert final["reference/sha256_end"] != final["reference/sha256_start"]
    ref = torch.load(run / "checkpoints" / "ref-step1.pt", weights_only=True)
    start = load_file(str(tiny_model_dir / "model.safetensors"))
    after1 = load_file(str(run / "checkpoints" / "actor-step1" / "model.safetensors"))
    # the reference after step 1 is halfway between the start and the actor after step 1, tensor by tensor
    name = "model.layers.0.mlp.down_proj.weight"
    from transformers import AutoModelForCausalLM

    names = [n for n, _ in AutoModelForCausalLM.from_pretrained(tiny_model_dir).named_parameters()]
    moved = ref[names.index(name)]
    assert torch.allclose(moved, 0.5 * start[name] + 0.5 * after1[name], atol=1e-6)
    assert not torch.allclose(moved, start[name])


def test_train_ppo_takes_the_stores_training_prompts(tmp_path, db, tiny_model_dir, liked_rm):
    from app.jobs.training import prepare_run
    from store.db import write
    from store.prompts import add_prompts
    from store.snapshot import split_of
    from training.ppo.config import PPOConfig

    texts = [f"prompt number {i}" for i in range(40)]
    with write(db) as con:
        add_prompts(con, texts, "test")
    run = prepare_run(db, PPOConfig(actor=str(tiny_model_dir), reward=str(liked_rm)), tmp_path / "runs")
    kept = [json.loads(line)["prompt"] for line in (run / "prompts.jsonl").read_text().splitlines()]
    assert kept == [t for t in texts if split_of(t, 0.1, 0) == "train"] and len(kept) < len(texts)
    assert query(db, "SELECT kind, path FROM runs") == [("ppo", str(run.resolve()))]
    assert json.loads((run / "config.json").read_text())["prompts"] == str((run / "prompts.jsonl").resolve())


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--reward", "/nonexistent"], "neither a reward run folder nor"),
        (["--reward", "{rm}", "--prompts", "/nonexistent.txt"], "no such prompts file"),
        (["--reward", "{rm}", "--temperature", "0"], "never decode greedily"),
        (["--reward", "{rm}", "--actor", "/nonexistent"], "is not a folder"),
        (["--reward", "{rm}", "--kl-estimator", "k9"], "kl_estimator must be k1 or k3"),
        ([], "a reward model is required"),
    ],
)
def test_bad_ppo_input_is_one_error_line_and_no_run(cli, db, tmp_path, liked_rm, flags, message):
    flags = [f.replace("{rm}", str(liked_rm)) for f in flags]
    code, _, err = cli("train-ppo", "--runs-dir", str(tmp_path / "runs"), *flags)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.integration
def test_stop_checkpoints_and_resume_finishes(tmp_path, db, tiny_model_dir, liked_rm, prompts_file, cli):
    from app.jobs.training import follow, prepare_run
    from training.launcher import launch
    from training.ppo.config import PPOConfig
    from training.runs import read_metrics, read_status

    cfg = PPOConfig(actor=str(tiny_model_dir), reward=str(liked_rm), max_new_tokens=8, max_steps=30, epochs=10)
    run = prepare_run(db, cfg, tmp_path / "runs", str(prompts_file))
    proc = launch("ppo", run)
    deadline = time.monotonic() + 300
    while not any(r.get("step", 0) >= 2 and "loss/actor" in r for r in read_metrics(run)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    code, out, _ = cli("stop", str(run), "--runs-dir", str(tmp_path / "runs"))  # by its folder
    assert code == 0 and "stop" in out
    status = follow(run, proc, poll_s=0.2)
    assert status["state"] == "stopped" and proc.returncode == 0
    stopped = next(r for r in read_metrics(run) if r.get("event") == "stopped")
    assert status["step"] == stopped["step"] < 30
    assert (run / "checkpoints" / "actor" / "latest").read_text().strip() == f"step{stopped['step']}"
    code, out, err = cli("train-ppo", "--resume", run.name, "--runs-dir", str(tmp_path / "runs"))  # by its id
    assert code == 0, err
    assert read_status(run)["state"] == "finished"
    resumed = next(r for r in read_metrics(run) if r.get("event") == "resumed")
    assert resumed["step"] == stopped["step"]
    assert sorted(steps_of(run)) == list(range(1, 31))


@pytest.mark.integration
def test_the_options_beyond_deepspeed_chat_run_together(tmp_path, tiny_model_dir, liked_rm, prompts_file):
    """EMA actor, LoRA on actor and critic, adaptive KL with the k3 estimator, whitened advantages, reward
    normalisation with the RM's statistics, the missing-EOS penalty, gradient checkpointing and TensorBoard."""
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForCausalLM

    rm = tmp_path / "rm"
    shutil.copytree(liked_rm, rm)
    (rm / "reward_stats.json").write_text(json.dumps({"score_mean": 0.5, "score_std": 2.0}))
    flags = ["--max-steps", "2", "--ema-beta", "0.9", "--actor-lora-rank", "4", "--critic-lora-rank", "4"]
    flags += ["--adaptive-kl", "--kl-target", "0.01", "--kl-horizon", "10", "--kl-estimator", "k3"]
    flags += ["--whiten-advantages", "--normalize-reward", "--missing-eos-penalty", "1.0"]
    flags += ["--gradient-checkpointing", "--tensorboard", "--actor-lr", "1e-2"]
    run = ppo(tmp_path, tiny_model_dir, rm, prompts_file, *flags)
    steps = steps_of(run)
    assert steps[1]["policy/kl_ctl"] == 0.05 and steps[2]["policy/kl_ctl"] != 0.05  # the controller moved it
    for folder in ("actor", "actor_ema"):
        model = AutoModelForCausalLM.from_pretrained(run / folder)
        assert not any("lora" in k for k in model.state_dict())  # adapters merged: a plain HF model
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("reward/score_mean")] == [1, 2]
