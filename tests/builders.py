"""What more than one test file builds with: hand-set reward models, a PPO run and its metrics, a seeded store,
separable pairs, prompt files, the Label Studio fixtures and the browser's artifacts folder (issue 28). The shared
pytest fixtures are in tests/conftest.py; a test file imports from here, never from another test file
(tests/test_layout.py). Heavy libraries (torch, label-studio-sdk) are imported inside the functions that use them,
so a light test file that needs a plain helper does not pay for them."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from bench.app_server import ROOT
from store.db import write
from store.prompts import prompt_ids
from store.responses import Sample, add_samples

if TYPE_CHECKING:
    import torch

# hand-built reward models and PPO runs (from tests/test_ppo_training.py, tests/test_ppo_watch.py)


def build_share_rm(actor_dir: Path, out: Path, feature: torch.Tensor, weight: float) -> Path:
    """A reward model whose score is a known function of the text: weight x an increasing function of the mean of
    `feature` (one value per token id) over the sequence.

    Hand-set weights: token t embeds as [f_t, 1, 0, ...]; layer 0 attends uniformly (q = k = 0) and copies f into
    dimension 2, so at the last token dimension 2 holds 4 * mean(f) over the sequence; everything else is zero.
    After the final RMSNorm the score is weight * 4m * sqrt(32) / sqrt(1 + 16 m^2), increasing in m = mean(f)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(actor_dir)
    config = LlamaConfig.from_pretrained(actor_dir, num_labels=1)
    config.pad_token_id = tok.convert_tokens_to_ids("<|endoftext|>")
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        emb = model.model.embed_tokens.weight
        emb[:, 0] = feature
        emb[:, 1] = 1.0
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.layers[0].self_attn.v_proj.weight[0, 0] = 1.0
        model.model.layers[0].self_attn.o_proj.weight[2, 0] = 1.0
        model.model.norm.weight.fill_(1.0)
        model.score.weight[0, 2] = weight
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_liked_token_rm(actor_dir: Path, out: Path) -> Path:
    """A reward model that rises with the share of even token ids: f_t = +1 for even ids, -1 for odd ones, 0 for
    EOS, weight 0.5 (see build_share_rm)."""
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(actor_dir)
    feature = torch.where(torch.arange(len(tok)) % 2 == 0, 1.0, -1.0)
    feature[tok.eos_token_id] = 0.0
    return build_share_rm(actor_dir, out, feature, 0.5)


def hand_ensemble(folder: Path, members: list[Path]) -> Path:
    """A reward run folder holding an ensemble, as `rlhf train-rm --ensemble` leaves it."""
    for i, m in enumerate(members):
        shutil.copytree(m, folder / "members" / str(i) / "model")
    shutil.copytree(members[0], folder / "model")
    entries = [{"model": f"members/{i}/model"} for i in range(len(members))]
    (folder / "ensemble.json").write_text(json.dumps({"members": entries}))
    return folder


def ppo(tmp, actor, reward, prompts, *flags: str, db: str | None = None) -> Path:
    """`rlhf train-ppo` on the tiny models; returns the run folder."""
    from app.faces.cli import main

    runs = tmp / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    args = ["--db", db or str(tmp / "s.duckdb"), "train-ppo", "--actor", str(actor), "--reward", str(reward)]
    args += ["--prompts", str(prompts), "--runs-dir", str(runs), "--max-new-tokens", "16", *flags]
    assert main(args) == 0
    (run,) = set(runs.iterdir()) - before
    return run


def rows_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def steps_of(run: Path) -> dict[int, dict]:
    """The last row logged for each step (a resumed run logs the steps after its checkpoint again)."""
    return {r["step"]: r for r in rows_of(run) if "loss/actor" in r}


HACK_SETTINGS = {"max_steps": 24, "epochs": 10, "actor_lr": 1e-3, "critic_lr": 1e-3, "save_every": 2}

# data (from tests/test_session.py, tests/test_reward_training.py, tests/test_rounds.py)


def seed_store(db, n_prompts: int, k: int = 4, duplicate_last: bool = False):
    with write(db) as con:
        ids = prompt_ids(con, [f"prompt {i}" for i in range(n_prompts)], "test")
        samples = [
            Sample(
                prompt_id=ids[f"prompt {i}"],
                text=f"p{i} answer {j}",
                position=j,
                n_tokens=3,
                finish_reason="eos",
                seed=0,
            )
            for i in range(n_prompts)
            for j in range(k)
        ]
        if duplicate_last:  # a repeated sample is never shown
            samples.append(Sample(ids["prompt 0"], "p0 answer 0", k, 3, "eos", 0))
        add_samples(con, samples, model_id="test")


# A small labeling campaign: each annotator ranks the same 5 prompts' 4 responses (shown in stored order) the same
# way every time, with these lead times; dee also skips a sixth prompt after 4 s (tests/test_dashboard.py works
# out every number of it by hand).
CAMPAIGN_ORDERS = {"ann": [1, 2, 3, 4], "bob": [2, 1, 3, 4], "dee": [1, 2, 4, 3], "cy": [4, 3, 2, 1]}
CAMPAIGN_LEADS = {"ann": [1, 3, 5, 7, 9], "bob": [10] * 5, "dee": [None] * 5, "cy": [30] * 5}


def campaign_store(db):
    from annotation.ranker_view import is_shown_order
    from store.rankings import add_ranking, add_skip

    seed_store(db, 6)
    with write(db) as con:
        rows = con.execute("SELECT prompt_id, response_id FROM responses ORDER BY response_id").fetchall()
        responses = {}
        for prompt_id, response_id in rows:
            responses.setdefault(prompt_id, []).append(response_id)
        prompts = sorted(responses)
        for name, ranks in CAMPAIGN_ORDERS.items():
            for i, prompt_id in enumerate(prompts[:5]):
                flags = ["shown_order"] if is_shown_order(ranks) else []
                lead = CAMPAIGN_LEADS[name][i]
                add_ranking(con, prompt_id, name, "ui", f"{name}:{i}", lead, responses[prompt_id], ranks, flags)
        add_skip(con, prompts[5], "dee", "ui", "dee:skip", 4.0, "cannot judge")
    return db


WORDS = "apple river stone cloud green quick music paper light window garden simple".split()


def separable_pairs(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        base = " ".join(rng.choice(WORDS) for _ in range(6))
        other = " ".join(rng.choice(WORDS) for _ in range(6))
        rows.append(
            {
                "prompt": f"Question {i}: tell me about {rng.choice(WORDS)}",
                "chosen": base + " please and thank you",
                "rejected": other,
                "margin": 1,
                "ranking_id": i,
            }
        )
    return rows


def numbered_prompts_file(tmp_path, n: int):
    path = tmp_path / "prompts.txt"
    path.write_text("".join(f"Question number {i}: what is {i} plus {i}?\n" for i in range(n)))
    return path


# Label Studio (from tests/test_labelstudio.py, tests/test_labelstudio_origin.py)

LS = Path(__file__).parent / "data" / "ls"
RANKER = json.loads((LS / "ranker_rank.json").read_text())
# ranker_rank.json: project 5; task 17 annotations 101 and 103 (102 is cancelled), task 18 annotation 104.
FIRST_IMPORT = (
    "tasks 2, annotations 4, rankings added 3, pairs added 15, already imported 0, skipped 1 (cancelled 1), flagged 1"
)
# ranker_rank.json again: project 5; task 17 annotations 101 and 103 (102 is cancelled), task 18 annotation 104.
REIMPORT = (
    "tasks 2, annotations 4, rankings added 0, pairs added 0, already imported 3, skipped 1 (cancelled 1), flagged 0"
)


def convert(tmp_path, tasks, config_file, fmt):
    """Write an export in `fmt` the way Label Studio does."""
    from label_studio_sdk.converter import Converter

    src = tmp_path / "export.json"
    src.write_text(json.dumps(tasks))
    out = tmp_path / fmt.name
    out.mkdir()
    Converter(str(config_file), project_dir=str(tmp_path), download_resources=False).convert(
        str(src), str(out), fmt, is_dir=False
    )
    (produced,) = list(out.iterdir())
    target = tmp_path / {"JSON_MIN": "min.json", "CSV": "export.csv", "TSV": "export.tsv"}[fmt.name]
    produced.rename(target)
    return target


# the browser (from tests/test_browser.py)

ARTIFACTS = ROOT / "test-artifacts"


def exported_ls_task(prompt: str, responses: list[str], results: list[dict]) -> list[dict]:
    """Task 7 as `rlhf export-ls` writes it (items x0, x1, ... shown in this order), with annotation 70 by ann: the
    Ranker's order x1, x0, x2, ... and these results."""
    items = [{"id": f"x{n}", "title": f"Response {n + 1}", "body": t} for n, t in enumerate(responses)]
    order = [f"x{n}" for n in (1, 0, *range(2, len(responses)))]
    ranker = {"from_name": "rank", "to_name": "answers", "type": "ranker", "value": {"ranker": {"rank": order}}}
    return [
        {
            "id": 7,
            "data": {"prompt": prompt, "turns": [{"role": "user", "content": prompt}], "items": items},
            "annotations": [
                {"id": 70, "completed_by": {"email": "ann"}, "lead_time": 30, "result": [ranker, *results]}
            ],
        }
    ]


def ls_choices(name: str, *chosen: str) -> dict:
    """A Label Studio Choices result of control `name`."""
    return {"from_name": name, "to_name": "answers", "type": "choices", "value": {"choices": list(chosen)}}
