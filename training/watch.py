"""The over-optimisation watch: small pure functions over one PPO step's numbers (no models, no I/O).

PPO optimises a reward model, not the people who ranked. Gao, Schulman and Hilton (2022) showed the true reward
rising and then falling as KL grows; the HH paper saw the policy's score under its own preference model and under
one trained on the other half of the data part ways; Singhal et al. (2023) found that length alone explains most of
what RLHF gains on several datasets. So, every step:

- an ensemble's members are split into the ones PPO optimises (combined by a rule, Coste et al. 2023) and held-out
  judges it never sees the gradient of (`split_members`, `combine`);
- the correlation between response length and the optimised score within the batch (`pearson`);
- an alarm (`Watch`) that decides on evidence: at each checkpoint evaluation (the same held-out prompts and
  sampling seed every time, training/rollouts/checkpoints.py) it compares the held-out judge's per-prompt scores with
  those of the best evaluation so far, paired by prompt, and fires when the fall is beyond noise while the
  optimised score rose (`fell`); or when KL passes a budget. The per-step scores of 8 rollout replies are too few
  to tell a fall from noise (the demo's earlier step-wise alarm fired at step 7 on a run whose judge rose at every
  checkpoint): they stay as plots.

The rule's false-alarm rate: every evaluation is tested at level alpha / (E (E - 1) / 2) for a run with E planned
evaluations (Bonferroni over every pair of evaluations, so the choice of the best one as the baseline is paid
for), with Student's t for the paired mean. tests/test_watch.py simulates 3000 runs whose judge does not move for
each of four shapes (3-12 evaluations of 8-32 prompts) and fails on a rate significantly above alpha = 0.05.

Best-of-N's KL from the reference is the analytic log N - (N - 1) / N (an upper bound, Beirami et al. 2024).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field

import torch

RULES = ("first", "mean", "min", "mean-minus-std")


def split_members(n_members: int, heldout: int) -> tuple[list[int], list[int]]:
    """(optimised, held-out) member indices: the last `heldout` members judge, the others are optimised."""
    if n_members < 1:
        raise ValueError("an ensemble has at least one member")
    if not 0 <= heldout < n_members:
        raise ValueError(f"{heldout} held-out judges leave no member to optimise among {n_members}")
    return list(range(n_members - heldout)), list(range(n_members - heldout, n_members))


def combine(scores: torch.Tensor, rule: str, coef: float = 1.0) -> torch.Tensor:
    """One score per response from the optimised members' scores (M, B) -> (B,).

    first: member 0 alone; mean: the members' mean; min: the worst member (Coste et al.'s worst-case optimisation);
    mean-minus-std: mean - coef * (population) standard deviation across members (their uncertainty-weighted
    optimisation, with the spread in the score's own units)."""
    if scores.dim() != 2 or scores.shape[0] < 1:
        raise ValueError(f"scores must be (members, batch), got {tuple(scores.shape)}")
    if rule == "first":
        return scores[0]
    if rule == "mean":
        return scores.mean(0)
    if rule == "min":
        return scores.min(0).values
    if rule == "mean-minus-std":
        return scores.mean(0) - coef * scores.std(0, unbiased=False)
    raise ValueError(f"unknown reward combination {rule!r}: one of {', '.join(RULES)}")


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of two (B,) vectors; 0.0 when either is constant (no linear relation to report)."""
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denom = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    return float((x * y).sum()) / denom if denom > 0 else 0.0


def best_index(scores: list[float]) -> int:
    """The first highest-scoring sample's index."""
    if not scores:
        raise ValueError("no samples to pick from")
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def best_of_n_kl(n: int) -> float:
    """KL(best-of-n || reference) <= log n - (n - 1) / n nats (0 for n = 1)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return math.log(n) - (n - 1) / n


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for aa in (
            m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_tail(t: float, df: int) -> float:
    """P(T > t) for Student's t with df degrees of freedom, t >= 0."""
    return 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t))


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile for p >= 0.5, by bisection on `t_tail` (2.228 for p = 0.975 and 10 degrees of
    freedom, as the tables). Cached: a run asks for the same few (level, prompts) at every evaluation."""
    lo, hi = 0.0, 1.0
    while t_tail(hi, df) > 1 - p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_tail(mid, df) > 1 - p else (lo, mid)
    return (lo + hi) / 2


def pair_level(alpha: float, evaluations: int) -> float:
    """The one-sided level of each comparison in a run with this many planned evaluations: alpha over the number
    of pairs of evaluations (at least one)."""
    return alpha / max(1, evaluations * (evaluations - 1) // 2)


def fell(peak: list[float], now: list[float], level: float, tolerance: float = 0.0) -> tuple[bool, float, float]:
    """(fell, mean difference, its upper bound): now - peak per prompt (the same prompts, in order); the fall is
    beyond noise when the one-sided (1 - level) upper bound of the mean difference is below -tolerance."""
    if len(peak) != len(now) or len(now) < 2:
        raise ValueError(f"need the same two or more prompts at both evaluations, got {len(peak)} and {len(now)}")
    d = [b - a for a, b in zip(peak, now, strict=True)]
    mean = statistics.fmean(d)
    upper = mean + t_quantile(1 - level, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return upper < -tolerance, mean, upper


@dataclass
class Watch:
    """The alarm's state across a run. Every step: KL over `kl_budget` (when set) fires it, and the step's optimised
    and held-out scores are smoothed (exponential moving average, weight `alpha_ema` on the new value) into
    `history`, for plots only. Every checkpoint evaluation (`evaluated`): the held-out judge's per-prompt scores
    are tested against the best evaluation so far (`fell`, at `pair_level(alpha, evaluations)`); the alarm fires
    when they fell beyond noise (by more than `tolerance` score units) while the optimised score's mean is above
    where it was at that best: the actor keeps earning reward the held-out judge no longer agrees with. Once fired
    it stays fired (`reason` says why and at which step)."""

    alpha: float = 0.05
    evaluations: int = 2
    tolerance: float = 0.0
    kl_budget: float | None = None
    alpha_ema: float = 0.3
    optimised: float | None = None
    heldout: float | None = None
    reason: str | None = None
    history: list[tuple[int, float, float]] = field(default_factory=list)
    best: tuple[int, list[float], float] | None = None  # (step, held-out scores, optimised mean) of the best so far

    def update(self, step: int, optimised: float, heldout: float | None, kl: float) -> str | None:
        """Feed one step; returns the alarm's reason the step it fires (the KL budget), else None."""
        if heldout is not None:
            a = self.alpha_ema
            self.optimised = optimised if self.optimised is None else a * optimised + (1 - a) * self.optimised
            self.heldout = heldout if self.heldout is None else a * heldout + (1 - a) * self.heldout
            self.history.append((step, self.optimised, self.heldout))
        if self.reason is None and self.kl_budget is not None and kl > self.kl_budget:
            self.reason = f"KL {kl:.2f} nats passed the budget of {self.kl_budget:g} at step {step}"
            return self.reason
        return None

    def evaluated(self, step: int, optimised: list[float], heldout: list[float]) -> str | None:
        """Feed one checkpoint evaluation (per-prompt scores on the held-out prompts); the alarm's reason if it
        fires now, else None."""
        score, judged = statistics.fmean(optimised), statistics.fmean(heldout)
        if self.best is None or judged > statistics.fmean(self.best[1]):
            self.best = (step, list(heldout), score)
            return None
        if self.reason is not None:
            return None
        best_step, best_scores, score_at_best = self.best
        down, mean, upper = fell(best_scores, heldout, pair_level(self.alpha, self.evaluations), self.tolerance)
        if down and score > score_at_best:
            self.reason = (
                f"the held-out judge's score fell from {statistics.fmean(best_scores):.3f} (step {best_step}) to "
                f"{judged:.3f} (step {step}; {mean:+.3f}, upper bound {upper:+.3f} over {len(heldout)} prompts) "
                f"while the optimised score rose from {score_at_best:.3f} to {score:.3f}"
            )
            return self.reason
        return None
