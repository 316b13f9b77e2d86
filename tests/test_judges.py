"""training/judges.py's `Judges` by hand: one member's score as read; several optimised members standardised by
their own held-out statistics, combined by the rule and put back on member 0's scale; the held-out judges' mean
standardised score; and --reward-combine refused where it would change nothing."""

import json

import pytest
import torch

from training.judges import Judges, reward_scores
from training.loaders import load_scalar_model


@pytest.fixture(scope="module")
def rm(liked_rm):
    return load_scalar_model(str(liked_rm), "fp32").eval()


@pytest.fixture(scope="module")
def batch():
    ids = torch.tensor([[5, 6, 8, 10], [0, 7, 9, 11], [4, 3, 12, 14]])
    return ids, torch.ones_like(ids), torch.tensor([3, 3, 3])


def test_one_member_is_its_score_and_several_are_combined_on_member_zeros_scale(rm, batch):
    with torch.no_grad():
        s = reward_scores(rm, *batch)
        one, none = Judges([rm], [(0.0, 1.0)], 0, "mean")(*batch)
        assert torch.allclose(one, s) and none is None
        # two optimised members (the same weights), member 1 with held-out mean 1 and std 2: z0 = s, z1 = (s - 1) / 2
        stats = [(0.0, 1.0), (1.0, 2.0)]
        mean, _ = Judges([rm, rm], stats, 0, "mean")(*batch)
        assert torch.allclose(mean, (s + (s - 1) / 2) / 2)
        low, _ = Judges([rm, rm], stats, 0, "min")(*batch)
        assert torch.allclose(low, torch.minimum(s, (s - 1) / 2))
        first, _ = Judges([rm, rm], [(2.0, 4.0), (1.0, 2.0)], 0, "first")(*batch)
        assert torch.allclose(first, s)  # standardised by (2, 4), then back on member 0's scale: s itself
        # three members, the last one held out: it watches (its standardised score), the first two are optimised
        score, held = Judges([rm, rm, rm], [*stats, (3.0, 0.5)], 1, "mean")(*batch)
        assert torch.allclose(score, mean) and torch.allclose(held, (s - 3) / 0.5)


def _ensemble(folder, members):
    folder.mkdir()
    (folder / "ensemble.json").write_text(json.dumps({"members": members}))
    return folder


def test_a_combine_rule_with_one_optimised_member_is_refused_in_one_line(cli, db, tmp_path, models, liked_rm):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\n")
    args = ["train-ppo", "--actor", models["actor"], "--prompts", str(prompts), "--runs-dir", str(tmp_path / "runs")]
    code, _, err = cli(*args, "--reward", models["reward"], "--reward-combine", "mean")
    assert code == 1 and "--reward-combine mean needs 2+ optimised reward models" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_a_two_member_ensemble_combines_only_when_no_member_is_held_out(tmp_path, liked_rm):
    from training.ppo.config import PPOConfig

    ens = _ensemble(tmp_path / "ens", [{"model": str(liked_rm)}, {"model": str(liked_rm)}])
    PPOConfig(reward=str(ens), reward_combine="mean", heldout_judges=0).check_combine()  # both optimised
    with pytest.raises(ValueError, match="2 member\\(s\\), 1 of them held out"):
        PPOConfig(reward=str(ens), reward_combine="min").check_combine()  # the default: the second one watches
    PPOConfig(reward=str(ens)).check_combine()  # `first` is always meaningful
