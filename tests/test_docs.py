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


LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def broken_links(doc: Path, text: str) -> list[str]:
    """The Markdown link targets in `text` (not http(s), mailto or an #anchor; not inside code) that name no file
    relative to `doc`'s folder."""
    text = re.sub(r"```.*?```", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text)
    out = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        if not (doc.parent / target.split("#", 1)[0]).resolve().is_file():
            out.append(target)
    return out


def test_a_broken_link_is_found_and_code_is_not_a_link(tmp_path):
    (tmp_path / "there.md").write_text("x")
    doc = tmp_path / "doc.md"
    text = "[a](there.md) [b](gone.md#part) `[c](nope.md)` [d](https://x.org/y) [e](#top)\n```\n[f](no.md)\n```"
    assert broken_links(doc, text) == ["gone.md#part"]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = [
        f"{doc.relative_to(ROOT)}: {target}"
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for target in broken_links(doc, doc.read_text())
    ]
    assert not broken, "\n".join(broken)
