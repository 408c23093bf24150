"""The weight transports (`weight_sync.transport`): the one table of what each needs, read by the config's
checks, the cluster check before anything starts and the engines' start-up. Their senders live in
actors/weights/sync.py, keyed by the same names (a test holds the two to each other)."""
from __future__ import annotations

from dataclasses import dataclass

from sead_ray.core.registry import Registry


@dataclass(frozen=True)
class TransportNeeds:
    vllm_api: bool            # through vLLM's weight-transfer API: the trained roles' engines start with it set up
    cuda: bool                # CUDA on the trainer's and the engines' side
    one_node: bool            # the trainer's rank 0 and every engine it feeds on one node


WEIGHT_TRANSPORTS: Registry[TransportNeeds] = Registry("weight_sync.transport", "weight transport")
WEIGHT_TRANSPORTS.add("shm", TransportNeeds(vllm_api=False, cuda=False, one_node=True))   # a file in /dev/shm
WEIGHT_TRANSPORTS.add("object_store", TransportNeeds(vllm_api=False, cuda=False, one_node=False))
WEIGHT_TRANSPORTS.add("gloo", TransportNeeds(vllm_api=True, cuda=False, one_node=False))
WEIGHT_TRANSPORTS.add("nccl", TransportNeeds(vllm_api=True, cuda=True, one_node=False))
