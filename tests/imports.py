"""Helpers for the tests that read imports: which edge_rl modules a module imports (those
inside functions too, or only what runs when it is imported), and whether importing one loads
TensorFlow. Static: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TF_MODULES = ("tensorflow", "tf_agents", "tensorflow_model_optimization", "tf_keras", "keras")

PACKAGE_DIRS = {"edge_rl.device": ROOT / "device", "edge_rl.converters": ROOT / "converters",
                "edge_rl": ROOT / "edge_rl"}


def module_file(name: str) -> Path | None:
    """The source file of edge_rl module `name`; None for modules outside edge_rl."""
    for package, folder in PACKAGE_DIRS.items():  # the most specific package first
        if name == package or name.startswith(package + "."):
            path = folder.joinpath(*name[len(package) + 1:].split(".")) if name != package \
                else folder
            if path.with_suffix(".py").is_file():
                return path.with_suffix(".py")
            if (path / "__init__.py").is_file():
                return path / "__init__.py"
            return None
    return None


def imported_names(tree: ast.AST, module: str, is_package: bool, everywhere: bool) -> set[str]:
    """Modules `tree` imports, with the packages they load on the way. `everywhere`: inside
    functions too (a lazy import); otherwise what runs when the module is imported, less
    `if TYPE_CHECKING:` blocks."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not everywhere and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # maybe submodules
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    with_parents = set()
    for name in names:
        parts = name.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return with_parents


def tensorflow_chain(module: str, seen: dict[str, list[str] | None]) -> list[str] | None:
    """The import chain from edge_rl module `module` to a TensorFlow module when importing it
    loads TensorFlow; None when it does not."""
    if module in seen:
        return seen[module]
    seen[module] = None  # an import cycle adds nothing
    path = module_file(module)
    if path is None:
        return None
    tree = ast.parse(path.read_text())
    for name in sorted(imported_names(tree, module, path.name == "__init__.py", False)):
        if name.split(".")[0] in TF_MODULES:
            seen[module] = [module, name]
            return seen[module]
        if name.startswith("edge_rl") and name != module:
            chain = tensorflow_chain(name, seen)
            if chain:
                seen[module] = [module, *chain]
                return seen[module]
    return None


def module_name(path: Path) -> str:
    """The edge_rl module whose source is `path` (device/ and converters/ are mapped into
    edge_rl, as pyproject.toml's package-dir does)."""
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    if parts[0] in ("device", "converters"):
        parts.insert(0, "edge_rl")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)
