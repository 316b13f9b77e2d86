"""How much of PPO's sampled KL is bf16 rounding: `python -m bench.kl_rounding [--responses N] [--scale S]`.

The reference is the default model in bf16; the actor is the same model after a random weight change of S times
each matrix's spread (0.001: far smaller than what 20 PPO steps do). The actor samples N responses of 64 tokens to
64-token prompts through the rollout's decode (training/sampling/decode.py::sample), once with the prompt's pass in
SDPA (the decode as it is) and once in the trainers' kernel; `--engine vllm` adds a third set drawn by vLLM as
PPO's rollouts draw them (the sampler/trainer mismatch). Each set is scored as PPO scores it (both models in bf16
with the trainers' kernel) and in fp32 (the change's KL without rounding). Prints the mean sampled KL (k1, summed
over a response) with its standard error. Not part of `make bench`: it measures numerics, not speed."""

from __future__ import annotations

import argparse
import contextlib
import statistics
from types import SimpleNamespace

import torch


def load(folder, dtype: str, state=None):
    """The model as PPO loads it (training/loaders.py, the trainers' kernel), with `state`'s weights if given."""
    from training.loaders import DTYPES, load_causal_lm
    from training.models import training_attention

    model = load_causal_lm(str(folder), dtype, training_attention()).eval()
    if state is not None:
        model.load_state_dict({k: v.to(DTYPES[dtype]) for k, v in state.items()})
    return model


def changed(state: dict, scale: float) -> dict:
    """Every matrix moved by scale x its standard deviation x N(0, 1), rounded back to bf16."""
    g = torch.Generator().manual_seed(1)
    out = {}
    for k, v in state.items():
        if v.is_floating_point() and v.dim() == 2:
            v = (v.float() + scale * v.float().std() * torch.randn(v.shape, generator=g)).to(v.dtype)
        out[k] = v
    return out


def responses(actor, tok, prompts: list[str], prompt_pass_sdpa: bool) -> list[torch.Tensor]:
    from training.models import chat_prompt
    from training.sampling import decode

    cfg = SimpleNamespace(max_new_tokens=64, min_new_tokens=64, temperature=1.0, top_k=0, top_p=1.0)
    kernel = decode.prompt_pass_kernel
    if not prompt_pass_sdpa:
        decode.prompt_pass_kernel = lambda model: contextlib.nullcontext()
    try:
        out = []
        with torch.no_grad():
            for i in range(0, len(prompts), 8):
                texts = [chat_prompt(tok, p) for p in prompts[i : i + 8]]
                enc = tok(texts, add_special_tokens=False, return_tensors="pt", padding=True)
                resp, _ = decode.sample(actor, enc["input_ids"], enc["attention_mask"], cfg, tok.eos_token_id, 0)
                out.append(torch.cat([enc["input_ids"], resp], 1))
        return out
    finally:
        decode.prompt_pass_kernel = kernel


def engine_responses(folder, actor, tok, prompts: list[str]) -> list[torch.Tensor]:
    """The same responses drawn by vLLM as PPO's rollouts draw them (training/sampling/rollout_engine.py): an engine
    over the reference's folder in bf16, given the actor's weights in place, 64 tokens sampled at temperature 1."""
    from training.models import chat_prompt
    from training.sampling.rollout_engine import actor_weights
    from training.sampling.vllm_engine import Settings, VllmEngine

    engine = VllmEngine(folder, "bf16", [tok.eos_token_id], 2 * 64 + 8, seed=0, only_eos=True)
    try:
        engine.load_weights(actor_weights(actor))
        ids = [tok(chat_prompt(tok, p), add_special_tokens=False)["input_ids"] for p in prompts]
        outs = engine.sample(ids, 1, Settings(1.0, 1.0, 0, 64, 64), seed=0)
    finally:
        engine.close()
    rows = [torch.tensor(i + o[0].token_ids) for i, o in zip(ids, outs, strict=True)]
    return [torch.stack(rows[i : i + 8]) for i in range(0, len(rows), 8)]


def sampled_kl(actor, ref, batches: list[torch.Tensor], prompt_len: int) -> tuple[float, float]:
    """Mean and standard error over responses of sum_t log p_actor - log p_ref (PPO's reward/kl)."""
    from training.kernels.logprobs import response_logprobs

    kl = []
    with torch.no_grad():
        for ids in batches:
            mask = torch.ones_like(ids)
            diff = response_logprobs(actor, ids, mask, prompt_len) - response_logprobs(ref, ids, mask, prompt_len)
            kl += diff.float().sum(1).tolist()
    return statistics.mean(kl), statistics.stdev(kl) / len(kl) ** 0.5


def main() -> None:
    from transformers import AutoTokenizer

    from bench.ppo import PROMPT_TOKENS, fixed_length_prompts
    from training.models import resolve_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=64)
    parser.add_argument("--scale", type=float, default=0.001)
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf", help="vllm: a third set, sampled by vLLM")
    args = parser.parse_args()
    torch.manual_seed(0)
    folder = resolve_model("default")
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = fixed_length_prompts(tok, args.responses)
    ref = load(folder, "bf16")
    state, actor_state = ref.state_dict(), changed(ref.state_dict(), args.scale)
    actor = load(folder, "bf16", actor_state)
    sets = {f"prompt pass {k}": responses(actor, tok, prompts, k == "SDPA") for k in ("SDPA", "trainers' kernel")}
    if args.engine == "vllm":
        sets["sampled by vLLM"] = engine_responses(folder, actor, tok, prompts)
    fp32 = (load(folder, "fp32", actor_state), load(folder, "fp32", state))
    scorers = {"bf16": (actor, ref), "fp32": fp32}
    for label, batches in sets.items():
        for name, (a, r) in scorers.items():
            mean, se = sampled_kl(a, r, batches, PROMPT_TOKENS)
            print(f"{label:>28}, scored in {name}: KL {mean:+.4f} +- {se:.4f} nats a response")


if __name__ == "__main__":
    main()
