"""One seam for every trainer: an entry in training/registry.py, registered here only, gets its `rlhf` command with
its config's flags, a run prepared for its kind of data, its runs-table row, its plots and its Train-tab form.
The toy trainer trains on prompts (the kind PPO and RLOO are); nothing is launched (the launch is the registry's
module under DeepSpeed, which every real trainer's own tests run)."""

import json
from dataclasses import dataclass, field

import pytest

from tests.conftest import query
from training.registry import TRAINERS, Trainer
from training.rollouts.prompts_config import PromptsConfig


@dataclass
class ToyConfig(PromptsConfig):
    KIND = "toy"
    toy_baseline: str = field(default="mean", metadata={"help": "the toy's baseline"})

    def check(self) -> None:
        super().check()
        if self.toy_baseline not in ("mean", "leave-one-out"):
            raise ValueError(f"toy_baseline must be mean or leave-one-out, got {self.toy_baseline}")


TOY = Trainer(
    kind="toy",
    title="Toy",
    config=ToyConfig,
    module="training.toy.train",
    prefix="toy",
    output="policy_out",
    policy=True,
    step_key="loss/toy",
    plots=("loss/toy", "reward/score_mean"),
    headline=lambda final: f"toy score {final['reward/score_mean']:.2f}" if final else "",
    progress=lambda row: f"toy step {row['step']}" if "loss/toy" in row else None,
    data="prompts",
    command="train-toy",
    summary="a toy on prompts",
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(TRAINERS, "toy", TOY)
    return TOY


def _finish_without_launching(monkeypatch, rows: list[dict]):
    """In place of the launch: the run's ranks would write these metrics rows and a finished status."""
    import app.jobs.training

    def finished(kind, run, *args, on_metrics=None, **kwargs):
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        status = {"state": "finished", "step": rows[-1]["step"], "total_steps": 2, "final": rows[-1]}
        (run / "status.json").write_text(json.dumps(status))
        for row in rows:
            on_metrics(row)
        return status

    monkeypatch.setattr(app.jobs.training, "run_training", finished)


def test_a_registered_trainer_gets_its_command_run_row_and_plots(toy, cli, db, tmp_path, models, monkeypatch):
    from app.faces.train_tab import plot_updates
    from app.jobs.train_view import runs_rows

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Name a fruit.\nSay hello.\n")
    rows = [
        {"step": 1, "loss/toy": 0.5, "reward/score_mean": 0.25},
        {"step": 2, "loss/toy": 0.25, "reward/score_mean": 0.75},
    ]
    _finish_without_launching(monkeypatch, rows)
    runs = tmp_path / "runs"
    code, out, err = cli(
        "train-toy", "--actor", models["actor"], "--reward", models["reward"], "--prompts", str(prompts),
        "--toy-baseline", "leave-one-out", "--max-new-tokens", "7", "--runs-dir", str(runs),
    )  # fmt: skip
    assert code == 0, err
    (run,) = runs.iterdir()
    assert run.name.startswith("toy-")
    config = json.loads((run / "config.json").read_text())
    assert config["kind"] == "toy" and config["toy_baseline"] == "leave-one-out" and config["max_new_tokens"] == 7
    assert config["reward"] == str((tmp_path / "model").resolve()) and config["output_dir"] == str(run.resolve())
    assert "toy step 1" in out and "toy step 2" in out and f"policy in {run / 'policy_out'}" in out
    assert query(db, "SELECT kind FROM runs") == [("toy",)]
    ((name, kind, _, state, step, headline, _),) = runs_rows(db)
    assert (name, kind, state, step, headline) == (run.name, "toy", "finished", "2/2", "toy score 0.75")
    titles = [p.constructor_args.get("title") for p in plot_updates(run) if p.constructor_args.get("visible")]
    assert titles == ["loss/toy", "reward/score_mean"]


def test_a_registered_trainers_own_check_is_one_error_line_and_no_run(toy, cli, db, tmp_path, models):
    code, _, err = cli(
        "train-toy", "--actor", models["actor"], "--reward", models["reward"], "--toy-baseline", "median",
        "--runs-dir", str(tmp_path / "runs"),
    )  # fmt: skip
    assert code == 1 and err.strip().splitlines()[-1].endswith("toy_baseline must be mean or leave-one-out, got median")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert query(db, "SELECT count(*) FROM runs") == [(0,)]


def test_a_registered_trainer_gets_a_form_and_a_button_in_the_train_tab(toy):
    import gradio as gr

    from app.faces.train_tab import _trainer_forms

    with gr.Blocks():
        ui = _trainer_forms()
    assert ui["buttons"]["toy"].elem_id == "run-toy" and ui["buttons"]["toy"].value == "Run toy"
    ids = [c.elem_id for c in ui["forms"]["toy"]]
    assert "toy-toy-baseline" in ids and "toy-max-new-tokens" in ids
    assert "toy-prompts" not in ids and "toy-output-dir" not in ids  # the picker and the launcher set those


def test_the_train_tabs_buttons_and_titles_come_from_the_domain_entry():
    """The registry holds no UI strings: the app derives each button (label, element id, API name) and form title
    from the entry's title, data kind, command and summary; the ids the app has always had stay."""
    from app.faces.train_tab import button_of, form_title

    buttons = {kind: button_of(TRAINERS[kind]) for kind in ("reward", "ppo", "dpo", "rloo")}
    assert buttons == {
        "reward": ("Train reward model", "train-rm", "train_rm"),
        "ppo": ("Run PPO", "run-ppo", "run_ppo"),
        "dpo": ("Train DPO", "train-dpo", "train_dpo"),
        "rloo": ("Run RLOO", "run-rloo", "run_rloo"),
    }
    assert form_title(TOY) == "Toy settings (a toy on prompts)"
