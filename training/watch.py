"""The over-optimisation watch: small pure functions over one PPO step's numbers (no models, no I/O).

PPO optimises a reward model, not the people who ranked. Gao, Schulman and Hilton (2022) showed the true reward
rising and then falling as KL grows; the HH paper saw the policy's score under its own preference model and under
one trained on the other half of the data part ways; Singhal et al. (2023) found that length alone explains most of
what RLHF gains on several datasets. So, every step:

- an ensemble's members are split into the ones PPO optimises (combined by a rule, Coste et al. 2023) and held-out
  judges it never sees the gradient of (`split_members`, `combine`);
- the correlation between response length and the optimised score within the batch (`pearson`);
- an alarm (`Watch`) when the held-out judge's score has fallen for `patience` steps while the optimised score
  rose, or when KL passes a budget.

Best-of-N's KL from the reference is the analytic log N - (N - 1) / N (an upper bound, Beirami et al. 2024).
"""

from __future__ import annotations

import math
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


def best_of_n_kl(n: int) -> float:
    """KL(best-of-n || reference) <= log n - (n - 1) / n nats (0 for n = 1)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return math.log(n) - (n - 1) / n


@dataclass
class Watch:
    """The alarm's state across steps. Each step's optimised and held-out scores are smoothed (exponential moving
    average, weight `alpha` on the new value; alpha = 1 keeps the raw values). The held-out judge's peak is
    remembered with the optimised score at that step; the alarm fires when `patience` steps have passed since
    the peak, the held-out score is still below it by more than `tolerance`, and the optimised score is above
    where it was at the peak: the actor keeps earning reward the held-out judge no longer agrees with. KL over
    `kl_budget` (when set) fires it too. Once fired it stays fired (`reason` says why and at which step)."""

    patience: int = 5
    alpha: float = 0.3
    tolerance: float = 0.0
    kl_budget: float | None = None
    optimised: float | None = None
    heldout: float | None = None
    peak: float = -math.inf
    optimised_at_peak: float = -math.inf
    peak_step: int = 0
    reason: str | None = None
    history: list[tuple[int, float, float]] = field(default_factory=list)

    def update(self, step: int, optimised: float, heldout: float | None, kl: float) -> str | None:
        """Feed one step; returns the alarm's reason the step it fires, else None."""
        if self.reason is not None:
            return None
        if self.kl_budget is not None and kl > self.kl_budget:
            self.reason = f"KL {kl:.2f} nats passed the budget of {self.kl_budget:g} at step {step}"
            return self.reason
        if heldout is None:  # no held-out judge: only the KL budget can fire
            return None
        a = self.alpha
        self.optimised = optimised if self.optimised is None else a * optimised + (1 - a) * self.optimised
        self.heldout = heldout if self.heldout is None else a * heldout + (1 - a) * self.heldout
        self.history.append((step, self.optimised, self.heldout))
        if self.heldout > self.peak:
            self.peak, self.optimised_at_peak, self.peak_step = self.heldout, self.optimised, step
            return None
        falling = step - self.peak_step >= self.patience and self.heldout < self.peak - self.tolerance
        if falling and self.optimised > self.optimised_at_peak:
            self.reason = (
                f"the held-out judge's score fell from {self.peak:.3f} (step {self.peak_step}) to "
                f"{self.heldout:.3f} while the optimised score rose from {self.optimised_at_peak:.3f} to "
                f"{self.optimised:.3f} (step {step})"
            )
            return self.reason
        return None
