"""The learner's side of the wire: what actors' batches go through before replay.

    server      the gRPC LearnerService (Hello, Insert, GetPolicy, Heartbeat, Status)
    exchange    policies out, validated batches in, the (actor, seq) ledger and actor table
    ingest      batches from the exchange into replay, acks released on the learner's pace
    replay_log  every accepted batch on disk, fsync'd before its ack (RUN_DIR/replay-log/)

No TensorFlow: the wire's rules are the device side's (edge_rl.device.wire).
"""
