"""`sead-ray train`: find where a run resumes, start the system, run the loop, turn Ctrl-C or SIGTERM (`ray
job stop`) into a checkpoint at the next safe point, and tear the system down whatever happened."""
from __future__ import annotations

import logging
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from sead_ray.core.config import ConfigError, SeadConfig, config_to_dict, dump_config, load_config
from sead_ray.core.jsonl import write_jsonl
from sead_ray.core.models import resolve_model
from sead_ray.core.roles import ROLES
from sead_ray.curriculum.controller import ProfileController
from sead_ray.runs.cluster import connect
from sead_ray.scenario.profiles import Profile, read_profiles
from sead_ray.scenario.scenario import Scenario
from sead_ray.training.checkpoint import TrainState, latest_checkpoint, load_train_state, resume_conflicts, truncate_metrics
from sead_ray.training.loop import SelfEvolutionLoop
from sead_ray.training.warm_start import caps_holding, longest_script_turn_tokens

log = logging.getLogger(__name__)


# Ctrl-C, and what `ray job stop` (and most schedulers) send: both stop at the next safe point.
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


HELD_OUT_SEED = 104_723   # offsets the run's seed: the held-out draw is not any training draw


def held_out_profiles(cfg: SeadConfig, scenario: Scenario, run_dir: Path) -> list[Profile]:
    """The run's held-out evaluation set: drawn once (uniformly over the curriculum's states, with its own
    seed) into run_dir/eval_profiles.jsonl, read back from there on resume."""
    path = run_dir / "eval_profiles.jsonl"
    if path.exists():
        return read_profiles(path, scenario)
    curriculum = replace(cfg.curriculum, mode="uniform", depth="off")   # cold: each evaluation sets its depth
    profiles = [p for user_set in cfg.train.eval_user_sets or (curriculum.user_set,)
                for p in ProfileController(scenario, replace(curriculum, user_set=user_set),
                                           cfg.seed + HELD_OUT_SEED).sample(cfg.train.eval_profiles)]
    write_jsonl(path, (p.to_json(scenario.schema) for p in profiles))
    return profiles


RUN_FILES = ("config.yaml", "metrics.jsonl", "dialogues")   # what a started run leaves before its first checkpoint


def resume_point(cfg: SeadConfig, run_dir: Path, resume: bool) -> Optional[Path]:
    """Where a run starts, decided here only: `resume`, its latest checkpoint (None: from the beginning),
    refused when `cfg` changes a key its checkpoints were made with; a new run refuses a directory that
    already holds checkpoints (it would mix two runs' metrics)."""
    checkpoint = latest_checkpoint(run_dir)
    if not resume:
        if checkpoint is not None:
            raise ConfigError(f"{run_dir} already holds a run with checkpoints: continue it with "
                              f"`sead-ray train --resume {run_dir}` or choose another --out")
        files = [name for name in RUN_FILES if (run_dir / name).exists()]
        if files:
            raise ConfigError(f"{run_dir} holds a run's files ({', '.join(files)}) but no complete checkpoint: "
                              f"`sead-ray train --resume {run_dir}` starts that run over, or choose another --out")
        return None
    if (run_dir / "config.yaml").exists():
        changed = resume_conflicts(config_to_dict(load_config(run_dir / "config.yaml")), config_to_dict(cfg))
        if changed:
            raise ConfigError(f"{run_dir}: cannot resume with {', '.join(changed)}: the run's checkpoints were made "
                              f"with the first (start a new run with --out to change it)")
    return checkpoint


def caps_for_the_rehearsal(cfg: SeadConfig, scenario: Scenario, agent_model: str) -> SeadConfig:
    """The agent's token caps raised, where lower, to the honest script's longest turn in the agent's tokens
    (warm_start.caps_holding says why), and the log says so; the run's config.yaml keeps the raised caps."""
    from transformers import AutoTokenizer

    d = cfg.dialogue
    tokens = longest_script_turn_tokens(scenario, AutoTokenizer.from_pretrained(agent_model), d.agent_prefill)
    fitted = caps_holding(cfg, tokens)
    if fitted is not cfg:
        log.warning("dialogue.agent_train/agent_eval.max_tokens %d/%d -> %d/%d: the honest script's longest turn, "
                    "as the rehearsal teaches it, is %d tokens of this agent's", d.agent_train.max_tokens,
                    d.agent_eval.max_tokens, fitted.dialogue.agent_train.max_tokens,
                    fitted.dialogue.agent_eval.max_tokens, tokens)
    return fitted


async def train(cfg: SeadConfig, scenario: Scenario, run_dir: Path, *, resume: bool = False) -> dict:
    """Run (or continue) the self-evolution loop in `run_dir`; returns a summary of the run."""
    from actors.trained_roles import TrainingSystem

    # Absolute: Ray Train runs its workers in a directory of its own, where a relative path would
    # silently put the checkpoints.
    run_dir = Path(run_dir).resolve()
    checkpoint = resume_point(cfg, run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint is not None:
        start = load_train_state(checkpoint)
        agent_model = str(ROLES["agent"].checkpoint_model(checkpoint))
        log.info("resuming %s after iteration %d (policy version %d) from %s", run_dir, start.iteration,
                 start.version("agent"), checkpoint)
    else:
        if resume:
            log.info("no checkpoint in %s yet: starting from the beginning", run_dir)
        agent_model = str(resolve_model(cfg.models.agent))
        start = TrainState(0, ProfileController(scenario, cfg.curriculum, cfg.seed).state_dict())
    if cfg.train.warm_start == "sop_rehearsal":
        cfg = caps_for_the_rehearsal(cfg, scenario, agent_model)
    truncate_metrics(run_dir / "metrics.jsonl", start.iteration)
    dump_config(cfg, run_dir / "config.yaml")
    summary: dict = {"run_dir": str(run_dir), "tensorboard": str(run_dir / "tensorboard"),
                     "metrics": str(run_dir / "metrics.jsonl"), "interrupted": False, "wall_s": 0.0}
    if start.iteration >= cfg.train.iterations:
        log.info("%s already finished its %d iterations: nothing to do", run_dir, cfg.train.iterations)
        return {**summary, "iterations": cfg.train.iterations, "checkpoint": str(checkpoint)}

    connect(cfg)   # (nothing above needs Ray: a finished run answers without starting it)
    held_out = held_out_profiles(cfg, scenario, run_dir) if cfg.train.eval_every else []
    # user.train: the simulator resumes from its own weights in the checkpoint
    user_model = str(ROLES["user"].checkpoint_model(checkpoint)) if checkpoint is not None and cfg.user.train else None
    system = await TrainingSystem.start(cfg, scenario, agent_model, run_dir, first_iteration=start.iteration + 1,
                                        user_model=user_model)
    loop = SelfEvolutionLoop(cfg, scenario, system, run_dir, start, saved=checkpoint is not None, held_out=held_out)
    previous_handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_stop_signal(signum, frame):
        if loop.stop_requested:
            raise KeyboardInterrupt  # the second one: leave now
        loop.stop_requested = True
        log.warning("%s: stopping at the next safe point with a checkpoint (send it again to abort)",
                    STOP_SIGNALS[signum])
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop_signal)
    t_run = time.perf_counter()
    try:
        if checkpoint is not None:
            await system.restore(checkpoint, start.controller, start.versions)
        summary["interrupted"] = await loop.run_keeping_progress()
        summary["wall_s"] = time.perf_counter() - t_run
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        await system.stop()
    checkpoint = latest_checkpoint(run_dir)
    return {**summary, "iterations": loop.done.iteration, "checkpoint": str(checkpoint) if checkpoint else None}
