"""The learner's loop: what `edge-rl train` and `edge-rl learner` run, and `edge-rl export`.

    train         Training: batches into replay, updates, acks, checkpoints; and with
    publishing    Publisher: the actors' next policy version, checked against fp32
    evaluation    Evaluation: greedy evaluations, the best policy kept
    progress      RunClock, Board (TensorBoard), Progress (the bar and the rates)
    learner       the TF-Agents learner behind core.Learner: updates, publishing, saving
    evolution     what changes on the schedule besides the weights (n-step, replay, topology)
    local_actors  the `edge-rl actor` processes a run starts on loopback
    export        a finished run's best weights as a checked policy file

Nothing else in edge_rl imports this package but the command line and edge_rl.train(): the
loop sits on top of the others (docs/architecture.md, "Packages").
"""
