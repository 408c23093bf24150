"""The engine's side of weight_sync.verify without an engine: the worker extension digests a shm file as it lies and
the tensors vLLM's transfer engines hand the model, under the trainer's names, equal to what the sender digested;
bytes changed between the two are named. (Real engines and transports: tests/system/test_weight_digests.py.)"""
import torch

from actors.weights import extension
from actors.weights.extension import WeightReloadExtension
from actors.weights.files import SharedWeightFile
from sead_ray.training.weight_digest import DigestedSource, DigestRecorder, compare_digests


def _weights() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"model.embed_tokens.weight": torch.randn(64, 16, generator=g),
            "model.layers.0.self_attn.q_proj.weight": torch.randn(16, 16, generator=g),
            "model.layers.0.self_attn.k_proj.weight": torch.randn(8, 16, generator=g).to(torch.bfloat16)}


class ModelStandIn(torch.nn.Module):
    """Stands in for a vLLM model: `load_weights` takes (name, tensor) pairs in checkpoint naming (a real one fuses
    q/k/v into qkv_proj); it keeps the names it was given."""
    def __init__(self):
        super().__init__()
        self.loaded: list[str] = []

    def load_weights(self, weights):
        self.loaded += [name for name, _ in weights]
        return set(self.loaded)


class WorkerStandIn(WeightReloadExtension):
    """Stands in for a vLLM worker with our extension mixed in: its model runner holds the model and reloads
    weights by iterating them (as vLLM's `reload_weights` does)."""
    def __init__(self):
        self.model = ModelStandIn()
        self.model_runner = self
        self.reloaded: list[str] = []

    def get_model(self):
        return self.model

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        self.reloaded = [name for name, _ in weights_iterator]


def _sent(weights: dict) -> DigestedSource:
    """What the trainer's rank 0 sends: the weights, digested as they pass."""
    class SourceStandIn:
        """Stands in for actors.weights.senders.GatheredWeights on rank 0."""
        def metadata(self):
            return [(name, t.dtype, tuple(t.shape)) for name, t in weights.items()]

        def __iter__(self):
            return iter(weights.items())
    return DigestedSource(SourceStandIn(), record=True)


def test_the_shm_file_as_the_engine_reads_it_digests_like_the_sent_tensors_until_a_byte_changes(monkeypatch):
    monkeypatch.setattr(extension, "refresh_tied_lm_head", lambda model: None)   # vLLM's CPU re-pack
    weights, worker = _weights(), WorkerStandIn()
    sent = _sent(weights)
    shared = SharedWeightFile(sent.metadata(), version=1)
    try:
        shared.write(sent)                      # what the shm transport does on rank 0
        answer = worker.sead_reload_from_file(shared.path, True)
        assert answer["tensors"] == 3 and sorted(worker.reloaded) == sorted(weights)
        assert compare_digests(sent.recorder.digest, DigestRecorder.from_plain(answer["received"]).digest) == []
        assert worker.sead_reload_from_file(shared.path)["received"] is None   # not verified: nothing digested
        shared.views["model.layers.0.self_attn.k_proj.weight"][2, 3] += 1.0    # in the file, after the sender's digest
        received = DigestRecorder.from_plain(worker.sead_reload_from_file(shared.path, True)["received"])
        problems = compare_digests(sent.recorder.digest, received.digest)
        assert [p.split(" (")[0] for p in problems] == ["model.layers.0.self_attn.k_proj.weight"]
    finally:
        shared.close()


def test_what_a_transfer_engine_hands_the_model_is_digested_under_the_sent_names_until_collected():
    weights, worker = _weights(), WorkerStandIn()
    sent = _sent(weights)
    pairs = list(sent)
    worker.sead_watch_received(True)
    # a transfer engine hands the model what it received: one tensor at a time (gloo) or a bucket's worth (packed)
    worker.model.load_weights(pairs[:1])
    assert worker.model.load_weights(pairs[1:]) == set(weights)      # the model's own load ran, and answered
    received = DigestRecorder.from_plain(worker.sead_received_digest())
    assert compare_digests(sent.recorder.digest, received.digest) == []
    assert "load_weights" not in vars(worker.model)                  # watching stopped: the class's method again
    assert worker.sead_received_digest() is None                     # nothing watched since


def test_watching_again_starts_afresh_and_off_leaves_the_model_as_it_was():
    worker = WorkerStandIn()
    worker.sead_watch_received(True)
    worker.model.load_weights([("a", torch.ones(2))])
    worker.sead_watch_received(True)          # a sync that a failed one left open starts a new record
    worker.model.load_weights([("b", torch.ones(2))])
    assert set(worker.sead_received_digest()["digest"]) == {"b"}
    worker.sead_watch_received(False)
    worker.model.load_weights([("c", torch.ones(2))])
    assert worker.sead_received_digest() is None and worker.model.loaded == ["a", "b", "c"]
