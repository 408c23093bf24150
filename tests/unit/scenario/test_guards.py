"""The simulator plays by the paper's rules whatever it proposes: one level per dimension per turn,
and endings coherent with its own state (the scenario's status guards); every correction counted."""
import pytest

from sead_ray.core.config import ConfigError
from sead_ray.scenario.guards import StatusGuard, enforce_simulator_rules
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import load_scenario
from sead_ray.scenario.turn_protocol import UserTurnOutput
from tests.unit.play.test_dialogue import GOOD, play, scripted_agent
from tests.unit.scenario.test_scenario import _base, _write


def test_a_dimension_moves_at_most_max_step_levels_per_turn(schema):
    ruled = enforce_simulator_rules(schema, {}, (0, 0, 0), (4, 2, 5), "continue", max_step=1)
    assert (ruled.state, ruled.clamped_dimensions, ruled.status_override) == ((1, 1, 1), 3, None)
    down = enforce_simulator_rules(schema, {}, (4, 3, 5), (4, 0, 3), "continue", max_step=1)
    assert (down.state, down.clamped_dimensions) == ((4, 2, 4), 2)
    assert enforce_simulator_rules(schema, {}, (0, 0, 0), (4, 3, 5), "continue", max_step=0).state == (4, 3, 5)


def test_endings_must_agree_with_the_state(scenario, schema):
    guards = scenario.status_guards
    assert guards["accept"] == StatusGuard(at_least={"cooperation": 3, "trust": 3, "emotion": 2})
    # accepting while convinced it is a scam: the guard keeps the call going, and says so
    scam = enforce_simulator_rules(schema, guards, (3, 2, 0), (3, 2, 0), "accept", max_step=1)
    assert (scam.status, scam.status_override) == ("continue", "accept -> continue")
    ready = enforce_simulator_rules(schema, guards, (3, 2, 3), (3, 2, 3), "accept", max_step=1)
    assert (ready.status, ready.status_override) == ("accept", None)
    # the guard judges the state after the step limit: a jump to the top does not earn an accept
    jump = enforce_simulator_rules(schema, guards, (1, 1, 1), (4, 3, 5), "accept", max_step=1)
    assert jump.state == (2, 2, 2) and jump.status == "continue"
    assert enforce_simulator_rules(schema, guards, (4, 3, 5), (4, 3, 5), "hangup", max_step=1).status == "continue"
    assert enforce_simulator_rules(schema, guards, (1, 0, 0), (1, 0, 0), "hangup", max_step=1).status == "hangup"
    # without guards the simulator alone decides (the paper's pure setting)
    assert enforce_simulator_rules(schema, {}, (0, 0, 0), (0, 0, 0), "accept", max_step=1).status == "accept"


def test_a_call_counts_every_correction(scenario):
    async def eager_user(request):
        """A simulator that proposes the top state and accepts at every turn (what a small model does)."""
        return UserTurnOutput("Yes! Activate it!", (4, 3, 5), "accept", ok=True)
    traj = play(scenario, scripted_agent(GOOD), eager_user, profile=Profile((1, 1, 1), ()), max_step=1,
                status_guards=scenario.status_guards)
    # turn 1: (1,1,1) -> (2,2,2), three dimensions clamped, accept refused (below the thresholds);
    # turn 2: (3,3,3), cooperation and trust clamped again, now the accept stands
    assert [t.user_state for t in traj.turns] == [{"cooperation": 2, "emotion": 2, "trust": 2},
                                                 {"cooperation": 3, "emotion": 3, "trust": 3}]
    assert (traj.end_reason, traj.user_step_clamps, traj.user_status_overrides) == ("accept", 5, 1)
    record = traj.to_json(scenario)
    assert (record["user_step_clamps"], record["user_status_overrides"]) == (5, 1)


@pytest.mark.parametrize("guards, needle", [
    ({"win": {"at_least": {"trust": 1}}}, "a guard is for accept, refuse or hangup"),
    ({"accept": {"at_least": {"mood": 1}}}, "unknown dimension 'mood'"),
    ({"accept": {"at_least": {"trust": 9}}}, "accept.at_least.trust must be a level 0..5"),
    ({"accept": {"above": {"trust": 1}}}, "unknown key 'user.status_guards.accept.above'"),
    ({"accept": {}}, "must have at_least and/or at_most"),
])
def test_malformed_guards_name_the_field(tmp_path, guards, needle):
    tree = _base()
    tree["user"]["status_guards"] = guards
    with pytest.raises(ConfigError) as exc:
        load_scenario(_write(tmp_path, tree))
    assert needle in str(exc.value)
