"""A demo that outlives a session (app/studies/demo_stages.py): finished stages kept and never run again, a
started training run continued or kept, and `rlhf demo --resume` refusing what would mix two configurations."""

import json

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
