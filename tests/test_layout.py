"""The architecture's one-way imports (docs/architecture.md): app -> annotation -> store, app -> training; nothing
imports app; training never opens the database; store and annotation do not import torch when they are imported."""

import ast
import re
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


def _imports_of(node: ast.AST) -> set[str]:
    """The top-level packages one import statement names (none for any other node)."""
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module.split(".")[0]}
    return set()


def _imports(path: Path) -> set[str]:
    return set().union(*map(_imports_of, ast.walk(ast.parse(path.read_text()))))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_one_way(package):
    for path in (ROOT / package).rglob("*.py"):
        ours = _imports(path) & set(ALLOWED)
        assert ours <= ALLOWED[package], f"{path.relative_to(ROOT)} imports {sorted(ours - ALLOWED[package])}"


def test_only_the_store_opens_connections_and_transactions():
    """Outside store/, nothing names DuckDB, imports store.db's connect or transaction, or runs BEGIN, COMMIT or
    ROLLBACK: reads go through store.db.read and writes through store.db.write, the store's two doors (a
    transaction each, opened and closed in store/db.py)."""
    bad = []
    for package in ("app", "annotation", "training", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            where = str(path.relative_to(ROOT))
            bad += [f"{where} imports duckdb" for m in _full_imports(path) if m.split(".")[0] == "duckdb"]
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "store.db":
                    bad += [f"{where} imports {a.name}" for a in node.names if a.name in ("connect", "transaction")]
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if re.search(r"\b(BEGIN|COMMIT|ROLLBACK)\b", node.value):
                        bad.append(f"{where}:{node.lineno} runs {node.value[:40]!r}")
    assert not bad, bad


def test_a_judgement_is_written_by_one_path():
    """Outside store/, only annotation/judgement.py stores imported rankings (store.rankings.insert_rankings) and
    only the session (the Annotate tab's submit) stores one ranking (add_ranking), and it writes the answers through
    annotation/judgement.py: every question's `write` runs for the UI and every import alike. Any mention counts
    (an import by any form, an attribute, a name), and a star import of store.rankings is refused."""
    allowed = {"insert_rankings": {"annotation/judgement.py"}, "add_ranking": {"annotation/session.py"}}
    bad = []
    for package in ("app", "annotation", "training", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            where = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.ImportFrom):
                    names = [a.name for a in node.names]
                    if node.module == "store.rankings" and "*" in names:
                        bad.append(f"{where} imports * from store.rankings")
                elif isinstance(node, ast.Name):
                    names = [node.id]
                elif isinstance(node, ast.Attribute):
                    names = [node.attr]
                bad += [f"{where} names {n}" for n in names if n in allowed and where not in allowed[n]]
    assert not bad, bad
    session = ast.parse((ROOT / "annotation/session.py").read_text())
    calls = {n.func.id for n in ast.walk(session) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"add_ranking", "write_answers"} <= calls


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
    """Shared helpers live in training/'s frame and rooms (models.py, engine.py; rollouts/rollout.py,
    pairwise/reference.py, ...); a trainer package (one with a train.py) imports none of the others, so
    adding or removing a trainer touches no other trainer."""
    trainers = sorted(p.parent.name for p in (ROOT / "training").glob("*/train.py"))
    assert {"reward", "ppo"} <= set(trainers)
    for name in trainers:
        others = {f"training.{t}" for t in trainers if t != name}
        for path in (ROOT / "training" / name).rglob("*.py"):
            bad = {m for m in _named_modules(path) if any(m == o or m.startswith(o + ".") for o in others)}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


# training/ in rooms (docs/architecture.md): the frame at the top, four rooms of shared machinery, and one package
# per trainer. A room imports the frame, kernels and the rooms listed here; kernels are leaves over the frame.
FRAME = {
    "config_file",
    "engine",
    "judges",
    "launcher",
    "loaders",
    "models",
    "precision",
    "registry",
    "runs",
    "tiny",
    "watch",
}
ROOMS = {
    "kernels": {"attention", "hf_cache", "linear", "llama_step", "logprobs", "mixed_step"},
    "sampling": {"best_of_n", "chat", "decode", "generation", "rollout_engine", "vllm_engine", "vllm_worker"},
    "pairwise": {"data_types", "pairs", "pairs_config", "prefix", "reference", "scoring", "sequences"},
    "rollouts": {
        "checkpoints",
        "critic_free",
        "policy_losses",
        "profile",
        "prompt_data",
        "prompt_run",
        "prompts_config",
        "rollout",
    },
}
ROOM_MAY = {
    "frame": {"frame", "kernels"},
    "kernels": {"frame", "kernels"},
    "sampling": {"frame", "kernels", "sampling"},
    "pairwise": {"frame", "kernels", "pairwise"},
    "rollouts": {"frame", "kernels", "sampling", "pairwise", "rollouts"},
}


def _room_of(module: str) -> str:
    """'frame', a room's name, or 'trainer' for a module or package of training/ (dotted, from training. on)."""
    parts = module.split(".")
    if parts[1] in ROOMS:
        return parts[1]
    return "trainer" if (ROOT / "training" / parts[1]).is_dir() else "frame"


def _named_modules(path: Path) -> set[str]:
    """Every module an import in the file names, `from training.rollouts import rollout` as training.rollouts and
    training.rollouts.rollout (a module imported from its package is a module too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for a in node.names:
                sub = ROOT / (node.module.replace(".", "/") + "/" + a.name)
                if sub.with_suffix(".py").is_file() or sub.is_dir():
                    found.add(f"{node.module}.{a.name}")
    return found


def test_training_is_a_frame_four_rooms_and_the_trainers():
    """Every module of training/ is where the rooms say (a new one goes into a room, or the frame is widened here on
    purpose), and a room's imports point only where ROOM_MAY says: kernels know no sampling, pairs or rollouts, the
    frame no room but the kernels (the registry alone names each trainer's config), sampling and pairwise data
    know nothing of rollouts."""
    top = {p.stem for p in (ROOT / "training").glob("*.py")} - {"__init__"}
    assert top == FRAME
    trainers = {p.parent.name for p in (ROOT / "training").glob("*/train.py")}
    packages = {p.parent.name for p in (ROOT / "training").glob("*/__init__.py")}
    assert packages == set(ROOMS) | trainers, packages - set(ROOMS) - trainers  # a new package is a room or a trainer
    for room, modules in ROOMS.items():
        assert {p.stem for p in (ROOT / "training" / room).glob("*.py")} - {"__init__"} == modules, room
    bad = []
    for path in (ROOT / "training").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        room = _room_of(module)
        if room == "trainer" or path.stem == "__init__":
            continue
        for m in _named_modules(path):
            if m.split(".")[0] != "training" or m == "training":
                continue
            there = _room_of(m)
            if there not in ROOM_MAY[room] and not (module == "training.registry" and m.endswith(".config")):
                bad.append(f"{module} ({room}) imports {m} ({there})")
    assert not bad, bad


def test_every_trainer_is_in_the_registry():
    from training.registry import TRAINERS

    packages = {p.parent.name for p in (ROOT / "training").glob("*/train.py")}
    assert {t.module for t in TRAINERS.values()} == {f"training.{p}.train" for p in packages}
    assert all(t.config.KIND == kind for kind, t in TRAINERS.items())


def test_no_function_is_over_60_lines():
    """A function reads on one screen: each trainer's loop as its named steps (stop, checkpoint, resume and the final
    save of the trainers on pairs live once, in training/engine.py), a tab as its wiring over plain functions."""
    long = []
    for package in ("app", "annotation", "store", "training", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                    long.append(f"{path.relative_to(ROOT)}::{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def _module_graph() -> dict[str, set[str]]:
    """Our modules (app, annotation, store, training, bench) -> the ones each imports, at the top or inside a
    function (a deferred import still ties the two modules together)."""
    modules = {}
    for package in ("app", "annotation", "store", "training", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {m for m in (node.module, *(f"{node.module}.{a.name}" for a in node.names)) if m in modules}
        graph[name] = deps - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_by_hand():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    """No two of our modules import each other, directly or around a loop, even inside functions: a family of
    modules shares what it needs through a common module it all imports (e.g. app/studies/demo_common.py)."""
    assert _cycles(_module_graph()) == []


SQL_CALLS = {"execute", "executemany", "sql", "fetchall", "fetchone", "fetchdf"}


def test_no_sql_outside_the_store():
    """Every SQL statement lives in store/ (issue 28): the other packages call its named functions, and rows come
    back as values or dataclasses. A call of a connection's SQL methods, or an import of duckdb, elsewhere fails."""
    found = []
    for package in ("app", "annotation", "training", "bench"):
        for path in (ROOT / package).rglob("*.py"):
            where = path.relative_to(ROOT)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
                    found.append((str(where), node.lineno, f"calls .{node.func.attr}()"))
                elif "duckdb" in _imports_of(node):
                    found.append((str(where), node.lineno, "imports duckdb"))
    assert not found, "SQL outside store/:\n" + "\n".join(f"{f}:{n} {what}" for f, n, what in sorted(set(found)))


# app/ by what it is (issue 28): the faces a user meets (the CLI, the Gradio app, its tabs, widgets and server
# checks), the jobs a command or a button runs (runs, rounds, sampling, the Compare session), and the studies that
# run the product on itself (the demo family). Faces use jobs and studies, studies use jobs, jobs use neither.
APP_ROOMS = {"faces": {"faces", "jobs", "studies"}, "studies": {"studies", "jobs"}, "jobs": {"jobs"}}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "app" and len(parts) > 2 else None


def test_app_is_faces_jobs_and_studies_and_imports_point_one_way():
    graph = _module_graph()
    rooms = {_room(m) for m in graph if m.startswith("app.")} - {None}
    assert rooms == set(APP_ROOMS)
    assert {p.name for p in (ROOT / "app").glob("*.py")} == {"__init__.py"}, "every app module is in a room"
    bad = [
        f"{m} -> {d}"
        for m, deps in graph.items()
        if _room(m)
        for d in deps
        if _room(d) and _room(d) not in APP_ROOMS[_room(m)]
    ]
    assert not bad, "app's rooms import the wrong way:\n" + "\n".join(sorted(bad))


def test_bench_imports_only_jobs_of_the_app_and_no_test():
    """bench/ measures what the app's commands and buttons do (app.jobs: training, sampling, ...), never the CLI,
    the tabs, the demo or tests/: a benchmark that needs a helper of the tests has it moved to bench/
    (bench/app_server.py)."""
    graph = _module_graph()
    for path in (ROOT / "bench").rglob("*.py"):
        imported = {m for node in ast.walk(ast.parse(path.read_text())) for m in _full_imports_of(node)}
        bad = sorted(m for m in imported if m.split(".")[0] == "tests" or _room(m) not in (None, "jobs"))
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    assert _room("app.faces.train_tab") == "faces" and _room("app.jobs.training") == "jobs"
    assert "bench.app_server" in graph and any(d.startswith("app.jobs.") for d in graph["bench.ppo"])


def _full_imports_of(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module}
    return set()


def test_no_test_file_imports_another():
    """A builder, a data maker or a fixture that more than one test file uses lives in tests/builders.py or
    tests/conftest.py (issue 28): no tests/test_*.py imports another, so each test file reads on its own and moving a
    test never breaks a second file."""
    tests = ROOT / "tests"
    found = []
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for module in _full_imports_of(node):
                parts = module.split(".")
                if parts[0] == "tests" and len(parts) > 1 and parts[1].startswith("test_"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
            if isinstance(node, ast.ImportFrom) and node.module == "tests" and node.level == 0:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} imports tests.{a.name}" for a in node.names]
    assert not found, "\n".join(found)


def test_the_longest_test_files_are_handed_out_first():
    """The integration lane hands whole files to its two workers in collection order (Makefile:
    --no-loadscope-reorder); tests/conftest.py puts LONGEST_FIRST's files first, each a file that exists and holds
    integration or browser tests (a renamed file would drop to the end unnoticed)."""
    from types import SimpleNamespace

    from tests.conftest import LONGEST_FIRST, longest_first

    for name in LONGEST_FIRST:
        text = (ROOT / "tests" / name).read_text()
        assert "pytest.mark.integration" in text or "pytest.mark.browser" in text, name
    items = [SimpleNamespace(path=ROOT / "tests" / n) for n in ("test_a.py", "test_ppo_watch.py", "test_b.py")]
    items.append(SimpleNamespace(path=ROOT / "tests" / "test_demo.py"))
    ordered = [i.path.name for i in longest_first(items)]
    assert ordered == ["test_demo.py", "test_ppo_watch.py", "test_a.py", "test_b.py"]
    assert "--no-loadscope-reorder" in (ROOT / "Makefile").read_text()
