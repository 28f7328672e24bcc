"""verl_ext's import structure (README "Layout"): no module-level import cycles inside the package, and the
plugins never import the patches (issue 46)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "verl_ext"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """verl_ext modules imported when ``path`` is imported (module level, outside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {m for m in found if m.startswith("verl_ext")}


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in top_level_imports(path) if m in paths and m != name} for name, path in paths.items()}


def test_no_module_level_import_cycles():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join(trail + [node, nxt])}"
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def test_openspiel_env_and_episode_no_longer_import_each_other():
    edges = graph()
    assert "verl_ext.envs.openspiel_env" not in edges["verl_ext.envs.openspiel_episode"]


def test_plugins_never_import_the_patches():
    plugins = [p for p in PACKAGE.rglob("*.py")
               if module_name(p).startswith(("verl_ext.envs", "verl_ext.games", "verl_ext.dataset", "verl_ext.reward",
                                             "verl_ext.mixture", "verl_ext.held_out"))]
    assert plugins
    for path in plugins:
        assert not {m for m in top_level_imports(path) if m.startswith("verl_ext.patches")}, path
