"""Imports into the store: parse the whole file first, then write it in one transaction (all or nothing)."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from annotation.files import loads_json, read_text
from annotation.judgement import write_rankings
from annotation.labelstudio import parse_export, server_url
from annotation.native import parse_native
from store.db import StoreRef, write
from store.errors import UserError
from store.imports import drop_import, open_import, set_import_summary
from store.rankings import RankingIn


@dataclass
class ImportSummary:
    tasks: int = 0
    annotations: int = 0
    added: int = 0
    already: int = 0
    pairs: int = 0
    flagged: int = 0
    skipped: Counter = field(default_factory=Counter)
    conflicts: list[str] = field(default_factory=list)  # keys stored with other content, left as stored

    def line(self) -> str:
        skipped = sum(self.skipped.values())
        why = f" ({', '.join(f'{k} {v}' for k, v in sorted(self.skipped.items()))})" if skipped else ""
        return (
            f"tasks {self.tasks}, annotations {self.annotations}, rankings added {self.added}, "
            f"pairs added {self.pairs}, already imported {self.already}, skipped {skipped}{why}, "
            f"flagged {self.flagged}{self._conflicts()}"
        )

    def _conflicts(self) -> str:
        """Said only when there are some, so the line of every clean import reads as it always has."""
        if not self.conflicts:
            return ""
        return f", conflicts {len(self.conflicts)} (first {self.conflicts[0]}; the stored ranking is kept)"

    def as_dict(self) -> dict:
        return {
            "tasks": self.tasks,
            "annotations": self.annotations,
            "added": self.added,
            "already": self.already,
            "pairs": self.pairs,
            "flagged": self.flagged,
            "skipped": dict(self.skipped),
            "conflicts": list(self.conflicts),
        }


def store_rankings(
    db: StoreRef,
    rankings: list[RankingIn],
    summary: ImportSummary,
    source: str,
    origin: str,
    content_sha256: str | None,
) -> ImportSummary:
    """One transaction: the import record and every new ranking, or nothing."""
    with write(db) as con:
        import_id = open_import(con, source, origin, content_sha256)
        result = write_rankings(con, rankings, import_id=import_id)
        summary.added, summary.already, summary.conflicts = result.added, result.already, result.conflicts
        summary.pairs, summary.flagged = result.pairs, result.flagged
        if result.added:
            set_import_summary(con, import_id, summary.as_dict())
        else:  # a re-import adds no row at all, not even an import record
            drop_import(con, import_id)
    return summary


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def import_native(db: StoreRef, path: str | os.PathLike) -> ImportSummary:
    text = read_text(path)
    rankings = parse_native(text, Path(path).name)
    summary = ImportSummary(tasks=len(rankings), annotations=len(rankings))
    return store_rankings(db, rankings, summary, "native", str(path), _sha(text))


def import_preferences(db: StoreRef, path: str | os.PathLike, fmt: str = "auto", annotator: str = "") -> ImportSummary:
    """`rlhf import`: a preference file in any shape annotation/preference_files.py reads (a native JSONL file goes
    the native way, its errors naming lines). Every row or nothing; a re-import adds nothing."""
    from annotation.preference_files import FORMATS, SOURCE, detect, parse_rows, read_rows

    path = Path(path)
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if path.suffix == ".jsonl" and path.is_file() and fmt in ("auto", "native") and not annotator:
        first = next((line for line in read_text(path).splitlines() if line.strip()), "")
        try:  # a first line that is no object is the native parser's to name
            obj = loads_json(first, path.name)
            native = fmt == "native" or not isinstance(obj, dict) or detect(obj) == "native"
        except UserError:
            native = True
        if native:
            return import_native(db, path)
    rows = read_rows(path)
    rankings = parse_rows(rows, path.name, fmt, annotator)
    sha = _sha(read_text(path)) if path.is_file() and path.suffix in (".jsonl", ".json") else None
    summary = ImportSummary(tasks=len(rows), annotations=len(rankings))
    return store_rankings(db, rankings, summary, SOURCE, str(path), sha)


def import_labelstudio_text(
    db: StoreRef,
    text: str,
    name: str,
    origin: str,
    config_xml: str | None = None,
    bucket_order: list[str] | None = None,
    pulled_from: tuple[str, int] | None = None,
) -> ImportSummary:
    parsed = parse_export(text, name, config_xml=config_xml, bucket_order=bucket_order, pulled_from=pulled_from)
    summary = ImportSummary(tasks=parsed.tasks, annotations=parsed.annotations, skipped=parsed.skipped)
    return store_rankings(db, parsed.rankings, summary, "labelstudio", origin, _sha(text))


def import_labelstudio_file(
    db: StoreRef,
    path: str | os.PathLike,
    config: str | os.PathLike | None = None,
    bucket_order: list[str] | None = None,
) -> ImportSummary:
    config_xml = read_text(config) if config else None
    return import_labelstudio_text(db, read_text(path), Path(path).name, str(path), config_xml, bucket_order)


def import_labelstudio_url(
    db: StoreRef,
    url: str,
    project: int,
    api_key: str,
    bucket_order: list[str] | None = None,
    allow_private: bool = False,
) -> ImportSummary:
    """Pull a project's JSON export live with label-studio-sdk (Label Studio 1.2x: a personal access token).
    allow_private: the server may be at a private-range address (annotation/labelstudio_live.py)."""
    from annotation.labelstudio_live import fetch_export

    server_url(url)  # a malformed URL is one clear line before any network call
    tasks, config_xml = fetch_export(url, project, api_key, allow_private=allow_private)
    return import_labelstudio_tasks(db, tasks, url, project, config_xml, bucket_order)


def import_labelstudio_tasks(
    db: StoreRef,
    tasks: list,
    url: str,
    project: int,
    config_xml: str | None = None,
    bucket_order: list[str] | None = None,
) -> ImportSummary:
    """Tasks pulled from project `project` of the server at `url`, as its JSON export holds them; their keys
    name that server and project. The origin recorded leaves out any credentials in the URL."""
    server = server_url(url)
    return import_labelstudio_text(
        db,
        json.dumps(tasks),
        f"{server} project {project}",
        f"{server}#project={project}",
        config_xml,
        bucket_order,
        pulled_from=(server, project),
    )
