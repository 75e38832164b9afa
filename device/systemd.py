"""A systemd unit that keeps an `edge-rl actor` running on a board: started at boot once the
network is up, restarted when it exits. The actor reconnects to its learner by itself; the
unit covers reboots and crashes.

    edge-rl actor --learner 192.168.1.10:50051 --spool ~/edge-rl-spool --print-systemd-unit \\
        | sudo tee /etc/systemd/system/edge-rl-actor.service
"""

from __future__ import annotations

import getpass
import os
import shlex
import sys

UNIT_NAME = "edge-rl-actor.service"


def edge_rl_command() -> list[str]:
    """How this process was started, as an absolute command a service can run: the
    `edge-rl` script of this environment, or this Python with `-m edge_rl`."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "edge-rl" and os.path.isfile(script):
        return [os.path.abspath(script)]  # not resolved: a venv's bin/ must stay in the path
    return [os.path.abspath(sys.executable), "-m", "edge_rl"]


def actor_unit(actor_args: list[str], learner: str, has_spool: bool) -> str:
    """The unit's text for `edge-rl actor ACTOR_ARGS` run as the current user."""
    command = shlex.join([*edge_rl_command(), "actor", *actor_args])
    lines = [
        f"# {UNIT_NAME}: written by `edge-rl actor ... --print-systemd-unit`",
        f"# install: sudo cp THIS_FILE /etc/systemd/system/{UNIT_NAME}",
        f"#          sudo systemctl daemon-reload && sudo systemctl enable --now {UNIT_NAME}",
        f"# logs:    journalctl -u {UNIT_NAME} -f",
    ]
    if not has_spool:
        lines.append("# no --spool: batches not yet acked are lost when the actor restarts")
    lines += [
        "[Unit]",
        f"Description=edge-rl actor for the learner at {learner}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        f"User={getpass.getuser()}",
        f"ExecStart={command}",
        "Environment=PYTHONUNBUFFERED=1",
        "Restart=always",
        "RestartSec=5",
        # SIGTERM makes the actor flush its link and stop; give it the time that takes
        "TimeoutStopSec=30",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"
