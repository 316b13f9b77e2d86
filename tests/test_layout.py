"""The architecture's one-way imports (DESIGN.md): app -> annotation -> store, app -> training; nothing imports app;
training never opens the database; store and annotation do not import torch when they are imported."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "app": {"app", "annotation", "store", "training"},
    "annotation": {"annotation", "store"},
    "store": {"store"},
    "training": {"training"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_one_way(package):
    for path in (ROOT / package).rglob("*.py"):
        ours = _imports(path) & set(ALLOWED)
        assert ours <= ALLOWED[package], f"{path.relative_to(ROOT)} imports {sorted(ours - ALLOWED[package])}"


def test_training_never_opens_the_database():
    for path in (ROOT / "training").rglob("*.py"):
        assert "duckdb" not in _imports(path), path


@pytest.mark.integration
def test_store_and_annotation_import_without_torch():
    code = (
        "import sys, importlib, pkgutil\n"
        "for pkg in ('store', 'annotation'):\n"
        "    p = importlib.import_module(pkg)\n"
        "    for m in pkgutil.iter_modules(p.__path__):\n"
        "        importlib.import_module(f'{pkg}.{m.name}')\n"
        "print('torch' in sys.modules, 'gradio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def _full_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_trainer_imports_another_trainers_package():
    """Shared helpers live at training/'s top level (models.py, engine.py, and the trainers on prompts' loaders.py,
    rollout.py, policy_losses.py, ...); a trainer package (one with a train.py) imports none of the others, so
    adding or removing a trainer touches no other trainer."""
    trainers = sorted(p.parent.name for p in (ROOT / "training").glob("*/train.py"))
    assert {"reward", "ppo"} <= set(trainers)
    for name in trainers:
        others = {f"training.{t}" for t in trainers if t != name}
        for path in (ROOT / "training" / name).rglob("*.py"):
            bad = {m for m in _full_imports(path) if any(m == o or m.startswith(o + ".") for o in others)}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_every_trainer_is_in_the_registry():
    from training.registry import TRAINERS

    packages = {p.parent.name for p in (ROOT / "training").glob("*/train.py")}
    assert {t.module for t in TRAINERS.values()} == {f"training.{p}.train" for p in packages}
    assert all(t.config.KIND == kind for kind, t in TRAINERS.items())


def test_no_function_in_training_is_over_60_lines():
    """Each trainer's loop reads as its named steps on one screen; stop, checkpoint, resume and the final save of
    the trainers on pairs live once, in training/engine.py."""
    long = []
    for path in (ROOT / "training").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}::{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long
