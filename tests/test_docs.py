"""Every `path::name` the docs cite exists: the file, and the function, class, method or name in it. A bare file
name (`train.py::evaluate`) is the last full path with that file name cited before it in the same document."""

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITE = re.compile(r"([\w./-]*\.py)::([\w.]+)")


@cache
def _names(path: Path) -> frozenset[str]:
    """What `path::name` may name in a Python file: functions, classes, Class.member, and assigned names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
            if isinstance(node, ast.ClassDef):
                for child in node.body:
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                        found.add(f"{node.name}.{child.name}")
                    elif isinstance(child, ast.AnnAssign | ast.Assign):
                        targets = [child.target] if isinstance(child, ast.AnnAssign) else child.targets
                        found |= {f"{node.name}.{t.id}" for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(found)


def cited(text: str) -> list[tuple[str, str]]:
    """(path, name) for each citation in a document, bare file names resolved to the last full path cited."""
    last: dict[str, str] = {}
    out = []
    for m in CITE.finditer(text):
        path, name = m.group(1), m.group(2).rstrip(".")
        if "/" in path:
            last[Path(path).name] = path
        else:
            path = last.get(path, path)
        out.append((path, name))
    return out


def test_cited_resolves_bare_file_names_to_the_last_full_path():
    text = "`training/ppo/train.py::train`, then `train.py::finish`; `training/rloo/train.py::x` and `train.py::y.`"
    assert cited(text) == [
        ("training/ppo/train.py", "train"),
        ("training/ppo/train.py", "finish"),
        ("training/rloo/train.py", "x"),
        ("training/rloo/train.py", "y"),
    ]


def test_every_path_and_name_the_docs_cite_exists():
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path, name in cited(doc.read_text()):
            file = ROOT / path
            if not file.is_file():
                missing.append(f"{doc.relative_to(ROOT)}: {path} (no such file)")
            elif name not in _names(file):
                missing.append(f"{doc.relative_to(ROOT)}: {path}::{name}")
    assert not missing, "\n".join(missing)
