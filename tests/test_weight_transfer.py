"""Weight versions through vLLM's own RL weight-transfer API on CPU: our `gloo` backend (registered
through vLLM's plugin entry point) between the ZeRO-3 trainer's rank 0 and the workers of two agent
engines, the handshake the GPU `nccl` backend runs. After every step both engines serve the trainer's
weights: their logprobs equal the trainer's."""
import asyncio

import numpy as np
import pytest

from actors.system import shutdown_rollout_roles, start_rollout_roles
from sead_ray.loop import samples_from
from sead_ray.profiles import sample_profiles
from sead_ray.rollout import run_dialogues
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def system(ray_cluster, scenario, tmp_path_factory):
    from actors.trainer import TrainerGroup
    from sead_ray.models import resolve_model
    run_dir = tmp_path_factory.mktemp("gloo")
    cfg = tiny_config("user.backend=rule", "weight_sync.transport=gloo", "agent.engines=2", "train.batch_size=4",
                      "train.micro_batch_size=2", "train.lr=1e-2", "placement.agent.cpus=0.25",
                      "placement.trainer.cpus=0.25", "trainer.zero_stage=3",   # the GPU setting: gathers
                      "trainer.num_workers=2", "trainer.threads_per_worker=1", "weight_sync.timeout_s=30")
    roles = asyncio.run(start_rollout_roles(cfg, scenario, cfg.models.agent, run_dir))
    trainer = TrainerGroup(cfg, str(resolve_model(cfg.models.agent)), run_dir, engines=list(roles.agents.actors.values()))
    trainer.start()
    yield cfg, roles, trainer
    trainer.stop()
    asyncio.run(shutdown_rollout_roles(roles))


def _engine_logprobs(roles, prompt):
    import ray
    outs = ray.get([a.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=8)
                    for a in roles.agents.actors.values()])
    return outs


def test_every_version_reaches_both_engines_through_vllms_api(system, scenario):
    cfg, roles, trainer = system
    prompt = roles.tokenizer("Hello, this is a fixed prompt for the check", add_special_tokens=False)["input_ids"]
    before = _engine_logprobs(roles, prompt)
    for version in (1, 2):
        profiles = sample_profiles(scenario, 4, np.random.default_rng(version), n_max=200)
        result = asyncio.run(run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=version, phase="train",
                                           sampling=cfg.dialogue.agent_train))
        trajs = result.trajectories
        assert {t.policy_versions[0] for t in trajs} == {version - 1}
        advantages = [1.0 if i % 2 == 0 else -1.0 for i in range(len(trajs))]
        step = trainer.step(samples_from(trajs, advantages, cfg.train.max_seq_len))
        assert step.logprob_mismatch_mean < 1e-3, step       # the engines sampled with the trainer's weights
        sync = trainer.sync_weights(version)
        assert sync.version == version and sync.mb > 0 and sync.apply_s is not None
        outs = _engine_logprobs(roles, prompt)
        assert [o.policy_version for o in outs] == [version, version]
        for out in outs:
            recomputed = trainer.logprobs([prompt + out.token_ids])[0][len(prompt):]
            diffs = [abs(a - b) for a, b in zip(out.logprobs, recomputed)]
            assert len(diffs) == len(out.token_ids) and max(diffs) < 1e-3, diffs
    # both engines played calls (sticky least-loaded routing over the pool)
    import ray
    stats = ray.get([a.stats.remote() for a in roles.agents.actors.values()])
    assert all(s["tokens_generated"] > 16 for s in stats), stats     # more than the greedy checks alone
    # the weights did move: the engines' greedy continuation or its logprobs changed
    assert any(a.token_ids != b.token_ids or max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) > 1e-3
               for a, b in zip(before, outs))



def test_a_sync_that_meets_a_dead_engine_replaces_it_and_every_engine_serves_the_version(system):
    """An agent engine killed before a sync, through the run's own path (TrainedRole.publish): the sync fails
    within weight_sync.timeout_s instead of hanging; rank 0 first finishes the ZeRO-3 gathers rank 1 is in, so
    the trainer goes on (a failed sync is not a failed trainer); the live engine's open transfer is closed, the
    dead one is replaced in its bundle, and both then serve the version."""
    import time
    from functools import partial

    import ray

    from actors.system import restart_engine
    from actors.training_system import TrainedRole
    cfg, roles, trainer = system
    trained = TrainedRole("agent", roles.agents, trainer, partial(restart_engine, roles, "agent"), version=3)
    ray.kill(roles.agents.actors["agent-1"], no_restart=True)
    t0 = time.monotonic()
    result = asyncio.run(trained.publish())
    seconds = time.monotonic() - t0
    assert result.version == 3 and roles.agents.restarts == {"agent-1": 1}
    assert ray.get([a.get_version.remote() for a in roles.agents.actors.values()]) == [3, 3]
    # the failed sync (at most its timeout), the replacement's start-up, its push, the sync again
    assert seconds < cfg.weight_sync.timeout_s + 120, seconds
