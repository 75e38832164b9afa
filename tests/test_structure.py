"""Rules of the code's shape that keep it readable: a class's attributes are all set when it is
made (a reader finds them in its constructor, and no caller has to set them by hand); and each
package imports only the packages below it in the loop (docs/architecture.md, "Packages")."""

import ast

from imports import ROOT, TF_MODULES, imported_names, module_file, module_name, tensorflow_chain

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


# -- what may import what --------------------------------------------------------------------------
# A part is a subpackage of edge_rl, or a module at its top. Each may import the parts listed
# (and itself; edge_rl.core, the interfaces, from anywhere), inside functions too: a lazy import
# is a dependency all the same. Type-checking-only imports do not count (core names device's
# Transitions type so).

COMMAND_LINE = ("cli", "cli_run", "__init__", "__main__")  # may import any part
MAY_IMPORT = {
    "core": set(),
    "device": set(),  # a board installs it alone
    "tf_setup": set(),
    "config": {"device", "sparse"},  # sparse/__init__'s names of topologies and distributions
    "replay": {"config", "device"},
    "algorithm": {"config", "device", "replay", "sparse", "agents"},  # agents: the registry
    "sparse": {"algorithm", "device", "tf_setup"},
    "agents": {"algorithm", "config", "device", "sparse", "tf_setup"},
    "converters": {"config", "device", "tf_setup"},
    "tf_policy": {"device", "tf_setup"},
    "transport": {"config", "device", "replay"},
    "runs": {"config", "device", "transport"},  # transport: the replay log's positions
    "analysis": {"config", "device", "runs"},
    "loop": {"config", "device", "tf_setup", "algorithm", "agents", "sparse", "replay",
             "converters", "tf_policy", "transport", "runs"},
}
# parts whose import loads no TensorFlow (the board, `edge-rl report`, the tools that read runs)
NO_TENSORFLOW_ON_IMPORT = ("core", "config", "algorithm", "replay", "transport", "runs",
                           "analysis", *COMMAND_LINE)
NO_TENSORFLOW_AT_ALL = ("analysis",)  # not inside functions either (device/: its own test)


def part(module: str) -> str:
    """The part of edge_rl that `module` belongs to: edge_rl.loop.train -> loop, edge_rl.core
    -> core, edge_rl -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def forbidden_imports(sources: dict[str, str]) -> list[str]:
    """`module: imported` for each edge_rl import in `sources` (module name -> source) that
    the importing part may not make."""
    found = []
    for module, source in sorted(sources.items()):
        home = part(module)
        if home in COMMAND_LINE:
            continue
        allowed = MAY_IMPORT[home] | {home, "core"}
        path = module_file(module)
        package = path is not None and path.name == "__init__.py"
        # the modules imported (not the names taken from them, nor the packages on the way);
        # the bare edge_rl is loaded by every edge_rl import (it sets TensorFlow's Keras)
        names = {name for name in imported_names(ast.parse(source), module, package, True)
                 if name.startswith("edge_rl.") and module_file(name)}
        found += [f"{module}: {name}" for name in sorted(names) if part(name) not in allowed
                  and not any(other.startswith(name + ".") for other in names)]
    return found


def edge_rl_sources() -> dict[str, str]:
    return {module_name(path): path.read_text() for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


def test_the_import_rules_name_every_part():
    parts = {part(module) for module in edge_rl_sources()}
    assert parts == set(MAY_IMPORT) | set(COMMAND_LINE)


def test_each_part_imports_only_what_it_may():
    assert forbidden_imports(edge_rl_sources()) == []


def test_the_rule_finds_a_forbidden_import_inside_a_function():
    sources = {
        "edge_rl.runs.summary": "from edge_rl.runs.stability import late_run_stability\n"
                                "def f():\n    from edge_rl.loop.train import Training\n",
        "edge_rl.converters.tflite": "import edge_rl.device.policy\nimport edge_rl.agents\n",
        "edge_rl.device.actor": "from edge_rl import core, config\n",
        "edge_rl.cli": "from edge_rl.analysis.report import build_report\n",
    }
    assert forbidden_imports(sources) == ["edge_rl.converters.tflite: edge_rl.agents",
                                          "edge_rl.device.actor: edge_rl.config",
                                          "edge_rl.runs.summary: edge_rl.loop.train"]


def test_the_light_parts_load_no_tensorflow():
    seen: dict[str, list[str] | None] = {}
    loads = []
    for module, source in edge_rl_sources().items():
        if part(module) in NO_TENSORFLOW_ON_IMPORT and (chain := tensorflow_chain(module, seen)):
            loads.append(" -> ".join(chain))
        if part(module) in NO_TENSORFLOW_AT_ALL:
            tree = ast.parse(source)
            loads += [f"{module}: {name}" for name in imported_names(tree, module, False, True)
                      if name.split(".")[0] in TF_MODULES
                      or name.startswith("edge_rl.") and tensorflow_chain(name, seen)]
    assert loads == []
