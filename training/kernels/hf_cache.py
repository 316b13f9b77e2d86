"""The KV cache's name in transformers' forward: `cache` from 5.20, `past_key_values` before (5.20 keeps the old
name, deprecated, until 5.40). vLLM 0.32, the sampling engine, takes transformers < 5.20; the trainers' own decode
and prefix sharing pass and read the cache through these two functions and run on either."""

from __future__ import annotations

from functools import cache


@cache
def _name() -> str:
    import transformers
    from packaging.version import Version

    return "cache" if Version(transformers.__version__).release >= (5, 20) else "past_key_values"


def with_cache(kv) -> dict:
    """The forward's keyword argument that passes the KV cache `kv`."""
    return {_name(): kv}


def cache_of(out):
    """The KV cache a forward with use_cache=True returned."""
    return out[_name()]
