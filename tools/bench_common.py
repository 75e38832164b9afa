"""Small pieces the benchmark scripts in tools/ share: markdown tables and the CPU's name."""

from __future__ import annotations

import platform

from edge_rl.analysis.report import markdown_table


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table (edge-rl report's), as one string."""
    return "\n".join(markdown_table(header, rows)).rstrip()


def cpu_model() -> str:
    """The CPU's model name, for the report's header."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
