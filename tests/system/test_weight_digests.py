"""weight_sync.verify on real parts, for each CPU transport (shm, object_store, gloo) into a real vLLM-CPU engine: an
honest sync reports equal digests; a sync that damages one tensor on its way (after the sender digested it) fails
with the tensor named; and through the run's own path (TrainedRole.publish) the engine is synced again and serves
the version, the run going on. The weights are the model's own state dict sent from this process (rank 0 of a
one-rank trainer); the ZeRO-3 trainer's syncs are verified in tests/system/test_trainer.py."""
import asyncio
import logging
from functools import partial

import pytest

from actors.rollout_roles import restart_engine, shutdown_rollout_roles, start_rollout_roles
from actors.trained_roles import TrainedRole
from actors.weights.senders import make_transport
from benchmarks.weight_sync import StateDictSource
from sead_ray.training.trainer_protocol import WeightSyncFailed
from sead_ray.training.weight_digest import DigestedSource, DigestRecorder, digest_summary
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

TRANSPORTS = ["shm", "object_store", "gloo"]
DAMAGED = "model.layers.0.mlp.up_proj.weight"   # vLLM fuses it into gate_up_proj: digests are taken before


@pytest.fixture(scope="module")
def engine(ray_cluster, scenario, tmp_path_factory):
    """One agent engine, started with vLLM's transfer API set up (gloo); the file transports reload into it too.
    Yields the rollout roles and the model's weights."""
    from safetensors.torch import load_file

    from sead_ray.core.models import resolve_model
    cfg = tiny_config("user.backend=rule", "weight_sync.transport=gloo", "agent.engines=1",
                      "placement.agent.cpus=0.25", "weight_sync.timeout_s=30")
    roles = asyncio.run(start_rollout_roles(cfg, scenario, cfg.models.agent, tmp_path_factory.mktemp("digests")))
    weights = load_file(str(resolve_model(cfg.models.agent) / "model.safetensors"))
    yield roles, weights
    asyncio.run(shutdown_rollout_roles(roles))


class DamagedInTransitStandIn(DigestedSource):
    """Stands in for a transport that damages one tensor on its way to the engines: the sender digests the tensor
    as the trainer holds it, then the transport ships a copy with one element changed."""

    def __iter__(self):
        for name, tensor in super().__iter__():   # the sender's digest of `tensor` is taken here
            if name == DAMAGED:
                tensor = tensor.clone()
                tensor.view(-1)[0] += 1.0
            yield name, tensor


def damage_next_syncs(monkeypatch, syncs: int) -> None:
    """The transports' next `syncs` sends damage DAMAGED in transit; the ones after are honest."""
    left = [syncs]

    def digested(source, record):
        left[0] -= 1
        return (DamagedInTransitStandIn if left[0] >= 0 else DigestedSource)(source, record)
    monkeypatch.setattr("actors.weights.senders.DigestedSource", digested)


class TrainerStandIn:
    """Stands in for actors.trainer.TrainerGroup in TrainedRole.publish: rank 0 of a one-rank trainer in this
    process, sending fixed weights by a real transport (rebuilt for a changed list of engines) and checking the
    result as TrainerGroup.sync_weights does."""

    def __init__(self, transport: str, engines: list, weights: dict):
        self.name, self.weights, self.engines = transport, weights, list(engines)
        self.transport = make_transport(transport, engines=self.engines, rank=0, bucket_mb=1)

    def sync_weights(self, version: int, engines=None):
        if engines is not None:
            self.transport.close()
            self.engines = list(engines)
            self.transport = make_transport(self.name, engines=self.engines, rank=0, bucket_mb=1)
        return self.transport.send(StateDictSource(self.weights), version).checked()


def _version(roles) -> int:
    import ray
    return ray.get(roles.agent.get_version.remote())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_honest_sync_reports_equal_digests(engine, transport):
    roles, weights = engine
    version = _version(roles) + 1
    sender = make_transport(transport, engines=list(roles.agents.actors.values()), rank=0, bucket_mb=1)
    try:
        sync = sender.send(StateDictSource(weights), version)
    finally:
        sender.close()
    assert sync.verified is True and sync.mismatched == [] and sync.checked() is sync
    honest = DigestRecorder()
    honest.add_all(weights.items())
    assert sync.sent_digest == digest_summary(honest.digest) and sync.digest_s > 0
    assert _version(roles) == version


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tensor_damaged_in_transit_fails_the_sync_naming_it(engine, transport, monkeypatch):
    roles, weights = engine
    damage_next_syncs(monkeypatch, 1)
    sender = make_transport(transport, engines=list(roles.agents.actors.values()), rank=0, bucket_mb=1)
    try:
        sync = sender.send(StateDictSource(weights), _version(roles) + 1)
    finally:
        sender.close()
    assert sync.verified is False
    assert [line.split(" (")[0] for line in sync.mismatched] == [f"engine 0: {DAMAGED}"]
    with pytest.raises(WeightSyncFailed, match=f"engine 0: {DAMAGED}"):
        sync.checked()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_run_syncs_a_damaged_version_again_and_goes_on(engine, transport, monkeypatch, caplog):
    """TrainedRole.publish, the loop's path: the first sync fails with the tensor named, the second (honest) one
    is verified and the engine serves the version; damaged twice, the sync fails with the tensor named."""
    roles, weights = engine
    trainer = TrainerStandIn(transport, list(roles.agents.actors.values()), weights)
    try:
        version = _version(roles) + 1
        trained = TrainedRole("agent", roles.agents, trainer, partial(restart_engine, roles, "agent"), version=version)
        damage_next_syncs(monkeypatch, 1)
        with caplog.at_level(logging.WARNING, logger="actors.trained_roles"):
            result = asyncio.run(trained.publish())
        assert result.verified is True and result.version == version and _version(roles) == version
        assert any(f"weight sync v{version}" in r.getMessage() and DAMAGED in r.getMessage()
                   and "syncing it again" in r.getMessage() for r in caplog.records)
        trained.version += 1
        damage_next_syncs(monkeypatch, 2)
        with pytest.raises(WeightSyncFailed, match=DAMAGED):
            asyncio.run(trained.publish())
        damage_next_syncs(monkeypatch, 0)
        assert asyncio.run(trained.publish()).verified is True and _version(roles) == trained.version
    finally:
        trainer.transport.close()
