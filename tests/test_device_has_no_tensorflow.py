"""The device side never imports TensorFlow: statically, and in a live interpreter."""

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TF_MODULES = ("tensorflow", "tf_agents", "tensorflow_model_optimization", "tf_keras", "keras")


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
        "for args in (['--help'], ['train', '--help'], ['eval', '--help'], ['actor', '--help']):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args\n"
        f"loaded = [m for m in {TF_MODULES!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
