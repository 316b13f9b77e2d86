"""PPO's critic: the reward model's backbone and scalar head, without any LM head, reading a value at every
response position. The other three models load and read through the shared modules: training/loaders.py,
training/kernels/logprobs.py (actor, reference) and training/judges.py (reward)."""

from __future__ import annotations

import torch

from training.judges import backbone, unwrap
from training.kernels.logprobs import position_ids


class Critic(torch.nn.Module):
    """Per-token values from a reward model's backbone and scalar head (DeepSpeed-Chat starts the critic as an
    exact copy of the RM). Holds the HF model, so it saves as one."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, prompt_len: int) -> torch.Tensor:
        """(B, T) values at the positions that emit the response tokens (P-1 .. P+T-2), the same positions as the
        actor's log-probs."""
        hidden = backbone(self.model)(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
        ).last_hidden_state
        return unwrap(self.model).score(hidden[:, prompt_len - 1 : -1]).squeeze(-1).float()
