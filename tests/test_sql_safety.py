"""No SQL is built by formatting values into it: values go in as bound parameters (`?`). This test reads the source
of every package and finds each f-string that holds SQL; what it formats in must be one of the reviewed names below
(constant fragments, names from our own schema, a quoted path where DuckDB takes no parameter). A new one fails
here until someone looks at it. Plus: hostile text goes through the store verbatim."""

import ast
import re
from pathlib import Path

from tests.conftest import query, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|COPY|CREATE|EXPORT|FROM|WHERE)\b")

# What may appear inside {} of an f-string of SQL, and why it is not a value from a user.
REVIEWED = {
    "RANKABLE": "a constant WHERE fragment (store/assignments.py)",
    "mine": "one of two constant fragments: '' or the NOT EXISTS over the annotator's own assignments",
    "PAIR_COLUMNS": "a constant column list",
    "', '.join(('p.' + c.strip() for c in PAIR_COLUMNS.split(',')))": "the constant column list, prefixed",
    "', '.join(('u.' + c for c in UNPAIRED_COLUMNS))": "the unpaired column list, prefixed",
    "where": "one of two constant fragments ('' or 'AND NOT flagged')",
    "split": "one of SPLITS, the constant ('train', 'eval')",
    "query": "a SELECT assembled from the constants above",
    "pairs_query(drop_flagged)": "a SELECT assembled from the constants above",
    "pairs_query(drop_flagged, with_votes)": "a SELECT assembled from the constants above",
    "source": "the view `pairs`, the union of `pairs` and `vote_pairs` (pairs_source), or file_pairs, file_unpaired",
    "order": "a constant ORDER BY list (store/pairs.py)",
    "tsource": "the view `thumbs`, or it without the votes' rows (store/snapshot.py::thumbs_source)",
    "column": "an id column name parsed from our own schema files (store/backup.py)",
    "holder": "a table name read from DuckDB's own catalog (store/backup.py)",
    "fmt": "one of the constant COPY option lists of store/pairs.py",
    "t": "a table name read from DuckDB's own catalog",
    "table": "a table name parsed from our own schema files",
    "name": "a sequence name parsed from our own schema files",
    "int(start)": "an integer",
    "int(version)": "an integer: the schema version store/schema_file.py renders",
    "sequence": "a sequence name, a constant at every call of store.prompts.next_ids",
    "sql_string(tmp)": "a path, quoted by store.db.sql_string: COPY ... TO takes no parameter",
    "sql_string(path)": "a path, quoted by store.db.sql_string: COPY ... TO takes no parameter",
    "sql_string(partial.resolve())": "a path, quoted by store.db.sql_string: EXPORT DATABASE takes no parameter",
}


def sql_fstrings() -> list[tuple[str, int, str]]:
    found = []
    for pkg in ("app", "annotation", "training", "store"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if not isinstance(node, ast.JoinedStr):
                    continue
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
                if SQL.search(text):
                    found += [
                        (str(f.relative_to(ROOT)), node.lineno, ast.unparse(v.value))
                        for v in node.values
                        if isinstance(v, ast.FormattedValue)
                    ]
    return found


def test_sql_formats_in_only_reviewed_names():
    found = sql_fstrings()
    assert len(found) >= 10  # the scan does find the store's SQL
    unreviewed = [f"{f}:{line}: {{{expr}}}" for f, line, expr in found if expr not in REVIEWED]
    assert not unreviewed, "SQL built by formatting: use a ? parameter, or review it here\n" + "\n".join(unreviewed)


def test_sql_and_quotes_in_text_are_stored_as_text(cli, db, tmp_path):
    hostile = "'; DROP TABLE rankings; --"
    rows = [{"prompt": hostile, "responses": ["a ' quote", 'a " double'], "ranks": [1, 2], "annotator": "o'brien"}]
    out_dir = tmp_path / "it's here"
    out_dir.mkdir()
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", rows)))[0] == 0
    assert cli("pairs", "--out", str(out_dir / "p.jsonl"))[0] == 0  # a quote in the path COPY writes to
    assert query(db, "SELECT prompt, chosen, rejected, annotator FROM pairs") == [
        (hostile, "a ' quote", 'a " double', "o'brien")
    ]
    assert (out_dir / "p.jsonl").read_text().count("DROP TABLE") == 1
