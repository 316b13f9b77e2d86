"""Best-of-N (training/sampling/best_of_n.py, `rlhf best-of-n`): the picks by hand, then on tiny models against scoring
every sample directly, and the output file read back by `rlhf import`."""

import json

import pytest

from tests.conftest import query
from training.sampling.best_of_n import line, parse_ns, ranks_by_score, summary
from training.watch import best_index


def test_picks_ranks_and_ns_by_hand():
    assert best_index([1.0, 3.0, 3.0, 2.0]) == 1  # the first of two equal best
    assert ranks_by_score([1.0, 3.0, 3.0, 2.0]) == [3, 1, 1, 2]
    assert parse_ns("4,1,2,2") == [1, 2, 4]
    for bad in ("", "0,2", "a,b"):
        with pytest.raises(ValueError):
            parse_ns(bad)
    x = line("p", ["a", "b", "c", "d"], [0.5, 2.0, -1.0, 3.0], [1, 2, 4], "best-of-n:rm")
    assert x["best_of"] == {"1": 0, "2": 1, "4": 3} and x["ranks"] == [3, 2, 4, 1]
    # a text sampled twice is one response of the ranking; picks point at responses
    y = line("q", ["a", "b", "a", "c"], [1.0, 0.0, 1.0, 0.0], [1, 2, 4], "best-of-n:rm")
    assert y["responses"] == ["a", "b", "c"] and y["sample_of"] == [0, 1, 0, 2] and y["ranks"] == [1, 2, 2]
    assert y["best_of"] == {"1": 0, "2": 0, "4": 0} and y["scores"] == [1.0, 0.0, 0.0]
    rows = summary([x, y], [1, 2, 4])
    # n=1: (0.5 + 1) / 2; n=2: (2 + 1) / 2; n=4: (3 + 1) / 2; KL bound log n - (n - 1) / n
    assert [r["score_mean"] for r in rows] == [0.75, 1.5, 2.0]
    assert [round(r["kl_bound"], 4) for r in rows] == [0.0, 0.1931, 0.6363]


@pytest.mark.integration
def test_best_of_n_on_tiny_models_keeps_the_top_scored_sample_and_imports(cli, db, tmp_path, tiny_model_dir):
    from tests.builders import build_liked_token_rm
    from training.loaders import load_scalar_model, load_tokenizer
    from training.sampling.chat import score_reply
    from training.tiny import build_talking_model

    talker = build_talking_model(tmp_path / "talker", eos_rate=0.2)
    rm = build_liked_token_rm(tiny_model_dir, tmp_path / "rm")
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"Tell me about thing {i}.\n" for i in range(5)))
    out = tmp_path / "bon.jsonl"
    flags = ["--n", "1,2,4", "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "8"]
    code, stdout, err = cli("best-of-n", "--policy", str(talker), "--reward", str(rm), *flags)
    assert code == 0, err
    assert "n=4: mean score" in stdout and "KL <= 0.636 nats" in stdout
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) >= 4 and {x["prompt"] for x in lines} <= {f"Tell me about thing {i}." for i in range(5)}
    reward = (load_scalar_model(str(rm), "fp32").eval(), load_tokenizer(rm))
    for x in lines:
        assert len(x["sample_of"]) == 4 and len(x["responses"]) >= 2
        direct = [score_reply(reward, [{"role": "user", "content": x["prompt"]}], r) for r in x["responses"]]
        assert direct == pytest.approx(x["scores"], abs=1e-5)
        per_sample = [direct[j] for j in x["sample_of"]]
        for n in (1, 2, 4):  # the pick is the best-scored of the first n samples
            assert direct[x["best_of"][str(n)]] == max(per_sample[:n])
        assert x["best_of"]["1"] == x["sample_of"][0]
    code, stdout, err = cli("import", str(out))
    assert code == 0, err
    assert query(db, "SELECT count(*), min(annotator) FROM rankings") == [(len(lines), "best-of-n:rm")]


def test_bad_best_of_n_input_is_one_error_line(cli, tmp_path):
    code, _, err = cli("best-of-n", "--reward", str(tmp_path / "nope"), "--prompts", str(tmp_path / "nope.txt"))
    assert code == 1 and len(err.strip().splitlines()) == 1
    code, _, err = cli("best-of-n", "--reward", "x", "--n", "0")
    assert code == 1 and "--n takes positive numbers" in err
