"""The demo over seeds (app/studies/demo_seeds.py): headlines combined by hand, the report, and the commands."""

import json

import pytest

from app.studies.demo_seeds import headlines, interval, over_seeds, report, verdicts

PEAK = "PPO's checkpoint the judge scored highest (picked by that judge) minus best-of-N at the same KL"


@pytest.fixture(autouse=True)
def _no_git(monkeypatch):
    """The results files record the checkout's commit by running git; the fast lane starts no process."""
    monkeypatch.setattr("app.jobs.provenance.commit", lambda: "abc1234")


def results(seed: int, ppo: float, dpo: float, ppo_dpo: float, bon: float, kl: float, alarm=None) -> dict:
    """A demo's results.json, reduced to what the headlines read."""
    return {
        "config": {"seed": seed},
        "folder": f"demo/seed-{seed}",
        "win_rate": ppo,
        "win_rate_ci95": [ppo - 0.05, ppo + 0.05],
        "dpo_vs_reference": {"win_rate": dpo, "ci95": [dpo - 0.05, dpo + 0.05]},
        "ppo_vs_dpo": {"win_rate": ppo_dpo, "ci95": [ppo_dpo - 0.05, ppo_dpo + 0.05]},
        "best_of_n": [
            {"n": 1, "kl": 0.0, "win_rate": 0.5, "ci95": [0.45, 0.55]},
            {"n": 16, "kl": 1.835, "win_rate": bon, "ci95": [0.7, 0.9]},
        ],
        "watch": {"chosen_win_rate": ppo, "peak_win_rate": ppo, "best_of_n_at_peak_kl": bon, "alarm_step": alarm},
        "kl_per_step": [0.0, kl],
        "checkpoints": [{"step": 8, "kl": kl / 2, "chosen": False}, {"step": 16, "kl": kl, "chosen": True}],
        "dpo_point": {"kl": 2 * kl, "win_rate": dpo},
    }


def test_an_interval_over_seeds_by_hand():
    # 0.6, 0.7, 0.8: mean 0.7, sd 0.1, se 0.1 / sqrt 3 = 0.05774; t(0.975, 2 df) = 4.303: half-width 0.2484
    mean, lo, hi = interval([0.6, 0.7, 0.8])
    assert (
        mean == pytest.approx(0.7)
        and lo == pytest.approx(0.7 - 0.2484, abs=1e-4)
        and hi == pytest.approx(0.9484, abs=1e-4)
    )
    assert interval([0.6]) is None


def test_the_headlines_of_three_seeds_combine_into_a_mean_with_its_interval():
    runs = [
        results(0, 0.6, 0.9, 0.3, 0.8, 1.0),
        results(1, 0.7, 0.9, 0.4, 0.8, 2.0, alarm=12),
        results(2, 0.8, 0.9, 0.5, 0.8, 3.0),
    ]
    assert list(headlines(runs[0])) == [
        "PPO actor over the reference",
        "DPO policy over the reference",
        "PPO actor over the DPO policy",
        "best-of-16 of the reference over the reference",
        "PPO's kept checkpoint over the reference",
        "PPO's kept checkpoint (1 sample) minus best-of-16",
        "PPO's checkpoint the judge scored highest (picked by that judge) minus best-of-N at the same KL",
        "PPO (1 sample) minus best-of-16",
        "DPO (1 sample) minus best-of-16",
        "PPO's KL to the reference at the last step (nats)",
        "PPO's kept checkpoint's KL to the reference (nats)",
        "DPO's KL to the reference (nats)",
        "best-of-16's KL bound (nats)",
    ]
    combined = over_seeds(runs)
    rows = {r["headline"]: r for r in combined["rows"]}
    ppo = rows["PPO actor over the reference"]
    assert ppo["values"] == [0.6, 0.7, 0.8] and ppo["over_seeds"] == pytest.approx((0.7, 0.4516, 0.9484), abs=1e-4)
    assert rows["DPO policy over the reference"]["over_seeds"] == pytest.approx((0.9, 0.9, 0.9))  # no spread
    assert rows[PEAK]["values"] == pytest.approx([-0.2, -0.1, 0.0])
    assert rows["PPO's KL to the reference at the last step (nats)"]["over_seeds"][0] == pytest.approx(2.0)
    # the kept checkpoint (0.6, 0.7, 0.8) against best-of-16's 0.8 in each seed; the KL each method spent
    assert rows["PPO's kept checkpoint (1 sample) minus best-of-16"]["values"] == pytest.approx([-0.2, -0.1, 0.0])
    assert rows["DPO's KL to the reference (nats)"]["values"] == [2.0, 4.0, 6.0]
    assert rows["best-of-16's KL bound (nats)"]["over_seeds"] == pytest.approx((1.835, 1.835, 1.835))
    assert combined["seeds"] == [0, 1, 2] and combined["alarm_steps"] == [None, 12, None]
    # a head-to-head against 50%, a difference against zero: 0.3, 0.4, 0.5 -> 0.4 +- 0.2484
    assert verdicts(combined) == [
        "PPO actor over the DPO policy: 40.0% (15.2% to 64.8%), holds 50%: no clear difference over seeds",
        "PPO's kept checkpoint (1 sample) minus best-of-16: -10.0 pts (-34.8 pts to +14.8 pts), holds zero: no clear "
        "difference over seeds",
        f"{PEAK}: -10.0 pts (-34.8 pts to +14.8 pts), holds zero: no clear difference over seeds",
        "PPO (1 sample) minus best-of-16: -10.0 pts (-34.8 pts to +14.8 pts), holds zero: no clear difference over "
        "seeds",
        "DPO (1 sample) minus best-of-16: +10.0 pts (+10.0 pts to +10.0 pts), above zero",
    ]
    md = report(combined)
    row = "|PPO actor over the reference|60.0% (55.0%-65.0%)|70.0% (65.0%-75.0%)|80.0% (75.0%-85.0%)|"
    assert row + "70.0% (45.2% to 94.8%)|" in md
    assert "seed 1: step 12" in md and "seed 0: did not fire" in md
    wide = report(over_seeds([results(0, 0.6, 0.9, 0.3, 0.8, 1.0), results(1, 0.9, 0.9, 0.4, 0.8, 2.0)]))
    assert "|75.0% (0.0% to 100.0%)|" in wide  # 0.75 +- 12.71 * 0.15: cut at the ends of a win rate
    # a headline one seed lacks (a demo made before it existed) is combined over the seeds that have it, and says so
    no_dpo = {k: v for k, v in results(3, 0.7, 0, 0, 0.8, 1.0).items() if k not in ("dpo_vs_reference", "ppo_vs_dpo")}
    partial = over_seeds([*runs, no_dpo])
    dpo = next(r for r in partial["rows"] if r["headline"] == "DPO policy over the reference")
    assert dpo["values"] == [0.9, 0.9, 0.9, None] and dpo["over_seeds"] == pytest.approx((0.9, 0.9, 0.9))
    assert "|90.0% (85.0%-95.0%)|n/a|90.0% (90.0% to 90.0%), seeds 0, 1, 2 only|" in report(partial)
    assert verdicts(partial)[0].endswith("holds 50%: no clear difference over seeds (3 of 4 seeds)")
    alone = over_seeds([runs[0], no_dpo])  # on one seed: its value, no interval
    assert next(r for r in alone["rows"] if r["headline"] == "DPO policy over the reference")["over_seeds"] is None


def test_one_seed_twice_none_or_two_settings_is_one_error():
    from store.errors import UserError

    with pytest.raises(UserError, match="share a seed"):
        over_seeds([results(0, 0.6, 0.9, 0.3, 0.8, 1.0)] * 2)
    with pytest.raises(UserError, match="no demo results"):
        over_seeds([])
    other_lr = results(1, 0.6, 0.9, 0.3, 0.8, 1.0)
    other_lr["config"].update(actor_lr=1e-5, ppo_settings="whiten_advantages=false")
    with pytest.raises(UserError, match=r"differ in --actor-lr, --ppo-settings: a claim over seeds holds one setting"):
        over_seeds([results(0, 0.6, 0.9, 0.3, 0.8, 1.0), other_lr])
    same = results(2, 0.6, 0.9, 0.3, 0.8, 1.0)
    same["config"].update(engine="auto", actor_lr=2e-5)  # written out as the defaults are: no difference
    assert over_seeds([results(0, 0.6, 0.9, 0.3, 0.8, 1.0), same])["seeds"] == [0, 2]
    # PPO's defaults named explicitly, and a method or study more (its headlines n/a in the others): one setting
    named = results(3, 0.6, 0.9, 0.3, 0.8, 1.0)
    named["config"].update(ppo_settings="whiten_advantages=true,generation_batch_size=32", methods="ppo", campaign=True)
    assert over_seeds([results(0, 0.6, 0.9, 0.3, 0.8, 1.0), named])["seeds"] == [0, 3]
    other_batch = results(4, 0.6, 0.9, 0.3, 0.8, 1.0)
    other_batch["config"].update(ppo_settings="whiten_advantages=true,generation_batch_size=16")
    with pytest.raises(UserError, match=r"differ in --ppo-settings:"):
        over_seeds([named, other_batch])


def test_demo_seeds_combines_demo_folders_run_apart(tmp_path, capsys):
    from app.faces.cli import main

    for seed, ppo in ((4, 0.6), (5, 0.8)):
        (tmp_path / f"d{seed}").mkdir()
        (tmp_path / f"d{seed}" / "results.json").write_text(json.dumps(results(seed, ppo, 0.9, 0.4, 0.8, 1.0)))
    out = tmp_path / "combined"
    assert main(["demo-seeds", str(tmp_path / "d4"), str(tmp_path / "d5" / "results.json"), "--out", str(out)]) == 0
    assert "2 seeds (4, 5)" in capsys.readouterr().out
    saved = json.loads((out / "seeds.json").read_text())
    assert saved["seeds"] == [4, 5] and saved["rows"][0]["values"] == [0.6, 0.8]
    assert "# The demo over 2 seeds" in (out / "seeds.md").read_text()
    assert main(["demo-seeds", str(tmp_path / "missing"), "--out", str(out)]) == 1
    assert "no demo results at" in capsys.readouterr().err


def test_demo_refuses_a_bad_seed_count_in_one_line(tmp_path, capsys):
    from app.faces.cli import main

    assert main(["demo", "--quick", "--seeds", "0", "--runs-dir", str(tmp_path)]) == 1
    assert "--seeds takes 1 to 20 seeds" in capsys.readouterr().err


def rounds_results(seed: int, one: tuple, rand: list[tuple], unc: list[tuple]) -> dict:
    """A rounds study's results.json (R = 2, 40 labels), reduced to what its headlines read: each point (labels,
    reward-model accuracy, win rate over SFT)."""

    def arm(name: str, select: str, points: list[tuple]) -> dict:
        return {
            "name": name,
            "rounds": len(points),
            "select": select,
            "points": [
                {
                    "labels": n,
                    "rm_accuracy": acc,
                    "rm_ci95": [acc - 0.1, acc + 0.1],
                    "win_rate": w,
                    "ci95": [w - 0.05, w + 0.05],
                }
                for n, acc, w in points
            ],
        }

    return {
        "study": "rounds",
        "config": {"seed": seed, "rounds": 2},
        "label_budget": 40,
        "arms": [
            arm("1 round", "random", [one]),
            arm("2 rounds, random", "random", rand),
            arm("2 rounds, uncertain", "uncertain", unc),
        ],
    }


def test_a_rounds_study_over_seeds_answers_its_two_questions_with_intervals(tmp_path, capsys):
    from app.faces.cli import main

    # per seed: one round (40 labels), 2 rounds random and uncertain (round 1 shared at 20 labels)
    runs = [
        rounds_results(0, (40, 0.80, 0.50), [(20, 0.70, 0.45), (40, 0.78, 0.60)], [(20, 0.70, 0.45), (40, 0.84, 0.62)]),
        rounds_results(1, (40, 0.82, 0.52), [(20, 0.72, 0.47), (40, 0.80, 0.64)], [(20, 0.72, 0.47), (40, 0.83, 0.60)]),
        rounds_results(2, (40, 0.81, 0.48), [(20, 0.71, 0.46), (39, 0.79, 0.62)], [(20, 0.71, 0.46), (40, 0.85, 0.61)]),
    ]
    h = headlines(runs[0])
    assert list(h) == [
        "1 round: win rate over SFT at 40 labels",
        "1 round: held-out reward-model accuracy at 40 labels",
        "2 rounds, random: win rate over SFT at 40 labels",
        "2 rounds, random: held-out reward-model accuracy at 40 labels",
        "2 rounds, uncertain: win rate over SFT at 40 labels",
        "2 rounds, uncertain: held-out reward-model accuracy at 40 labels",
        "2 rounds (random) minus 1 round: win rate over SFT",
        "2 rounds (random) minus 1 round: held-out reward-model accuracy",
        "uncertain at 40 labels minus random at 40: held-out reward-model accuracy",
    ]
    win, ci = h["2 rounds, random: win rate over SFT at 40 labels"]
    assert win == 0.60 and ci == pytest.approx([0.55, 0.65])
    assert h["2 rounds (random) minus 1 round: win rate over SFT"][0] == pytest.approx(0.10)
    assert h["uncertain at 40 labels minus random at 40: held-out reward-model accuracy"][0] == pytest.approx(0.06)
    combined = over_seeds(runs)
    rows = {r["headline"]: r for r in combined["rows"]}
    assert len(rows) == len(h)  # seed 2's random arm stored 39 of its 40 labels: its rows are named by the 40 given
    # rounds minus one, win rate: 0.10, 0.12, 0.14: mean 0.12, sd 0.02, half-width 4.303 * 0.02 / sqrt 3 = 0.0497
    wins = rows["2 rounds (random) minus 1 round: win rate over SFT"]
    assert wins["values"] == pytest.approx([0.10, 0.12, 0.14])
    assert wins["over_seeds"] == pytest.approx((0.12, 0.0703, 0.1697), abs=1e-4)
    # rounds minus one, accuracy: -0.02, -0.02, -0.02: no spread, below zero
    assert rows["2 rounds (random) minus 1 round: held-out reward-model accuracy"]["over_seeds"] == pytest.approx(
        (-0.02, -0.02, -0.02)
    )
    # uncertain minus random at 40 labels: 0.06, 0.03, 0.06: mean 0.05, sd 0.01732, half-width 0.0430
    unc = rows["uncertain at 40 labels minus random at 40: held-out reward-model accuracy"]
    assert unc["over_seeds"] == pytest.approx((0.05, 0.0070, 0.0930), abs=1e-4)
    said = verdicts(combined)
    assert said == [
        "2 rounds (random) minus 1 round: win rate over SFT: +12.0 pts (+7.0 pts to +17.0 pts), above zero",
        "2 rounds (random) minus 1 round: held-out reward-model accuracy: -2.0 pts (-2.0 pts to -2.0 pts), below zero",
        "uncertain at 40 labels minus random at 40: held-out reward-model accuracy: +5.0 pts (+0.7 pts to +9.3 pts), "
        "above zero",
    ]
    md = report(combined)
    assert md.startswith("# The rounds study over 3 seeds") and "watch" not in md
    assert (
        "|2 rounds (random) minus 1 round: win rate over SFT|+10.0 pts|+12.0 pts|+14.0 pts|"
        "+12.0 pts (+7.0 pts to +17.0 pts)|" in md
    )
    # a difference that changes sign over seeds holds zero
    mixed = [
        runs[0],
        rounds_results(1, (40, 0.82, 0.70), [(20, 0.72, 0.47), (40, 0.80, 0.64)], [(20, 0.7, 0.4), (40, 0.8, 0.6)]),
    ]
    assert (
        "win rate over SFT: +2.0 pts (-99.6 pts to +100.0 pts), holds zero: no clear difference over seeds"
        in verdicts(over_seeds(mixed))[0]
    )
    # the command combines study folders and says each difference; a study beside a demo is one error
    for r in runs[:2]:
        (tmp_path / f"r{r['config']['seed']}").mkdir()
        (tmp_path / f"r{r['config']['seed']}" / "results.json").write_text(json.dumps(r))
    assert main(["demo-seeds", str(tmp_path / "r0"), str(tmp_path / "r1"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "2 rounds (random) minus 1 round: win rate over SFT: +11.0 pts" in out and "2 seeds (0, 1)" in out
    assert json.loads((tmp_path / "out" / "seeds.json").read_text())["study"] == "rounds"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "results.json").write_text(json.dumps(results(5, 0.6, 0.9, 0.4, 0.8, 1.0)))
    assert main(["demo-seeds", str(tmp_path / "r0"), str(tmp_path / "d"), "--out", str(tmp_path / "out")]) == 1
    assert "of different studies (demo, rounds): one at a time" in capsys.readouterr().err


def test_the_labeling_campaigns_numbers_combine_over_seeds():
    def campaign(seed: int, every: float, kept: float) -> dict:
        arms = {"all": {"accuracy": every, "ci95": [every - 0.05, every + 0.04]}}
        arms["gold-filtered"] = {"accuracy": kept, "ci95": [kept - 0.05, kept + 0.03]}
        diff = {"value": kept - every, "ci95": [0.0, kept - every + 0.04]}
        return {
            **results(seed, 0.7, 0.9, 0.5, 0.8, 1.0),
            "campaign": {"min_gold_accuracy": 0.8, "arms": arms, "difference": diff},
        }

    combined = over_seeds([campaign(0, 0.88, 0.92), campaign(1, 0.86, 0.89), campaign(2, 0.9, 0.95)])
    rows = {r["headline"]: r for r in combined["rows"]}
    gain_name = "campaign: without annotators under 80% on gold minus every pair, held-out accuracy"
    # 0.04, 0.03, 0.05: mean 0.04, sd 0.01, half-width 4.303 * 0.01 / sqrt 3 = 0.02484
    gain = rows[gain_name]
    assert gain["values"] == pytest.approx([0.04, 0.03, 0.05])
    assert gain["over_seeds"] == pytest.approx((0.04, 0.01516, 0.06484), abs=1e-5)
    assert rows["campaign: reward model on every pair, held-out accuracy"]["values"] == [0.88, 0.86, 0.9]
    kept = rows["campaign: reward model without annotators under 80% on gold, held-out accuracy"]
    assert kept["ci95"][1] == pytest.approx([0.84, 0.92])
    assert f"{gain_name}: +4.0 pts (+1.5 pts to +6.5 pts), above zero" in verdicts(combined)
    # a seed's interval over prompts reads in the row's unit: points for a difference, percent for a rate
    table = report(combined)
    assert "|+4.0 pts (+0.0 pts to +8.0 pts)|+3.0 pts (+0.0 pts to +7.0 pts)|" in table
    assert "|92.0% (87.0%-95.0%)|" in table


def test_seeds_that_chose_the_settings_are_shown_apart_and_left_out_of_the_mean(tmp_path, capsys):
    from app.faces.cli import main

    runs = [results(s, ppo, 0.9, h2h, 0.8, 1.0) for s, ppo, h2h in ((0, 0.9, 0.9), (1, 0.6, 0.3), (2, 0.7, 0.4))]
    runs.append(results(3, 0.8, 0.9, 0.5, 0.8, 1.0))
    combined = over_seeds(runs, chose=(0,))
    ppo = next(r for r in combined["rows"] if r["headline"] == "PPO actor over the reference")
    # seeds 1-3 only: 0.6, 0.7, 0.8 -> 0.7 +- 0.2484; seed 0's 0.9 shown, not counted
    assert ppo["values"] == [0.9, 0.6, 0.7, 0.8] and ppo["over_seeds"] == pytest.approx((0.7, 0.4516, 0.9484), abs=1e-4)
    assert verdicts(combined)[0] == (
        "PPO actor over the DPO policy: 40.0% (15.2% to 64.8%), holds 50%: no clear difference over seeds"
    )
    md = report(combined)
    assert md.startswith("# The demo over 3 seeds, and the 1 that chose\n")
    assert "|seed 0 (chose the settings)|seed 1|" in md and "over seeds 1, 2, 3 only." in md
    with pytest.raises(Exception, match="names seeds not combined here: \\[7\\]"):
        over_seeds(runs, chose=(7,))
    for r in runs:
        (tmp_path / f"s{r['config']['seed']}").mkdir()
        (tmp_path / f"s{r['config']['seed']}" / "results.json").write_text(json.dumps(r))
    folders = [str(tmp_path / f"s{s}") for s in range(4)]
    assert main(["demo-seeds", *folders, "--out", str(tmp_path / "o"), "--chose-settings", "0"]) == 0
    assert json.loads((tmp_path / "o" / "seeds.json").read_text())["chose_settings"] == [0]


def test_a_negative_correlation_over_seeds_reads_as_one():
    """The reward model's score against length is a correlation, -1 to 1: printed signed, its interval cut at -1
    and 1 (it was read as a rate and cut at 0%, so -0.5 over seeds printed as 0.0% to -50.0%)."""
    runs = []
    for seed, corr in ((0, -0.5), (1, -0.4), (2, -0.6)):
        r = results(seed, 0.6, 0.9, 0.3, 0.8, 1.0)
        r["reward_model"] = {"k": 4, "best_of_k_accuracy": 0.5, "length_correlation": corr}
        runs.append(r)
    md = report(over_seeds(runs))
    # mean -0.5, sd 0.1, se 0.05774, t(0.975, 2 df) 4.303: -0.5 +- 0.2484
    assert "|reward model: score's correlation with words|-0.500|-0.400|-0.600|-0.500 (-0.748 to -0.252)|" in md
    wide = report(over_seeds(runs[:2]))  # -0.45 +- 12.706 * 0.05 = 0.635: cut at -1
    assert "|-0.450 (-1.000 to +0.185)|" in wide


def test_the_peak_comparison_says_when_best_of_n_is_at_a_lower_kl():
    r = results(0, 0.9, 0.9, 0.5, 0.8, 9.0)
    r["watch"]["peak_kl_beyond_best_of_n"] = True
    names = list(headlines(r))
    assert PEAK not in names
    assert (
        "PPO's checkpoint the judge scored highest (picked by that judge) minus best-of-16 (unequal KL: PPO's beyond "
        "best-of-16's bound)"
    ) in names


def test_one_sample_against_best_of_n_over_seeds_by_hand(tmp_path):
    from app.studies.demo_seeds import ONE_SAMPLE_PLOT, write_combined

    runs = [results(s, ppo, 0.9, 0.4, bon, 1.0) for s, ppo, bon in ((0, 0.6, 0.7), (1, 0.7, 0.8), (2, 0.8, 0.9))]
    combined = write_combined(runs, tmp_path)
    one = combined["one_sample"]
    best = {r["n"]: r for r in one["best_of"]}
    # best-of-16: 0.7, 0.8, 0.9 -> 0.8 +- 4.303 * 0.1 / sqrt 3 = 0.2484; best-of-1 is 0.5 in every seed
    assert best[16]["values"] == [0.7, 0.8, 0.9]
    assert best[16]["over_seeds"] == pytest.approx((0.8, 0.5516, 1.0484), abs=1e-4)
    assert best[1]["over_seeds"] == pytest.approx((0.5, 0.5, 0.5))
    ppo = next(r for r in one["policies"] if r["name"] == "PPO")
    assert ppo["values"] == [0.6, 0.7, 0.8] and ppo["over_seeds"][0] == pytest.approx(0.7)
    assert (tmp_path / ONE_SAMPLE_PLOT).read_bytes()[:4] == b"\x89PNG"
    assert f"]({ONE_SAMPLE_PLOT})" in (tmp_path / "seeds.md").read_text()
    # a seed that chose the settings is drawn from nothing over seeds
    chosen = write_combined(runs, tmp_path / "chose", chose=(0,))["one_sample"]
    assert {r["n"]: r for r in chosen["best_of"]}[16]["over_seeds"][0] == pytest.approx(0.85)


def test_readmes_paragraph_says_one_sample_against_best_of_n_from_the_combination(tmp_path, capsys):
    """README's "Does it learn?" from three seeds by hand: PPO (the default recommendation) 0.6, 0.7, 0.8 -> 70.0%
    +- 24.84 points; best-of-16 0.7, 0.8, 0.9 -> 80.0% (55.2% to 100.0%, clipped); their difference -0.1 in every
    seed -> -10.0 points with no spread: below. Off topic: the reference 10% in every seed, PPO 10%, 20%, 30%: its
    excess 0, 0.1, 0.2 -> +10.0 +- 24.84 points, which holds zero. PPO over DPO 0.4 everywhere."""
    from app.faces.cli import main
    from app.studies.demo_seeds import README_END, README_START, readme_paragraph, write_combined

    runs = [results(s, ppo, 0.9, 0.4, bon, 1.0) for s, ppo, bon in ((0, 0.6, 0.7), (1, 0.7, 0.8), (2, 0.8, 0.9))]
    for run, off in zip(runs, (0.1, 0.2, 0.3), strict=True):
        run |= {"off_topic_reference": 0.1, "off_topic_actor": off}
    combined = write_combined(runs, tmp_path / "seeds")
    text = readme_paragraph(combined, "docs/results/x")
    assert text == (
        "Under the protocol of [docs/evaluation.md](docs/evaluation.md) (the panel judge on the test split, seeds "
        "0, 1, 2 declared before running, each a whole demo), the recommended method's policy, PPO, wins 70.0% "
        "(45.2% to 94.8%) over the reference with one sample, the mean over seeds with its 95% t interval; "
        "best-of-16 of the reference under the reward model wins 80.0% (55.2% to 100.0%) with 16 samples. "
        "The difference, -10.0 points (-10.0 to -10.0), puts one sample below best-of-16's sixteen. "
        "Answers sharing no content word with the prompt (off topic): reference 10.0%, PPO 20.0%. "
        "PPO's off-topic share minus the reference's: +10.0 points (-14.8 to +34.8): no clear difference over seeds. "
        "PPO's actor over DPO's policy, head to head: 40.0% (40.0% to 40.0%). "
        "Every seed's numbers and every method: [docs/results/x/seeds.md](docs/results/x/seeds.md)."
        "\n\n![one sample against best-of-N over seeds](docs/results/x/one_sample_over_seeds.png)\n"
    )
    worse = [r | {"off_topic_actor": 0.3} for r in runs]  # 20 points more in every seed: above zero
    assert "+20.0 points (+20.0 to +20.0): more off-topic answers than the reference's." in readme_paragraph(
        write_combined(worse, tmp_path / "worse"), "x"
    )
    for s, r in enumerate(runs):
        (tmp_path / f"seed-{s}").mkdir()
        (tmp_path / f"seed-{s}" / "results.json").write_text(json.dumps(r))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Does it learn?\n\n{README_START}\nnothing yet\n{README_END}\n\nafter\n")
    demos = [str(tmp_path / f"seed-{s}") for s in range(3)]
    out = str(tmp_path / "docs" / "results" / "x")
    assert main(["demo-seeds", *demos, "--out", out, "--readme", str(readme)]) == 0
    written = readme.read_text()
    assert written.startswith(f"# x\n\n## Does it learn?\n\n{README_START}\nUnder the protocol")
    assert "[docs/results/x/seeds.md](docs/results/x/seeds.md)" in written and written.endswith(
        f"{README_END}\n\nafter\n"
    )
    readme.write_text("# no block\n")
    capsys.readouterr()
    assert main(["demo-seeds", *demos, "--out", out, "--readme", str(readme)]) == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"has no block {README_START} ... {README_END} to write the paragraph into")
    )


def test_the_readmes_paragraph_is_the_rendering_of_the_seeds_file_it_links():
    """The block in README is either the note that no number exists yet (no figure in it), or exactly what
    `rlhf demo-seeds --readme` renders from the committed seeds.json it links: no number typed by hand."""
    import re
    from pathlib import Path

    from app.studies.demo_seeds import README_END, README_START, readme_paragraph

    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text()
    block = text.split(README_START, 1)[1].split(README_END, 1)[0].strip("\n")
    linked = re.search(r"\]\(([^)]+)/seeds\.md\)", block)
    if linked is None:
        assert not re.search(r"\d%", block), block
        return
    folder = linked.group(1)
    combined = json.loads((root / folder / "seeds.json").read_text())
    assert block + "\n" == readme_paragraph(combined, folder)
