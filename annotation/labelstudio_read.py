"""Label Studio's export formats read into one shape, `Annotation` (annotation/labelstudio.py maps each to a ranking).

The JSON export (a list of tasks or one task; pre-1.0 files say `completions`), JSON_MIN, and CSV/TSV (the SDK
writes TSV as result.csv). JSON_MIN and CSV flatten the task data and each control's value into one record; for
tasks `rlhf export-ls` wrote, the answers to its questions come back from the record too (annotation/questions/).
"""

from __future__ import annotations

from dataclasses import dataclass

from annotation.files import loads_json, read_csv
from annotation.questions import flat_result
from store.errors import UserError

# Keys JSON_MIN and CSV add beside the task data (label_studio_sdk converter).
_META_KEYS = {"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time", "agreement", "history"}


@dataclass
class Annotation:
    """One annotation of one task, whatever the export format it came from."""

    task_id: object
    annotation_id: object
    data: dict
    results: list[dict]  # each with 'from_name' and 'value'
    annotator: str
    lead_time: float | None = None
    cancelled: bool = False
    annotated: bool = True  # False: a task without annotations, which an export of all tasks also lists
    project: str | None = None  # the Label Studio project id, when the input says it
    server: str | None = None  # scheme://host:port of a live pull; a file does not say its server


def exported(data: dict) -> bool:
    """Whether a task's data is one `rlhf export-ls` wrote (annotation/labelstudio_export.py::ranker_tasks gives
    each its `turns`): only such a task's annotations carry answers to our questions."""
    return "turns" in data


def _annotator(completed_by: object) -> str:
    if isinstance(completed_by, dict):
        completed_by = completed_by.get("email") or completed_by.get("id")
    return f"ls:{completed_by}" if completed_by not in (None, "") else "ls:unknown"


def _float(x: object) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past float's range
        return None


def _project(*candidates: object) -> str | None:
    """The first project id given as a whole number (the JSON export puts one on every annotation)."""
    for p in candidates:
        if (isinstance(p, int) and not isinstance(p, bool)) or (isinstance(p, str) and p.isdigit()):
            return str(p)
    return None


def _from_json_tasks(tasks: list) -> list[Annotation]:
    out = []
    for n, task in enumerate(tasks, 1):
        if not isinstance(task, dict):
            raise UserError(f"task {n}: expected a JSON object, got {type(task).__name__}")
        anns = task.get("annotations", task.get("completions"))
        if not isinstance(anns, list) or not isinstance(task.get("data"), dict):
            raise UserError(f"task {task.get('id', n)}: needs 'data' and an 'annotations' list")
        if not anns:
            out.append(Annotation(task.get("id", n), None, task["data"], [], _annotator(None), annotated=False))
        for a in anns:
            if not isinstance(a, dict):
                raise UserError(f"task {task.get('id', n)}: an annotation is not a JSON object")
            results = a.get("result") or []
            out.append(
                Annotation(
                    task_id=task.get("id", n),
                    annotation_id=a.get("id"),
                    data=task["data"],
                    results=[r for r in results if isinstance(r, dict)],
                    annotator=_annotator(a.get("completed_by")),
                    lead_time=_float(a.get("lead_time")),
                    cancelled=bool(a.get("was_cancelled") or a.get("skipped")),
                    project=_project(a.get("project"), task.get("project")),
                )
            )
    return out


def _is_control_value(v: object) -> bool:
    return (
        isinstance(v, list) and bool(v) and all(isinstance(x, dict) and ("ranker" in x or "selected" in x) for x in v)
    )


def _from_min_records(records: list[dict]) -> list[Annotation]:
    """JSON_MIN / CSV rows: task data flattened to the top level, one key per control name."""
    out = []
    for n, rec in enumerate(records, 1):
        if not isinstance(rec, dict):
            raise UserError(f"record {n}: expected a JSON object, got {type(rec).__name__}")
        results = [{"from_name": k, "value": x} for k, v in rec.items() if _is_control_value(v) for x in v]
        # a task `rlhf export-ls` wrote: its questions' answers are flattened into the record too
        try:
            flat = {k: flat_result(k, v) for k, v in rec.items()} if exported(rec) else {}
        except UserError as e:
            raise UserError(f"record {n}: {e}") from None
        answers = {k: r for k, r in flat.items() if r is not None}
        results += list(answers.values())
        data = {k: v for k, v in rec.items() if k not in _META_KEYS and k not in answers and not _is_control_value(v)}
        annotation_id = rec.get("annotation_id")
        annotation_id = None if annotation_id == "" else annotation_id  # CSV writes a missing id as an empty cell
        out.append(
            Annotation(
                task_id=rec.get("id", n),
                annotation_id=annotation_id,
                data=data,
                results=results,
                annotator=_annotator(rec.get("annotator")),
                lead_time=_float(rec.get("lead_time")),
                annotated=bool(results) or annotation_id is not None,  # an unannotated task has neither
            )
        )
    return out


def _csv_records(text: str, sep: str, name: str) -> list[dict]:
    header, rows = read_csv(text, name, delimiter=sep)
    if not header:
        raise UserError(f"{name}: the CSV file has no header row")
    records = []
    for n, row in rows:
        rec = {}
        for k, v in row.items():
            if k is None:
                raise UserError(f"{name} row {n}: more values than columns")
            v = v or ""
            rec[k] = loads_json(v, f"{name} row {n} column {k}") if v[:1] in ("[", "{") else v
        records.append(rec)
    return records


def read_export(text: str, name: str) -> list[Annotation]:
    """Detect the format from the file name and content and return its annotations."""
    lower = name.lower()
    if lower.endswith((".csv", ".tsv")):
        header = text.split("\n", 1)[0]
        sep = "\t" if header.count("\t") > header.count(",") else ","  # the SDK writes TSV as result.csv
        records = _csv_records(text, sep, name)
        if records and "prompt" not in records[0]:
            cols = ", ".join(list(records[0])[:8])
            raise UserError(f"{name}: the CSV has no 'prompt' column (columns: {cols})")
        return _from_min_records(records)
    obj = loads_json(text, name)
    tasks = [obj] if isinstance(obj, dict) else obj
    if not isinstance(tasks, list):
        raise UserError(f"{name}: expected a Label Studio export (a list of tasks), got {type(obj).__name__}")
    if not tasks:
        raise UserError(f"{name}: the export holds no tasks")
    if all(isinstance(t, dict) and ("annotations" in t or "completions" in t) for t in tasks):
        return _from_json_tasks(tasks)
    if all(isinstance(t, dict) and "data" in t and len(t) <= 3 for t in tasks):
        raise UserError(f"{name}: these are tasks without annotations (an import file, not an export)")
    return _from_min_records(tasks)
