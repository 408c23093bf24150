"""Weight digests (weight_sync.verify): equal tensors digest alike whatever the order of summation, a changed,
missing or unexpected tensor is named, a sync result that says so fails, and the verify modes choose the syncs
to check."""
import json

import pytest
import torch

from sead_ray.training import weight_digest
from sead_ray.training.trainer_protocol import SyncResult, WeightSyncFailed
from sead_ray.training.weight_digest import (
    DigestedSource,
    DigestRecorder,
    SyncChecks,
    TensorDigest,
    compare_digests,
    digest_summary,
    tensor_digest,
    verification,
)


def _weights(dtype=torch.float32, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": (0.02 * torch.randn(512, 64, generator=g)).to(dtype),
            "model.layers.0.self_attn.q_proj.weight": (0.02 * torch.randn(64, 64, generator=g)).to(dtype),
            "model.norm.weight": torch.ones(64, dtype=dtype)}


def _digest(weights: dict) -> dict:
    recorder = DigestRecorder()
    recorder.add_all(weights.items())
    return recorder.digest


def test_a_digest_is_the_count_sum_and_sum_of_squares_in_float64():
    t = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    assert tensor_digest(t) == TensorDigest(4, 2.5, 1.0 + 4.0 + 0.25 + 9.0)
    # bf16 values are exact in float64: the digest of a bf16 tensor is that of the same values held wider
    b = (0.02 * torch.randn(1000, generator=torch.Generator().manual_seed(1))).to(torch.bfloat16)
    assert tensor_digest(b) == tensor_digest(b.to(torch.float64))


def test_chunked_and_whole_digests_agree_within_the_tolerance(monkeypatch):
    """Another chunking is another summation order: what another device or kernel would do."""
    t = 0.02 * torch.randn(100_003, generator=torch.Generator().manual_seed(2))
    whole = tensor_digest(t)
    monkeypatch.setattr(weight_digest, "_CHUNK", 997)
    chunked = tensor_digest(t)
    reversed_order = tensor_digest(t.flip(0))
    assert compare_digests({"w": whole}, {"w": chunked}) == []
    assert compare_digests({"w": whole}, {"w": reversed_order}) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equal_weights_compare_equal_and_one_changed_element_is_named(dtype):
    sent = _digest(_weights(dtype))
    assert compare_digests(sent, _digest({k: v.clone() for k, v in _weights(dtype).items()})) == []
    corrupted = _weights(dtype)
    corrupted["model.layers.0.self_attn.q_proj.weight"][3, 7] += 0.25
    problems = compare_digests(sent, _digest(corrupted))
    assert len(problems) == 1 and problems[0].startswith("model.layers.0.self_attn.q_proj.weight (sum ")


def test_a_small_change_in_the_largest_tensor_is_seen():
    weights = _weights()
    sent = _digest(weights)
    weights["model.embed_tokens.weight"][100, 5] += 0.01
    assert [p.split(" ")[0] for p in compare_digests(sent, _digest(weights))] == ["model.embed_tokens.weight"]


def test_missing_unexpected_and_reshaped_tensors_are_named():
    sent = _digest(_weights())
    got = dict(sent)
    del got["model.norm.weight"]
    got["lm_head.weight"] = sent["model.embed_tokens.weight"]
    got["model.layers.0.self_attn.q_proj.weight"] = tensor_digest(torch.zeros(10))
    assert compare_digests(sent, got) == [
        "model.layers.0.self_attn.q_proj.weight (4096 elements sent, 10 received)",
        "model.norm.weight (missing: sent, not received)",
        "lm_head.weight (unexpected: received, not sent)"]


def test_nan_weights_compare_equal_to_themselves():
    t = torch.tensor([1.0, float("nan")])
    assert compare_digests({"w": tensor_digest(t)}, {"w": tensor_digest(t.clone())}) == []


def test_the_sent_source_digests_what_passes_and_leaves_other_ranks_alone():
    weights = _weights()

    class SourceStandIn:
        """Stands in for actors.weights.senders.GatheredWeights: the pairs a trainer rank iterates (None off rank 0)."""
        def __init__(self, rank0: bool):
            self.rank0 = rank0

        def metadata(self):
            return list(weights)

        def __iter__(self):
            return ((k, v if self.rank0 else None) for k, v in weights.items())
    rank0 = DigestedSource(SourceStandIn(True), record=True)
    assert [k for k, _ in rank0] == list(weights) and rank0.metadata() == list(weights)
    assert rank0.recorder.digest == _digest(weights) and rank0.recorder.seconds > 0
    other = DigestedSource(SourceStandIn(False), record=True)
    assert [t for _, t in other] == [None] * 3 and other.recorder.digest == {}
    assert DigestedSource(SourceStandIn(True), record=False).recorder is None


def test_a_recorder_crosses_as_plain_data():
    """vLLM hands a worker's answer back as msgpack: lists, dicts and numbers."""
    recorder = DigestRecorder()
    recorder.add_all(_weights().items())
    back = DigestRecorder.from_plain(json.loads(json.dumps(recorder.to_plain())))
    assert back == recorder


def test_verification_names_the_engine_and_worker_of_each_mismatch():
    sent = DigestRecorder()
    sent.add_all(_weights().items())
    honest = DigestRecorder(dict(sent.digest), 0.5)
    bad = DigestRecorder({**sent.digest, "model.norm.weight": tensor_digest(torch.zeros(64))}, 0.7)
    assert verification(None, [[honest]]) == {}
    ok = verification(sent, [[honest], [honest, honest]])
    assert ok["verified"] is True and ok["mismatched"] == []
    assert ok["sent_digest"] == digest_summary(sent.digest) and ok["digest_s"] == pytest.approx(sent.seconds + 0.5)
    failed = verification(sent, [[honest], [honest, bad], None])
    assert failed["verified"] is False and failed["digest_s"] == pytest.approx(sent.seconds + 0.7)
    assert [line.split(" (")[0] for line in failed["mismatched"]] == [
        "engine 1 worker 1: model.norm.weight", "engine 2: no digest came back"]


def test_a_result_with_a_mismatch_fails_naming_the_tensor():
    assert SyncResult(3, 1.0, None, 0.1, 0.2).checked().verified is None
    assert SyncResult(3, 1.0, None, 0.1, 0.2, verified=True).checked().verified is True
    lines = [f"engine 0: layer{i}.weight (sum 1 sent, 2 received)" for i in range(7)]
    with pytest.raises(WeightSyncFailed, match=r"weight sync v3: .*engine 0: layer0.weight \(sum 1 sent.*and 2 more"):
        SyncResult(3, 1.0, None, 0.1, 0.2, verified=False, mismatched=lines).checked()


@pytest.mark.parametrize("mode, proven, verify", [
    ("every", False, True), ("every", True, True), ("first", False, True), ("first", True, False),
    ("off", False, False), ("off", True, False)])
def test_the_verify_modes_choose_the_syncs_checked(mode, proven, verify):
    checks = SyncChecks(mode)
    if proven:   # a sync to these engines was seen to arrive intact
        assert checks.seen(SyncResult(1, 1.0, None, 0.1, 0.2, verified=True)).verified is True
    assert checks.this_sync() is verify


def test_first_checks_again_after_a_mismatch_or_an_unchecked_sync():
    checks = SyncChecks("first")
    checks.seen(SyncResult(1, 1.0, None, 0.1, 0.2, verified=False))
    checks.seen(SyncResult(2, 1.0, None, 0.1, 0.2))
    assert checks.this_sync() is True


def test_an_unknown_verify_mode_is_refused():
    with pytest.raises(ValueError, match="weight_sync.verify = 'sometimes'"):
        SyncChecks("sometimes")


def test_the_config_key_defaults_to_every_and_refuses_other_values():
    from sead_ray.core.config import ConfigError
    from tests.conftest import tiny_config
    assert tiny_config().weight_sync.verify == "every"
    assert tiny_config("weight_sync.verify=first").weight_sync.verify == "first"
    with pytest.raises(ConfigError, match="weight_sync.verify"):
        tiny_config("weight_sync.verify=sometimes")
