"""What a board's user runs: the systemd unit, and the Raspberry Pi page's commands, which
tools/arm64_check.py runs as they are written (the check itself is in .ci/run)."""

import importlib.util
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EDGE_RL, edge_rl

REPO = Path(__file__).resolve().parents[1]


def arm64_check():
    spec = importlib.util.spec_from_file_location("arm64_check", REPO / "tools/arm64_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_raspberry_pi_page_gives_the_commands_the_check_runs():
    page = (REPO / "docs" / "raspberry-pi.md").read_text()
    check = arm64_check()
    for command in [*check.WORKSTATION_COMMANDS.values(), *check.PI_COMMANDS.values()]:
        assert command in page, command


def test_the_systemd_unit_runs_this_actor_with_absolute_paths(tmp_path):
    (tmp_path / "token").write_text("t\n")
    result = edge_rl("actor", "--learner", "10.0.0.1:50051", "--token-file", "token",
                     "--spool", "spool", "--cpu-watts", "1.5", "--print-systemd-unit",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    command = shlex.split(start.removeprefix("ExecStart="))
    assert command[:2] == [EDGE_RL, "actor"]
    assert command[2:] == ["--learner", "10.0.0.1:50051", "--token-file",
                           str(tmp_path / "token"), "--spool", str(tmp_path / "spool"),
                           "--cpu-watts", "1.5"]
    for line in ("Restart=always", "After=network-online.target", "WantedBy=multi-user.target"):
        assert line in unit
    assert not (tmp_path / "spool").exists()  # printing the unit runs nothing
    # the command line the unit runs is one the CLI takes
    assert subprocess.run([*command, "--help"], capture_output=True).returncode == 0
    if shutil.which("systemd-analyze"):
        path = tmp_path / "edge-rl-actor.service"
        path.write_text(unit)
        verified = subprocess.run(["systemd-analyze", "verify", str(path)],
                                  capture_output=True, text=True)
        assert verified.returncode == 0, verified.stderr


def test_a_unit_without_a_spool_says_what_that_costs():
    result = edge_rl("actor", "--learner", "h:1", "--print-systemd-unit")
    assert result.returncode == 0, result.stderr
    assert "no --spool" in result.stdout


@pytest.mark.parametrize("flag", ["--spool-max-mb=0", "--cpu-watts=-1"])
def test_bad_actor_flags_are_refused_before_a_unit_is_written(flag):
    result = edge_rl("actor", "--learner", "h:1", flag, "--print-systemd-unit")
    assert result.returncode == 2 and result.stdout == ""
