"""Actors on separate network hosts: tools/netns_fleet.py in a real subprocess.

The script puts a learner and two actors in their own network namespaces joined by veth pairs,
takes one actor's link down for 12 s (over twice the actors' 5 s heartbeat timeout) and up
again, and checks that the actor spools, reconnects and delivers, and that the learner's final
ledger equals the actors' acks. It needs root and `ip netns`; where it cannot run it exits 77
and says why, and this test skips.
"""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "netns_fleet.py"
EXIT_SKIP = 77


def test_actor_cut_off_by_its_link_spools_reconnects_and_delivers():
    process = subprocess.Popen([sys.executable, str(SCRIPT), "--outage", "12"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=SCRIPT.parent.parent)
    try:
        output, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        # SIGINT, not SIGKILL: the script's clean-up removes its namespaces and processes
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"netns_fleet.py took over 300 s\n{output[-4000:]}")
    if process.returncode == EXIT_SKIP:
        reason = [line for line in output.splitlines() if line.startswith("skipped: ")]
        pytest.skip(reason[-1] if reason else output.strip()[-300:])
    assert process.returncode == 0, (
        f"netns_fleet.py exited with {process.returncode}:\n{output[-6000:]}")
    assert "final ledger" in output, output[-3000:]
    print(output[output.index("netns fleet:"):])  # the figures, for `pytest -rA`
