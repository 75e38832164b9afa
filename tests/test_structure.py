"""Rules of the code's shape that keep it readable: a class's attributes are all set when it is
made (a reader finds them in its constructor, and no caller has to set them by hand)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edge_rl", "device", "converters")


def attributes_set_late(source: str) -> list[str]:
    """`Class.attribute` for each attribute a method sets that neither the constructor nor a
    method the constructor calls sets first."""
    late = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        if "__init__" not in methods:
            continue  # dataclasses and protocols: their fields are the constructor
        init = methods["__init__"]
        called = {n.func.attr for n in ast.walk(init) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                  and n.func.value.id == "self"}
        early = set()
        for name in ("__init__", *called):
            early |= _assigned(methods[name]) if name in methods else set()
        for name, method in methods.items():
            late += [f"{cls.name}.{attr} (in {name})" for attr in _assigned(method) - early]
    return late


def _assigned(function: ast.FunctionDef) -> set[str]:
    return {n.attr for n in ast.walk(function) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "self"
            and isinstance(n.ctx, ast.Store)}


def test_the_rule_finds_an_attribute_first_set_outside_the_constructor():
    source = ("class Run:\n"
              "    def __init__(self):\n        self.a = 1\n        self.reset()\n"
              "    def reset(self):\n        self.b = 2\n"
              "    def run(self):\n        self.a = self.b = 3\n        self.started = 4\n")
    assert attributes_set_late(source) == ["Run.started (in run)"]


def test_every_attribute_is_set_in_its_constructor():
    late = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            late += [f"{path.relative_to(ROOT)}: {item}"
                     for item in attributes_set_late(path.read_text())]
    assert late == []
