"""Placement groups from config: bundles per role, strategy, node resources."""
