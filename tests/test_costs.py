"""Energy, carbon and time accounting (edge_rl.runs.costs, edge_rl.device.accounting)."""

import time

import pytest
from test_wire import transitions

from edge_rl.device import wire_pb2
from edge_rl.device.accounting import ProcessEnergy, TimeSplit
from edge_rl.device.errors import UserError
from edge_rl.device.wire import BatchCosts, BatchError, batch_costs, encode_batch
from edge_rl.runs.costs import RunCosts, carbon_intensity


def encoded(costs):
    data = encode_batch(transitions(), run_id="r", actor_id="a", incarnation=1, seq=0,
                        policy_version=1, costs=costs)
    return wire_pb2.TrajectoryBatch.FromString(data)


def test_a_batch_carries_its_costs_and_bad_ones_are_refused():
    sent = BatchCosts(2.5, 0.25, "cpu-seconds x 10 W/core",
                      {"inference": 0.1, "env": 0.2, "transport": 0.3})
    assert batch_costs(encoded(sent)) == sent
    assert batch_costs(encoded(None)) == BatchCosts()  # an actor that measures nothing
    for bad in (BatchCosts(joules=-1.0, energy_method="x"),
                BatchCosts(cpu_seconds=float("inf"), energy_method="x"),
                BatchCosts(joules=1e12, energy_method="x"),
                BatchCosts(times={"transport": 1e6}),
                BatchCosts(joules=1.0, energy_method="x" * 65)):
        with pytest.raises(BatchError):
            batch_costs(encoded(bad))


def test_carbon_intensity_by_country_and_the_world_average():
    world, source = carbon_intensity(None)
    france, _ = carbon_intensity("FRA")
    poland, _ = carbon_intensity("pol")
    assert "world average" in source
    assert france < world < poland  # nuclear and hydro against coal
    with pytest.raises(UserError, match="alpha-3"):
        carbon_intensity("France")


def test_time_split_and_process_energy_measure_what_ran():
    split = TimeSplit()
    with split.part("env"):
        time.sleep(0.05)
    assert split.take()["env"] >= 0.05 and split.take() == {}
    energy = ProcessEnergy(watts_per_core=4.0)
    begin = time.process_time()
    while time.process_time() - begin < 0.2:  # burn 0.2 s of CPU
        pass
    joules, cpu_seconds = energy.take()
    assert cpu_seconds >= 0.2 and joules == pytest.approx(4.0 * cpu_seconds)


def test_run_costs_add_remote_reports_once_and_survive_a_restore():
    costs = RunCosts(carbon=True, country="FRA", watts_per_core=10.0)
    report = BatchCosts(5.0, 0.5, "cpu-seconds x 10 W/core", {"inference": 1.0, "env": 2.0})
    costs.add_batch(report, actor_host="board-1")
    costs.add_batch(BatchCosts(times={"env": 1.0}), actor_host="local")  # a local actor
    with costs.learner.part("updates"):
        time.sleep(0.01)
    energy = costs.energy()
    assert energy["remote_actors_joules"] == 5.0
    assert energy["joules"] == pytest.approx(energy["learner_machine_joules"] + 5.0, abs=0.2)
    assert energy["country"] == "FRA"
    assert "remote actors: cpu-seconds x 10 W/core" in energy["method"]
    assert costs.time_breakdown()["actors"] == {"inference": 1.0, "env": 3.0, "transport": 0.0}

    resumed = RunCosts(carbon=True, country="FRA", watts_per_core=10.0)
    resumed.restore(costs.state())
    assert resumed.energy()["remote_actors_joules"] == 5.0
    assert resumed.energy()["learner_machine_joules"] >= energy["learner_machine_joules"]
    assert resumed.time_breakdown()["learner"]["updates"] >= 0.01

    assert RunCosts(carbon=False, country=None, watts_per_core=10.0).energy() is None
