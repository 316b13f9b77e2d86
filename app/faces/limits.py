"""The server's caps on every size a user of the app controls (`rlhf ui --max-...`), checked on the server before
any work starts: a browser's form limits are a hint, an API caller sends what it likes.

Without them one annotator could ask Compare for a million new tokens (the decode sizes its KV cache for prompt +
new tokens before the first one: about 46 GB in fp32 for SmolLM2-135M), a best-of-N multiplies that, and so on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from store.errors import UserError


@dataclass(frozen=True)
class ServeLimits:
    max_new_tokens: int = field(default=512, metadata={"help": "longest reply the Compare chat samples, in tokens"})
    max_message_chars: int = field(default=4000, metadata={"help": "longest Compare message, in characters"})
    max_best_of: int = field(default=16, metadata={"help": "largest best-of-N in Compare"})
    max_k: int = field(default=16, metadata={"help": "most responses per prompt the Data and Train tabs sample"})
    max_sample_tokens: int = field(default=1024, metadata={"help": "longest response the app's sampling asks for"})
    # each page that opens queues about six events (its tabs' loads): 64 refused a team of 100 opening at once
    max_queue: int = field(
        default=1000, metadata={"help": "requests waiting in the app's queue before it refuses more"}
    )
    max_chat_models: int = field(default=3, metadata={"help": "models the Compare tab keeps loaded (least recent go)"})
    max_upload_mb_per_hour: float = field(
        default=2000.0, metadata={"help": "MB of uploads a login may send in an hour (annotators: none)"}
    )
    max_request_kb: int = field(
        default=1024, metadata={"help": "largest request body the app reads, in KB (uploads have their own limit)"}
    )
    max_undos_per_hour: int = field(default=60, metadata={"help": "Undo clicks a login may make in an hour"})
    cache_hours: float = field(
        default=24.0, metadata={"help": "hours the app keeps an upload or a download's copy before deleting it"}
    )

    def cache_schedule(self) -> tuple[int, int]:
        """Gradio's delete_cache: (every how many seconds it looks, the age in seconds past which a file goes). It
        looks every hour, or twice per age when that is shorter."""
        if not math.isfinite(self.cache_hours) or self.cache_hours <= 0:
            raise UserError(f"--cache-hours must be a number of hours above 0, got {self.cache_hours}")
        age = max(1, round(self.cache_hours * 3600))
        return max(1, min(3600, age // 2)), age

    def check_chat(self, message: str, max_new_tokens: int, best_of: int) -> None:
        """A Compare request: one line naming the cap it is over, else nothing."""
        if len(message) > self.max_message_chars:
            raise UserError(
                f"the message is {len(message):,} characters; this server takes at most {self.max_message_chars:,}"
            )
        _within("max new tokens", max_new_tokens, 1, self.max_new_tokens)
        _within("best-of-N", best_of, 1, self.max_best_of)

    def check_sampling(self, k: int, max_new_tokens: int | None = None) -> None:
        """What the Data tab's Sample and the Train tab's next round ask for."""
        _within("responses per prompt (K)", k, 1, self.max_k)
        if max_new_tokens is not None:
            _within("max new tokens", max_new_tokens, 1, self.max_sample_tokens)


def _within(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise UserError(f"{what} must be from {low} to {high} on this server, got {value}")
