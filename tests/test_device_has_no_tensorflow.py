"""The device side never imports TensorFlow: statically, and in a live interpreter."""

import ast
import pkgutil
import re
import subprocess
import sys

import pytest
from imports import ROOT, TF_MODULES, imported_names, tensorflow_chain


def test_no_tensorflow_import_statement_under_device():
    pattern = re.compile(rf"^\s*(import|from)\s+({'|'.join(TF_MODULES)})\b", re.M)
    offenders = [p.name for p in (ROOT / "device").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_importing_the_device_runtime_and_the_cli_loads_no_tensorflow():
    import edge_rl.device

    modules = [f"edge_rl.device.{m.name}" for m in pkgutil.iter_modules(edge_rl.device.__path__)]
    code = (
        "import sys, importlib\n"
        f"for name in {['edge_rl', 'edge_rl.cli', 'edge_rl.config', *modules]!r}:\n"
        "    importlib.import_module(name)\n"
        "from click.testing import CliRunner\n"
        "from edge_rl.cli import cli\n"
        "for args in (['--help'], ['train', '--help'], ['eval', '--help'], ['actor', '--help'],\n"
        "             ['bench', '--help'], ['bench', 'footprint', '--help']):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        f"loaded = [m for m in {TF_MODULES!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- every import under device/, those inside functions included --------------------------------


def test_no_device_module_imports_tensorflow_even_inside_a_function():
    """Every import under device/, lazy ones included: of a TensorFlow module, or of an edge_rl
    module whose import loads TensorFlow (edge_rl.tf_policy, edge_rl.loop.learner, ...)."""
    seen: dict[str, list[str] | None] = {}
    offenders = []
    for path in sorted((ROOT / "device").rglob("*.py")):
        module = "edge_rl.device." + path.stem if path.stem != "__init__" else "edge_rl.device"
        tree = ast.parse(path.read_text())
        for name in sorted(imported_names(tree, module, path.stem == "__init__", True)):
            if name.split(".")[0] in TF_MODULES:
                offenders.append(f"{path.name}: {name}")
            elif name.startswith("edge_rl") and (chain := tensorflow_chain(name, seen)):
                offenders.append(f"{path.name}: {' -> '.join(chain)}")
    assert offenders == []


def test_the_scan_sees_tensorflow_behind_edge_rl_modules():
    seen: dict[str, list[str] | None] = {}
    for module in ("edge_rl.tf_policy", "edge_rl.loop.learner", "edge_rl.converters"):
        chain = tensorflow_chain(module, seen)
        assert chain and chain[-1].split(".")[0] in TF_MODULES, module
    assert tensorflow_chain("edge_rl.core", seen) is None
    lazy = ast.parse("def load():\n    from edge_rl.tf_policy import TFAgentsPolicy\n")
    assert "edge_rl.tf_policy" in imported_names(lazy, "edge_rl.device.x", False, True)
    assert "edge_rl.tf_policy" not in imported_names(lazy, "edge_rl.device.x", False, False)


def test_tf_agents_policies_reach_the_device_by_registration(monkeypatch):
    """The device runtime loads a TF-Agents policy (--actor-precision tf-fp32) only through a
    loader the learner's side registered; without one, one line says what to do."""
    from edge_rl.device import policy as device_policy

    monkeypatch.setattr(device_policy, "PUBLISHED_FORMATS", {})
    with pytest.raises(device_policy.PolicyFileError, match="edge-rl actor"):
        device_policy.load_published(device_policy.ZIP_MAGIC + b"rest of a zip")
    device_policy.register_published_format(device_policy.ZIP_MAGIC,
                                             lambda data, previous: ("loaded", data, previous))
    assert device_policy.load_published(device_policy.ZIP_MAGIC + b"z", previous=7) == (
        "loaded", device_policy.ZIP_MAGIC + b"z", 7)
