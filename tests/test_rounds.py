"""Rounds (issue 13): the migration that makes every earlier row round 1, `rlhf round start` on tiny models (the
policy on every response, --mix-previous, the Annotate queue's order), `rlhf rounds`, and bad input."""

import json
from pathlib import Path

import duckdb
import pytest

from annotation.session import next_task, submit
from store.backup import MANIFEST, _counts, restore
from store.db import connect, latest_version, migrate
from store.errors import UserError
from store.rounds import list_rounds
from tests.builders import numbered_prompts_file
from tests.conftest import query, store_rows


def _v3_store(path) -> None:
    """A store as rlhf-studio made it before rounds (schema version 3): two prompts, K = 3, one ranking."""
    con = duckdb.connect(str(path))
    assert migrate(con, upto=3) == (0, 3)
    con.execute("INSERT INTO prompts (text, source) VALUES ('first?', 't'), ('second?', 't')")
    con.execute(
        "INSERT INTO responses (prompt_id, text, model_id, position) VALUES "
        "(1, 'a', 'default:SmolLM2', 0), (1, 'b', 'default:SmolLM2', 1), (1, 'c', 'default:SmolLM2', 2), "
        "(2, 'd', 'default:SmolLM2', 0), (2, 'e', 'default:SmolLM2', 1)"
    )
    con.execute("INSERT INTO rankings (prompt_id, annotator, source) VALUES (1, 'ann', 'native')")
    con.execute("INSERT INTO ranking_items VALUES (1, 1, 2, 0), (1, 2, 1, 1), (1, 3, 3, 2)")
    con.close()


def _backup_as_version_3_made_it(db, out) -> None:
    """What `rlhf backup` wrote before rounds: EXPORT DATABASE plus the manifest (taken without migrating)."""
    con = duckdb.connect(str(db))
    counts = _counts(con)
    con.execute(f"EXPORT DATABASE '{out}' (FORMAT parquet)")
    con.close()
    (out / MANIFEST).write_text(json.dumps({"source": str(db), "schema_version": 3, "rows": counts}))


def test_a_store_from_before_rounds_reads_as_round_one_and_its_backup_restores(tmp_path):
    db, saved = tmp_path / "old.duckdb", tmp_path / "backup"
    _v3_store(db)
    _backup_as_version_3_made_it(db, saved)
    con = duckdb.connect(str(db))
    pairs_before = con.execute("SELECT * FROM pairs ORDER BY chosen_id, rejected_id").fetchall()
    con.close()
    assert len(pairs_before) == 3  # b > a > c

    with connect(db) as con:  # opening it migrates
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == latest_version() >= 4
        # the old columns of every pair are unchanged; the pair now says its round and policies
        after = con.execute(f"SELECT {', '.join(['*'])} FROM pairs ORDER BY chosen_id, rejected_id").fetchall()
        assert [row[:11] for row in after] == pairs_before
        assert {row[11:14] for row in after} == {(1, "default:SmolLM2", "default:SmolLM2")}
        # no strength was asked (migration 0011), nor a question without a table of its own (0017)
        assert {row[14:] for row in after} == {(None, None)}
        assert con.execute("SELECT DISTINCT round FROM response_round").fetchall() == [(1,)]
        (only,) = list_rounds(con)
    assert only | {"runs": []} == {
        "round": 1,
        "policy": "default:SmolLM2",
        "previous_policy": None,
        "selection": "all",
        "prompts": 2,
        "responses": 5,
        "rankings": 1,
        "pairs": 3,
        "labels_spent": 1,
        "wins": {"default:SmolLM2": 1.0},
        "runs": [],
    }
    # the backup made before the migration restores into a store of the latest schema with every row
    restored = tmp_path / "restored.duckdb"
    restore(saved, restored)
    old = {t: rows for t, rows in store_rows(str(db)).items()}
    assert store_rows(str(restored)) == old
    with connect(restored) as con:
        assert [r["pairs"] for r in list_rounds(con)] == [3]


def _rank_everything(db, annotator: str, ranks_of=None) -> list:
    """Rank every task the queue hands out (first shown response best, unless ranks_of(task) says otherwise)."""
    tasks = []
    while (task := next_task(db, annotator, seed=len(tasks))) is not None:
        tasks.append(task)
        ranks = ranks_of(task) if ranks_of else list(range(1, len(task.response_ids) + 1))
        submit(db, annotator, task.assignment_id, ranks)
    return tasks


@pytest.fixture(scope="module")
def second_policy(tmp_path_factory, default_model_dir):
    """Another tiny model (another seed): the 'tuned' policy of round 2."""
    from training.tiny import build_plain_model

    return build_plain_model(tmp_path_factory.mktemp("policy-2"), hidden=32, seed=1)


@pytest.mark.integration
def test_two_rounds_record_the_policy_of_every_response_and_the_queue_asks_the_new_round_first(
    cli, db, tmp_path, tiny_model_dir, second_policy
):
    flags = ["--max-new-tokens", "6", "--dtype", "fp32"]
    assert cli("prompts", "add", str(numbered_prompts_file(tmp_path, 6)))[0] == 0
    code, out, err = cli("round", "start", "--policy", str(tiny_model_dir), "--k", "3", "--n", "4", *flags)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("round 1 started: 4 of 6 candidate prompts, 12 responses")
    round1 = query(db, "SELECT prompt_id FROM round_prompts WHERE round = 1 ORDER BY position")
    assert len(round1) == 4
    # the queue hands round 1's prompts out in the selection's order; only prompts with responses are asked
    tasks = _rank_everything(db, "ann")
    assert [(t.prompt_id,) for t in tasks] == round1

    # round 2: the 2 prompts no round asked, plus --reask would take all; here the fresh ones only
    code, out, err = cli(
        "round", "start", "--policy", str(second_policy), "--k", "2", "--mix-previous", "1", "--seed", "3", *flags
    )
    assert code == 0, err
    assert out.splitlines()[-1].startswith("round 2 started: 2 of 2 candidate prompts, 6 responses")
    models = dict(query(db, "SELECT model_id, count(*) FROM response_round WHERE round = 2 GROUP BY model_id"))
    assert models == {str(second_policy.resolve()): 4, str(tiny_model_dir.resolve()): 2}
    assert query(db, "SELECT policy, previous_policy FROM rounds WHERE round = 2") == [
        (str(second_policy.resolve()), str(tiny_model_dir.resolve()))
    ]

    # round 3: fresh prompts from a file, while round 2's wait: the queue asks the newest round first
    more = tmp_path / "more.txt"
    more.write_text("A fresh question?\nAnother fresh question?\n")
    code, out, err = cli("round", "start", "--policy", str(second_policy), "--k", "2", "--prompts", str(more), *flags)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("round 3 started: 2 of 2 candidate prompts, 4 responses")
    third = query(db, "SELECT prompt_id FROM round_prompts WHERE round = 3 ORDER BY position")
    prev, by_id = str(tiny_model_dir.resolve()), dict(query(db, "SELECT response_id, model_id FROM responses"))

    def new_first(task):  # the new policy's responses best, in shown order; the previous policy's last
        order = sorted(range(len(task.response_ids)), key=lambda i: (by_id[task.response_ids[i]] == prev, i))
        ranks = [0] * len(order)
        for rank, i in enumerate(order, 1):
            ranks[i] = rank
        return ranks

    tasks = _rank_everything(db, "ann", new_first)
    assert [(t.prompt_id,) for t in tasks[:2]] == third and len(tasks) == 4

    # round 4 asks 3 ranked prompts again: each task shows only round 4's responses
    code, out, err = cli("round", "start", "--policy", str(second_policy), "--k", "2", "--reask", "--n", "3", *flags)
    assert code == 0, err
    fourth = query(db, "SELECT prompt_id FROM round_prompts WHERE round = 4 ORDER BY position")
    fresh = {i for (i,) in query(db, "SELECT response_id FROM response_round WHERE round = 4")}
    tasks = _rank_everything(db, "ann")
    assert [(t.prompt_id,) for t in tasks] == fourth
    assert all(set(t.response_ids) <= fresh and len(t.response_ids) >= 1 for t in tasks)

    rounds = {r["round"]: r for r in list_rounds_of(db)}
    assert [rounds[i]["rankings"] for i in (1, 2, 3, 4)] == [4, 2, 2, 3] and rounds[4]["labels_spent"] == 11
    assert rounds[2]["wins"] == {str(second_policy.resolve()): 2.0}  # the new policy won both mixed rankings
    assert rounds[2]["pairs"] == 2 * 3 and rounds[4]["selection"] == "random"
    code, out, _ = cli("rounds")
    lines = out.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [["round", str(i)] for i in (1, 2, 3, 4)]
    assert "(previous)" in lines[1] and "first place:" in lines[1] and "11 rankings so far" in lines[3]


def list_rounds_of(db):
    with connect(db, create=False) as con:
        return list_rounds(con)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--policy", "/no/such/model"], "--policy /no/such/model: no such model"),
        (["--mix-previous", "2"], "round 1 has none"),
        (["--select", "smart"], "--select must be one of random, uncertain, disagree"),
        (["--k", "1"], "at least 2 responses per prompt"),
        (["--select", "uncertain"], "train one first"),
    ],
)
def test_a_bad_round_is_one_error_line_and_changes_nothing(cli, db, tmp_path, tiny_model_dir, flags, message):
    cli("prompts", "add", str(numbered_prompts_file(tmp_path, 3)))
    before = store_rows(db)
    code, out, err = cli("round", "start", "--policy", str(tiny_model_dir), "--max-new-tokens", "4", *flags)
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert store_rows(db) == before


def test_a_round_with_no_prompts_left_says_so(cli, db, tiny_model_dir):
    code, _, err = cli("round", "start", "--policy", str(tiny_model_dir))
    assert code == 1 and "no prompts to ask" in err


def _newest_run(runs) -> Path:
    return max(runs.iterdir(), key=lambda p: p.stat().st_mtime_ns)


@pytest.mark.integration
def test_two_rounds_end_to_end_rm_ppo_then_the_round_one_actor_samples_round_two(cli, db, tmp_path, tiny_model_dir):
    """Round 1 from the SFT model, a reward model and PPO on it; round 2 from PPO's actor with the SFT model's
    samples mixed in, prompts chosen by the reward model's uncertainty; a warm-started reward model on both rounds
    (with its accuracy on round 2's pairs before and after), PPO continued from the round-1 actor."""
    runs = tmp_path / "runs"
    sample = ["--max-new-tokens", "6", "--dtype", "fp32"]
    train = ["--runs-dir", str(runs), "--dtype", "fp32"]
    assert cli("prompts", "add", str(numbered_prompts_file(tmp_path, 14)))[0] == 0
    code, _, err = cli("round", "start", "--policy", str(tiny_model_dir), "--k", "3", "--n", "8", *sample)
    assert code == 0, err
    _rank_everything(db, "ann")

    code, out, err = cli("train-rm", "--model", str(tiny_model_dir), "--max-steps", "2", *train)
    assert code == 0, err
    rm1 = _newest_run(runs)
    assert "round 1" not in out  # one round: nothing fresh to measure
    code, _, err = cli(
        "train-ppo", "--actor", str(tiny_model_dir), "--reward", str(rm1), "--max-new-tokens", "6", "--max-steps", "2",
        *train,
    )  # fmt: skip
    assert code == 0, err
    ppo1 = _newest_run(runs)

    code, out, err = cli(
        "round", "start", "--policy", str(ppo1), "--k", "2", "--mix-previous", "1", "--select", "uncertain",
        "--n", "4", *sample,
    )  # fmt: skip
    assert code == 0, err
    actor, sft = str((ppo1 / "actor").resolve()), str(tiny_model_dir.resolve())
    assert query(db, "SELECT policy, previous_policy, selection FROM rounds WHERE round = 2") == [
        (actor, sft, "uncertain")
    ]
    assert dict(query(db, "SELECT model_id, count(*) FROM response_round WHERE round = 2 GROUP BY ALL")) == {
        actor: 8,
        sft: 4,
    }
    gaps = [v for (v,) in query(db, "SELECT value FROM round_prompts WHERE round = 2 ORDER BY position")]
    assert len(gaps) == 4 and gaps == sorted(gaps)  # the smallest score gaps first: the least sure
    assert set(query(db, "SELECT prompt_id FROM round_prompts WHERE round = 2")).isdisjoint(
        query(db, "SELECT prompt_id FROM round_prompts WHERE round = 1")
    )
    _rank_everything(db, "ann")
    code, out, _ = cli("rounds")
    assert [line.split()[:2] for line in out.strip().splitlines()] == [["round", "1"], ["round", "2"]]
    assert f"policy {actor} + {sft} (previous)" in out and "runs: reward rm-" in out.splitlines()[0]

    # the next reward model warm-starts from the last one and trains on both rounds; it says how the last one did
    code, out, err = cli("train-rm", "--model", str(rm1 / "model"), "--max-steps", "2", *train)
    assert code == 0, err
    rm2 = _newest_run(runs)
    fresh = json.loads((rm2 / "fresh_pairs.json").read_text())
    assert (
        fresh["round"] == 2
        and fresh["previous_run"] == rm1.name
        and fresh["pairs"] == query(db, "SELECT count(*) FROM pairs WHERE round = 2")[0][0]
    )
    assert 0 <= fresh["before"] <= 1 and 0 <= fresh["after"] <= 1
    assert f"round 2's {fresh['pairs']} pairs: " in out and f"before it ({rm1.name})" in out
    manifest = json.loads((Path(json.loads((rm2 / "config.json").read_text())["data"]) / "manifest.json").read_text())
    both = query(db, "SELECT count(*) FROM pairs")[0][0]
    assert sum(s["pairs"] for s in manifest["splits"].values()) == both

    # PPO continues from the round-1 actor; the reference stays the SFT model
    code, out, err = cli("train-ppo", "--actor", str(ppo1), "--reward", str(rm2), "--max-steps", "1", *train)
    assert code == 0, err
    config = json.loads((_newest_run(runs) / "config.json").read_text())
    assert (config["actor"], config["reference"]) == (actor, sft)


def test_a_snapshot_of_some_rounds_holds_only_their_pairs(db, tmp_path):
    from store.db import write
    from store.prompts import prompt_ids
    from store.responses import Sample, add_samples
    from store.snapshot import write_snapshot

    with write(db) as con:
        ids = prompt_ids(con, ["a?", "b?"], "t")
        for round_, prompt in ((None, "a?"), (2, "b?")):
            add_samples(
                con, [Sample(ids[prompt], f"{prompt} {j}", j, 1, "eos", 0) for j in range(3)], "m", round_
            )  # fmt: skip
    for _ in range(2):
        task = next_task(db, "ann")
        submit(db, "ann", task.assignment_id, [1, 2, 3])
    with write(db) as con:
        both = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.0)
        second = write_snapshot(con, tmp_path / "snaps2", eval_fraction=0.0, rounds=[2])
        with pytest.raises(UserError, match=r"no pairs in round\(s\) 5"):
            write_snapshot(con, tmp_path / "snaps3", eval_fraction=0.0, rounds=[5])
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["rounds"] == [2] and manifest["splits"]["train"]["pairs"] == 3
    assert json.loads((both / "manifest.json").read_text())["splits"]["train"]["pairs"] == 6
    assert "rounds" not in json.loads((both / "manifest.json").read_text())
