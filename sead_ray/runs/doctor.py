"""`sead-ray doctor`: before a first run on a new cluster (or here), check each part a run needs, in the order a run
meets them, one line each: the config, the models, Ray, the GPUs as the actors see them, /dev/shm and disk, the
placement groups, an engine of each role, the trainer group, one weight sync with its digests, one greedy call end
to end. A part that fails says what usually fixes it; the parts after it that need it are not checked (a disk too
small for the run's checkpoints is a failure the check-up itself does not need: the parts after it are checked)."""
from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

GIB = 2**30

# What usually fixes a part, when its error does not say more
FIXES = {
    "config": "correct the key or file named above (`sead-ray <command> --help` lists the config's keys)",
    "models": "a local Hugging Face folder, embedded:NAME (`sead-ray models` lists them) or tiny:NAME in models.*",
    "ray": "start the cluster (`ray up cluster.yaml`, or `ray start --head` here) or set ray.address / $RAY_ADDRESS",
    "gpus": "start the containers with the GPUs (cluster.yaml: docker.worker_run_options `--gpus all`) and check "
            "`nvidia-smi` inside one",
    "storage": "free the space named above, or move output_dir to a larger filesystem every node mounts",
    "placement": "add nodes (or resources) to the cluster, or ask for fewer: agent.engines, user.engines, "
                 "trainer.num_workers, placement.<role>.*",
    "engines": "read the engine's error above: the model folder, engine.max_model_len, or memory "
               "(`sead-ray plan --config CFG`)",
    "trainer": "read the trainer's error above: the model folder, trainer.*, or memory (`sead-ray plan --config CFG`)",
    "sync": "try weight_sync.transport = object_store (any nodes) or shm (one node) to tell the transport from the "
            "engines; a digest mismatch names the tensors that arrived changed",
    "call": "read the call's error above: the user simulator (user.*) or the agent's engine",
}
PARTS = tuple(FIXES)
CALL_TURNS = 2   # the call proves the path end to end (agent, user, parsing), not the policy: kept short


class PartFailed(Exception):
    """A part that does not work, with what to do about it (None: FIXES says it); `blocks` False when the parts
    after it do not need it."""

    def __init__(self, detail: str, fix: Optional[str] = None, blocks: bool = True):
        super().__init__(detail)
        self.fix, self.blocks = fix, blocks


@dataclass
class Check:
    part: str
    status: str          # "ok", "FAIL" or "not checked"
    detail: str
    seconds: float = 0.0
    fix: str = ""
    blocks: bool = True   # a failure the parts after it need fixed first

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def failure(cls, part: str, exc: BaseException, seconds: float) -> Check:
        """A failed part from what was raised (a PartFailed's own fix, else the part's usual one)."""
        fix = exc.fix if isinstance(exc, PartFailed) and exc.fix else FIXES[part]
        text = str(exc) if isinstance(exc, PartFailed) else f"{type(exc).__name__}: {exc}"
        return cls(part, "FAIL", " ".join(text.split())[:600], seconds, fix, getattr(exc, "blocks", True))

    def line(self) -> str:
        """One line: status, part, what was seen (and the fix of a failure)."""
        mark = {"ok": "ok  ", "FAIL": "FAIL"}.get(self.status, "--  ")
        took = f" ({self.seconds:.1f} s)" if self.status != "not checked" else ""
        fix = f"  -> fix: {self.fix}" if self.status == "FAIL" and self.fix else ""
        return f"{mark} {self.part:<9} {self.detail}{took}{fix}"


class Checks:
    """The checks of one doctor run, in order: each is printed as it ends (`say`); after the first failure that
    blocks, the remaining parts are reported as not checked."""

    def __init__(self, say: Callable[[str], None] = print):
        self.done: list[Check] = []
        self.say = say

    @property
    def failed(self) -> Optional[Check]:
        return next((c for c in self.done if c.status == "FAIL"), None)

    @property
    def blocking(self) -> Optional[Check]:
        return next((c for c in self.done if c.status == "FAIL" and c.blocks), None)

    def record(self, check: Check) -> Check:
        self.done.append(check)
        self.say(check.line())
        return check

    async def run(self, part: str, step: Callable[[], Any]) -> bool:
        """Run one part's `step` (sync or async; it returns what it saw, or raises): True when it passed."""
        if self.blocking is not None:
            self.record(Check(part, "not checked", f"needs {self.blocking.part}"))
            return False
        t0 = time.perf_counter()
        try:
            detail = step()
            if asyncio.iscoroutine(detail):
                detail = await detail
        except Exception as exc:   # every failure becomes its line: the doctor itself never stops on one
            self.record(Check.failure(part, exc, time.perf_counter() - t0))
            return False
        self.record(Check(part, "ok", detail, time.perf_counter() - t0))
        return True

    def summary(self, wall_s: float) -> str:
        failed = [c for c in self.done if c.status == "FAIL"]
        if not failed:
            return f"doctor: all {len(self.done)} parts work ({wall_s:.0f} s)"
        return f"doctor: {', '.join(c.part for c in failed)} FAILED ({wall_s:.0f} s): {failed[0].fix}"


def checkpoints_on_disk(cfg: Any) -> int:
    """How many checkpoints a run holds on disk at its fullest: the kept ones, the one being written, and a warm
    start's iteration 0 (never pruned)."""
    warm_start = int(cfg.train.warm_start != "none")
    if cfg.train.keep_checkpoints:
        return cfg.train.keep_checkpoints + 1 + warm_start
    every = cfg.train.checkpoint_every or cfg.train.iterations
    return cfg.train.iterations // every + 1 + warm_start


def run_disk_bytes(cfg: Any, trained: list) -> float:
    """Bytes of the run's checkpoints at their fullest: `sead-ray plan`'s checkpoint (HF weights + DeepSpeed state) of
    each trained model (ops.model_shape.ModelShape), times the checkpoints on disk at once."""
    from sead_ray.ops.memory_plan import checkpoint_bytes
    return sum(sum(checkpoint_bytes(cfg, model)) for model in trained) * checkpoints_on_disk(cfg)


def gpus_asked(cfg: Any) -> dict[str, float]:
    """The roles whose placement asks for GPUs, with how many each of their bundles asks."""
    from placement.groups import ROLES
    return {role: getattr(cfg.placement, role).gpus for role in ROLES if getattr(cfg.placement, role).gpus > 0}


def _cuda_devices_seen() -> int:
    """In a task holding one GPU: the CUDA devices torch sees there."""
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class Doctor:
    """The parts of one check-up, each a method returning what it saw (a line's detail) or raising."""

    def __init__(self, cfg: Any, scenario: Any, work_dir: Path):
        self.cfg = dataclasses.replace(cfg, weight_sync=dataclasses.replace(cfg.weight_sync, verify="every"))
        self.scenario, self.work_dir = scenario, work_dir
        self.paths: dict[str, str] = {}
        self.roles: Any = None
        self.trainers: dict[str, Any] = {}
        self.trainer_error: Optional[BaseException] = None
        self.trainer_s = 0.0

    def models(self) -> str:
        from sead_ray.core.models import resolve_model
        from sead_ray.user.simulators import user_on_engine
        self.paths["agent"] = str(resolve_model(self.cfg.models.agent))
        said = [f"agent {self.cfg.models.agent}"]
        if user_on_engine(self.cfg.user):
            self.paths["user"] = str(resolve_model(self.cfg.models.user))
            said.append(f"user {self.cfg.models.user}")
        else:
            said.append(f"user: the {self.cfg.user.backend} simulator (no model)")
        return "; ".join(said)

    def ray(self) -> str:
        from sead_ray.runs.cluster import connect
        resources = connect(self.cfg)
        import ray
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return f"{len(nodes)} node(s): CPU {resources.get('CPU', 0):g}, GPU {resources.get('GPU', 0):g}, " \
               f"memory {resources.get('memory', 0) / GIB:.0f} GiB"

    def gpus(self) -> str:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        asked = gpus_asked(self.cfg)
        if not asked:
            return "none asked (every role runs on CPU)"
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) > 0]
        if not nodes:
            raise PartFailed(f"roles {', '.join(asked)} ask for GPUs and no node of the cluster lists one",
                             "start the nodes with GPUs; a container needs `--gpus all` for Ray to see them")
        probe = ray.remote(num_gpus=1, num_cpus=0)(_cuda_devices_seen)
        seen = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                        .remote() for n in nodes], timeout=300)
        blind = [f"{n['NodeManagerAddress']} (Ray lists {n['Resources']['GPU']:g})" for n, k in zip(nodes, seen) if k < 1]
        if blind:
            raise PartFailed(f"an actor holding a GPU sees no CUDA device on node(s) {', '.join(blind)}")
        return f"{sum(n['Resources']['GPU'] for n in nodes):g} GPU(s) on {len(nodes)} node(s), each seen by an actor"

    def storage(self) -> str:
        import ray

        from actors.ray_cluster import unshared_run_dir_nodes
        from actors.weights.cluster_checks import shm_free_bytes, trained_weight_bytes, transport_placement_problem
        from sead_ray.core.roles import trained_roles
        from sead_ray.ops.model_shape import reference_shape
        weight_bytes = trained_weight_bytes(self.cfg, self.paths["agent"], self.paths.get("user"))
        problem = transport_placement_problem(self.cfg, [n for n in ray.nodes() if n.get("Alive")], weight_bytes,
                                              shm_free_bytes)
        if problem:
            raise PartFailed(problem, "the transport or the node named above")
        blind = unshared_run_dir_nodes(self.work_dir)
        if blind:
            raise PartFailed(f"output_dir {self.work_dir.parent} is not visible on node(s) {', '.join(blind)}",
                             "put output_dir on a filesystem every node mounts at the same path (cluster.yaml: /shared)")
        trained = [reference_shape(self.paths.get(role, self.cfg.models.agent)) for role in trained_roles(self.cfg)]
        need, free = run_disk_bytes(self.cfg, trained), shutil.disk_usage(self.work_dir).free
        where = self.work_dir.parent
        if free < need:
            raise PartFailed(f"{where} has {free / GIB:.1f} GiB free; the run's {checkpoints_on_disk(self.cfg)} "
                             f"checkpoints on disk at once need {need / GIB:.1f} GiB (train.keep_checkpoints "
                             f"fewer; the check-up itself writes none, so its other parts go on)", blocks=False)
        shm = (f"/dev/shm: {shm_free_bytes(ray.get_runtime_context().get_node_id()) / GIB:.1f} GiB free for "
               f"{weight_bytes / GIB:.2f} GiB of weights; " if self.cfg.weight_sync.transport == "shm" else "")
        return (f"{shm}{where}: {free / GIB:.0f} GiB free for {checkpoints_on_disk(self.cfg)} checkpoints of "
                f"{need / checkpoints_on_disk(self.cfg) / GIB:.2f} GiB; visible on every node")

    async def start_roles(self, checks: Checks) -> None:
        """The placement groups, then the engines with the trainer group starting beside them (as a run starts
        them): three lines."""
        from actors.rollout_roles import start_rollout_roles
        from actors.trainer import TrainerGroup
        from placement import PlacementError
        from sead_ray.core.roles import trained_roles

        async def trainers_beside(roles: Any, agents: list, users: list) -> None:
            t0 = time.perf_counter()
            engines = {"agent": agents, "user": users}
            try:
                for role in trained_roles(self.cfg):
                    self.trainers[role] = TrainerGroup(self.cfg, self.paths[role], self.work_dir,
                                                       engines=engines[role], role=role)
                await asyncio.gather(*(asyncio.to_thread(t.start) for t in self.trainers.values()))
            except Exception as exc:   # its own line; the engines' start goes on
                self.trainer_error = exc
            self.trainer_s = time.perf_counter() - t0

        if checks.blocking is not None:
            for part in ("placement", "engines", "trainer"):
                await checks.run(part, lambda: "")
            return
        t0 = time.perf_counter()
        try:
            self.roles = await start_rollout_roles(
                self.cfg, self.scenario, self.paths["agent"], self.work_dir, with_stats=False,
                trainer_workers=len(trained_roles(self.cfg)) * self.cfg.trainer.num_workers, beside=trainers_beside)
        except PlacementError as exc:   # before any engine or trainer started
            checks.record(Check.failure("placement", exc, time.perf_counter() - t0))
            for part in ("engines", "trainer"):
                await checks.run(part, lambda: "")
            return
        except Exception as exc:
            checks.record(Check("placement", "ok", "every role's group placed"))
            checks.record(Check.failure("engines", exc, time.perf_counter() - t0))
        else:
            checks.record(Check("placement", "ok", "; ".join(f"{r}: {rp.describe()}"
                                                             for r, rp in self.roles.plan.items())))
            engines = [f"{role} x {len(pool.actors)} (TP {getattr(self.cfg, role).tensor_parallel_size})"
                       if role == "agent" or self.paths.get("user") else f"{role}: {self.cfg.user.backend} simulator x "
                       f"{len(pool.actors)}" for role, pool in (("agent", self.roles.agents), ("user", self.roles.users))
                       if pool.actors]
            checks.record(Check("engines", "ok", "; ".join(engines) + " started", time.perf_counter() - t0))
        if self.trainer_error is not None:
            checks.record(Check.failure("trainer", self.trainer_error, self.trainer_s))
        elif self.trainers:
            checks.record(Check("trainer", "ok", f"{', '.join(self.trainers)}: {self.cfg.trainer.num_workers} rank(s), "
                                f"ZeRO-{self.cfg.trainer.zero_stage}", self.trainer_s))
        else:
            checks.record(Check("trainer", "not checked", "needs engines"))

    async def sync(self) -> str:
        said = []
        for role, trainer in self.trainers.items():
            result = await asyncio.to_thread(trainer.sync_weights, 1)   # raises WeightSyncFailed on a mismatch
            if result.verified is not True:
                raise PartFailed(f"{role}: the sync returned without the engines' digests")
            said.append(f"{role}: {result.mb:.0f} MiB to {len(trainer.engines)} engine(s) by "
                        f"{self.cfg.weight_sync.transport} in {result.total_s:.1f} s, digests equal")
        return "; ".join(said)

    async def call(self) -> str:
        from sead_ray.curriculum.controller import ProfileController
        from sead_ray.play.rollout import run_dialogues
        profile = ProfileController(self.scenario, dataclasses.replace(self.cfg.curriculum, depth="off"),
                                    self.cfg.seed).sample(1)
        short = dataclasses.replace(self.cfg, dialogue=dataclasses.replace(self.cfg.dialogue, max_turns=CALL_TURNS))
        result = await run_dialogues(self.roles.endpoints(), short, self.scenario, profile, iteration=0,
                                     phase="doctor", training=False)
        call = result.trajectories[0]
        if call.errored:
            raise PartFailed(f"the call ended in error: {call.error}")
        return (f"one greedy call of at most {CALL_TURNS} turns: {len(call.turns)} turns, ended {call.outcome} "
                f"({call.end_reason}), {call.agent_parse_failures} agent turn(s) unparsed")

    async def stop(self) -> None:
        from actors.rollout_roles import shutdown_rollout_roles
        for trainer in self.trainers.values():
            await asyncio.to_thread(trainer.stop)
        if self.roles is not None:
            await shutdown_rollout_roles(self.roles)


async def diagnose(config_path: str, overrides: list[str], say: Callable[[str], None] = print) -> Checks:
    """Every part, each as one line through `say`, in the order a run meets them."""
    from sead_ray.runs.inputs import load
    checks = Checks(say)
    loaded: list = []

    def config() -> str:
        loaded.extend(load(config_path, overrides))
        cfg, scenario = loaded
        return (f"{config_path}: scenario {Path(scenario.source).name}, user {cfg.user.backend}, "
                f"{cfg.train.iterations} iterations")
    if not await checks.run("config", config):
        for part in PARTS[1:]:
            await checks.run(part, lambda: "")
        return checks
    cfg, scenario = loaded
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix="doctor-", dir=Path(cfg.output_dir).resolve()))
    doctor = Doctor(cfg, scenario, work_dir)
    try:
        await checks.run("models", doctor.models)
        await checks.run("ray", doctor.ray)
        await checks.run("gpus", doctor.gpus)
        await checks.run("storage", doctor.storage)
        await doctor.start_roles(checks)
        await checks.run("sync", doctor.sync)
        await checks.run("call", doctor.call)
    finally:
        await doctor.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    return checks
