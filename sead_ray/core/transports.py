"""The weight transports (`weight_sync.transport`): one table of what each needs and which sender ships it, read by
the config's checks, the cluster check before anything starts, the engines' start-up and the trainer (the senders
live in actors/weights/senders.py, named here as `module:attribute`: this layer imports no actor)."""
from __future__ import annotations

from dataclasses import dataclass

from sead_ray.core.registry import Registry


@dataclass(frozen=True)
class TransportNeeds:
    vllm_api: bool            # through vLLM's weight-transfer API: the trained roles' engines start with it set up
    cuda: bool                # CUDA on the trainer's and the engines' side
    one_node: bool            # the trainer's rank 0 and every engine it feeds on one node
    sender: str               # its WeightTransport class
    vllm_init: str = ""       # vllm_api: the builder of vLLM's trainer-side init info (which picks vLLM's engine)


WEIGHT_TRANSPORTS: Registry[TransportNeeds] = Registry("weight_sync.transport", "weight transport")
SENDERS = "actors.weights.senders"
WEIGHT_TRANSPORTS.add("shm", TransportNeeds(vllm_api=False, cuda=False, one_node=True,   # a file in /dev/shm
                                            sender=f"{SENDERS}:ShmTransport"))
WEIGHT_TRANSPORTS.add("object_store", TransportNeeds(vllm_api=False, cuda=False, one_node=False,
                                                     sender=f"{SENDERS}:ObjectStoreTransport"))
WEIGHT_TRANSPORTS.add("gloo", TransportNeeds(vllm_api=True, cuda=False, one_node=False,
                                             sender=f"{SENDERS}:VllmApiTransport", vllm_init=f"{SENDERS}:gloo_init_info"))
WEIGHT_TRANSPORTS.add("nccl", TransportNeeds(vllm_api=True, cuda=True, one_node=False,
                                             sender=f"{SENDERS}:VllmApiTransport", vllm_init=f"{SENDERS}:nccl_init_info"))
