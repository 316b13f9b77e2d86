"""Prefix sharing (training/pairwise/prefix.py): the split worked out by hand, and the two-pass forward giving the same
outputs and gradients as running every sequence whole, on a tiny random Llama."""

import pytest
import torch

from training.pairwise.prefix import common_prefix, forward, prefix_lengths, split

PAD = 0


def tiny(kind: str, attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    cfg = LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=PAD,
        num_labels=1,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    cls = LlamaForCausalLM if kind == "lm" else LlamaForSequenceClassification
    return cls(cfg).train()


def test_prefix_lengths_by_hand():
    assert common_prefix([[5, 6, 7], [5, 6, 8, 9], [5, 6]]) == 2
    assert common_prefix([[1, 2], [3]]) == 0
    seqs = [[5, 6, 7, 8], [5, 6, 7, 9, 9], [5, 6, 2], [4, 4, 4], [5, 6, 7, 1]]
    groups = ["a", "a", "a", "b", "c"]
    # group a: common prefix 2 ([5, 6]); c has one sequence (nothing to share); b too
    assert prefix_lengths(seqs, groups, [9] * 5) == {"a": 2, "b": 0, "c": 0}
    # a limit (the first position a sequence needs an output at) caps its group's prefix
    assert prefix_lengths(seqs, groups, [9, 1, 9, 9, 9])["a"] == 1
    # two identical sequences: the prefix stops at the limit (the last token stays in the chunk)
    assert prefix_lengths([[1, 2, 3], [1, 2, 3]], [0, 0], [2, 2]) == {0: 2}
    assert split([[1, 2], [3, 4]], [0, 1], [1, 1], PAD) is None  # nothing shared: run them whole


def test_split_by_hand():
    seqs = [[5, 6, 7, 8], [5, 6, 9], [3, 3, 3, 4], [3, 3, 1], [7]]
    s = split(seqs, [0, 0, 1, 1, 2], [len(x) - 1 for x in seqs], PAD)
    # groups 0 and 1 share 2 tokens each; group 2 (one sequence) none: its prefix row is all padding
    assert s.prefix_ids.tolist() == [[5, 6], [3, 3], [PAD, PAD]]
    assert s.prefix_mask.tolist() == [[1, 1], [1, 1], [0, 0]]
    assert s.chunk_ids.tolist() == [[7, 8], [9, PAD], [3, 4], [1, PAD], [7, PAD]]
    assert s.chunk_mask.tolist() == [[1, 1], [1, 0], [1, 1], [1, 0], [1, 0]]
    assert s.group.tolist() == [0, 0, 1, 1, 2] and s.offset.tolist() == [2, 2, 2, 2, 0]


def whole(seqs):
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), PAD)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
    return ids, mask


SEQS = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 11], [5, 6, 7, 12, 13], [20, 21, 22, 23], [20, 21, 24, 25, 26], [30, 31, 32]]
GROUPS = [0, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_shared_forward_equals_whole_sequences_for_log_probs_and_gradients(attention):
    model = tiny("lm", attention)
    ids, mask = whole(SEQS)
    full = model(input_ids=ids, attention_mask=mask).logits
    s = split(SEQS, GROUPS, [len(x) - 1 for x in SEQS], PAD)
    assert s.offset.tolist() == [3, 3, 3, 2, 2, 0]
    part = forward(model, s, "cpu", prefix_kwargs={"logits_to_keep": 1}).logits
    for i, (seq, o) in enumerate(zip(SEQS, s.offset.tolist(), strict=True)):
        torch.testing.assert_close(part[i, : len(seq) - o], full[i, o : len(seq)], atol=1e-5, rtol=1e-4)
    # gradients of the same loss (every chunk position's logits) through both paths
    pick = torch.zeros_like(full[..., 0])
    for i, (seq, o) in enumerate(zip(SEQS, s.offset.tolist(), strict=True)):
        pick[i, o : len(seq)] = 1
    model.zero_grad()
    (full.logsumexp(-1) * pick).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    part = forward(model, s, "cpu", prefix_kwargs={"logits_to_keep": 1}).logits
    (part.logsumexp(-1) * s.chunk_mask).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[n], atol=1e-5, rtol=1e-4, msg=n)


def test_shared_forward_gives_the_reward_models_scores():
    model = tiny("rm", "eager")
    ids, mask = whole(SEQS)
    full = model(input_ids=ids, attention_mask=mask).logits[:, 0]
    s = split(SEQS, GROUPS, [len(x) - 1 for x in SEQS], PAD)
    torch.testing.assert_close(forward(model, s, "cpu").logits[:, 0], full, atol=1e-5, rtol=1e-4)


def ranked_batch():
    from training.pairwise.pairs import Tokenised

    # ranking r1: prompt [5, 6, 7], three responses (two pairs share a chosen one); r2: prompt [20, 21]
    return [
        Tokenised([5, 6, 7, 8, 9], [5, 6, 7, 10], 1.0, "r1", False, 3, 3),
        Tokenised([5, 6, 7, 8, 9], [5, 6, 7, 11, 12, 13], 1.0, "r1", False, 3, 3),
        Tokenised([20, 21, 22, 23], [20, 21, 24], 1.0, "r2", False, 2, 2),
    ]


def test_dpo_log_probs_with_the_prompt_run_once_equal_the_whole_sequences():
    from training.pairwise.reference import response_logprobs, shared_logprobs
    from training.pairwise.sequences import collate, shared_rows

    model = tiny("lm", "eager")
    batch = ranked_batch()
    ids, attention, response, _, _, keys = collate(batch, PAD)
    s = shared_rows(batch, keys, PAD)
    # each prefix stops one token before the first response token: those logits predict it
    assert s.offset.tolist() == [2, 2, 2, 1, 1] and s.group.tolist() == [0, 0, 0, 1, 1]
    want, want_count = response_logprobs(model, ids, attention, response, head=0)
    got, count = shared_logprobs(model, s, keys, "cpu")
    assert count.tolist() == want_count.tolist() == [2, 1, 3, 2, 1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_reward_scores_with_the_prompt_run_once_equal_the_whole_sequences():
    from training.reward.data import collate, shared_rows
    from training.reward.train import forward_scores

    model = tiny("rm", "eager")
    batch = ranked_batch()
    s = shared_rows(batch, PAD)
    assert s.offset.tolist() == [3, 3, 3, 2, 2]  # the score is read at the last token: all the prompt is shared
    got, want = forward_scores(model, collate(batch, PAD), "cpu", s), forward_scores(model, collate(batch, PAD), "cpu")
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def _agree_on_rank(rank: int, init: str, have: list[bool], out: str) -> None:
    import json

    from training.pairwise.prefix import agree

    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    got = [agree("split" if h[rank] else None, "cpu") for h in have]
    torch.distributed.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(got, f)


@pytest.mark.integration
def test_ranks_agree_on_one_pass_or_two(tmp_path):
    # ZeRO-3 gathers weights in every forward: if one rank's batch shares nothing, no rank shares
    import json

    import torch.multiprocessing as mp

    have = [[True, True], [True, False], [False, True], [False, False]]
    out = str(tmp_path / "agreed")
    mp.spawn(_agree_on_rank, args=(f"file://{tmp_path}/rendezvous", have, out), nprocs=2)
    for rank in (0, 1):
        assert json.loads(open(f"{out}.{rank}").read()) == ["split", None, None, None]
