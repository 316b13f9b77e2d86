"""A demo that outlives a session (app/studies/demo_stages.py): finished stages kept and never run again, a
started training run continued or kept, and `rlhf demo --resume` refusing what would mix two configurations."""

import dataclasses
import json
from pathlib import Path

import pytest

from app.studies.demo_config import QUICK, DemoConfig
from app.studies.demo_stages import SETTINGS_FILE, Stages, load_settings, prepared_run, run_stage, save_settings
from store.errors import UserError
from training.runs import write_json_atomic


def test_a_finished_stage_is_kept_and_its_function_not_called_again(tmp_path):
    calls, lines = [], []
    ticks = iter([10.0, 12.5, 20.0, 23.0])

    def work(x):
        calls.append(x)
        return {"pair": (x, str(tmp_path))}

    stages = Stages(tmp_path)
    v = run_stage(stages, "sampling", lambda: work(1), lines.append, clock=lambda: next(ticks))
    assert v == {"pair": (1, str(tmp_path))} and calls == [1]
    # a later sitting reads the folder afresh: the value comes back through decode, the function is not called
    again = Stages(tmp_path)
    assert again.done("sampling") and not again.done("reward")
    kept = run_stage(again, "sampling", lambda: work(2), lines.append, decode=lambda d: d["pair"][0])
    assert kept == 1 and calls == [1]
    run_stage(again, "reward", lambda: work(3), lines.append, encode=lambda d: d["pair"][0], clock=lambda: next(ticks))
    assert json.loads((tmp_path / "stages.json").read_text())["done"]["reward"] == {"value": 3, "seconds": 3.0}
    assert Stages(tmp_path).seconds() == {"sampling": 2.5, "reward": 3.0}  # the stages' own times, in order
    assert lines == ["sampling: 2 s", "sampling: done before (2 s), kept", "reward: 3 s"]


def test_each_sitting_records_its_command_commit_and_the_stages_it_finished(tmp_path):
    from app.studies.demo_report import _sittings

    first = {"command": "rlhf demo --seed 1", "commit": "aaa1111", "date": "2026-12-07T10:00:00+00:00"}
    stages = Stages(tmp_path)
    stages.begin_sitting(first)
    run_stage(stages, "set-up", lambda: 1, print)
    run_stage(stages, "sampling", lambda: 2, print)
    with pytest.raises(RuntimeError):  # the session ends in the reward stage: not this sitting's
        run_stage(stages, "reward", lambda: (_ for _ in ()).throw(RuntimeError("cut")), print)
    again = Stages(tmp_path)
    second = {"command": "rlhf demo --resume D", "commit": "bbb2222", "date": "2026-12-08T09:00:00+00:00"}
    again.begin_sitting(second)
    for name in ("set-up", "sampling", "reward"):  # the first two kept, not the second sitting's
        run_stage(again, name, lambda: 3, print)
    assert Stages(tmp_path).sittings() == [first | {"stages": ["set-up", "sampling"]}, second | {"stages": ["reward"]}]
    r = {"sittings": Stages(tmp_path).sittings(), "timings_s": Stages(tmp_path).seconds()}
    assert _sittings(r).splitlines()[3:] == [
        "- `rlhf demo --seed 1` at commit aaa1111 on 2026-12-07T10:00:00+00:00: set-up, sampling",
        "- `rlhf demo --resume D` at commit bbb2222 on 2026-12-08T09:00:00+00:00: reward",
    ]
    # a demo begun before sittings were recorded names its earlier stages so; one sitting alone needs no list
    older = {"sittings": [second | {"stages": ["reward"]}], "timings_s": {"set-up": 1, "sampling": 2, "reward": 3}}
    assert _sittings(older).splitlines()[3] == "- before sittings were recorded: set-up, sampling"
    assert (
        _sittings({"sittings": [first | {"stages": ["set-up", "sampling"]}], "timings_s": {"set-up": 1, "sampling": 2}})
        == ""
    )


def test_a_stage_that_raises_is_not_recorded_and_runs_again(tmp_path):
    stages = Stages(tmp_path)
    with pytest.raises(RuntimeError):
        run_stage(stages, "ppo", lambda: (_ for _ in ()).throw(RuntimeError("killed")), print)
    assert not Stages(tmp_path).done("ppo")
    assert run_stage(Stages(tmp_path), "ppo", lambda: "run-1", print) == "run-1"


def test_a_started_training_run_is_continued_kept_or_replaced(tmp_path):
    runs = tmp_path / "runs"
    prepared = []

    def prepare():
        run = runs / f"run-{len(prepared)}"
        run.mkdir(parents=True)
        prepared.append(run.name)
        return run

    stages = Stages(tmp_path)
    run, mode = prepared_run(stages, "ppo", runs, prepare)
    assert (run.name, mode) == ("run-0", "new") and Stages(tmp_path).started("ppo", runs) == run
    write_json_atomic(run / "status.json", {"state": "running", "step": 7})  # the sitting ended at step 7
    assert prepared_run(Stages(tmp_path), "ppo", runs, prepare) == (run, "resume")
    # a trainer that does not checkpoint starts over in a new run, recorded in place of the old one
    run2, mode = prepared_run(Stages(tmp_path), "ppo", runs, prepare, resumable=False)
    assert (run2.name, mode) == ("run-1", "new") and Stages(tmp_path).started("ppo", runs) == run2
    write_json_atomic(run2 / "status.json", {"state": "finished", "step": 20})
    assert prepared_run(Stages(tmp_path), "ppo", runs, prepare) == (run2, "finished")  # trained: not again
    # a recorded run whose folder is gone is prepared anew; no record at all (no stages) too
    write_json_atomic(tmp_path / "stages.json", {"done": {}, "started": {"ppo": "gone"}})
    assert prepared_run(Stages(tmp_path), "ppo", runs, prepare)[1] == "new"
    assert prepared_run(None, "ppo", runs, prepare)[1] == "new" and prepared == ["run-0", "run-1", "run-2", "run-3"]


def test_resume_takes_the_settings_the_demo_started_with_and_refuses_others(tmp_path):
    cfg = DemoConfig(**QUICK, seed=3)
    save_settings(tmp_path, cfg, True, 2)
    assert load_settings(tmp_path, DemoConfig, {}) == (cfg, True, 2)
    with pytest.raises(UserError, match="drop --k, --ppo-steps"):
        load_settings(tmp_path, DemoConfig, {"k": 3, "ppo_steps": 9})
    with pytest.raises(UserError, match="is not a demo folder to resume"):
        load_settings(tmp_path / "elsewhere", DemoConfig, {})
    (tmp_path / SETTINGS_FILE).write_text('{"config": {"k": 4, "warp": 9}, "quick": false, "seeds": 1}')
    with pytest.raises(UserError, match="settings this version does not know: warp"):
        load_settings(tmp_path, DemoConfig, {})
    (tmp_path / "stages.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read .*stages.json"):
        Stages(tmp_path)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--k", "3"], "drop --k"),
        (["--quick"], "drop --quick"),
        (["--seeds", "2"], "drop --seeds"),
    ],
)
def test_demo_resume_with_other_settings_is_one_error_line_and_changes_nothing(tmp_path, capsys, flags, message):
    from app.faces.cli import main

    save_settings(tmp_path, DemoConfig(**QUICK), True, 1)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["demo", "--resume", str(tmp_path), *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert main(["demo", "--resume", str(tmp_path / "nothing")]) == 1
    assert "is not a demo folder to resume" in capsys.readouterr().err


def _finished_demo(folder, db_file, **settings):
    """A demo folder whose set-up, sampling and reward stages are done (and, as a real demo's, a PPO and a DPO run
    after them): its settings, stages.json naming its own folder, the runs' folders and a store recording them."""
    from store.db import write
    from store.runs import record_run
    from store.snapshot import write_snapshot
    from tests.builders import campaign_store

    folder.mkdir()
    save_settings(folder, DemoConfig(**{**QUICK, **settings}), True, 1)
    campaign_store(db_file)  # rankings, so pairs for the snapshot
    (folder / "store.duckdb").write_bytes(open(db_file, "rb").read())
    with write(str(folder / "store.duckdb")) as con:
        snap = write_snapshot(con, folder / "snapshots")
        for run in ("rm-1", "ppo-1", "dpo-1"):
            (folder / "runs" / run).mkdir(parents=True)
            config = {"output_dir": str(folder / "runs" / run), "data": str(snap)}
            (folder / "runs" / run / "config.json").write_text(json.dumps(config))
            record_run(con, run, run.split("-")[0], str(folder / "runs" / run), config, None)
    (folder / "runs" / "rm-1" / "model.safetensors").write_bytes(b"w" * (1 << 20))  # big: linked, not copied
    (folder / "runs" / "dpo-1" / "status.json").write_text('{"state": "finished"}')
    (folder / "heldout_prompts.txt").write_text("a held-out prompt\n")
    done = {
        "set-up": {"value": ["tiny", "tiny", ["p"], ["h"], str(folder / "store.duckdb")], "seconds": 1.0},
        "sampling": {"value": [[["r"]], 1, 6], "seconds": 2.0},
        "reward": {"value": [{"seed": 0}, "rm-1", {"eval/rm_accuracy": 0.9}], "seconds": 3.0},
        "ppo": {"value": "ppo-1", "seconds": 4.0},
        "dpo": {"value": [{"dpo_run": "dpo-1"}, []], "seconds": 5.0},
    }
    write_json_atomic(folder / "stages.json", {"done": done, "started": {}})
    return folder


@pytest.mark.store_file
def test_a_fork_keeps_the_reward_stage_and_the_dpo_run_under_its_own_folder_and_leaves_its_source_alone(tmp_path, db):
    from app.studies.demo_stages import fork_demo, fork_settings
    from tests.conftest import query, store_rows

    src = _finished_demo(tmp_path / "src", db)
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file() and p.suffix != ".duckdb"}
    rows_before = store_rows(str(src / "store.duckdb"))
    cfg, parent, quick = fork_settings(src, DemoConfig, {"ppo_settings": "whiten_advantages=true", "k": 4})
    # --ppo-settings goes on top of the source's (the quick preset's): its whitening given, its batch kept
    merged = "whiten_advantages=true,generation_batch_size=8"
    assert quick and cfg == dataclasses.replace(parent, ppo_settings=merged)
    fork = tmp_path / "fork"
    fork.mkdir()
    assert fork_demo(src, fork, cfg, parent) == ["set-up", "sampling", "reward"]
    state = Stages(fork).state
    assert list(state["done"]) == ["set-up", "sampling", "reward"] and state["started"] == {"dpo": "dpo-1"}
    assert state["done"]["set-up"]["value"][4] == str(fork / "store.duckdb") and state["forked"] == {
        "from": str(src),
        "kept": ["set-up", "sampling", "reward"],
    }
    assert sorted(p.name for p in (fork / "runs").iterdir()) == ["dpo-1", "rm-1"]  # PPO's run is the fork's to train
    assert json.loads((fork / "runs" / "rm-1" / "config.json").read_text())["output_dir"] == str(fork / "runs" / "rm-1")
    assert (fork / "runs" / "rm-1" / "model.safetensors").stat().st_ino == (
        src / "runs/rm-1/model.safetensors"
    ).stat().st_ino
    rows, db_fork = store_rows(str(fork / "store.duckdb")), str(fork / "store.duckdb")
    runs = query(db_fork, "SELECT run_id, path, config->>'output_dir' FROM runs ORDER BY run_id")
    assert runs == [(k, str(fork / "runs" / k), str(fork / "runs" / k)) for k in ("dpo-1", "rm-1")]
    (snap,) = query(db_fork, "SELECT path FROM snapshots")
    assert Path(snap[0]).parent == fork / "snapshots" and Path(snap[0]).is_dir()
    assert rows["rankings"] == rows_before["rankings"] and rows["prompts"] == rows_before["prompts"]
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file() and p.suffix != ".duckdb"} == before
    assert store_rows(str(src / "store.duckdb")) == rows_before
    # other DPO settings too: DPO trains again in the fork
    fork2 = tmp_path / "fork2"
    fork2.mkdir()
    fork_demo(src, fork2, dataclasses.replace(cfg, dpo_beta=0.5), parent)
    assert Stages(fork2).state["started"] == {} and sorted(p.name for p in (fork2 / "runs").iterdir()) == ["rm-1"]
    # no PPO or DPO setting changed (a study added, --campaign): PPO's stages and DPO's are kept as they are
    state = json.loads((src / "stages.json").read_text())
    state["done"] |= {
        "evaluation": {"value": [], "seconds": 1.0},
        "checkpoints and best-of-N": {"value": {}, "seconds": 1.0},
    }
    (src / "stages.json").write_text(json.dumps(state))
    fork3 = tmp_path / "fork3"
    fork3.mkdir()
    kept = fork_demo(src, fork3, dataclasses.replace(parent, campaign=True), parent)
    assert kept == ["set-up", "sampling", "reward", "ppo", "evaluation", "checkpoints and best-of-N", "dpo"]
    assert sorted(p.name for p in (fork3 / "runs").iterdir()) == ["dpo-1", "ppo-1", "rm-1"]
    assert query(str(fork3 / "store.duckdb"), "SELECT count(*) FROM runs") == [(3,)]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seed", "1"], "keeps src's prompts, rankings and reward model, made with its settings; drop --seed"),
        (["--k", "3", "--rm-lr", "1"], "drop --k, --rm-lr"),
        (["--quick"], "drop --quick"),
        (["--resume", "SRC"], "give one of them"),
        (["--ppo-settings", "whiten=1"], "'whiten=1' is not key=value"),
    ],
)
@pytest.mark.store_file
def test_a_fork_that_would_change_the_kept_stages_is_one_error_line_and_no_folder(tmp_path, db, capsys, flags, message):
    from app.faces.cli import main

    src = _finished_demo(tmp_path / "src", db)
    flags = [str(src) if f == "SRC" else f for f in flags]
    assert main(["demo", "--fork", str(src), "--runs-dir", str(tmp_path / "forks"), *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "forks").exists() or not any((tmp_path / "forks").iterdir())


@pytest.mark.store_file
def test_only_a_demo_whose_reward_stage_finished_can_be_forked(tmp_path, db):
    from app.studies.demo_stages import fork_settings

    with pytest.raises(UserError, match="is not a demo folder to fork"):
        fork_settings(tmp_path / "nothing", DemoConfig, {})
    src = _finished_demo(tmp_path / "src", db)
    state = json.loads((src / "stages.json").read_text())
    del state["done"]["reward"]
    (src / "stages.json").write_text(json.dumps(state))
    with pytest.raises(UserError, match="has not finished its reward stage: go on with --resume"):
        fork_settings(src, DemoConfig, {})
    save_settings(src, DemoConfig(**{**QUICK, "rounds": 2}), True, 1)
    with pytest.raises(UserError, match="is a rounds study"):
        fork_settings(src, DemoConfig, {})


def test_an_old_demos_kept_checkpoint_is_judged_against_dpo_where_its_samples_are_known(tmp_path):
    """A demo whose checkpoints stage ran before the kept checkpoint's samples were kept: resumed, the kept one is
    the final actor (its samples are the demo's own), or an earlier one whose weights are gone (one line, no
    matchup); DPO's results gain kept_vs_dpo only from samples that are known."""
    from app.studies.demo_common import Judging, compare
    from app.studies.demo_methods import with_kept_matchup
    from app.studies.demo_taste import Taste
    from app.studies.demo_watch import kept_samples_again
    from training.rollouts.checkpoints import CHECKPOINTS_FILE

    run = tmp_path / "ppo-run"
    (run / "actor").mkdir(parents=True)
    rows = [{"step": 4, "actor": str(run / "checkpoints" / "actor-step4")}, {"step": 8, "actor": str(run / "actor")}]
    (run / CHECKPOINTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts = {"reference": [["a b", "c"]], "ppo": [["a b c d", "e f"]], "dpo": [["a", "b c d e f g"]]}
    lines = []

    def watch(kept_step: int) -> dict:
        return {"checkpoints": [{"step": s, "chosen": s == kept_step, "win_rate": 0.5} for s in (4, 8)]}

    assert kept_samples_again(DemoConfig(), run, ["p"], texts, watch(8), lines.append) == texts["ppo"]
    assert kept_samples_again(DemoConfig(), run, ["p"], texts, watch(4), lines.append) is None
    assert len(lines) == 2 and "step 4) has no weights left" in lines[1]
    assert kept_samples_again(DemoConfig(), run, ["p"], texts, {"checkpoints": []}, lines.append) is None
    dpo = {"ppo_vs_dpo": {"win_rate": 0.25}}
    judge = Judging(["p"], Taste("concise"))
    judged = with_kept_matchup(dpo, {**texts, "ppo_kept": texts["ppo"]}, 7, judge)
    assert judged == {**dpo, "kept_vs_dpo": compare(texts["ppo"], texts["dpo"], 7, judge)}
    assert with_kept_matchup(dpo, {**texts, "ppo_kept": None}, 7, judge) == dpo  # unknown samples: no matchup
    assert with_kept_matchup(judged, {**texts, "ppo_kept": texts["dpo"]}, 7, judge) == judged  # one it has stays
    assert with_kept_matchup({}, {**texts, "ppo_kept": texts["ppo"]}, 7, judge) == {}  # no DPO in this demo


def test_a_fork_keeps_a_method_on_prompts_only_where_its_own_settings_are_unchanged():
    import dataclasses

    from app.studies.demo_stages import kept_stages

    parent = DemoConfig(methods="ppo,rloo,online_dpo")
    done = {
        "set-up": {},
        "sampling": {},
        "reward": {"value": [{}, "rm-run", {}]},
        "ppo": {"value": "ppo-run"},
        "evaluation": {},
        "checkpoints and best-of-N": {},
        "rloo": {"value": [{"rloo_run": "rloo-run"}, []]},
        "online_dpo": {"value": [{"online_dpo_run": "odpo-run"}, []]},
    }
    stages, runs = kept_stages(done, parent, parent)
    assert stages[-2:] == ["rloo", "online_dpo"] and runs[-2:] == ["rloo-run", "odpo-run"]
    for change in ({"online_dpo_lr": 1e-4}, {"online_dpo_beta": 0.5}):
        stages, runs = kept_stages(done, dataclasses.replace(parent, **change), parent)
        assert "online_dpo" not in stages and "odpo-run" not in runs and "rloo" in stages  # RLOO's are PPO's
    stages, runs = kept_stages(done, dataclasses.replace(parent, method_steps=40), parent)
    assert not {"rloo", "online_dpo"} & set(stages) and "ppo" in stages  # longer runs of both, PPO kept
    stages, _ = kept_stages(done, dataclasses.replace(parent, kl_ctl=0.2), parent)  # a PPO setting: none kept
    assert not {"ppo", "rloo", "online_dpo"} & set(stages)
    # RLOO's own settings retrain RLOO only
    stages, runs = kept_stages(done, dataclasses.replace(parent, rloo_settings="kl_ctl=0.2"), parent)
    assert "rloo" not in stages and "rloo-run" not in runs and {"ppo", "online_dpo"} <= set(stages)


@pytest.mark.integration
def test_the_demos_reward_stage_keeps_finished_members_and_resumes_the_one_it_was_in(tmp_path, tiny_model_dir):
    """A sitting cut in the reward stage: the next one keeps the ensemble's finished member 0 (not trained again) and
    continues member 1 from its last checkpoint, ending where an uninterrupted run ends."""
    import os
    import signal
    import time

    from app.jobs.training import follow, prepare_run
    from app.studies.demo import train_reward
    from tests.builders import separable_pairs
    from tests.conftest import write_jsonl
    from training.launcher import launch
    from training.reward.config import RewardConfig
    from training.runs import read_metrics, read_status

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(160))
    cfg = RewardConfig(model=str(tiny_model_dir), max_steps=16, lr=1e-3, eval_fraction=0.25, ensemble=2, save_every=4)
    db, runs = str(tmp_path / "s.duckdb"), tmp_path / "runs"
    whole = prepare_run(db, cfg, runs, str(pairs))
    assert follow(whole, launch("reward", whole))["state"] == "finished"

    cut = prepare_run(db, cfg, runs, str(pairs))
    stages = Stages(tmp_path)
    stages.start("reward", cut)  # as train_reward records the run it prepares
    proc = launch("reward", cut)
    member1 = cut / "members" / "1"
    deadline = time.monotonic() + 300
    latest = member1 / "checkpoints" / "latest"
    while not latest.exists():  # member 1 checkpointed (every 4 of its 16 steps)
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the sitting ends
    proc.wait()
    step = int(latest.read_text().strip().removeprefix("step"))  # the checkpoint it had when killed
    assert step < 16
    model0 = cut / "members" / "0" / "model" / "model.safetensors"
    before = (model0.stat().st_mtime_ns, len(read_metrics(cut / "members" / "0")))

    lines = []
    got_cfg, run, final = train_reward(DemoConfig(), None, "unused", runs, lines.append, Stages(tmp_path))
    assert run == cut and got_cfg.max_steps == 16 and got_cfg.ensemble == 2  # the run's own settings, not the demo's
    assert (model0.stat().st_mtime_ns, len(read_metrics(cut / "members" / "0"))) == before  # member 0 kept
    resumed = [r for r in read_metrics(member1) if r.get("event") == "resumed"]
    assert [r["step"] for r in resumed] == [step]
    assert any("goes on from its last checkpoint" in line for line in lines)
    a = read_status(whole)["final"]
    assert final.keys() == a.keys()
    for key in a:
        assert final[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key
    assert not list(cut.glob("**/checkpoints"))  # trained: its resume state dropped, its models kept
    assert (cut / "model" / "model.safetensors").is_file() and model0.is_file()
    # the stage finished: a later sitting keeps the run as it is
    assert prepared_run(Stages(tmp_path), "reward", runs, lambda: pytest.fail("prepared again")) == (cut, "finished")


def test_a_finished_runs_resume_state_goes_and_its_models_stay(tmp_path):
    """drop_resume_state: every folder of DeepSpeed tags that names its `latest`, under a checkpoints folder (a
    reward ensemble's members included); the saved models and PPO's judged actor snapshots stay."""
    from app.studies.demo_common import drop_resume_state

    files = [
        "rm/checkpoints/latest",
        "rm/checkpoints/step50/mp_rank_00_model_states.pt",
        "rm/members/0/checkpoints/latest",
        "rm/members/0/checkpoints/step4/x.pt",
        "rm/members/0/model/model.safetensors",
        "rm/model/model.safetensors",
        "ppo/checkpoints/actor/latest",
        "ppo/checkpoints/actor/step4/x.pt",
        "ppo/checkpoints/critic/latest",
        "ppo/checkpoints/actor-step4/model.safetensors",
        "ppo/actor/model.safetensors",
    ]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("x")
    drop_resume_state(tmp_path / "rm")
    drop_resume_state(tmp_path / "ppo")
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == [
        "ppo/actor/model.safetensors",
        "ppo/checkpoints/actor-step4/model.safetensors",
        "rm/members/0/model/model.safetensors",
        "rm/model/model.safetensors",
    ]
