"""Immutable training inputs. Training never opens the database: `rlhf train-*` first freezes the pairs into
Parquet files plus a manifest (row counts, content hash), records the snapshot, and names it in the run config.

The split into train/eval is by prompt, so no prompt's pairs sit on both sides."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from store.db import sql_string
from store.durable import rename_durably
from store.errors import UserError
from store.pairs import PAIR_COLUMNS
from store.protocol import Connection

SPLITS = ("train", "eval")


def split_of(prompt: str, eval_fraction: float, seed: int) -> str:
    """'eval' for a stable pseudo-random `eval_fraction` of prompts, chosen by hashing the prompt text, so the
    same prompt lands on the same side in every snapshot of a growing store."""
    h = int.from_bytes(hashlib.sha256(f"{seed}:{prompt}".encode()).digest()[:8], "big") / 2**64
    return "eval" if h < eval_fraction else "train"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pairs_source(with_votes: bool) -> str:
    """The relation a snapshot reads its pairs from: the `pairs` view, and with `with_votes` the Compare tab's
    decided votes too (`vote_pairs`, the same columns; votes have no prompt, ranking or response ids)."""
    return "(SELECT * FROM pairs UNION ALL BY NAME SELECT * FROM vote_pairs)" if with_votes else "pairs"


def _assign_splits(con: Connection, eval_fraction: float, seed: int, source: str) -> dict[str, str]:
    """The split of each prompt text (text, not id: a vote's prompt has no id, and lands where a stored prompt
    of the same text does)."""
    prompts = dict(
        con.execute(f"SELECT prompt, min(prompt_id) FROM {source} GROUP BY prompt ORDER BY prompt").fetchall()
    )
    if not prompts:
        raise UserError("no pairs in the store yet: import or submit rankings first")
    splits = {text: split_of(text, eval_fraction, seed) for text in prompts}
    # A small store could hash every prompt to one side; keep at least one prompt on each side when possible (the
    # one whose id hashes lowest; a vote's prompt, which has no id, by its text).
    if eval_fraction > 0 and len(prompts) >= 2 and "eval" not in splits.values():
        key = lambda t: hashlib.sha256(f"{seed}:{t if prompts[t] is None else prompts[t]}".encode()).hexdigest()  # noqa: E731
        splits[min(splits, key=key)] = "eval"
    con.execute("CREATE OR REPLACE TEMP TABLE snapshot_split (prompt VARCHAR, split VARCHAR)")
    con.executemany("INSERT INTO snapshot_split VALUES (?, ?)", list(splits.items()))
    return splits


def _pair_filter(
    con: Connection, drop_flagged: bool, rounds: list[int] | None, left_out: list[str] | None = None
) -> str:
    """The WHERE clause's tail that picks the snapshot's pairs; a round the store lacks is a UserError. (A vote has
    no round: a snapshot of some rounds leaves the votes out.) left_out: annotators whose pairs stay out (the temp
    table snapshot_left_out holds them)."""
    where = "AND NOT p.flagged" if drop_flagged else ""
    if left_out:
        con.execute("CREATE OR REPLACE TEMP TABLE snapshot_left_out (annotator VARCHAR)")
        con.executemany("INSERT INTO snapshot_left_out VALUES (?)", [[a] for a in left_out])
        where += " AND p.annotator NOT IN (SELECT annotator FROM snapshot_left_out)"
    if rounds is not None:
        have = {r for (r,) in con.execute("SELECT DISTINCT round FROM pairs").fetchall()}
        if not set(rounds) & have:
            raise UserError(f"no pairs in round(s) {', '.join(map(str, rounds))}: the store has rounds {sorted(have)}")
        where += f" AND p.round IN ({', '.join(str(int(r)) for r in rounds)})"  # ints, not text
    return where


def _write_split(
    con: Connection, folder: Path, split: str, where: str, source: str = "pairs", votes: bool = False
) -> dict:
    """One split's pairs as folder/<split>.parquet; returns its manifest entry (counts and sha256)."""
    path = folder / f"{split}.parquet"
    query = f"""SELECT {", ".join("p." + c.strip() for c in PAIR_COLUMNS.split(","))}
                FROM {source} p JOIN snapshot_split s USING (prompt)
                WHERE s.split = '{split}' {where}
                ORDER BY p.prompt_id NULLS LAST, p.prompt, p.ranking_id, p.chosen_id, p.rejected_id, p.chosen"""
    con.execute(f"COPY ({query}) TO {sql_string(path)} (FORMAT parquet)")
    pairs, prompts, rankings, n_votes = con.execute(
        f"""SELECT count(*), count(DISTINCT prompt), count(DISTINCT ranking_id), count(*) FILTER (ranking_id IS NULL)
            FROM ({query})"""
    ).fetchone()
    entry = {"file": path.name, "pairs": pairs, "prompts": prompts, "rankings": rankings}
    return {**entry, **({"votes": n_votes} if votes else {}), "sha256": _sha256(path)}


# What every snapshot folder says about itself (README.md beside its files): the columns, and how to read it.
SNAPSHOT_README = """# Preference pairs snapshot {name}

Written by rlhf-studio (store/snapshot.py) and read-only: `train.parquet` and `eval.parquet` hold the store's
chosen/rejected pairs at one moment, split by prompt (every pair of a prompt in one split); `manifest.json` holds
the options, the counts and each file's sha256, to check a copy against.

| column | type | meaning |
|---|---|---|
| prompt_id | BIGINT | the prompt's id in the store (empty for a Compare vote) |
| prompt | VARCHAR | the prompt; a conversation is its messages as JSON, `[{{"role": ..., "content": ...}}, ...]` |
| chosen | VARCHAR | the response ranked higher |
| rejected | VARCHAR | the response ranked lower |
| margin | INTEGER | the rank gap between them (1 for neighbours) |
| annotator | VARCHAR | who ranked them |
| source | VARCHAR | where the ranking came from (ui, native, labelstudio, dataset, ...); compare: a vote |
| ranking_id | BIGINT | the ranking the pair comes from (empty for a vote) |
| chosen_id, rejected_id | BIGINT | the responses' ids in the store |
| flagged | BOOLEAN | the ranking was flagged (left in the shown order, or too fast); a vote: blind or multi-turn |
| strength | INTEGER | how much better, 0-3 (Llama 2's levels), where the annotator said |
| answers | JSON | the ranking's other answers (a team's question, `best_good`) as `{{"question": answer}}` |

Read it with `datasets` as it is:

```python
from datasets import load_dataset
pairs = load_dataset("parquet", data_files={{"train": "train.parquet", "eval": "eval.parquet"}})
```
"""


UNPAIRED_README = """# Unpaired preference snapshot {name}

Written by rlhf-studio (store/snapshot.py) and read-only: `train.parquet` and `eval.parquet` hold unpaired rows
(TRL's unpaired preference type) split by prompt; `manifest.json` holds the options, the counts and each file's sha256.

| column | type | meaning |
|---|---|---|
| prompt | VARCHAR | the prompt |
| completion | VARCHAR | one response |
| label | BOOLEAN | true: desirable (thumbs up); false: undesirable |
| ranking_id | BIGINT | the ranking it came from, where given |
"""


def write_snapshot(con: Connection, root: str | os.PathLike, **options) -> Path:
    """`freeze_snapshot` then `record_snapshot` on one connection (a command that holds the store anyway)."""
    folder, manifest = freeze_snapshot(con, root, **options)
    record_snapshot(con, folder, manifest)
    return folder


def record_snapshot(con: Connection, folder: Path, manifest: dict) -> int:
    """Record a frozen snapshot in the store (inside the caller's write); returns its snapshot id."""
    return con.execute(
        "INSERT INTO snapshots (path, content_sha256, manifest) VALUES (?, ?, ?) RETURNING snapshot_id",
        [str(Path(folder).resolve()), manifest["content_sha256"], json.dumps(manifest)],
    ).fetchone()[0]


@dataclass(frozen=True)
class RecordedSnapshot:
    snapshot_id: int
    path: str  # absolute, as recorded
    created_at: str


def list_snapshots(con: Connection) -> list[RecordedSnapshot]:
    """Every recorded snapshot, newest first."""
    rows = con.execute("SELECT snapshot_id, path, created_at FROM snapshots ORDER BY snapshot_id DESC").fetchall()
    return [RecordedSnapshot(sid, path, str(created)) for sid, path, created in rows]


def freeze_snapshot(
    con: Connection,
    root: str | os.PathLike,
    eval_fraction: float = 0.1,
    seed: int = 0,
    drop_flagged: bool = False,
    rounds: list[int] | None = None,
    with_votes: bool = False,
    left_out: dict | None = None,
    thumbs: bool = False,
) -> tuple[Path, dict]:
    """Freeze the current pairs into ROOT/<name>/{train,eval}.parquet + manifest.json; returns (folder, manifest).
    With `rounds`, only the pairs of those rounds (store/rounds.py); the split stays the store's, by prompt. With
    `with_votes`, the Compare tab's decided votes too, one pair each.

    It only reads: run it in a read transaction (`store.connect` + `transaction`, so both splits and the manifest
    see the same pairs), and annotators keep submitting while the files are written; then record the result with
    `record_snapshot` in a short write. The folder
    appears whole (written aside, fsynced, then renamed) and its files are read-only.

    left_out: {"annotators": [...], and why (e.g. "min_gold_accuracy": 0.7)}: those annotators' pairs stay out;
    the manifest records it with the pairs that removed."""
    options = {"drop_flagged": drop_flagged, **({"rounds": sorted(rounds)} if rounds is not None else {})}
    options |= {"with_votes": True} if with_votes else {}
    options |= {"thumbs": True} if thumbs else {}  # and the thumbs (migration 0016), for a trainer on unpaired data
    if left_out is not None:
        annotators = sorted(left_out.get("annotators", []))
        source = pairs_source(with_votes)
        removed = con.execute(
            f"SELECT count(*) FROM {source} p WHERE p.annotator IN (SELECT unnest(?::VARCHAR[]))",
            [annotators],
        ).fetchone()[0]
        options["left_out"] = {**left_out, "annotators": annotators, "pairs_removed": removed}
    return _freeze(con, root, eval_fraction, seed, pairs_source(with_votes), options)


def freeze_pairs_file(
    root: str | os.PathLike, rows: list[dict], origin: dict, eval_fraction: float = 0.1, seed: int = 0
) -> tuple[Path, dict]:
    """A pairs file's rows (prompt, chosen and rejected text, optional margin and ranking_id; checked by the
    caller) frozen as a snapshot exactly as the store's pairs are: the same split rule, files and manifest, which
    names the file it came from (`origin`: its name and sha256). Editing the file later changes no run."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(
            """CREATE TEMP TABLE file_pairs (prompt VARCHAR, chosen VARCHAR, rejected VARCHAR, margin DOUBLE,
               annotator VARCHAR, source VARCHAR, prompt_id BIGINT, ranking_id BIGINT, chosen_id BIGINT,
               rejected_id BIGINT, flagged BOOLEAN, strength INTEGER, answers JSON)"""  # PAIR_COLUMNS, typed
        )
        con.execute(
            """INSERT INTO file_pairs (prompt, chosen, rejected, margin, ranking_id, strength, source, flagged)
               SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::DOUBLE[]),
                      unnest(?::BIGINT[]), unnest(?::INTEGER[]), 'file', false""",
            [[r[k] for r in rows] for k in ("prompt", "chosen", "rejected")]
            + [[r.get(k) for r in rows] for k in ("margin", "ranking_id", "strength")],
        )
        return _freeze(con, root, eval_fraction, seed, "file_pairs", {"drop_flagged": False, "from": origin})
    finally:
        con.close()


UNPAIRED_COLUMNS = ("prompt", "completion", "label", "ranking_id")


def freeze_unpaired_file(
    root: str | os.PathLike, rows: list[dict], origin: dict, eval_fraction: float = 0.1, seed: int = 0
) -> tuple[Path, dict]:
    """An unpaired file's rows (prompt, completion, label: a thumbs up or down; optional ranking_id; checked by the
    caller) frozen as a snapshot whose manifest says `"data": "unpaired"`: the pairs' split rule (by prompt), files
    and hashes."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(
            """CREATE TEMP TABLE file_unpaired (prompt VARCHAR, completion VARCHAR, label BOOLEAN, ranking_id BIGINT,
               prompt_id BIGINT, row_number BIGINT)"""
        )
        con.execute(
            """INSERT INTO file_unpaired (prompt, completion, label, ranking_id, row_number)
               SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::BOOLEAN[]), unnest(?::BIGINT[]),
                      unnest(range(?::BIGINT))""",
            [[r.get(k) for r in rows] for k in UNPAIRED_COLUMNS] + [len(rows)],
        )
        return _freeze(con, root, eval_fraction, seed, "file_unpaired", {"from": origin}, data="unpaired")
    finally:
        con.close()


def _write_unpaired_split(con: Connection, folder: Path, split: str, source: str) -> dict:
    """One split's unpaired rows as folder/<split>.parquet, in the file's order; its manifest entry."""
    path = folder / f"{split}.parquet"
    query = f"""SELECT {", ".join("u." + c for c in UNPAIRED_COLUMNS)} FROM {source} u JOIN snapshot_split s
                USING (prompt) WHERE s.split = '{split}' ORDER BY u.row_number"""
    con.execute(f"COPY ({query}) TO {sql_string(path)} (FORMAT parquet)")
    rows, prompts, desirable = con.execute(
        f"SELECT count(*), count(DISTINCT prompt), count(*) FILTER (label) FROM ({query})"
    ).fetchone()
    return {"file": path.name, "rows": rows, "prompts": prompts, "desirable": desirable, "sha256": _sha256(path)}


def _freeze(
    con: Connection,
    root: str | os.PathLike,
    eval_fraction: float,
    seed: int,
    source: str,
    options: dict,
    data: str = "pairs",
) -> tuple[Path, dict]:
    """The rows of `source` into a snapshot folder under root (see freeze_snapshot); options go into the manifest
    (drop_flagged, rounds, with_votes, from). `data`: the data type (training/pairwise/data_types.py) the manifest
    names: pairs, or unpaired rows."""
    if not 0 <= eval_fraction < 1:
        raise UserError(f"eval fraction must be in [0, 1), got {eval_fraction}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".snapshot-", dir=root))
    try:
        if data == "pairs":
            splits, columns = _frozen_splits(con, tmp, eval_fraction, seed, options, source), PAIR_COLUMNS.split(",")
        else:
            _assign_splits(con, eval_fraction, seed, source)
            splits = {split: _write_unpaired_split(con, tmp, split, source) for split in SPLITS}
            columns = list(UNPAIRED_COLUMNS)
        hashes = [splits[s]["sha256"] + splits[s].get("thumbs", {}).get("sha256", "") for s in SPLITS]
        content = hashlib.sha256("".join(hashes).encode()).hexdigest()
        created = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        manifest = {
            "format": 1,
            "name": f"snap-{created}-{content[:8]}",
            "created_at": created,
            "eval_fraction": eval_fraction,
            "seed": seed,
            "data": data,
            **options,
            "columns": [c.strip() for c in columns],
            "splits": splits,
            "content_sha256": content,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        readme = SNAPSHOT_README if data == "pairs" else UNPAIRED_README
        (tmp / "README.md").write_text(readme.format(name=manifest["name"]))
        for f in tmp.iterdir():
            f.chmod(0o444)
        final = root / manifest["name"]
        if final.exists():  # same second, same content: the snapshot already exists
            shutil.rmtree(tmp)
        else:
            rename_durably(tmp, final)
    except (duckdb.Error, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot write snapshot under {root}: {str(e).splitlines()[0]}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, manifest


def thumbs_source(with_votes: bool) -> str:
    """The relation a snapshot reads its thumbs from (migration 0016): all of them, or without the votes'."""
    return "thumbs" if with_votes else "(SELECT * FROM thumbs WHERE source != 'compare')"


def _frozen_splits(con, folder: Path, eval_fraction, seed, options: dict, source: str) -> dict[str, dict]:
    """Each split's pairs (and with options' `thumbs`, its thumbs: not with `rounds`, which thumbs have none of),
    every prompt on one side for both."""
    thumbs = options.get("thumbs") and options.get("rounds") is None
    tsource = thumbs_source(options.get("with_votes", False))
    both = f"(SELECT prompt, prompt_id FROM {source} UNION ALL SELECT prompt, prompt_id FROM {tsource})"
    _assign_splits(con, eval_fraction, seed, both if thumbs else source)
    left = options.get("left_out", {}).get("annotators")
    where = _pair_filter(con, options["drop_flagged"], options.get("rounds"), left)
    votes = options.get("with_votes", False)
    out = {split: _write_split(con, folder, split, where, source, votes) for split in SPLITS}
    if thumbs:
        for split in SPLITS:
            out[split]["thumbs"] = _write_thumbs(con, folder, split, tsource, where)
    return out


def _write_thumbs(con: Connection, folder: Path, split: str, tsource: str, where: str) -> dict:
    """One split's thumbs as folder/thumbs-<split>.parquet (prompt, completion, label, ranking_id: the unpaired
    columns); its manifest entry. `where`: the pairs' filter (flagged, left-out annotators), which thumbs obey too."""
    path = folder / f"thumbs-{split}.parquet"
    query = f"""SELECT p.prompt, p.completion, p.label, CAST(NULL AS BIGINT) AS ranking_id
                FROM {tsource} p JOIN snapshot_split s USING (prompt)
                WHERE s.split = '{split}' {where} ORDER BY p.prompt, p.completion, p.label, p.annotator, p.source"""
    con.execute(f"COPY ({query}) TO {sql_string(path)} (FORMAT parquet)")
    (rows,) = con.execute(f"SELECT count(*) FROM ({query})").fetchone()
    return {"file": path.name, "rows": rows, "sha256": _sha256(path)}


def verify_snapshot(folder: str | os.PathLike) -> dict:
    """Read a snapshot's manifest and check every file against its hash; returns the manifest."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{folder} is not a snapshot: {e}") from None
    for split, info in manifest["splits"].items():
        for kind, entry in (("", info), (" thumbs", info.get("thumbs"))):
            if entry and _sha256(folder / entry["file"]) != entry["sha256"]:
                raise UserError(f"snapshot {folder.name}: {split}{kind} file does not match its manifest hash")
    return manifest
