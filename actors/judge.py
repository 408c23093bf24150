"""JudgeActor: a local model as the LLM judge of `sead-ray judge`, decoding greedily under the
judgement's JSON schema (sead_ray/evaluation/judge.py has the rubric and the parser)."""
from __future__ import annotations

import ray

from actors.vllm_engine import EngineSpec, VLLMEngine
from sead_ray.evaluation.judge import judge_schema


@ray.remote
class JudgeActor:
    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.engine = VLLMEngine(spec)

    async def start(self) -> float:
        from transformers import AutoTokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(self.spec.model_path)
        return await self.engine.start()

    async def judge(self, messages: list[dict], max_tokens: int) -> str:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        room = self.spec.max_model_len - len(prompt)
        if room < 8:
            return ""   # a call too long for the judge's context: a judge failure, not a crash
        gen = await self.engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=min(max_tokens, room),
                                         json_schema=judge_schema())
        return gen.text

    def shutdown(self) -> None:
        self.engine.shutdown()
