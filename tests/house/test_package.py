"""The wheel is the product: the test and benchmark harness stays in the repository."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_is_not_in_the_package():
    for module in ("differential", "tpcds", "tpch"):
        assert importlib.util.find_spec(f"datafusion_distributed_py.{module}") is None
        assert importlib.util.find_spec(f"harness.{module}") is not None  # from the repo root
    config = (ROOT / "pyproject.toml").read_text()
    assert 'python-packages = ["datafusion_distributed_py"]' in config  # what maturin packs
    package = ROOT / "datafusion_distributed_py"
    assert not [p for p in package.rglob("*.sql")], "query files belong to the harness"


def test_the_build_has_no_test_features_of_datafusion_distributed():
    """Its `integration` feature pulls test tooling into the wheel and changes planner
    defaults (src/worker/task_cache.rs sweeps the task cache without it)."""
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    features = manifest["dependencies"]["datafusion-distributed"]["features"]
    assert not {"integration", "tpch", "tpcds", "clickbench"} & set(features), features


def _rust_module_graph() -> dict[str, set[str]]:
    """Each top-level module of the Rust core (a folder or a file of ``src/``) -> the others
    it names as ``crate::<module>``."""
    src = ROOT / "src"
    graph: dict[str, set[str]] = {}
    for entry in src.iterdir():
        name = entry.stem
        if name in ("lib", "main"):
            continue
        files = entry.rglob("*.rs") if entry.is_dir() else [entry]
        text = "\n".join(f.read_text() for f in files)
        graph[name] = set(re.findall(r"crate::([a-z_]+)", text)) - {name}
    return graph


def test_rust_modules_depend_one_way():
    """docs/architecture.md: dependencies point one way. No module reaches back to one that
    depends on it, and nothing imports the Python boundary (``python``)."""
    graph = _rust_module_graph()
    assert not any("python" in deps for deps in graph.values()), graph
    # The coordinator reaches in-process workers as `protocol::InProcessWorkers`.
    assert "worker" not in graph["coordinator"], graph["coordinator"]
    # Checks change nothing, rewrites check nothing: each in its own room.
    assert not list((ROOT / "src" / "plan_rewrites").glob("lost_in_transit.rs"))
    assert_acyclic(graph)


def _rust_file_graphs() -> dict[str, dict[str, set[str]]]:
    """Each folder of ``src/`` -> each of its files -> the sibling files it uses (``super::x``
    from a file, ``self::x`` / ``x::`` from the folder's ``mod.rs``)."""
    graphs: dict[str, dict[str, set[str]]] = {}
    for folder in sorted(p for p in (ROOT / "src").iterdir() if p.is_dir()):
        files = {f.stem: f for f in folder.glob("*.rs") if f.stem != "mod"}
        graph: dict[str, set[str]] = {}
        for name, path in files.items():
            # Test modules may reach anywhere; what the file itself uses is before them.
            text = path.read_text().split("#[cfg(test)]", 1)[0]
            used = set(re.findall(r"\bsuper::\{?([a-z_]+)", text))
            used |= {m for group in re.findall(r"\bsuper::\{([^}]*)\}", text)
                     for m in re.findall(r"\b([a-z_]+)\b", group)}  # fmt: skip
            graph[name] = {u for u in used if u in files and u != name}
        graphs[folder.name] = graph
    return graphs


def test_rust_files_within_a_folder_depend_one_way():
    """Within a folder too: no file uses a sibling that uses it back."""
    graphs = _rust_file_graphs()
    assert graphs["protocol"]["grpc"] >= {"connect_failure"}, graphs["protocol"]
    for graph in graphs.values():
        assert_acyclic(graph)


def test_python_stays_at_the_boundary():
    """PyO3 is used by the Python boundary (``src/python/``), by the runtime whose threads
    and waits meet the interpreter (``src/runtime/``), and by ``lib.rs``'s module; the
    coordinator, workers, protocol and codecs reach Python only through traits ``python/``
    implements."""
    src = ROOT / "src"
    using = [
        str(f.relative_to(src))
        for f in src.rglob("*.rs")
        if "pyo3" in f.read_text()
        and f.relative_to(src).parts[0] not in ("python", "runtime", "lib.rs")
    ]
    assert using == [], using


def _python_module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (anywhere in it,
    function-level imports included; ``_internal``, the compiled core, is not a module here)."""
    package = ROOT / "datafusion_distributed_py"
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if alias.name != "_internal":
                        deps.add(target if target in modules else node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_python_modules_depend_one_way():
    """No module of the package imports one that imports it back (the package's
    ``__init__`` gathers the public API; its modules import each other, never it)."""
    graph = _python_module_graph()
    assert "datafusion_distributed_py.context" in graph
    assert_acyclic(graph)


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """Fails naming the first cycle found in ``graph`` (module -> the modules it imports)."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            assert state.get(dep) != "open", f"a cycle: {' -> '.join([*path, dep])}"
            if dep not in state:
                visit(dep, [*path, dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_tests_live_in_area_folders_named_by_feature():
    """Every test module is in a folder of its area (``tests/<area>/test_*.py``), and no test
    module or test is named after an issue number: names say what is tested."""
    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert loose == [], f"test modules outside an area folder: {loose}"
    modules = sorted(tests.glob("*/test_*.py"))
    assert len({p.parent.name for p in modules}) >= 8, "too few areas: is the layout gone?"
    numbered = re.compile(r"(?:issue|bug|gh)_?\d+", re.IGNORECASE)
    for path in modules:
        assert not numbered.search(path.stem), path
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                assert not numbered.search(node.name), f"{path.name}::{node.name}"


def test_the_architecture_module_map_matches_the_tree():
    """``docs/architecture.md`` names every module of the package and every room of ``src/``
    (a file by its path, or by its name in a row of its folder), and every path it names
    exists."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:src|datafusion_distributed_py)/[\w/.]*)`", doc))
    missing_paths = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing_paths == [], f"architecture.md names paths that do not exist: {missing_paths}"
    unnamed = []
    package = ROOT / "datafusion_distributed_py"
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        if path.name == "__init__.py" or path.name.startswith("_"):
            continue
        if rel in named or folder in named:
            continue
        if f"`{path.name}`" in doc and folder == "datafusion_distributed_py/":
            continue
        unnamed.append(rel)
    for room in sorted((ROOT / "src").iterdir()):
        rel = room.relative_to(ROOT).as_posix()
        if room.name in ("lib.rs",):
            continue
        if not any(n == rel or n.startswith(rel + "/") or n == rel + "/" for n in named):
            unnamed.append(rel)
    assert unnamed == [], f"architecture.md's module map does not name: {unnamed}"
