"""What each page of `sead-ray view` shows, as JSON: a run's curves and learning verdict (the very
functions `sead-ray report` uses, so the numbers are those of report/summary.md), the curriculum map of an
iteration, dialogue summaries with filters and one call turn by turn, and a comparison's table with the
calls where agents differ."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

from sead_ray.evaluation.held_out import format_held_out_test, held_out_test
from sead_ray.evaluation.made_up import known_sentences, made_up, not_the_scenarios, scenario_sentences
from sead_ray.evaluation.metrics import DEFAULT_DIMENSIONS
from sead_ray.evaluation.report import learning_summary, metrics_rows
from sead_ray.scenario.state import Dimension, StateSchema
from sead_ray.view.calls import CallSummary, matches, summarizer
from sead_ray.view.files import Folder, ViewError, read_json_file

PAGE_MAX = 200


def default_schema() -> StateSchema:
    return StateSchema(tuple(Dimension(name, tuple(str(i) for i in range(top + 1))) for name, top in DEFAULT_DIMENSIONS))


class Views:
    """The pages' data over one Folder; each run's config and scenario are read once."""

    def __init__(self, folder: Folder):
        self.folder = folder
        self._settings: dict[Path, tuple] = {}
        self._made_up: dict[Path, tuple[int, list[dict]]] = {}   # by file: its indexed length, what was made up
        self._held_out: dict[Path, tuple[tuple, Optional[dict]]] = {}   # by run: its eval files' sizes, the test
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------- settings
    def setting(self, source: Optional[Path]) -> tuple[Any, Any, StateSchema, Optional[str]]:
        """(config, scenario, schema, problem) of a run or evaluation folder; without a readable config the
        default state dimensions and no scenario (the problem says why)."""
        if source is None:
            return None, None, default_schema(), None
        with self._lock:
            if source not in self._settings:
                from sead_ray.runs.inputs import load
                try:
                    cfg, scenario = load(str(source / "config.yaml"), [])
                    self._settings[source] = (cfg, scenario, scenario.schema, None)
                except Exception as exc:   # a moved scenario file: the files are still worth showing
                    self._settings[source] = (None, None, default_schema(), f"{source.name}/config.yaml: {exc}")
            return self._settings[source]

    def _run(self, rel: str) -> Path:
        run = self.folder.path(rel)
        if not (run / "config.yaml").is_file():
            raise ViewError(f"{rel or '.'}: not a sead-ray run directory (no config.yaml)", 404)
        return run

    def dialogues_index(self, file: Path):
        _, _, schema, _ = self.setting(self.folder.source_of(file))
        return self.folder.index(file, "dialogues:" + ",".join(schema.names), summarizer(schema.names))

    def made_up_in(self, file: Path) -> Optional[list[dict]]:
        """The sentences of the file's won calls that are not the scenario's (evaluation/made_up.py), or None
        without a scenario; computed again only when the file grew."""
        _, scenario, _, _ = self.setting(self.folder.source_of(file))
        if scenario is None:
            return None
        index = self.dialogues_index(file)
        if self._made_up.get(file, (None,))[0] != index.end:
            won = [index.record(i) for i, s in enumerate(index.summaries) if s is not None and s.outcome == "success"]
            self._made_up[file] = (index.end, made_up(won, scenario_sentences(scenario)))
        return self._made_up[file][1]

    def held_out_test_of(self, run: Path) -> Optional[dict]:
        """held_out.held_out_test, read again only when the run's held-out files changed (the page polls)."""
        files = tuple((p.name, p.stat().st_size) for p in sorted(run.glob("dialogues/eval_*.jsonl")))
        if self._held_out.get(run, (None,))[0] != files:
            self._held_out[run] = (files, held_out_test(run))
        return self._held_out[run][1]

    # ----------------------------------------------------------------------------- folder
    def overview(self) -> dict:
        from sead_ray.agent.scripted import ALL_CLASSES, HONEST
        from sead_ray.training.checkpoint import latest_checkpoint
        found = self.folder.discover()
        found["root"] = str(self.folder.root)
        found["dialogue_files"] = {src: self.folder.dialogue_files(src) for src in found["runs"] + found["evals"]}
        found["checkpoints"] = {run: getattr(latest_checkpoint(self.folder.path(run)), "name", None)
                                for run in found["runs"]}
        found["scripts"] = [HONEST, *ALL_CLASSES]
        return found

    # ----------------------------------------------------------------------------- run page
    def run(self, rel: str) -> dict:
        from sead_ray.training.checkpoint import latest_checkpoint
        run = self._run(rel)
        metrics = run / "metrics.jsonl"
        rows, held_out, problems, version, by_start = [], [], None, "none", {}
        if metrics.is_file():
            index = self.folder.index(metrics, "metrics", lambda v: v if isinstance(v, dict) else None)
            rows, held_out = metrics_rows(index.summaries), metrics_rows(index.summaries, phase="eval")
            problems, version = index.problems(), f"{index.identity}:{index.end}"
            # calls started deeper (curriculum.depth: reverse): held-out won/calls per start, phases eval_dK
            for row in index.summaries:
                phase = row.get("phase") if isinstance(row, dict) else None
                if isinstance(phase, str) and phase.startswith("eval_d") and isinstance(row.get("iteration"), int):
                    by_start.setdefault(row["iteration"], {})[phase[5:]] = f"{row.get('successes', 0)}/{row.get('n', 0)}"
            for row in held_out:
                if row["iteration"] in by_start:
                    by_start[row["iteration"]]["cold"] = f"{row.get('successes', 0)}/{row.get('n', 0)}"
        learning = learning_summary(rows)
        held = learning_summary(held_out)["per_iteration"]
        series = []
        for row, p in zip(rows, learning["per_iteration"]):
            series.append({**p, "cr": row.get("cr"), "reward_mean": row.get("reward_mean"),
                           "train_loss": row.get("train_loss"), "train_kl": row.get("train_kl"),
                           "band_fractions": row.get("band_fractions"), "cr_by_start": row.get("cr_by_start")})
        _, _, schema, problem = self.setting(run)
        checkpoint = latest_checkpoint(run)
        test = self.held_out_test_of(run)
        latest = [max(run.glob(f"dialogues/{kind}_*.jsonl"), default=None) for kind in ("iter", "eval")]
        made = [{"file": self.folder.rel(f), "sentences": found[:10], "total": len(found),
                 "said": sum(x["said"] for x in found)}
                for f in latest if f is not None and (found := self.made_up_in(f)) is not None]
        return {"run": rel, "series": series, "held_out": held, "held_out_by_start": by_start,
                "verdict": format_held_out_test(test) if test else None, "held_out_test": test,
                "training_verdict": learning.get("verdict_text"), "made_up": made,
                "verdict_data": learning.get("verdict"), "problems": problems, "version": version,
                "config_problem": problem, "checkpoint": checkpoint.name if checkpoint else None,
                "curriculum": sorted(int(p.stem[5:]) for p in (run / "curriculum").glob("iter_*.json")
                                     if p.stem[5:].isdigit()),
                "dialogue_files": self.folder.dialogue_files(rel),
                "summary_md": (run / "report" / "summary.md").is_file()}

    # ----------------------------------------------------------------------------- curriculum map
    def curriculum(self, rel: str, iteration: int) -> dict:
        run = self._run(rel)
        data = read_json_file(run / "curriculum" / f"iter_{iteration:04d}.json", "curriculum")
        states = data.get("states") if isinstance(data, dict) else None
        if not isinstance(states, dict):
            raise ViewError(f"curriculum/iter_{iteration:04d}.json: expected an object with 'states'", 422)
        _, _, schema, _ = self.setting(run)
        keep = ("cr", "attempts", "successes", "band", "weight", "draws")
        dialogues = run / "dialogues" / f"iter_{iteration:04d}.jsonl"
        return {"iteration": iteration,
                "dimensions": [{"name": d.name, "levels": list(d.levels)} for d in schema.dimensions],
                "states": {k: {f: v.get(f) for f in keep} for k, v in states.items() if isinstance(v, dict)},
                "dialogues": self.folder.rel(dialogues) if dialogues.is_file() else None}

    def bands_for(self, file: Path) -> Optional[dict]:
        """Band of each initial state when iteration N's calls were drawn: the curriculum after N-1
        (iteration 1: every state unseen); None for a file that is not a run's iter_NNNN.jsonl."""
        stem = file.stem
        if not (stem.startswith("iter_") and stem[5:].isdigit() and file.parent.name == "dialogues"):
            return None
        before = file.parent.parent / "curriculum" / f"iter_{int(stem[5:]) - 1:04d}.json"
        if not before.is_file():
            return {}
        data = read_json_file(before, "curriculum")
        states = data.get("states") if isinstance(data, dict) else None
        return {k: v.get("band") for k, v in (states or {}).items() if isinstance(v, dict)}

    # ----------------------------------------------------------------------------- dialogue browser
    def dialogues(self, rel: str, filters: dict, offset: int = 0, limit: int = 50) -> dict:
        file = self.folder.path(rel)
        if not file.is_file():
            raise ViewError(f"{rel}: not a dialogues file", 400)
        index = self.dialogues_index(file)
        bands = self.bands_for(file)
        cfg = self.setting(self.folder.source_of(file))[0]
        rows, facets = [], {"user_set": set(), "behavior": set(), "band": set(), "end_reason": set()}
        for i, s in enumerate(index.summaries):
            band = None if bands is None else bands.get(s.state, "unseen")
            facets["user_set"].add(s.user_set or "")
            facets["behavior"].update(s.behaviors)
            facets["end_reason"].add(s.end_reason or "")
            if band:
                facets["band"].add(band)
            if matches(s, band, filters):
                rows.append((i, s, band))
        limit = max(1, min(PAGE_MAX, limit))
        page = [{**s.to_json(), "index": i, "band": band, "reward": _reward(cfg, s), "id": self._id(index, i)}
                for i, s, band in rows[offset:offset + limit]]
        return {"file": rel, "total": len(index), "matched": len(rows), "offset": offset, "limit": limit,
                "rows": page, "facets": {k: sorted(v) for k, v in facets.items()},
                "problems": index.problems(), "bands": bands is not None}

    @staticmethod
    def _id(index, i: int) -> str:
        """A call's dialogue_id, read from its line (not kept in the index)."""
        record = index.record(i)
        return str(record.get("dialogue_id", "")) if isinstance(record, dict) else ""

    def dialogue(self, rel: str, i: int) -> dict:
        file = self.folder.path(rel)
        index = self.dialogues_index(file)
        record = index.record(i)
        summary = index.summaries[i]
        cfg, scenario, schema, _ = self.setting(self.folder.source_of(file))
        bands = self.bands_for(file)
        # per turn, the policy's sentences that are not the scenario's (what the agent made up)
        own = known_sentences(scenario_sentences(scenario)) if scenario is not None else None
        new_words = None if own is None or not isinstance(record, dict) else [
            [] if t.get("scripted") else not_the_scenarios(t.get("agent") or "", own) for t in record.get("turns", [])]
        return {"file": rel, "index": i, "total": len(index), "line": index.linenos[i], "record": record,
                "summary": summary.to_json(), "reward": _reward(cfg, summary),
                "band": None if bands is None else bands.get(summary.state, "unseen"),
                "dimensions": [{"name": d.name, "max": d.max_level} for d in schema.dimensions],
                "made_up": new_words}

    def same_profile(self, rel: str, i: int, limit: int = 40) -> list[dict]:
        """The calls of the same profile in every other dialogues file of the folder (before/after)."""
        file = self.folder.path(rel)
        index = self.dialogues_index(file)
        if not 0 <= i < len(index):
            raise ViewError(f"{rel}: no record {i}", 404)
        key = index.summaries[i].profile
        found = self.folder.discover()
        out = []
        for source in found["runs"] + found["evals"]:
            for other in self.folder.dialogue_files(source):
                index = self.dialogues_index(self.folder.path(other))
                for j, s in enumerate(index.summaries):
                    if s.profile == key and not (other == rel and j == i):
                        out.append({"file": other, "index": j, "source": source, "outcome": s.outcome,
                                    "end_reason": s.end_reason, "iteration": s.iteration})
                        if len(out) >= limit:
                            return out
        return out

    # ----------------------------------------------------------------------------- compare page
    def compare(self, rel: str) -> dict:
        from sead_ray.evaluation.compare import agent_dir_name
        folder = self.folder.path(rel)
        rows = read_json_file(folder / "compare.json", "comparison")
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "agent" in r for r in rows):
            raise ViewError(f"{rel}/compare.json: expected a list of rows with 'agent'", 422)
        md = folder / "compare.md"
        title = md.read_text(errors="replace").splitlines()[0].lstrip("# ") if md.is_file() else rel
        agents = list(dict.fromkeys(r["agent"] for r in rows))
        files = {}
        for i, agent in enumerate(agents):
            f = folder / "agents" / agent_dir_name(i, agent) / "dialogues.jsonl"
            files[agent] = f if f.is_file() else None
        differ = []
        first = files.get(agents[0]) if agents else None
        if first is not None:
            ref = self.dialogues_index(first).summaries
            for agent in agents[1:]:
                if files[agent] is None:
                    continue
                other = self.dialogues_index(files[agent]).summaries
                for j, (a, b) in enumerate(zip(ref, other)):
                    if a.outcome != b.outcome:
                        differ.append({"index": j, "agent": agent, "first": self.folder.rel(first),
                                       "other": self.folder.rel(files[agent]), "first_outcome": a.outcome,
                                       "outcome": b.outcome, "state": a.state})
        ablation = folder.parent / "ablation.md"
        return {"compare": rel, "title": title, "rows": rows,
                "files": {a: self.folder.rel(f) if f else None for a, f in files.items()},
                "differ": differ[:500], "differ_total": len(differ),
                "ablation": ablation.read_text(errors="replace") if ablation.is_file() else None}


def _reward(cfg: Any, s: CallSummary) -> Optional[float]:
    """The training reward of a call as the loop computes it (train.reward of sead_ray.training.rewards)."""
    if cfg is None or s.outcome not in ("success", "failure"):
        return None
    from sead_ray.training.rewards import REWARDS
    return REWARDS.get(cfg.train.reward)(s, cfg.train)
