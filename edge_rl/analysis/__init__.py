"""`edge-rl report`: finished runs side by side, from their run folders only.

    compare  runs grouped into settings, thresholds, speed-ups and Welch's intervals
    report   the PNGs and report.md

No TensorFlow, even inside functions; matplotlib only when the figures are drawn.
"""
