"""The loop's phases without Ray: calls that end in error are played again with the same seed, and a
call that stays in error is neither trained on nor counted by Mistake Analysis (an infrastructure
failure is not a policy failure). The agent and the system are test doubles; the simulator is the
real rule back-end and the tokenizer the real SmolLM2 one."""
import asyncio
import json
import shutil

import numpy as np
import pytest

from sead_ray.curriculum.controller import ProfileController
from sead_ray.play.rollout import RolloutEndpoints, run_dialogues
from sead_ray.scenario.profiles import sample_profiles
from sead_ray.scenario.turn_protocol import AgentTurnOutput, UserTurnOutput
from sead_ray.training.checkpoint import CheckpointError, TrainState
from sead_ray.training.loop import SelfEvolutionLoop, user_samples_from
from sead_ray.training.trainer_protocol import StepMetrics, SyncResult
from sead_ray.user.rule.simulator import RuleUserSimulator
from tests.conftest import tiny_config

REPLY = 'It is free, 700 yuan, no deposit."}'


class FakeAgentEndpoint:
    """Test double of the agent engine pool: a fixed reply; the calls named in `dies_in` raise (a dead
    engine) the first `times` they are played."""

    def __init__(self, tokenizer, dies_in=(), times=1):
        self.tokenizer, self.dies_in, self.times, self.failures = tokenizer, set(dies_in), times, {}

    async def generate(self, dialogue_id, prompt_ids, **kwargs):
        base = dialogue_id.split("-replay")[0]
        if base in self.dies_in and self.failures.get(base, 0) < self.times:
            self.failures[base] = self.failures.get(base, 0) + 1
            raise RuntimeError("agent engine died")
        ids = self.tokenizer(REPLY, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return AgentTurnOutput(REPLY, ids, [-0.5] * len(ids), policy_version=0)

    def release(self, dialogue_id):
        pass


class RuleUsers:
    def __init__(self, scenario):
        self.sim = RuleUserSimulator(scenario, accept_phrase="It is free")

    async def respond(self, request):
        return self.sim.respond(request)

    def release(self, dialogue_id):
        pass


def _endpoints(scenario, tokenizer, **agent):
    return RolloutEndpoints(FakeAgentEndpoint(tokenizer, **agent), RuleUsers(scenario), tokenizer, engines=1)


def test_a_call_in_error_is_replayed_with_its_seed(scenario, smollm_tokenizer):
    cfg = tiny_config("dialogue.error_replays=2")
    profiles = sample_profiles(scenario, 3, np.random.default_rng(0), n_max=200)
    def play(endpoints):
        return asyncio.run(run_dialogues(endpoints, cfg, scenario, profiles, iteration=1, phase="train",
                                         training=True))
    result = play(_endpoints(scenario, smollm_tokenizer, dies_in={"it0001-p0001-r0"}, times=1))
    undisturbed = play(_endpoints(scenario, smollm_tokenizer))
    replayed = result.trajectories[1]
    assert not replayed.errored and replayed.replays == 1 and replayed.dialogue_id == "it0001-p0001-r0-replay1"
    # the replay is the call itself, whole, as it would have gone without the failure
    same = undisturbed.trajectories[1]
    assert (replayed.end_reason, replayed.token_ids, [t.user for t in replayed.turns]) == \
        (same.end_reason, same.token_ids, [t.user for t in same.turns])
    assert result.errors == 0 and result.replays == 1 and len(result.played) == 3


class FakeLoopSystem:
    """Test double of actors.trained_roles.TrainingSystem: the controller for real, everything else records."""

    def __init__(self, cfg, scenario, endpoints):
        self.controller = ProfileController(scenario, cfg.curriculum, cfg.seed)
        self._endpoints, self.user_engines = endpoints, 1
        self.trained, self.outcomes, self.rows, self.version, self.resets = [], [], [], 0, []
        self.references = []   # (checkpoint, steps taken before it became the KL's reference)

    def endpoints(self):
        return self._endpoints

    async def rescale(self):
        return None

    async def sample_profiles(self, n):
        return self.controller.sample(n)

    async def update_curriculum(self, outcomes):
        outcomes = list(outcomes)
        self.outcomes.append(outcomes)
        return self.controller.update(outcomes)

    async def controller_state(self):
        return self.controller.state_dict()

    trained_roles = ["agent"]

    async def grpo_step(self, samples, role, lr=None, reset_optimizer_after=False):
        self.trained.append(samples)
        self.resets.append(reset_optimizer_after)
        self.version += 1
        return StepMetrics(0.0, 0.0, 0.0, 0.0, 0.0, None, sum(sum(s.loss_mask) for s in samples), 0.0, 0.0, 0.0, 0.0,
                           0.0)

    async def publish(self, role):
        return SyncResult(self.version, 1.0, None, 0.0, 0.0)

    async def set_reference(self, checkpoint, role="agent"):
        assert (checkpoint / "state.json").exists()
        self.references.append((checkpoint, len(self.trained)))

    def save_weights(self, directory):
        directory.mkdir(parents=True, exist_ok=True)

    async def record_iteration(self, iteration, phase, records, extra, curriculum=None):
        self.rows.append({"iteration": iteration, "phase": phase, **extra})
        return {"cr": 0.0}


def test_calls_still_in_error_are_neither_trained_on_nor_counted(scenario, smollm_tokenizer, tmp_path):
    cfg = tiny_config("train.batch_size=4", "train.iterations=1", "dialogue.error_replays=1", "curriculum.mode=uniform")
    system = FakeLoopSystem(cfg, scenario, None)
    broken = "it0001-p0002-r0"
    system._endpoints = _endpoints(scenario, smollm_tokenizer, dies_in={broken}, times=99)
    start = TrainState(0, system.controller.state_dict())
    asyncio.run(SelfEvolutionLoop(cfg, scenario, system, tmp_path, start, saved=False).run())
    records = [json.loads(line) for line in (tmp_path / "dialogues" / "iter_0001.jsonl").read_text().splitlines()]
    assert [r["end_reason"] == "error" for r in records] == [False, False, True, False]   # reported, not hidden
    assert records[2]["replays"] == 1
    assert len(system.trained[0]) == 3 and len(system.outcomes[0]) == 3        # the broken call left out of both
    assert system.rows[0]["error_calls"] == 1 and system.rows[0]["train_agent_tokens"] > 0
    assert (tmp_path / "checkpoints" / "latest").exists()     # the run's last iteration is checkpointed


def test_a_failure_mid_run_keeps_the_last_completed_iteration(scenario, smollm_tokenizer, tmp_path):
    cfg = tiny_config("train.batch_size=2", "train.iterations=3", "train.checkpoint_every=0")
    system = FakeLoopSystem(cfg, scenario, _endpoints(scenario, smollm_tokenizer))
    sample = system.sample_profiles

    async def controller_dies_in_iteration_2(n):
        if system.trained:
            raise RuntimeError("the controller actor died")
        return await sample(n)
    system.sample_profiles = controller_dies_in_iteration_2
    loop = SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                             saved=False)
    try:
        asyncio.run(loop.run_keeping_progress())
    except RuntimeError as exc:
        assert "controller actor died" in str(exc)
    else:
        raise AssertionError("the failure was swallowed")
    # checkpoint_every 0 saves only at the end: this one was written because iteration 2 failed
    state = json.loads((tmp_path / "checkpoints" / "latest" / "state.json").read_text())
    assert state["iteration"] == 1 and state["versions"] == {"agent": 1}


def test_no_checkpoint_pairs_new_weights_with_an_unfinished_iteration(scenario, smollm_tokenizer, tmp_path):
    cfg = tiny_config("train.batch_size=2", "train.iterations=3", "train.checkpoint_every=0")
    system = FakeLoopSystem(cfg, scenario, _endpoints(scenario, smollm_tokenizer))

    async def publish_fails(role):
        if system.version == 2:
            raise RuntimeError("agent engine unreachable")
        return SyncResult(system.version, 1.0, None, 0.0, 0.0)
    system.publish = publish_fails
    loop = SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                             saved=False)
    try:
        asyncio.run(loop.run_keeping_progress())
    except RuntimeError:
        pass
    # iteration 2 had already stepped: saving now would store v2 weights as iteration 1's
    assert not (tmp_path / "checkpoints").exists()


def test_held_out_evaluation_replays_one_fixed_set(scenario, smollm_tokenizer, tmp_path):
    from sead_ray.runs.train import held_out_profiles
    cfg = tiny_config("train.batch_size=2", "train.iterations=3", "train.eval_every=2", "train.eval_profiles=3")
    held_out = held_out_profiles(cfg, scenario, tmp_path)
    assert held_out_profiles(cfg, scenario, tmp_path) == held_out     # read back on resume, not drawn again
    system = FakeLoopSystem(cfg, scenario, _endpoints(scenario, smollm_tokenizer))
    training_draws = ProfileController(scenario, cfg.curriculum, cfg.seed).sample(2)
    assert not set(held_out) & set(training_draws)     # its own seed: not the first training draw
    loop = SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                             saved=False, held_out=held_out)
    asyncio.run(loop.run())
    # before training, every eval_every iterations, and after the last
    assert [(r["iteration"], r["phase"]) for r in system.rows] == [
        (0, "eval"), (1, "train"), (2, "train"), (2, "eval"), (3, "train"), (3, "eval")]
    runs = {}
    for it in (0, 2, 3):
        records = [json.loads(line) for line in (tmp_path / "dialogues" / f"eval_{it:04d}.jsonl").read_text().splitlines()]
        runs[it] = [(r["profile"]["behaviors"], r["turns"]) for r in records]
        assert len(records) == 3
    assert runs[0] == runs[2] == runs[3]       # same profiles, same seeds (the agent double does not learn)


def test_a_batch_without_reward_differences_skips_its_step_only_when_asked(scenario, smollm_tokenizer, tmp_path):
    """train.skip_no_signal_steps: every call of the batch ends alike (the fixed reply never persuades the
    rule user), so every advantage is 0; the step and the weight sync are skipped and the version stays, unless a KL term
    still gives the step a gradient."""
    def run(out, *settings):
        cfg = tiny_config("train.batch_size=2", "train.iterations=2", *settings)
        system = FakeLoopSystem(cfg, scenario, _endpoints(scenario, smollm_tokenizer))
        loop = SelfEvolutionLoop(cfg, scenario, system, out, TrainState(0, system.controller.state_dict()),
                                 saved=False)
        asyncio.run(loop.run())
        return system, json.loads((out / "checkpoints" / "latest" / "state.json").read_text())

    system, state = run(tmp_path / "skip", "train.skip_no_signal_steps=true")
    records = (tmp_path / "skip" / "dialogues" / "iter_0001.jsonl").read_text().splitlines()
    assert len({json.loads(line)["outcome"] for line in records}) == 1       # no reward differences
    assert system.trained == [] and system.version == 0
    assert [(r["train_skipped"], r["policy_version"], r["train_grad_norm"]) for r in system.rows] == [(1, 0, 0.0)] * 2
    assert system.rows[0]["train_agent_tokens"] > 0 and system.rows[0]["train_entropy"] is None
    assert state["iteration"] == 2 and state["versions"] == {"agent": 0}
    for settings in [("train.skip_no_signal_steps=false",), ("train.skip_no_signal_steps=true", "train.kl_coef=0.1")]:
        system, state = run(tmp_path / "-".join(settings), *settings)
        assert len(system.trained) == 2 and state["versions"]["agent"] == 2
        assert [r["train_skipped"] for r in system.rows] == [0, 0]
    # the lr = 0 control: no step either, whatever the calls
    system, state = run(tmp_path / "lr0", "train.skip_no_signal_steps=false", "train.lr=0")
    assert system.trained == [] and state["versions"] == {"agent": 0}
    assert [r["train_skipped"] for r in system.rows] == [1, 1]
    # unless the KL is asked to cover only the calls that carry signal: then there is none to take it over
    system, state = run(tmp_path / "kl-signal-only", "train.skip_no_signal_steps=true", "train.kl_coef=0.1",
                        "train.drop_no_signal_calls_under_kl=true")
    assert system.trained == [] and state["versions"] == {"agent": 0}


def test_a_stop_keeps_the_last_checkpoint_when_a_save_would_outlast_it(scenario, smollm_tokenizer, tmp_path):
    """train.stop_save_max_s: checkpoints every 2 iterations, a stop after iteration 3. When the run's last save
    took longer than the limit, the stop leaves iteration 2's checkpoint (a resume redoes iteration 3) instead of
    a save that could outlast the job's stop wait; within the limit it saves iteration 3."""
    import time

    def run(out, limit):
        cfg = tiny_config("train.batch_size=2", "train.iterations=4", "train.checkpoint_every=2",
                          f"train.stop_save_max_s={limit}")
        system = FakeLoopSystem(cfg, scenario, _endpoints(scenario, smollm_tokenizer))
        loop = SelfEvolutionLoop(cfg, scenario, system, out, TrainState(0, system.controller.state_dict()),
                                 saved=False)
        record, save_weights = system.record_iteration, system.save_weights

        async def stop_after_iteration_3(iteration, phase, records, extra, curriculum=None):
            loop.stop_requested = loop.stop_requested or iteration == 3
            return await record(iteration, phase, records, extra, curriculum)

        def slow_save(directory):
            time.sleep(0.2)
            save_weights(directory)
        system.record_iteration, system.save_weights = stop_after_iteration_3, slow_save
        assert asyncio.run(loop.run_keeping_progress()) is True          # stopped
        return json.loads((out / "checkpoints" / "latest" / "state.json").read_text())["iteration"]

    assert run(tmp_path / "slow", 0.1) == 2
    assert run(tmp_path / "fast", 60) == 3


class SlowWriterSystem(FakeLoopSystem):
    """FakeLoopSystem whose checkpoint writer takes `save_s` (a slowed writer); it logs when the writer, the agent's
    calls and the GRPO steps run, and can ask the loop to stop while a checkpoint is being written."""

    def __init__(self, cfg, scenario, endpoints, save_s, stop_during_save=None):
        super().__init__(cfg, scenario, endpoints)
        self.save_s, self.stop_during_save, self.events, self.loop = save_s, stop_during_save, [], None
        generate = endpoints.agent.generate

        async def logged_generate(dialogue_id, prompt_ids, **kwargs):
            self.events.append(("call", dialogue_id[:6]))
            return await generate(dialogue_id, prompt_ids, **kwargs)
        endpoints.agent.generate = logged_generate

    def save_weights(self, directory):
        import time
        self.events.append(("save starts", directory.name))
        if directory.name == self.stop_during_save:
            self.loop.stop_requested = True
        time.sleep(self.save_s)
        super().save_weights(directory)
        self.events.append(("save ends", directory.name))

    async def grpo_step(self, samples, role, lr=None, reset_optimizer_after=False):
        self.events.append(("step", self.version + 1))
        return await super().grpo_step(samples, role, lr, reset_optimizer_after)

    def move_checkpoint(self, staged, directory):
        """train.checkpoint_staging_dir: the copy into the run, as slow as the write."""
        import time

        from sead_ray.training.checkpoint import copy_staged
        self.events.append(("copy starts", directory.name))
        time.sleep(self.save_s)
        copy_staged(str(staged), str(directory))
        self.events.append(("copy ends", directory.name))


def _slow_writer_run(scenario, tokenizer, out, *overrides, stop_during_save=None):
    cfg = tiny_config("train.batch_size=2", "train.iterations=3", *overrides)
    system = SlowWriterSystem(cfg, scenario, _endpoints(scenario, tokenizer), 0.5, stop_during_save)
    loop = system.loop = SelfEvolutionLoop(cfg, scenario, system, out, TrainState(0, system.controller.state_dict()),
                                           saved=False)
    return system, asyncio.run(loop.run_keeping_progress())


def test_a_checkpoint_is_written_while_the_next_iteration_plays_and_its_step_waits(scenario, smollm_tokenizer,
                                                                                   tmp_path):
    system, stopped = _slow_writer_run(scenario, smollm_tokenizer, tmp_path)
    events = system.events
    assert not stopped
    first_save = events.index(("save starts", "iter_0001")), events.index(("save ends", "iter_0001"))
    # iteration 2's calls were played while iteration 1's checkpoint was being written ...
    assert ("call", "it0002") in events[first_save[0]:first_save[1]]
    # ... and its GRPO step waited for it (the checkpoint holds iteration 1's weights)
    assert events.index(("step", 2)) > first_save[1]
    # one save at a time, and the run ends after its last one
    starts = [e for e in events if e[0] == "save starts"]
    ends = [e for e in events if e[0] == "save ends"]
    assert [e[1] for e in starts] == [e[1] for e in ends] == ["iter_0001", "iter_0002", "iter_0003"]
    assert all(events.index(("save ends", a[1])) < events.index(b) for a, b in zip(starts, starts[1:]))
    assert events[-1] == ("save ends", "iter_0003")
    assert json.loads((tmp_path / "checkpoints" / "latest" / "state.json").read_text())["iteration"] == 3

    serial, _ = _slow_writer_run(scenario, smollm_tokenizer, tmp_path / "serial", "train.checkpoint_in_background=false")
    write = serial.events.index(("save starts", "iter_0001")), serial.events.index(("save ends", "iter_0001"))
    assert ("call", "it0002") not in serial.events[write[0]:write[1]]   # the switch: one thing at a time


def test_a_staged_checkpoint_frees_the_trainer_before_its_copy_into_the_run_ends(scenario, smollm_tokenizer,
                                                                                  tmp_path):
    """train.checkpoint_staging_dir: the trainer writes the checkpoint there (node-local) and the next GRPO step
    waits only for that; the copy into the run goes on beside it, and `latest` moves once the copy is complete."""
    staging = tmp_path / "local_disk"
    system, stopped = _slow_writer_run(scenario, smollm_tokenizer, tmp_path / "run",
                                       f"train.checkpoint_staging_dir={staging}")
    events = system.events
    assert not stopped
    written, copied = events.index(("save ends", "iter_0001")), events.index(("copy ends", "iter_0001"))
    assert written < events.index(("step", 2)) < copied   # the step did not wait for the copy
    assert events.index(("save starts", "iter_0002")) > copied   # at most one checkpoint in flight
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("iter_*"))
    assert kept == ["iter_0002", "iter_0003"] and all(
        (tmp_path / "run" / "checkpoints" / name / "state.json").exists() for name in kept)
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest" / "state.json").read_text())["iteration"] == 3
    assert list((staging / "run").iterdir()) == []   # each staged copy removed once in the run


def test_a_stop_during_a_save_ends_with_complete_checkpoints(scenario, smollm_tokenizer, tmp_path):
    """Stop asked while iteration 1's checkpoint is written: the run waits for it, checkpoints the last completed
    iteration (2, whose calls were already playing, unless the stop cut them short) and ends; no checkpoint is left
    half written."""
    system, stopped = _slow_writer_run(scenario, smollm_tokenizer, tmp_path, stop_during_save="iter_0001")
    completed = sum(e[0] == "step" for e in system.events)   # one GRPO step per completed iteration
    assert stopped and completed in (1, 2)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*"))
    assert kept == [f"iter_{i:04d}" for i in range(1, completed + 1)]
    assert all((tmp_path / "checkpoints" / name / "state.json").exists() for name in kept)
    assert json.loads((tmp_path / "checkpoints" / "latest" / "state.json").read_text())["iteration"] == completed
    assert system.events[-1] == ("save ends", kept[-1])


def test_simulator_samples_train_only_the_simulators_tokens():
    """user.train: the simulator's samples mask all but its own sampled tokens (the end-to-end run that
    trains the simulator is tests/system/test_job_submit.py)."""
    from sead_ray.play.dialogue import Trajectory
    from sead_ray.scenario.profiles import Profile
    turn = UserTurnOutput("hi", (1,), "continue", True, prompt_ids=[5, 6, 7], token_ids=[8, 9], logprobs=[-0.5, -0.25])
    traj = Trajectory("d", Profile((1,), ()), [], "failure", "refuse", user_turns=[turn, turn])
    samples = user_samples_from([traj], [0.75], max_seq_len=4)
    assert len(samples) == 2
    assert samples[0].token_ids == [5, 6, 7, 8] and samples[0].loss_mask == [0, 0, 0, 1]   # cut at max_seq_len
    assert samples[0].rollout_logprobs == [0.0, 0.0, 0.0, -0.5] and samples[0].advantage == 0.75


class PlainRuleUsers(RuleUsers):
    def __init__(self, scenario):
        self.sim = RuleUserSimulator(scenario)


def test_sop_rehearsal_fine_tunes_on_the_won_script_calls_then_checkpoints_iteration_0_once(
        scenario, smollm_tokenizer, tmp_path):
    """train.warm_start = sop_rehearsal: before iteration 1 the honest script plays warm_start_calls calls per step
    against the run's simulator; the agent trains on those it won, in its own format (every agent turn in the loss,
    advantage 1, the estimate the state it last heard); iteration 0 is checkpointed and kept; a resumed run does not
    rehearse again."""
    from sead_ray.training.checkpoint import latest_checkpoint, load_train_state
    tok = smollm_tokenizer
    cfg = tiny_config("train.batch_size=2", "train.iterations=1", "train.warm_start=sop_rehearsal",
                      "train.warm_start_steps=2", "train.warm_start_calls=3", "curriculum.user_set=soft",
                      "train.eval_every=1", "train.eval_profiles=2", "train.keep_checkpoints=1")
    endpoints = RolloutEndpoints(FakeAgentEndpoint(tok), PlainRuleUsers(scenario), tok, engines=1)
    system = FakeLoopSystem(cfg, scenario, endpoints)
    from sead_ray.runs.train import held_out_profiles
    loop = SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                             saved=False, held_out=held_out_profiles(cfg, scenario, tmp_path))
    asyncio.run(loop.run())
    rehearsal, grpo = system.trained[:2], system.trained[2:]
    assert len(rehearsal) == 2 and len(grpo) == 1
    assert system.resets == [False, True, False]   # the rehearsal's Adam moments end with its last step
    calls = [json.loads(line) for line in (tmp_path / "dialogues" / "warm_start.jsonl").read_text().splitlines()]
    assert len(calls) == 6 and sum(c["outcome"] == "success" for c in calls) == sum(len(b) for b in rehearsal) >= 4
    for sample in (s for batch in rehearsal for s in batch):
        assert sample.advantage == 1.0
        trained = tok.decode([i for i, m in zip(sample.token_ids, sample.loss_mask) if m])
        prefill = cfg.dialogue.agent_prefill     # context, not trained: each trained turn is the rest of the format
        turns = [json.loads(prefill + part) for part in trained.split(tok.eos_token) if part]
        assert turns and all(set(t) == {"reply", "estimate"} for t in turns)   # the agent's format, whole turns
        assert turns[0]["reply"] == scenario.rule_user.opening
    # the first estimate is the profile's state (what the agent "heard" before the call): the state it should estimate
    first = calls[0]
    won = [c for c in calls if c["outcome"] == "success"]
    first_turn = tok.decode([i for i, m in zip(rehearsal[0][0].token_ids, rehearsal[0][0].loss_mask) if m])
    assert json.loads(cfg.dialogue.agent_prefill + first_turn.split(tok.eos_token)[0])["estimate"] == \
        {k: won[0]["profile"][k] for k in ("cooperation", "emotion", "trust")}
    assert first["turns"][0]["agent"] == scenario.rule_user.opening
    phases = [(r["iteration"], r["phase"]) for r in system.rows]
    assert phases == [(0, "warm_start"), (0, "eval"), (1, "train"), (1, "eval")]
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*"))
    assert kept == ["iter_0000", "iter_0001"]      # iteration 0 outlives keep_checkpoints = 1
    assert load_train_state(tmp_path / "checkpoints" / "iter_0000").versions == {"agent": 2}
    assert load_train_state(latest_checkpoint(tmp_path)).versions == {"agent": 3}

    # resumed from iteration 0 (a stop right after the warm start): no second rehearsal, no second evaluation 0
    again = FakeLoopSystem(cfg, scenario, endpoints)
    start = load_train_state(tmp_path / "checkpoints" / "iter_0000")
    resumed = SelfEvolutionLoop(cfg, scenario, again, tmp_path / "resumed", start, saved=True,
                                held_out=held_out_profiles(cfg, scenario, tmp_path))
    (tmp_path / "resumed" / "dialogues").mkdir(parents=True)
    (tmp_path / "resumed" / "dialogues" / "eval_0000.jsonl").write_text("")
    asyncio.run(resumed.run())
    assert len(again.trained) == 1 and [r["phase"] for r in again.rows] == ["train", "eval"]
    assert system.references == again.references == []   # train.kl_coef = 0: no reference model at all


def test_with_a_kl_term_the_rehearsed_agent_is_its_reference_on_a_fresh_run_and_a_resumed_one(
        scenario, smollm_tokenizer, tmp_path):
    """The KL term pulls self-play towards the rehearsed agent (iteration 0's checkpoint), not towards the base model
    the rehearsal started from; the rehearsal's own steps have no reference."""
    from sead_ray.training.checkpoint import load_train_state
    cfg = tiny_config("train.batch_size=2", "train.iterations=1", "train.warm_start=sop_rehearsal",
                      "train.warm_start_steps=2", "train.warm_start_calls=3", "curriculum.user_set=soft",
                      "train.kl_coef=0.1", "train.keep_checkpoints=1")
    endpoints = RolloutEndpoints(FakeAgentEndpoint(smollm_tokenizer), PlainRuleUsers(scenario), smollm_tokenizer,
                                 engines=1)
    system = FakeLoopSystem(cfg, scenario, endpoints)
    asyncio.run(SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                                  saved=False).run())
    rehearsed = tmp_path / "checkpoints" / "iter_0000"
    assert len(system.trained) == 3 and system.references == [(rehearsed, 2)]   # after the rehearsal, before GRPO
    again = FakeLoopSystem(cfg, scenario, endpoints)
    asyncio.run(SelfEvolutionLoop(cfg, scenario, again, tmp_path, load_train_state(rehearsed), saved=True).run())
    assert again.references == [(rehearsed, 0)] and len(again.trained) == 1   # resumed: set before its first step
    # the rehearsed agent's checkpoint gone: said, before any step
    shutil.rmtree(rehearsed)
    lost = FakeLoopSystem(cfg, scenario, endpoints)
    with pytest.raises(CheckpointError, match="rehearsed agent"):
        asyncio.run(SelfEvolutionLoop(cfg, scenario, lost, tmp_path, TrainState(0, lost.controller.state_dict(),
                                                                                {"agent": 2}), saved=True).run())
    assert lost.trained == []


def test_under_reverse_calls_start_where_drawn_their_script_turns_untrained_and_counted_per_start(
        scenario, smollm_tokenizer, tmp_path):
    from sead_ray.play.starts import honest_start
    cfg = tiny_config("train.batch_size=6", "train.iterations=1", "curriculum.depth=reverse", "curriculum.user_set=soft",
                      "dialogue.max_turns=6", "train.eval_every=1", "train.eval_depths=[cold, 0]")
    system = FakeLoopSystem(cfg, scenario, None)
    system._endpoints = RolloutEndpoints(FakeAgentEndpoint(smollm_tokenizer), PlainRuleUsers(scenario),
                                         smollm_tokenizer, engines=1)
    held_out = ProfileController(scenario, cfg.curriculum.__class__(user_set="soft"), 5).sample(3)
    start = TrainState(0, system.controller.state_dict())
    asyncio.run(SelfEvolutionLoop(cfg, scenario, system, tmp_path, start, saved=False, held_out=held_out).run())
    records = [json.loads(line) for line in (tmp_path / "dialogues" / "iter_0001.jsonl").read_text().splitlines()]
    depths = [r["profile"].get("start_depth") for r in records]
    assert set(depths) - {None} and set(depths) <= {0, 1, 2, None}
    settings_user = PlainRuleUsers(scenario)
    from sead_ray.play.dialogue import call_settings
    from sead_ray.scenario.profiles import Profile
    for record in records:
        scripted = [t for t in record["turns"] if t.get("scripted")]
        depth = record["profile"].get("start_depth")
        assert (depth is None) == (not scripted)
        assert all(t["user_status"] == "continue" for t in scripted)   # no drawn start is already decided
        assert len(record["turns"]) > len(scripted)                       # the policy played
        if depth is not None:   # the script's turns are the honest start at that depth on this profile
            profile = Profile.from_json(record["profile"], scenario.schema)
            expected = asyncio.run(honest_start(scenario, profile, settings_user.respond,
                                                call_settings(cfg, scenario), depth))
            assert [t["agent_raw"] for t in scripted] == list(expected.turns)
    # the trainer saw only the policy's tokens: one fixed reply per policy turn
    reply_tokens = len(smollm_tokenizer(REPLY, add_special_tokens=False)["input_ids"]) + 1
    policy_turns = [sum(not t.get("scripted") for t in r["turns"]) for r in records]
    assert sorted(sum(s.loss_mask) for s in system.trained[0]) == sorted(n * reply_tokens for n in policy_turns)
    # Mistake Analysis got each call's start
    assert [d for _, d, _ in system.outcomes[0]] == depths
    assert {row["phase"] for row in system.rows} >= {"eval", "eval_d0"}
    assert all(r["profile"].get("start_depth") in (0, None)
               for r in map(json.loads, (tmp_path / "dialogues" / "eval_0001_d0.jsonl").read_text().splitlines()))
    assert (tmp_path / "dialogues" / "eval_0001.jsonl").exists()


def test_a_held_out_set_from_several_user_sets_is_cold_and_labelled(scenario, tmp_path):
    from sead_ray.runs.train import held_out_profiles
    cfg = tiny_config("train.eval_profiles=3", "train.eval_user_sets=[soft, hard]", "curriculum.depth=reverse")
    held_out = held_out_profiles(cfg, scenario, tmp_path)
    assert [p.extra["user_set"] for p in held_out] == ["soft"] * 3 + ["hard"] * 3
    assert all(scenario.user_sets[p.extra["user_set"]].contains(scenario.schema, p.state) for p in held_out)
    assert {p.start_depth for p in held_out} == {None}       # each evaluation sets where its calls start
    assert held_out_profiles(cfg, scenario, tmp_path) == held_out


class PhraseByCallAgent(FakeAgentEndpoint):
    """Says the rule user's planted phrase ("It is free") in the calls `winning(dialogue_id)` picks, else stalls."""

    def __init__(self, tokenizer, winning):
        super().__init__(tokenizer)
        self.winning = winning

    async def generate(self, dialogue_id, prompt_ids, **kwargs):
        text = REPLY if self.winning(dialogue_id) else 'Let me think."}'
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return AgentTurnOutput(text, ids, [-0.5] * len(ids), policy_version=0)


@pytest.mark.parametrize("settings, trained", [
    ((), 4),
    (("train.kl_coef=0.1",), 8),      # their KL gradient keeps them in the step
    (("train.kl_coef=0.1", "train.drop_no_signal_calls_under_kl=true"), 4)])
def test_calls_without_signal_are_left_out_of_the_step(scenario, smollm_tokenizer, tmp_path, settings, trained):
    """Group 0 wins every call (advantage 0), group 1 wins one of four: only group 1 reaches the trainer, unless
    a KL term gives group 0 a gradient and is not asked to cover the calls with signal only."""
    cfg = tiny_config("train.batch_size=2", "train.rollouts_per_profile=4", "train.iterations=1",
                      "train.advantage_mode=group_mean", "train.drop_no_signal_calls=true", "user.status_guards=false",
                      *settings)
    system = FakeLoopSystem(cfg, scenario, None)
    agent = PhraseByCallAgent(smollm_tokenizer, lambda did: "-p0000-" in did or did.endswith("-p0001-r0"))
    system._endpoints = RolloutEndpoints(agent, RuleUsers(scenario), smollm_tokenizer, engines=1)
    asyncio.run(SelfEvolutionLoop(cfg, scenario, system, tmp_path, TrainState(0, system.controller.state_dict()),
                                  saved=False).run())
    assert len(system.trained) == 1 and len(system.trained[0]) == trained
    assert sorted(s.advantage for s in system.trained[0]) == sorted([-0.25, -0.25, -0.25, 0.75] + [0.0] * (trained - 4))
    assert len(system.outcomes[0]) == 8       # Mistake Analysis still counts every call
