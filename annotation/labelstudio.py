"""Label Studio exports -> rankings.

Accepts the JSON export (a list of tasks or one task; pre-1.0 files say `completions`), JSON_MIN and CSV/TSV, for
the Ranker template (rank mode `{"ranker": {"<name>": [ids]}}`, the older flat list `{"ranker": [ids]}`, and
buckets `{"ranker": {"_": [...], "<bucket>": [...]}}` with a user-given bucket order) and the Pairwise template
(`{"selected": "left" | "right"}`, left = the first `toName` field). For tasks `rlhf export-ls` wrote, the answers to
the questions its config asks beside the Ranker (annotation/questions/: strength_1.., edit, tags_1..) come too, from
every format (JSON_MIN and CSV flatten them into the record: a choice as its text, a text area's text).
Cancelled or empty annotations are skipped, and
so are tasks nobody has annotated yet (an export of all tasks holds them: no annotations, or empty CSV cells).
A ranking equal to the order shown, or made in under `FAST_LEAD_TIME_S`, is stored with a flag. Each ranking's
key names the server and project it comes from as far as the input says (see `ranking_keys`).
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from annotation.labelstudio_read import Annotation, exported, read_export
from annotation.questions import Shown, answered_alone, from_ls, settle
from store.conversations import conversation_text
from store.errors import UserError
from store.rankings import RankedItem, RankingIn

FAST_LEAD_TIME_S = 2.0


@dataclass
class LabelConfig:
    """What the importer needs from a labeling config: which field each Pairwise compares, the List field."""

    pairwise: dict[str, tuple[str, str]] = field(default_factory=dict)  # control name -> (left, right) fields
    list_field: str | None = None  # data key of the <List> the Ranker orders
    prompt_field: str = "prompt"


def parse_label_config(xml: str) -> LabelConfig:
    if re.search(r"<!(DOCTYPE|ENTITY)", xml, flags=re.I):  # entity expansion ("billion laughs"), external files
        raise UserError("the labeling config declares a DTD or entities; Label Studio configs have none")
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise UserError(f"the labeling config is not valid XML: {e}") from None
    cfg = LabelConfig()
    for tag in root.iter():
        if tag.tag == "Pairwise":
            names = [n.strip() for n in tag.get("toName", "").split(",")]
            if len(names) == 2:
                cfg.pairwise[tag.get("name", "")] = (names[0], names[1])
        elif tag.tag == "List" and tag.get("value", "").startswith("$"):
            cfg.list_field = tag.get("value")[1:]
    # toName names the Text tags; their value says which data key holds the text.
    values = {t.get("name"): t.get("value", "")[1:] for t in root.iter() if t.get("value", "").startswith("$")}
    cfg.pairwise = {k: (values.get(a, a), values.get(b, b)) for k, (a, b) in cfg.pairwise.items()}
    return cfg


@dataclass
class Parsed:
    rankings: list[RankingIn]
    tasks: int
    annotations: int
    skipped: Counter


def _list_items(data: dict, cfg: LabelConfig, where: str) -> list[tuple[str, str]]:
    """The Ranker's items as (id, text), in the order Label Studio showed them."""
    key = cfg.list_field
    if key is None:
        key = next(
            (
                k
                for k, v in data.items()
                if isinstance(v, list) and v and all(isinstance(x, dict) and "id" in x for x in v)
            ),
            None,
        )
    items = data.get(key) if key else None
    if not isinstance(items, list):
        raise UserError(f"{where}: a Ranker result but no list of items in the task data")
    out = []
    for x in items:
        text = x.get("body", x.get("title")) if isinstance(x, dict) else None
        if not isinstance(text, str) or "id" not in x:
            raise UserError(f"{where}: every item needs an 'id' and a text 'body'")
        if any(i == str(x["id"]) for i, _ in out):
            raise UserError(f"{where}: item id {str(x['id'])!r} appears twice in the task's list")
        out.append((str(x["id"]), text))
    return out


def _ranker_ranks(value: object, bucket_order: list[str] | None, where: str) -> dict[str, int]:
    """item id -> rank (1 = best, equal = tie) from any of the three Ranker result shapes."""
    if isinstance(value, list):  # older flat form: ids best first
        _once([str(i) for i in value], where)
        return {str(i): n for n, i in enumerate(value, 1)}
    if not isinstance(value, dict):
        raise UserError(f"{where}: unreadable Ranker value {value!r:.60}")
    columns = {k: v for k, v in value.items() if k != "_"}
    if bucket_order:
        unknown = [k for k in columns if k not in bucket_order]
        if unknown:
            raise UserError(f"{where}: bucket {unknown[0]!r} is not in --bucket-order {','.join(bucket_order)}")
        present = [b for b in bucket_order if columns.get(b)]
        _once([str(i) for b in present for i in columns[b]], where)
        return {str(i): present.index(b) + 1 for b in present for i in columns[b]}
    if len(columns) == 1 and "_" not in value:
        ids = next(iter(columns.values()))
        _once([str(i) for i in ids], where)
        return {str(i): n for n, i in enumerate(ids, 1)}
    raise UserError(
        f"{where}: this export uses Ranker buckets ({', '.join(sorted(columns))}); pass --bucket-order "
        "with the buckets best first, e.g. --bucket-order " + ",".join(sorted(columns))
    )


def _once(ids: list[str], where: str) -> None:
    seen = set()
    for i in ids:
        if i in seen:
            raise UserError(f"{where}: item {i!r} is ranked twice")
        seen.add(i)


def _ranker(ann: Annotation, value: object, cfg: LabelConfig, bucket_order, where: str) -> list[RankedItem]:
    items = _list_items(ann.data, cfg, where)
    ranks = _ranker_ranks(value, bucket_order, where)
    known = {i for i, _ in items}
    missing = [i for i in ranks if i not in known]
    if missing:
        raise UserError(f"{where}: ranked item {missing[0]!r} is not among the task's items")
    return [
        RankedItem(text=text, rank=ranks[i], shown_position=pos, response_id=_store_id(i))
        for pos, (i, text) in enumerate(items)
        if i in ranks
    ]


def _store_id(item_id: str) -> int | None:
    """Items written by `rlhf export-ls` carry the response id as 'r<id>'."""
    m = re.fullmatch(r"r(\d+)", item_id)
    return int(m.group(1)) if m else None


def _pairwise(ann: Annotation, from_name: str, value: dict, cfg: LabelConfig, where: str) -> list[RankedItem]:
    left, right = cfg.pairwise.get(from_name) or ("answer1", "answer2")
    if left not in ann.data or right not in ann.data:
        texts = [k for k, v in ann.data.items() if isinstance(v, str) and k != cfg.prompt_field]
        if len(texts) != 2:
            raise UserError(f"{where}: a Pairwise result but the task has no answer1/answer2 fields")
        left, right = texts
    selected = value.get("selected")
    if selected in ("left", left):
        ranks = (1, 2)
    elif selected in ("right", right):
        ranks = (2, 1)
    else:
        return []
    return [
        RankedItem(text=str(ann.data[left]), rank=ranks[0], shown_position=0),
        RankedItem(text=str(ann.data[right]), rank=ranks[1], shown_position=1),
    ]


def _flags(items: list[RankedItem], lead_time: float | None, pairwise: bool) -> list[str]:
    flags = []
    by_rank = [it.shown_position for it in sorted(items, key=lambda it: it.rank)]
    if not pairwise and len(items) > 1 and len({it.rank for it in items}) == len(items) and by_rank == sorted(by_rank):
        flags.append("shown_order")  # Label Studio saves the original order when the annotator never dragged
    if lead_time is not None and lead_time < FAST_LEAD_TIME_S:
        flags.append("fast")
    return flags


def to_ranking(ann: Annotation, cfg: LabelConfig, bucket_order: list[str] | None) -> RankingIn | str:
    """The ranking this annotation makes, or the reason it is skipped."""
    where = f"task {ann.task_id} annotation {ann.annotation_id}"
    if not ann.annotated:
        return "not annotated"
    if ann.cancelled:
        return "cancelled"
    if not ann.results:
        return "empty"
    items, pairwise = _ranked_items(ann, cfg, bucket_order, where)
    if items is None:
        return "unsupported"
    if len(items) < 2:
        return "no preference"
    prompt = _prompt_text(ann, cfg, where)
    key, same_as, same_whatever = _keys(ann, prompt, items)
    ranking = RankingIn(
        prompt=prompt,
        items=items,
        annotator=ann.annotator,
        source="labelstudio",
        external_key=key,
        same_as=same_as,
        same_whatever=same_whatever,
        lead_time_s=ann.lead_time,
        flags=_flags(items, ann.lead_time, pairwise),
    )
    ranking.items = _dense(ranking.items)
    if problem := ranking.problem():
        raise UserError(f"{where}: {problem}")
    if not pairwise and exported(ann.data):
        _with_answers(ranking, ann, where)
    return ranking


def _ranked_items(
    ann: Annotation, cfg: LabelConfig, bucket_order: list[str] | None, where: str
) -> tuple[list[RankedItem] | None, bool]:
    """The annotation's ranked responses (None: no Ranker or Pairwise result), and whether they came from Pairwise."""
    items, pairwise = None, False
    for r in ann.results:
        value = r.get("value")
        if isinstance(value, dict) and "ranker" in value:
            items = _ranker(ann, value["ranker"], cfg, bucket_order, where)
        elif isinstance(value, dict) and "selected" in value:
            items, pairwise = _pairwise(ann, str(r.get("from_name", "")), value, cfg, where), True
        if items is not None:
            break
    if not pairwise and exported(ann.data) and answered_alone(ann.results, where):
        # an answer that needs no order (all bad): it goes with every response the task showed, tied, whatever the
        # Ranker holds (Label Studio saves the shown order when nobody dragged)
        listed = _list_items(ann.data, cfg, where)
        items = [
            RankedItem(text=t, rank=1, shown_position=n, response_id=_store_id(i)) for n, (i, t) in enumerate(listed)
        ]
    return items, pairwise


def _prompt_text(ann: Annotation, cfg: LabelConfig, where: str) -> str:
    prompt = ann.data.get(cfg.prompt_field)
    if isinstance(prompt, list):  # a project of its own whose tasks hold the conversation as messages
        try:
            prompt = conversation_text(prompt)
        except UserError as e:
            raise UserError(f"{where}: '{cfg.prompt_field}': {e}") from None
    if not isinstance(prompt, str):
        raise UserError(f"{where}: no '{cfg.prompt_field}' text in the task data")
    return prompt


def _keys(ann: Annotation, prompt: str, items: list[RankedItem]) -> tuple[str, list[str], list[str]]:
    if ann.annotation_id is not None:
        return ranking_keys(ann)
    # a hand-made export without annotation ids: the content is the identity
    canon = json.dumps([prompt, [(it.text, it.rank) for it in items], ann.annotator], ensure_ascii=False)
    return "ls:sha256:" + hashlib.sha256(canon.encode()).hexdigest()[:32], [], []


def _with_answers(ranking: RankingIn, ann: Annotation, where: str) -> None:
    """The questions asked beside the Ranker of a task `rlhf export-ls` wrote (its config asks them:
    annotation/questions/), onto the ranking; a project's own controls that happen to share a name are not read."""
    items = ranking.items
    shown = Shown(
        texts=[it.text for it in items],
        ranks=[it.rank for it in items],
        numbers=[it.shown_position + 1 for it in items],
    )
    for name, answer in from_ls(ann.results, shown, where).items():
        ranking.answers[name] = answer
    settle(ranking, where)
    ranking.flags = _flags(ranking.items, ann.lead_time, False)  # as settled: tied responses are no order
    if problem := ranking.problem():
        raise UserError(f"{where}: {problem}")


def server_url(url: str) -> str:
    """A Label Studio URL as the server it names: scheme://host:port, lowercased, without credentials, path or
    trailing slash, so every spelling of one server gives the same ranking keys."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        port = None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port is None:
        raise UserError("not a Label Studio URL: give http[s]://host[:port]")  # not echoed: it may hold a password
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # IPv6, lowercased by urlsplit
    return f"{parts.scheme.lower()}://{host}:{port}"


def _like(text: str) -> str:
    """text as a LIKE pattern matching only itself: a hand-made export's task id 'task_1' is no wildcard."""
    return re.sub(r"[\\%_]", lambda m: "\\" + m.group(), text)


def ranking_keys(ann: Annotation) -> tuple[str, list[str], list[str]]:
    """(the ranking's external key, LIKE patterns of keys it may already be stored under, those of them under
    which a stored ranking is this one even with other content).

    The key names where the annotation lives, so two servers or projects with the same task and annotation ids
    stay apart: 'ls:<server>/p<project>:<task>:<annotation>' for a live pull (server as `server_url` writes it,
    e.g. 'ls:http://127.0.0.1:8080/p3:17:101'), 'ls:file/p<project>:<task>:<annotation>' for an export file
    whose annotations name their project (the JSON export does; no file names its server), and the key of
    before origins were recorded, 'ls:<task>:<annotation>', for one that does not (JSON_MIN, CSV, TSV).
    Where one of two keys leaves the server or project unknown, the same task and annotation ids with equal
    content are the same annotation: a file after a live pull of its project, the JSON after the CSV, an old
    export into a store keyed the old way all add nothing. The price: a file is told apart from the same
    project number on another server only by its content (equal content is then one judgement, stored once).
    Where the file names no project at all, the same ids of the same prompt are the same annotation whatever the
    content: other content is that annotation edited in Label Studio since, a conflict (the stored one is kept),
    not a second judgement. (A file that names its project, over a store of keys that name none, still takes other
    content as another project's annotation: `test_an_old_store_takes_a_new_project_but_not_the_same_export_again`.)"""
    task, annotation = str(ann.task_id), str(ann.annotation_id)
    ids = f"{_like(task)}:{_like(annotation)}"
    if ann.project is None:
        return f"ls:{task}:{annotation}", [f"ls:%:{ids}"], [f"ls:%:{ids}"]  # the same ids from any origin
    project = _like(ann.project)
    # a pull: an export file of its project; a file: its project pulled from any server
    elsewhere = f"ls:file/p{project}:{ids}" if ann.server else f"ls:%/p{project}:{ids}"
    key = f"ls:{ann.server or 'file'}/p{ann.project}:{task}:{annotation}"
    return key, [f"ls:{ids}", elsewhere], []


def _dense(items: list[RankedItem]) -> list[RankedItem]:
    """Renumber ranks 1..n keeping ties, so a partial ranking still reads 'rank r of the items ranked'."""
    order = {r: n for n, r in enumerate(sorted({it.rank for it in items}), 1)}
    for it in items:
        it.rank = order[it.rank]
    return items


def parse_export(
    text: str,
    name: str,
    config_xml: str | None = None,
    bucket_order: list[str] | None = None,
    pulled_from: tuple[str, int] | None = None,
) -> Parsed:
    """Every ranking in a Label Studio export, with counts of what was skipped and why. `pulled_from`: the
    (server, project id) of a live pull, which its keys name."""
    cfg = parse_label_config(config_xml) if config_xml else LabelConfig()
    annotations = read_export(text, name)
    if pulled_from:
        server = server_url(pulled_from[0])
        for ann in annotations:
            ann.server, ann.project = server, str(pulled_from[1])
    rankings, skipped = [], Counter()
    seen = set()
    for ann in annotations:
        if ann.annotation_id is not None:
            key = (str(ann.task_id), str(ann.annotation_id))
            if key in seen:
                raise UserError(f"{name}: task {key[0]} annotation {key[1]} appears twice in the file")
            seen.add(key)
        got = to_ranking(ann, cfg, bucket_order)
        if isinstance(got, str):
            skipped[got] += 1
        else:
            rankings.append(got)
    if skipped["unsupported"] and not rankings:
        kinds = sorted({str(r.get("type", r.get("from_name"))) for a in annotations for r in a.results})
        raise UserError(
            f"{name}: unsupported Label Studio template (result types: {', '.join(kinds)}); "
            "rlhf-studio imports Ranker and Pairwise results"
        )
    tasks = len({a.task_id for a in annotations})
    return Parsed(rankings=rankings, tasks=tasks, annotations=sum(a.annotated for a in annotations), skipped=skipped)
