"""What kind of sentence a caller's sentence is, by a linear probe over its sentence embedding: pressure, a
credential request, a payment request, reassurance, small talk, or an ordinary statement or question.

The nearest-prototype reading of the semantic ear (semantic_ear.py) needs a fresh wording to sit close to one
sentence somebody wrote; pressure in particular comes in more shapes than a list holds ("I'd hate to see it
wasted", "everyone I called today said yes"). A probe learns the direction that separates the kinds from many
examples instead: multinomial logistic regression, class-balanced and L2-regularised, fitted at start on the
generic sentences shipped in sead_ray/data/ear_sentences.yaml (many domains, none of the shipped scenarios') plus
the scenario's own (its facts, claims, opening and ask as ordinary statements; its red flags). Full-batch L-BFGS
from zeros: the same sentences give the same probe in every process. Embedding the ~550 sentences takes a few
seconds on one thread and fitting under one, once per process: the fitted weights are cached by the model and the
sentences.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

KINDS = ("ordinary", "pressure", "credentials", "payment", "reassurance", "small_talk")
CORPUS_KEYS = {"benign": "ordinary", "pressure": "pressure", "credentials": "credentials", "payment": "payment",
               "reassurance": "reassurance", "small_talk": "small_talk"}


@functools.cache
def generic_sentences() -> tuple[tuple[str, str], ...]:
    """(sentence, kind) for every sentence of the shipped corpus (read once per process)."""
    import yaml
    text = resources.files("sead_ray.data").joinpath("ear_sentences.yaml").read_text(encoding="utf-8")
    corpus = yaml.safe_load(text)
    return tuple((s, CORPUS_KEYS[key]) for key, sentences in corpus.items() for s in sentences)


@dataclass(frozen=True)
class KindProbe:
    """Fitted weights: `probabilities(embeddings)` is [n, len(KINDS)]."""
    weight: Any      # torch [384, len(KINDS)]
    bias: Any        # torch [len(KINDS)]

    def probabilities(self, embeddings: Any) -> Any:
        return (embeddings @ self.weight + self.bias).softmax(-1)


_FITTED: dict[tuple, KindProbe] = {}
_LOCK = threading.Lock()


def fit_probe(embedder: Any, examples: Sequence[tuple[str, str]], own: int = 0, own_weight: float = 4.0,
              l2: float = 1e-3, steps: int = 200) -> KindProbe:
    """The probe for `examples` (sentence, kind), each kind weighted by the inverse of its count, the last `own`
    examples (the scenario's) `own_weight` times as much as a generic one: they are what this user hears; cached."""
    key = (embedder.name, tuple(examples), own, own_weight, l2, steps)
    with _LOCK:
        if key in _FITTED:
            return _FITTED[key]
    torch = embedder.torch
    x = embedder.embed([s for s, _ in examples]).float()
    y = torch.tensor([KINDS.index(k) for _, k in examples])
    counts = torch.bincount(y, minlength=len(KINDS)).clamp(min=1).float()
    class_weight = counts.sum() / (len(KINDS) * counts)
    sample_weight = class_weight[y] * torch.tensor([1.0] * (len(examples) - own) + [own_weight] * own)
    sample_weight = sample_weight / sample_weight.mean()
    weight = torch.zeros(x.shape[1], len(KINDS), requires_grad=True)
    bias = torch.zeros(len(KINDS), requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe")

    def loss_fn():
        optimizer.zero_grad()
        loss = (torch.nn.functional.cross_entropy(x @ weight + bias, y, reduction="none") * sample_weight).mean() \
            + l2 * weight.pow(2).sum()
        loss.backward()
        return loss
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        optimizer.step(loss_fn)
    finally:
        torch.set_num_threads(threads)
    probe = KindProbe(weight.detach(), bias.detach())
    with _LOCK:
        _FITTED[key] = probe
    return probe
