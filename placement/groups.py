"""Placement groups from the config: one group per role, one bundle per actor of the role.

Following verl's role -> resource-pool mapping: each role (`controller`, `stats`, `agent_policy`,
`user_sim`, `trainer`) gets a placement group whose bundles describe what one of its actors needs
(CPUs, GPUs, and optionally a custom node resource such as `rollout` that pins user simulators to
rollout nodes). A group that cannot be placed fails fast with a message saying which role needs what.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

ROLES = ("controller", "stats", "agent_policy", "user_sim", "trainer")


class PlacementError(RuntimeError):
    """A role's placement group cannot be satisfied by the cluster."""


@dataclass
class RolePlacement:
    role: str
    bundles: list[dict[str, float]]
    strategy: str
    group: Any = None        # ray PlacementGroup once created

    def describe(self) -> str:
        return f"{len(self.bundles)} x {self.bundles[0] if self.bundles else {}} ({self.strategy})"


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


def user_engine_count(cfg: Any, cluster_resources: Mapping[str, float]) -> int:
    """`user_sim.engines`, with `auto` = one engine per unit of the user_sim node resource (at least 1)."""
    engines = cfg.user_sim.engines
    if engines != "auto":
        return int(engines)
    resource = cfg.placement.user_sim.node_resource
    return max(1, int(cluster_resources.get(resource, 0))) if resource else 1


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
        plan[role] = RolePlacement(role, [bundle_for(resources) for _ in range(n)], strategy)
    return plan


def _shortfall(plan: Mapping[str, RolePlacement], total: Mapping[str, float]) -> Optional[str]:
    """A message when the cluster's total resources cannot hold the plan, whatever the packing."""
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


def create_placement_groups(cfg: Any, counts: Mapping[str, int], timeout_s: Optional[float] = None,
                            name_prefix: str = "sead") -> dict[str, RolePlacement]:
    """Create and wait for one placement group per role; raise PlacementError instead of hanging."""
    import ray
    from ray.util.placement_group import placement_group

    plan = plan_placement(cfg, counts)
    message = _shortfall(plan, ray.cluster_resources())
    if message:
        raise PlacementError(message)
    timeout_s = cfg.placement.timeout_s if timeout_s is None else timeout_s
    for rp in plan.values():
        rp.group = placement_group(rp.bundles, strategy=rp.strategy, name=f"{name_prefix}-{rp.role}")
    pending = {rp.group.ready(): rp for rp in plan.values()}
    ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    if not_ready:
        stuck = [pending[ref] for ref in not_ready]
        remove_placement_groups(plan)
        raise PlacementError(
            "placement timed out after {:g} s; unplaced: {}. Free resources: {}".format(
                timeout_s, "; ".join(f"role {rp.role} needs {rp.describe()}" for rp in stuck),
                {k: round(v, 3) for k, v in ray.available_resources().items() if not k.startswith("node:")}))
    return plan


def remove_placement_groups(plan: Mapping[str, RolePlacement]) -> None:
    from ray.util.placement_group import remove_placement_group
    for rp in plan.values():
        if rp.group is not None:
            try:
                remove_placement_group(rp.group)
            except Exception:  # already gone with its cluster
                pass
            rp.group = None


def scheduling(plan: Mapping[str, RolePlacement], role: str, index: int) -> Any:
    """The Ray scheduling strategy placing actor `index` of `role` into its bundle."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    rp = plan[role]
    return PlacementGroupSchedulingStrategy(placement_group=rp.group, placement_group_bundle_index=index,
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
