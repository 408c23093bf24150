"""Placement groups from the config: one group per role, one bundle per actor of the role.

Following verl's role -> resource-pool mapping: each role (`controller`, `stats`, `agent`,
`user`, `trainer`) gets a placement group whose bundles describe what one of its actors needs
(CPUs, GPUs, and optionally a custom node resource such as `rollout` that pins user simulators to
rollout nodes). A group that cannot be placed fails fast with a message saying which role needs what.

The trainer is planned and checked like every role, but its group is not created here: Ray Train
places its workers itself (`worker_resources` gives them the same bundle), so only the check that the
cluster can hold it all, with the same message, happens before anything starts.

An *elastic* role (the user simulators with `user.engines: auto`) gets one single-bundle group per
actor instead, so that the pool can grow onto nodes that join and drop the groups of nodes that left
without Ray rescheduling a shared group underneath the live actors.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

ROLES = ("controller", "stats", "agent", "user", "trainer")
EXTERNAL_ROLES = ("trainer",)   # placed by another library (Ray Train); checked, not created here


class PlacementError(RuntimeError):
    """A role's placement group cannot be satisfied by the cluster."""


@dataclass
class RolePlacement:
    role: str
    bundles: list[dict[str, float]]
    strategy: str
    elastic: bool = False
    external: bool = False
    # ray PlacementGroups once created: one for the role, or one per actor (None once removed) if elastic
    groups: list = field(default_factory=list)

    def describe(self) -> str:
        kind = "one group per actor" if self.elastic else "placed by Ray Train" if self.external else self.strategy
        return f"{len(self.bundles)} x {self.bundles[0] if self.bundles else {}} ({kind})"

    def locate(self, index: int) -> tuple[Any, int]:
        """(placement group, bundle index) of actor `index`."""
        return (self.groups[index], 0) if self.elastic else (self.groups[0], index)


def bundle_for(resources: Any) -> dict[str, float]:
    """One bundle from a config RoleResources (cpus, gpus, node_resource)."""
    bundle: dict[str, float] = {}
    if resources.cpus > 0:
        bundle["CPU"] = float(resources.cpus)
    if resources.gpus > 0:
        bundle["GPU"] = float(resources.gpus)
    if resources.node_resource:
        # One unit per actor: a node offering `rollout: 2` hosts two user-simulator engines.
        bundle[resources.node_resource] = 1.0
    if not bundle:
        bundle["CPU"] = 0.01  # Ray rejects empty bundles
    return bundle


def tensor_parallel_bundles(resources: Any, tensor_parallel: int) -> list[dict[str, float]]:
    """The bundles of one engine that ray.serve.llm places: one per tensor-parallel worker, each with its
    share of the role's GPUs (one each: vLLM's Ray executor refuses a bundle of more than one GPU)."""
    bundle = bundle_for(resources)
    share = {k: v / tensor_parallel for k, v in bundle.items() if k in ("CPU", "GPU")}
    return [{**bundle, **share}] * tensor_parallel


def worker_resources(resources: Any) -> dict[str, float]:
    """A role's bundle as Ray Train's `resources_per_worker`."""
    return bundle_for(resources)


def user_engine_count(cfg: Any, cluster_resources: Mapping[str, float]) -> int:
    """`user.engines`, with `auto` = one engine per unit of the user node resource (at least 1)."""
    engines = cfg.user.engines
    if engines != "auto":
        return int(engines)
    resource = cfg.placement.user.node_resource
    return max(1, int(cluster_resources.get(resource, 0))) if resource else 1


def elastic_roles(cfg: Any) -> tuple[str, ...]:
    return ("user",) if cfg.user.engines == "auto" else ()


def plan_placement(cfg: Any, counts: Mapping[str, int]) -> dict[str, RolePlacement]:
    """Bundles per role for `counts` actors of each role (pure; no Ray)."""
    plan = {}
    for role, n in counts.items():
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r} (roles: {ROLES})")
        if n <= 0:
            continue
        resources = getattr(cfg.placement, role)
        strategy = cfg.placement.strategy
        plan[role] = RolePlacement(role, [bundle_for(resources) for _ in range(n)], strategy,
                                   elastic=role in elastic_roles(cfg), external=role in EXTERNAL_ROLES)
    return plan


def check_fits(plan: Mapping[str, RolePlacement], total: Mapping[str, float]) -> None:
    """Raise PlacementError when the cluster's total resources cannot hold the plan, whatever the
    packing; the message names each role that asks for a missing resource."""
    message = _shortfall(plan, total)
    if message:
        raise PlacementError(message)


def _shortfall(plan: Mapping[str, RolePlacement], total: Mapping[str, float]) -> Optional[str]:
    need: dict[str, float] = {}
    for rp in plan.values():
        for b in rp.bundles:
            for k, v in b.items():
                need[k] = need.get(k, 0.0) + v
    missing = {k: v for k, v in need.items() if v > total.get(k, 0.0) + 1e-9}
    if not missing:
        return None
    lines = [f"the cluster cannot place this run: it needs {', '.join(f'{v:g} {k}' for k, v in sorted(need.items()))} "
             f"and has {', '.join(f'{total.get(k, 0):g} {k}' for k in sorted(need))}."]
    for rp in plan.values():
        short = [k for k in rp.bundles[0] if k in missing]
        if short:
            lines.append(f"  role {rp.role} needs {rp.describe()}")
    lines.append("Lower the role's resources under `placement:` in the config, or add nodes that offer them.")
    return "\n".join(lines)


def _wait_ready(groups: Mapping[Any, str], timeout_s: float) -> list[str]:
    """Wait for the groups (group -> description); returns the descriptions of those not ready in time."""
    import ray
    pending = {g.ready(): what for g, what in groups.items()}
    _, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    return [pending[ref] for ref in not_ready]


def create_placement_groups(cfg: Any, counts: Mapping[str, int], timeout_s: Optional[float] = None,
                            name_prefix: str = "sead") -> dict[str, RolePlacement]:
    """Create and wait for the placement groups of every role; raise PlacementError instead of hanging."""
    import ray
    from ray.util.placement_group import placement_group

    plan = plan_placement(cfg, counts)
    check_fits(plan, ray.cluster_resources())
    timeout_s = cfg.placement.timeout_s if timeout_s is None else timeout_s
    created = {}
    for rp in plan.values():
        if rp.external:
            continue
        if rp.elastic:
            rp.groups = [placement_group([b], name=f"{name_prefix}-{rp.role}-{i}") for i, b in enumerate(rp.bundles)]
        else:
            rp.groups = [placement_group(rp.bundles, strategy=rp.strategy, name=f"{name_prefix}-{rp.role}")]
        created.update({g: f"role {rp.role} needs {rp.describe()}" for g in rp.groups})
    stuck = _wait_ready(created, timeout_s)
    if stuck:
        remove_placement_groups(plan)
        raise PlacementError("placement timed out after {:g} s; unplaced: {}. Free resources: {}".format(
            timeout_s, "; ".join(sorted(set(stuck))), free_resources()))
    return plan


def free_resources() -> dict:
    """The cluster's unused resources, without Ray's per-node markers (for messages)."""
    import ray
    return {k: round(v, 3) for k, v in ray.available_resources().items() if not k.startswith("node:")}


def add_actor_group(rp: RolePlacement, bundle: dict[str, float], timeout_s: float,
                    name_prefix: str = "sead") -> Optional[int]:
    """Grow an elastic role by one actor's group; its index, or None if the cluster cannot place it
    within `timeout_s` (the group is then removed again)."""
    from ray.util.placement_group import placement_group, remove_placement_group
    if not rp.elastic:
        raise ValueError(f"role {rp.role} is not elastic")
    index = len(rp.groups)
    group = placement_group([bundle], name=f"{name_prefix}-{rp.role}-{index}")
    if _wait_ready({group: rp.role}, timeout_s):
        remove_placement_group(group)
        return None
    rp.bundles.append(bundle)
    rp.groups.append(group)
    return index


def remove_actor_group(rp: RolePlacement, index: int) -> None:
    """Release the group of actor `index` of an elastic role (its actor is gone or retired)."""
    from ray.util.placement_group import remove_placement_group
    group, rp.groups[index] = rp.groups[index], None
    if group is not None:
        try:
            remove_placement_group(group)
        except Exception:  # its node is gone and the group with it
            pass


def remove_placement_groups(plan: Mapping[str, RolePlacement]) -> None:
    from ray.util.placement_group import remove_placement_group
    for rp in plan.values():
        for group in rp.groups:
            if group is not None:
                try:
                    remove_placement_group(group)
                except Exception:  # already gone with its cluster
                    pass
        rp.groups = []


def scheduling(plan: Mapping[str, RolePlacement], role: str, index: int) -> Any:
    """The Ray scheduling strategy placing actor `index` of `role` into its bundle."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    group, bundle_index = plan[role].locate(index)
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle_index,
                                            placement_group_capture_child_tasks=True)


def actor_options(plan: Mapping[str, RolePlacement], role: str, index: int) -> dict:
    """`.options(...)` for actor `index` of `role`: its bundle's resources and strategy."""
    bundle = plan[role].bundles[index]
    opts: dict = {"scheduling_strategy": scheduling(plan, role, index), "num_cpus": bundle.get("CPU", 0)}
    if bundle.get("GPU"):
        opts["num_gpus"] = bundle["GPU"]
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
    if custom:
        opts["resources"] = custom
    return opts
