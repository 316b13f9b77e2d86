"""The PPO math on hand-computed tables, and against plain loops written the way DeepSpeed-Chat writes them, on
random inputs with padding."""

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from training.ppo.losses import critic_loss_fn, get_advantages_and_returns
from training.rollouts.policy_losses import (
    actor_loss_fn,
    adaptive_kl_update,
    approx_kl,
    clip_fraction,
    compute_rewards,
    kl_estimate,
    masked_whiten,
    zero_after_end,
)

T = torch.tensor


@pytest.mark.parametrize(
    "score, mask, expected",
    [
        # kl part: -0.1 * ([.5,.2,.3,.1] - [.4,.5,.1,.1]) = [-.01, .03, -.02, 0]
        # mask[1:] sums to 2 -> ends = 1 + 2 + 1 = 4 -> score clip(7) = 5 lands at index 3
        (7.0, [1, 1, 1, 0], [-0.01, 0.03, -0.02, 5.0]),
        # mask[1:] sums to 1 -> ends = 3 -> -2 lands at index 2: -0.02 - 2 = -2.02
        (-2.0, [1, 1, 0, 0], [-0.01, 0.03, -2.02, 0.0]),
        # clipped from below: -9 -> -5 at index 3
        (-9.0, [0, 1, 1, 0], [-0.01, 0.03, -0.02, -5.0]),
        # the mask fills the last position (a response cut at the limit, DeepSpeed-Chat's mask): mask[1:] sums to 3
        # -> ends = 1 + 3 + 1 = 5 > L = 4; DeepSpeed-Chat's rewards[start:5][-1] is index 3: 0 + 2 = 2
        (2.0, [1, 1, 1, 1], [-0.01, 0.03, -0.02, 2.0]),
    ],
)
def test_compute_rewards_by_hand(score, mask, expected):
    out = compute_rewards(T([[0.5, 0.2, 0.3, 0.1]]), T([[0.4, 0.5, 0.1, 0.1]]), T([score]), T([mask]), 1, 0.1)
    assert out[0].tolist() == pytest.approx(expected, abs=1e-6)


def test_k3_estimator_by_hand():
    # d = 0.1: exp(-0.1) - 1 + 0.1 = 0.0048374; d = -0.3: exp(0.3) - 1 - 0.3 = 0.0498588 (never negative)
    assert kl_estimate(T([0.1, -0.3]), T([0.0, 0.0]), "k3").tolist() == pytest.approx([0.0048374, 0.0498588], 1e-4)
    out = compute_rewards(T([[0.1, 0.0]]), T([[0.0, 0.0]]), T([1.0]), T([[1, 0]]), 0, 0.1, kl_estimator="k3")
    assert out[0].tolist() == pytest.approx([-0.1 * 0.0048374, 1.0], abs=1e-6)  # ends = 0 + 1 + 1 = 2 -> index 1


@pytest.mark.parametrize(
    "start, gamma, lam, advantages, returns",
    [
        # t=2: d = 2 - 3 = -1, A = -1; t=1: d = 1 + 3 - 2 = 2, A = 2 + .5 * -1 = 1.5; t=0: d = 0 + 2 - 1 = 1,
        # A = 1 + .5 * 1.5 = 1.75; returns = A + V = [2.75, 3.5, 2]
        (0, 1.0, 0.5, [1.75, 1.5, -1.0], [2.75, 3.5, 2.0]),
        (1, 1.0, 0.5, [1.5, -1.0], [3.5, 2.0]),
        # gamma .9, lam 1: t=2: A = -1; t=1: d = 1 + 2.7 - 2 = 1.7, A = 1.7 - .9 = .8; t=0: d = 1.8 - 1 = .8,
        # A = .8 + .9 * .8 = 1.52
        (0, 0.9, 1.0, [1.52, 0.8, -1.0], [2.52, 2.8, 2.0]),
    ],
)
def test_gae_by_hand(start, gamma, lam, advantages, returns):
    values, rewards = T([[1.0, 2.0, 3.0]]), T([[0.0, 1.0, 2.0]])
    a, r = get_advantages_and_returns(values, rewards, start, gamma, lam)
    assert a[0].tolist() == pytest.approx(advantages)
    assert r[0].tolist() == pytest.approx(returns)


def test_advantages_are_detached_and_returns_carry_the_value_gradient():
    values = T([[1.0, 2.0]], requires_grad=True)
    a, r = get_advantages_and_returns(values, T([[0.0, 1.0]]), 0)
    assert not a.requires_grad and r.requires_grad


@pytest.mark.parametrize(
    "log_ratio, advantages, mask, expected",
    [
        # ratio 1.5, A=1: max(-1.5, -1.2) = -1.2; ratio .5, A=1: max(-.5, -.8) = -.5; ratio 1, A=-2: 2
        ([math.log(1.5), math.log(0.5), 0.0], [1.0, 1.0, -2.0], [1, 1, 1], (-1.2 - 0.5 + 2) / 3),
        ([math.log(1.5), math.log(0.5), 0.0], [1.0, 1.0, -2.0], [1, 1, 0], (-1.2 - 0.5) / 2),
        # A=-1, ratio 1.5: max(1.5, 1.2) = 1.5 (no reward for moving the wrong way); masked position ignored
        ([math.log(1.5), 5.0], [-1.0, 3.0], [1, 0], 1.5),
    ],
)
def test_actor_loss_by_hand(log_ratio, advantages, mask, expected):
    old = T([[0.1] * len(mask)])
    loss = actor_loss_fn(old + T([log_ratio]), old, T([advantages]), T([mask], dtype=torch.float32))
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_critic_loss_by_hand():
    # pos 0: (1 - 0)^2 = 1 vs (clamp(1, 1.3, 1.7) - 0)^2 = 1.69 -> 1.69
    # pos 1: (2 - 2.5)^2 = .25 vs (1.7 - 2.5)^2 = .64 -> .64; 0.5 * (1.69 + .64) / 2 = .5825
    loss = critic_loss_fn(T([[1.0, 2.0]]), T([[1.5, 1.5]]), T([[0.0, 2.5]]), T([[1.0, 1.0]]))
    assert loss.item() == pytest.approx(0.5825)
    # inside the clip range the plain squared error wins: 0.5 * (1.6 - 1.0)^2 = 0.18
    assert critic_loss_fn(T([[1.6]]), T([[1.5]]), T([[1.0]]), T([[1.0]])).item() == pytest.approx(0.18)


def test_small_helpers_by_hand():
    # whiten [1, 2, 3] (100 masked): mean 2, unbiased var (1 + 0 + 1) / 2 = 1
    assert masked_whiten(T([1.0, 2.0, 3.0, 100.0]), T([1, 1, 1, 0])).tolist()[:3] == pytest.approx([-1, 0, 1], 1e-4)
    # log ratio ln 2: (2 - 1) - ln 2 = 0.30685
    assert approx_kl(T([math.log(2.0)]), T([0.0]), T([1.0])).item() == pytest.approx(0.30685, 1e-4)
    assert clip_fraction(T([0.3, 0.1, 0.0]), T([0.0, 0.0, 0.0]), T([1.0, 1.0, 1.0]), 0.2).item() == pytest.approx(1 / 3)
    # e = clip(12 / 6 - 1, -.2, .2) = .2 -> .1 * (1 + .2 * 100 / 1000) = .102; e = 5.4 / 6 - 1 = -.1 -> .099
    assert adaptive_kl_update(0.1, 12.0, 6.0, 100, 1000) == pytest.approx(0.102)
    assert adaptive_kl_update(0.1, 5.4, 6.0, 100, 1000) == pytest.approx(0.099)
    # ends = 0 + 2 + 1 = 3: positions 3.. are zeroed
    assert zero_after_end(T([[1.0, 2.0, 3.0, 4.0]]), T([[1, 1, 0, 0]]), 0).tolist() == [[1.0, 2.0, 3.0, 0.0]]


# --- plain-loop references, written as DeepSpeed-Chat writes them ---------------------------------------------


def loop_rewards(log_probs, ref_log_probs, score, action_mask, start, kl_ctl, clip):
    rewards = -kl_ctl * (log_probs - ref_log_probs)
    ends = start + action_mask[:, start:].sum(1) + 1
    for j in range(log_probs.shape[0]):
        rewards[j, start : ends[j]][-1] += torch.clamp(score[j], -clip, clip)
    return rewards


def closed_form_gae(values, rewards, start, gamma, lam):
    """GAE written out per position, not as the backward recursion the code uses:
    A_t = sum_{u >= t} (gamma * lam)^(u - t) * delta_u, delta_u = r_u + gamma * V_{u+1} - V_u, V_L = 0."""
    L = rewards.shape[1]
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], 1)
    deltas = rewards + gamma * next_values - values
    adv = torch.stack([sum((gamma * lam) ** (u - t) * deltas[:, u] for u in range(t, L)) for t in range(start, L)], 1)
    return adv, adv + values[:, start:]


def loop_actor(logprobs, old, adv, mask, c):
    total, n = 0.0, 0.0
    for i in range(logprobs.shape[0]):
        for t in range(logprobs.shape[1]):
            if mask[i, t]:
                r, a = math.exp(logprobs[i, t].item() - old[i, t].item()), adv[i, t].item()
                total += max(-a * r, -a * min(max(r, 1 - c), 1 + c))
                n += 1
    return total / n


def loop_critic(values, old, returns, mask, c):
    total, n = 0.0, 0.0
    for i in range(values.shape[0]):
        for t in range(values.shape[1]):
            if mask[i, t]:
                v, vo, r = values[i, t].item(), old[i, t].item(), returns[i, t].item()
                total += max((v - r) ** 2, (min(max(v, vo - c), vo + c) - r) ** 2)
                n += 1
    return 0.5 * total / n


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_functions_match_plain_loops_with_padding(seed):
    g = torch.Generator().manual_seed(seed)
    B, L, start = 6, 12, 4
    # response tokens before the padding, up to the whole length (the mask then fills the last position)
    lengths = torch.randint(1, L - start + 1, (B,), generator=g)
    mask = torch.zeros(B, L, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, : start + n] = 1
    lp, ref = torch.randn(B, L, generator=g), torch.randn(B, L, generator=g)
    score, values = 4 * torch.randn(B, generator=g), torch.randn(B, L, generator=g)

    rewards = compute_rewards(lp, ref, score, mask, start, 0.05, 2.0)
    assert torch.allclose(rewards, loop_rewards(lp, ref, score, mask, start, 0.05, 2.0), atol=1e-6)

    rewards, values = zero_after_end(rewards, mask, start), zero_after_end(values, mask, start)
    a, r = get_advantages_and_returns(values, rewards, start, 0.99, 0.9)
    a2, r2 = closed_form_gae(values, rewards, start, 0.99, 0.9)
    assert torch.allclose(a, a2, atol=1e-5) and torch.allclose(r, r2, atol=1e-5)

    m = mask[:, start:].float()
    new, old = lp[:, start:] + 0.3 * torch.randn(B, L - start, generator=g), lp[:, start:]
    assert actor_loss_fn(new, old, a, m).item() == pytest.approx(loop_actor(new, old, a, m, 0.2), abs=1e-5)
    v = r + 0.5 * torch.randn(B, L - start, generator=g)
    assert critic_loss_fn(v, values[:, start:], r, m).item() == pytest.approx(
        loop_critic(v, values[:, start:], r, m, 0.2), abs=1e-5
    )


def test_the_score_lands_on_the_token_that_emits_eos():
    """The trainer's masks: EOS stays in the loss mask, and the score sits on EOS's position (or on the last token
    of a response cut at the length limit)."""
    from training.ppo.experience import add_advantages
    from training.rollouts.rollout import Experience, response_mask

    eos, pad = 2, 0
    response = T([[5, 6, 2, 0], [5, 2, 0, 0], [5, 6, 7, 8]])
    mask, lengths, ended = response_mask(response, eos)
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert lengths.tolist() == [3, 2, 4] and ended.tolist() == [True, True, False]
    zeros = torch.zeros(3, 4)
    exp = Experience(
        prompt_len=1,
        ids=torch.cat([torch.full((3, 1), 9), response.masked_fill(mask == 0, pad)], 1),
        attention_mask=torch.cat([torch.ones(3, 1, dtype=torch.long), mask], 1),
        mask=mask,
        lengths=lengths,
        ended=ended,
        logprobs=zeros,
        ref_logprobs=zeros,
        values=zeros.clone(),
        raw_scores=T([1.0, 2.0, 3.0]),
        scores=T([1.0, 2.0, 3.0]),
    )
    cfg = SimpleNamespace(clip_reward_value=5.0, kl_estimator="k1", gamma=1.0, lam=1.0, whiten_advantages=False)
    add_advantages(exp, 0.1, cfg)
    assert exp.rewards.tolist() == [[0, 0, 1, 0], [0, 2, 0, 0], [0, 0, 0, 3]]
    assert exp.advantages.tolist() == [[1, 1, 1, 0], [2, 2, 0, 0], [3, 3, 3, 3]]  # gamma = lam = 1, V = 0


@pytest.mark.integration
def test_the_math_module_imports_only_torch():
    code = (
        "import sys, training.ppo.losses, training.rollouts.policy_losses\n"
        "print(sorted(m for m in ('deepspeed', 'gradio', 'duckdb', 'transformers') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_decode_sampling_draws_from_the_filtered_distribution():
    from training.sampling.decode import draw, filter_logits

    # top-k 2 of [3, 1, 2, 0] keeps tokens 0 and 2; top-p .5 of softmax([2, 1, 0]) = [.665, .245, .09] keeps token 0
    assert torch.isinf(filter_logits(T([[3.0, 1.0, 2.0, 0.0]]), 1.0, 2, 1.0)).tolist() == [[False, True, False, True]]
    assert torch.isinf(filter_logits(T([[2.0, 1.0, 0.0]]), 1.0, 0, 0.5)).tolist() == [[False, True, True]]
    # top-p .8 needs tokens 0 and 1 (.665 < .8 <= .91); temperature 2 halves the logits first
    assert torch.isinf(filter_logits(T([[2.0, 1.0, 0.0]]), 1.0, 0, 0.8)).tolist() == [[False, False, True]]
    assert filter_logits(T([[2.0, 1.0]]), 2.0, 0, 1.0).tolist() == [[1.0, 0.5]]
    torch.manual_seed(0)
    probs = T([[0.5, 0.0, 0.3, 0.2]]).repeat(20000, 1)
    counts = torch.bincount(draw(probs), minlength=4) / 20000
    assert counts[1] == 0 and counts.tolist() == pytest.approx([0.5, 0.0, 0.3, 0.2], abs=0.015)
