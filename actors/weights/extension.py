"""The engine's side of every weight transport, inside vLLM's worker processes: `WeightReloadExtension`, which vLLM
mixes into each worker of an engine (actors.vllm_engine.WORKER_EXTENSION), reloads a version from a safetensors
file (shm, object_store) and digests what a worker received (weight_sync.verify) on every transport."""
from __future__ import annotations

from typing import Any, Optional

from sead_ray.training.weight_digest import DigestRecorder


class WeightReloadExtension:
    """Mixed into vLLM's worker: reload the model's weights in place from a safetensors file, and digest the
    tensors a worker receives, under the names the trainer sent.

    After start-up on CPU the parameters are re-packed and `model.load_weights` fails; the model
    runner's `reload_weights` is the path that works (PLATFORM_NOTES.md)."""
    _sead_received: Optional[DigestRecorder] = None

    def sead_reload_from_file(self, path: str, digest: bool = False) -> dict:
        """Reload every weight from the file: the tensors loaded, and with `digest` the digest of the file's tensors
        as they lie, before the loader fuses them (DigestRecorder.to_plain; None without)."""
        from actors.weights.files import map_weight_file
        tensors = map_weight_file(path)   # read where it lies: the loader's copy is the only one
        received = None
        if digest:
            received = DigestRecorder()
            received.add_all(tensors.items())
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        refresh_tied_lm_head(self.model_runner.get_model())
        return {"tensors": len(tensors), "received": None if received is None else received.to_plain()}

    def sead_watch_received(self, on: bool) -> None:
        """vLLM's weight-transfer API (gloo, nccl): until `sead_received_digest`, digest every tensor the transfer
        engine hands to the model's `load_weights` (whole, under the trainer's names, before the model fuses
        them); `on` False stops watching. Every backend of the API loads through that one method."""
        model = self.model_runner.get_model()
        vars(model).pop("load_weights", None)   # the class's own method again
        self._sead_received = None
        if not on:
            return
        received = self._sead_received = DigestRecorder()
        load = model.load_weights

        def load_digested(weights: Any) -> Any:
            weights = list(weights)
            received.add_all(weights)
            return load(weights)
        model.load_weights = load_digested

    def sead_received_digest(self) -> Optional[dict]:
        """What `sead_watch_received` recorded since it was called (DigestRecorder.to_plain; None: it was not), and
        stop watching."""
        received = self._sead_received
        self.sead_watch_received(False)
        return None if received is None else received.to_plain()


def refresh_tied_lm_head(model: Any) -> None:
    """vLLM 0.32 on CPU packs the lm_head GEMM at load time; with tied embeddings (SmolLM2) a reload
    updates the embedding but the lm_head keeps serving the packed old weights. Re-pack it from the
    current weight (in effect a no-op for an untied head, which the reload already updated)."""
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return
    lm_head = getattr(model, "lm_head", None)
    method = getattr(lm_head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(lm_head)
