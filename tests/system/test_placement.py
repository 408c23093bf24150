"""Placement from config: bundles per role, and a cluster that cannot hold a role (the trainer
included, although Ray Train places its workers) refused at once with a message naming the role."""
import time

import pytest

from placement import PlacementError, check_fits, create_placement_groups, plan_placement, worker_resources
from tests.conftest import tiny_config


def test_plan_has_one_bundle_per_actor_and_marks_the_trainer_external():
    cfg = tiny_config("placement.trainer.cpus=2", "placement.trainer.gpus=1", "placement.user.node_resource=rollout")
    plan = plan_placement(cfg, {"agent": 1, "user": 3, "trainer": 2, "stats": 0})
    assert set(plan) == {"agent", "user", "trainer"}
    assert plan["user"].bundles == [{"CPU": 0.5, "rollout": 1.0}] * 3
    assert plan["trainer"].bundles == [{"CPU": 2.0, "GPU": 1.0}] * 2 and plan["trainer"].external
    assert worker_resources(cfg.placement.trainer) == {"CPU": 2.0, "GPU": 1.0}
    with pytest.raises(ValueError, match="unknown role"):
        plan_placement(cfg, {"critic": 1})


def test_a_cluster_short_of_trainer_gpus_is_refused_naming_the_trainer():
    cfg = tiny_config("placement.trainer.gpus=1")
    plan = plan_placement(cfg, {"agent": 1, "user": 1, "trainer": 2})
    with pytest.raises(PlacementError) as err:
        check_fits(plan, {"CPU": 16.0})
    message = str(err.value)
    assert "needs" in message and "2 GPU" in message and "has" in message
    assert "role trainer needs 2 x {'CPU': 0.4, 'GPU': 1.0} (placed by Ray Train)" in message
    assert "role agent" not in message          # only the roles short of something are named
    check_fits(plan, {"CPU": 16.0, "GPU": 2.0})          # enough: no error


@pytest.mark.slow
def test_creating_groups_fails_fast_on_a_real_cluster(ray_cluster):
    cfg = tiny_config("placement.trainer.gpus=1")
    t0 = time.perf_counter()
    with pytest.raises(PlacementError, match="role trainer"):
        create_placement_groups(cfg, {"agent": 1, "user": 1, "trainer": 2})
    assert time.perf_counter() - t0 < cfg.placement.timeout_s     # refused up front, no wait for a timeout
    plan = create_placement_groups(cfg, {"agent": 1, "trainer": 0})
    assert plan["agent"].groups and ray_cluster.get(plan["agent"].groups[0].ready(), timeout=30)
    from placement import remove_placement_groups
    remove_placement_groups(plan)
