"""A real user's install: build the wheel, install its base dependencies in a fresh venv and
import it from outside the repository (where the source edge_rl/ cannot shadow it).

The fresh venv gets the newest protobuf the base install allows, so this also proves the
committed gRPC stubs (grpcio-tools 1.62) import beyond TF's protobuf 4.25.
"""

import json
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(args, cwd, **kw):
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900, **kw)
    assert result.returncode == 0, f"{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_and_runs_with_the_base_install_only(tmp_path):
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT)], ROOT)
    wheel = next(dist.glob("edge_rl-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    run([str(python), "-m", "pip", "check"], tmp_path)
    away = tmp_path / "elsewhere"
    away.mkdir()
    code = (
        "import importlib.util, google.protobuf, edge_rl, edge_rl.device\n"
        "from edge_rl.device import wire_pb2, wire_pb2_grpc, actor, evaluate, runtime\n"
        # the subpackages that need no TensorFlow, as a board's or a report's user has them
        "import edge_rl.transport.server, edge_rl.replay.buffer, edge_rl.runs.summary\n"
        "import edge_rl.analysis.report\n"
        "assert importlib.util.find_spec('tensorflow') is None\n"
        f"assert edge_rl.device.__file__.startswith({str(env_dir)!r})\n"
        "print(google.protobuf.__version__, runtime.load_runtime())\n"
    )
    out = run([str(python), "-c", code], away)
    protobuf_major = int(out.split(".")[0])
    assert protobuf_major >= 5, out  # the newest protobuf, not TF's 4.25
    assert "ai_edge_litert" in out
    edge_rl_command = str(env_dir / "bin" / "edge-rl")
    help_text = run([edge_rl_command, "--help"], away)
    assert "train" in help_text and "actor" in help_text
    # a board's user measures a policy file with the base install: edge-rl bench
    for command in ("latency", "footprint", "input-quantization"):
        assert "Usage: edge-rl bench" in run([edge_rl_command, "bench", command, "--help"], away)
    policy = ROOT / "tests" / "data" / "differential" / "dqn-cartpole" / "best" / "policy.tflite"
    latency = json.loads(run([edge_rl_command, "bench", "latency", str(policy), "--invokes",
                              "200", "--json"], away))
    assert latency["precision"] == "int8" and 0 < latency["median_us"] < 1e6


def test_pyproject_lists_every_package():
    """setuptools takes the packages pyproject.toml lists, no others: a subpackage missing
    there works in an editable install and is absent from the wheel CI installs."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join((package, *init.parent.relative_to(ROOT / folder).parts))
             for package, folder in setuptools["package-dir"].items()  # edge_rl, device, ...
             for init in (ROOT / folder).rglob("__init__.py")}
    assert sorted(setuptools["packages"]) == sorted(found)
