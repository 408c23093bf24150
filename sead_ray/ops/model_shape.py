"""The shape of a causal LM (layers, widths, heads, vocabulary) from its config.json or, for a model a config names
before it is downloaded, from the known shapes: what the memory plan (sead_ray.ops.memory_plan), the weight-sync
checks and `sead-ray doctor` count with (pure)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class ModelShape:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        attention = self.hidden * self.hidden * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params + embeddings + self.hidden

    @classmethod
    def from_hf_config(cls, path: Path) -> ModelShape:
        c = json.loads(Path(path).read_text())
        return cls(c.get("_name_or_path") or Path(path).parent.name, c["num_hidden_layers"], c["hidden_size"],
                   c["intermediate_size"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]),
                   c["vocab_size"], bool(c.get("tie_word_embeddings", False)))


# Shapes of models a config may name before they are downloaded (config.json of each).
KNOWN_SHAPES = {
    "Qwen2.5-0.5B-Instruct": ModelShape("Qwen2.5-0.5B-Instruct", 24, 896, 4864, 14, 2, 151936, True),
    "Qwen2.5-7B-Instruct": ModelShape("Qwen2.5-7B-Instruct", 28, 3584, 18944, 28, 4, 152064),
    "Qwen2.5-14B-Instruct": ModelShape("Qwen2.5-14B-Instruct", 48, 5120, 13824, 40, 8, 152064),
    "Qwen2.5-72B-Instruct": ModelShape("Qwen2.5-72B-Instruct", 80, 8192, 29568, 64, 8, 152064),
}


def model_shape(reference: str, folder: Optional[Path]) -> ModelShape:
    """From the model folder's config.json, else from the known shapes by the reference's last name."""
    if folder is not None and (Path(folder) / "config.json").exists():
        return ModelShape.from_hf_config(Path(folder) / "config.json")
    name = Path(reference).name
    if name in KNOWN_SHAPES:
        return KNOWN_SHAPES[name]
    raise ValueError(f"no config.json for {reference!r} and no known shape for {name!r} "
                     f"(known: {', '.join(KNOWN_SHAPES)})")


def reference_shape(reference: str) -> ModelShape:
    """The shape of the model a config names: from its local folder (an embedded model is provisioned), else,
    for a reference that is no local model, from the known shapes (ValueError when neither has it)."""
    from sead_ray.core.models import ModelError, resolve_model
    try:
        folder = resolve_model(reference)
    except ModelError:
        folder = None
    return model_shape(reference, folder)
