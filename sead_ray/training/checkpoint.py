"""Checkpoints of a run directory: save, find the latest, keep the newest K, and the resume state.

    RUN/checkpoints/iter_NNNN/hf/          model + tokenizer (transformers and vLLM load it as it is)
    RUN/checkpoints/iter_NNNN/deepspeed/   optimizer and engine state of every rank
    RUN/checkpoints/iter_NNNN/state.json   TrainState: what else resuming exactly needs
    RUN/checkpoints/latest -> iter_NNNN    replaced atomically once the folder is complete
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from sead_ray.core.jsonl import write_json, write_jsonl

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (its partial folder is removed; `latest` is unchanged)."""


@dataclass
class TrainState:
    """What a checkpoint holds besides the weights to continue exactly."""
    iteration: int                 # last completed iteration
    controller: dict               # ProfileController.state_dict() after that iteration
    versions: dict[str, int] = field(default_factory=dict)   # per trained role (core.roles): its weights' version

    def version(self, role: str) -> int:
        return self.versions.get(role, 0)

    @classmethod
    def from_json(cls, data: dict) -> TrainState:
        versions = data.get("versions")
        if versions is None:   # written before the roles were data: one field per role
            versions = {"agent": data["policy_version"], "user": data.get("user_policy_version", 0)}
        return cls(int(data["iteration"]), data["controller"], {role: int(v) for role, v in versions.items()})


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoint_dir(run_dir: Path, iteration: int) -> Path:
    """The checkpoint after `iteration` (0: the warm start's, the self-play's baseline and the KL's reference)."""
    return checkpoints_dir(run_dir) / f"iter_{iteration:04d}"


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint folders whose state.json was written (the last step of a save), oldest first. Only
    folders inside the run directory count: resuming unpickles DeepSpeed state (torch.load with
    weights_only=False), so a checkpoint is trusted input and a link out of the run is never followed."""
    folder = checkpoints_dir(run_dir)
    return sorted(p for p in folder.glob("iter_*") if (p / "state.json").exists() and _inside(p, folder))


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    """What `latest` names; if that is missing or incomplete (a save cut short, a folder deleted by
    hand), the newest complete checkpoint, with a warning."""
    link = checkpoints_dir(run_dir) / "latest"
    if link.exists() and (link.resolve() / "state.json").exists() and _inside(link, checkpoints_dir(run_dir)):
        return link.resolve()
    complete = complete_checkpoints(run_dir)
    if complete and link.is_symlink():
        log.warning("%s points to %s, which is missing, incomplete or outside the run: using %s", link,
                    os.readlink(link), complete[-1])
    return complete[-1] if complete else None


def load_train_state(checkpoint: Path) -> TrainState:
    return TrainState.from_json(json.loads((checkpoint / "state.json").read_text()))


def save_checkpoint(save_weights: Callable[[Path], Any], run_dir: Path, state: TrainState, keep: int = 0,
                    staging: Optional[Path] = None, move: Optional[Callable[[Path, Path], None]] = None,
                    weights_written: Callable[[], None] = lambda: None) -> Path:
    """`save_weights(directory)` writes hf/ and deepspeed/ (with `staging`: into a folder of it, node-local, and
    `move(staged, directory)` copies them into the run); then state.json, then `latest` moves to the new folder,
    then all but the newest `keep` checkpoints go (0 keeps every one). `weights_written()` is called once
    `save_weights` returned: the trainer is free again while the copy goes on."""
    directory = checkpoint_dir(run_dir, state.iteration)
    written = Path(staging) / Path(run_dir).name / directory.name if staging else directory
    t0 = time.perf_counter()
    try:
        try:
            save_weights(written)
        finally:
            weights_written()
        if written != directory:
            move(written, directory)
        write_json(directory / "state.json", asdict(state))
    except Exception as exc:   # e.g. a full disk: give the space of the partial folder back, keep `latest`
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(written, ignore_errors=True)   # a staged folder on this node (one elsewhere stays there)
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        free_mb = shutil.disk_usage(checkpoints_dir(run_dir)).free / 2**20
        previous = latest_checkpoint(run_dir)
        raise CheckpointError(f"the checkpoint of iteration {state.iteration} could not be written to {directory} "
                              f"({reason}; {free_mb:.0f} MiB free there); the last complete checkpoint is "
                              f"{previous or 'none'}: `--resume` continues from it") from exc
    tmp = checkpoints_dir(run_dir) / ".latest.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(directory.name)
    os.replace(tmp, checkpoints_dir(run_dir) / "latest")
    log.info("checkpoint after iteration %d: %s (%.0f s)", state.iteration, directory, time.perf_counter() - t0)
    if keep > 0:
        prune_checkpoints(run_dir, keep)
    return directory


def copy_staged(staged: str, directory: str) -> None:
    """On a node the trainer wrote a staged checkpoint on: its files into the run's folder, then out of staging."""
    shutil.copytree(staged, directory, dirs_exist_ok=True)
    shutil.rmtree(staged, ignore_errors=True)


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Remove complete checkpoints older than the newest `keep` (never the one `latest` names, nor iteration 0:
    a warm start's weights, the self-play's baseline)."""
    latest = latest_checkpoint(run_dir)
    complete = complete_checkpoints(run_dir)
    removed = [p for p in complete[:-keep] if p != latest and p != checkpoint_dir(run_dir, 0)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def truncate_metrics(path: Path, last_iteration: int) -> None:
    """Drop metric rows of iterations after the checkpoint (they are redone on resume). A line torn by
    a killed run is dropped with a warning."""
    if not path.exists():
        return
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            log.warning("%s:%d: dropping a torn metrics line", path, lineno)
            continue
        if row is not None and row.get("iteration", 0) <= last_iteration:
            rows.append(row)
    write_jsonl(path, rows)


class RunDirectoryBusy(RuntimeError):
    """Another live process trains in this run directory."""


@contextlib.contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold RUN/.lock for the duration of a run: two runs writing one directory would interleave
    metrics rows and overwrite each other's checkpoints. The OS drops the lock when the holder dies,
    so a killed run never leaves the directory locked."""
    import fcntl
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / ".lock"
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise RunDirectoryBusy(f"{run_dir} is in use by a live run ({holder}); wait for it or stop it "
                                   f"before resuming") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {os.uname().nodename}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# What a run's checkpoints and curriculum were made with: changing one on resume would fail after the
# engines started (DeepSpeed shards per rank) or silently mix two runs (scenario, seed, model).
FIXED_FOR_A_RUN = ("scenario", "seed", "models.agent", "models.dtype", "trainer.num_workers", "trainer.zero_stage",
                   "user.train")


def resume_conflicts(saved: dict, wanted: dict) -> list[str]:
    """`key old -> new` for each FIXED_FOR_A_RUN key a resume would change (configs as config_to_dict)."""
    missing = object()

    def value(tree: dict, key: str) -> Any:
        for part in key.split("."):
            tree = tree.get(part, missing) if isinstance(tree, dict) else missing
        return tree
    # a key the saved config lacks (written by an older version) had its default then: not a change
    return [f"{k} {value(saved, k)!r} -> {value(wanted, k)!r}" for k in FIXED_FOR_A_RUN
            if value(saved, k) is not missing and value(saved, k) != value(wanted, k)]
