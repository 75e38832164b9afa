"""What a run writes down about itself, and reads back on --resume.

    checkpoint   atomic folders and files (RUN_DIR/checkpoints/, `latest`)
    run_state    the counters that survive a resume (state.json) and policy-version.json
    best_policy  the calibration rows, and the best policy's folder (RUN_DIR/best/)
    costs        where the time went, energy and CO2 (kept in state.json, in summary.json)
    stability    late-run stability of the evaluations (summary.json, TensorBoard, report)
    summary      summary.json

No TensorFlow: `edge-rl report` and the tools read runs without it.
"""
