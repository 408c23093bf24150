"""The models of a run, by role, as data: `agent` always trains; `user` (the simulator) trains only with
user.train (the paper's train-URM ablation). What differs between them is read here, so that role-generic
code (checkpoints, versions, metrics, trainers) never asks `if role == "agent"`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Role:
    name: str
    checkpoint_folder: str   # its weights inside a checkpoint folder ("": the folder itself, the agent's HF model)
    metric_prefix: str       # of its figures in metrics.jsonl ("": the agent's, unprefixed)
    train_sampling: str      # the cfg.dialogue section whose temperature its trained calls were sampled at
    trains_per_turn: bool    # one training sample per turn of a call (else one per call)
    opposes_agent: bool      # rewarded by the opposite of the agent's outcome (else by train.reward)

    def checkpoint(self, folder: Path) -> Path:
        return Path(folder) / self.checkpoint_folder if self.checkpoint_folder else Path(folder)

    def checkpoint_model(self, folder: Path) -> Path:
        """The role's model in a checkpoint, an HF folder (transformers and vLLM load it as it is)."""
        return self.checkpoint(folder) / "hf"

    def sampling(self, cfg: Any) -> Any:
        return getattr(cfg.dialogue, self.train_sampling)


ROLES: dict[str, Role] = {
    "agent": Role("agent", "", "", "agent_train", trains_per_turn=False, opposes_agent=False),
    "user": Role("user", "user", "user_", "user", trains_per_turn=True, opposes_agent=True),
}


def trained_roles(cfg: Any) -> list[str]:
    """The roles whose weights this run trains, the agent first."""
    return ["agent"] + (["user"] if cfg.user.train else [])
