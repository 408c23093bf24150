"""Placement groups from config: bundles per role, strategy, node resources."""
from .groups import (
    ROLES,
    PlacementError,
    RolePlacement,
    actor_options,
    add_actor_group,
    bundle_for,
    check_fits,
    create_placement_groups,
    free_resources,
    plan_placement,
    remove_actor_group,
    remove_placement_groups,
    user_engine_count,
    worker_resources,
)

__all__ = ["ROLES", "PlacementError", "RolePlacement", "actor_options", "add_actor_group", "bundle_for", "check_fits",
           "create_placement_groups", "free_resources", "plan_placement", "remove_actor_group", "remove_placement_groups",
           "user_engine_count", "worker_resources"]
