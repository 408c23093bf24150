"""The talk page: the user plays the callee against an agent and sees its state estimate every turn.

Agents are the references `eval` takes, each through the path the rollout uses for it: a run (its latest
checkpoint) or any local model on a vLLM engine started in this process, with the token-exact context
of training (IncrementalChatEncoder, the config's prefill, its evaluation decoding); `openai:MODEL@URL`
(a `sead-ray serve` endpoint too) through EndpointAgent, with the key from the environment variable
the config names; `script:CLASS` (the battery's scripted agents, no engine). A conversation is saved
as a dialogue record in the format of dialogues files (Trajectory.to_json), so every tool reads it.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sead_ray.agent.prompt import agent_messages, parse_agent_output
from sead_ray.play.dialogue import Trajectory, Turn
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.turn_protocol import AgentTurnOutput, turn_seed
from sead_ray.view.files import ViewError

STATUSES = ("continue", "accept", "refuse", "hangup")
MAX_SESSIONS = 32


class LocalEngineAgent:
    """A local model on a vLLM engine in this process, prompted token-exactly as in training."""

    def __init__(self, cfg: Any, model_path: str, policy_version: int = 0):
        from transformers import AutoTokenizer

        from sead_ray.runs.evaluate import local_agent_engine
        self.engine = local_agent_engine(cfg, model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.prefill = cfg.dialogue.agent_prefill
        self.policy_version = policy_version   # a run's checkpoint: the version its weights are
        self.encoders: dict[str, Any] = {}
        self.started = False

    async def start(self) -> dict:
        if not self.started:
            await self.engine.start()
            self.started = True
        return {"engine_start_s": round(self.engine.started_s, 1)}

    async def generate(self, dialogue_id: str, prompt_ids: Optional[list[int]] = None, *, messages: list[dict],
                       seed: Optional[int] = None, request_id: str = "", temperature: float = 0.0,
                       top_p: float = 1.0, max_tokens: int = 64) -> AgentTurnOutput:
        from sead_ray.agent.token_context import IncrementalChatEncoder
        encoder = self.encoders.get(dialogue_id)
        if encoder is None:
            encoder = self.encoders[dialogue_id] = IncrementalChatEncoder(self.tokenizer, messages[:2], self.prefill)
        elif messages[-1]["role"] == "user":
            encoder.add_user(messages[-1]["content"])
        out = await self.engine.generate(encoder.prompt_ids(), temperature=temperature, top_p=top_p,
                                         max_tokens=max_tokens, seed=seed, request_id=request_id or None)
        encoder.add_generation(out.token_ids, out.logprobs)
        return AgentTurnOutput(self.prefill + out.text, list(out.token_ids), list(out.logprobs), self.policy_version,
                               out.finish_reason, prompt_tokens=out.prompt_tokens,
                               completion_tokens=len(out.token_ids))   # as the rollout's agent pool reports them

    def release(self, dialogue_id: str) -> None:
        self.encoders.pop(dialogue_id, None)

    async def close(self) -> None:
        self.engine.shutdown()


@dataclass
class TalkSession:
    """One conversation: the agent's turns as the rollout records them; the user's words and own state."""
    id: str
    agent_ref: str
    agent: Any
    cfg: Any
    scenario: Any
    profile: Profile
    seed: int
    turns: list[Turn] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    heard: list[str] = field(default_factory=list)
    status: str = "continue"
    started: float = field(default_factory=time.perf_counter)

    def view(self, saved: Optional[str] = None) -> dict:
        return {"id": self.id, "agent": self.agent_ref, "status": self.status, "turns": [t.to_json() for t in self.turns],
                "max_turns": self.cfg.dialogue.max_turns, "over": self.over, "saved": saved,
                "dimensions": [{"name": d.name, "levels": list(d.levels)} for d in self.scenario.schema.dimensions],
                "opening": self.scenario.call_opening, "user_title": self.scenario.user_title}

    @property
    def over(self) -> bool:
        """Ended by the user, or the agent's last allowed turn has been answered (then a timeout)."""
        return self.status != "continue" or (len(self.turns) >= self.cfg.dialogue.max_turns
                                             and self.turns[-1].user is not None)

    def record(self) -> dict:
        """The conversation as a dialogue record (a call not ended by the user counts as a timeout)."""
        end = self.status if self.status != "continue" else "timeout"
        traj = Trajectory(f"talk-{self.id}", self.profile, list(self.turns),
                          self.scenario.outcome_of_status.get(end, "failure"), end,
                          wall_seconds=time.perf_counter() - self.started)
        return {**traj.to_json(self.scenario), "agent": self.agent_ref}


class Talks:
    """The talk page's sessions and the agents they use (a local engine is started once per model)."""

    def __init__(self, views: Any):
        self.views = views
        self.sessions: dict[str, TalkSession] = {}
        self.engines: dict[str, LocalEngineAgent] = {}
        self.lock = asyncio.Lock()

    def setting(self, config_dir: str) -> tuple[Any, Any]:
        source = self.views.folder.path(config_dir) if config_dir else self.views.folder.root
        if not (source / "config.yaml").is_file():
            raise ViewError(f"{config_dir or '.'}: no config.yaml (choose a run or an evaluation folder)", 400)
        cfg, scenario, _, problem = self.views.setting(source)
        if cfg is None:
            raise ViewError(f"cannot talk with the setting of {config_dir}: {problem}", 400)
        return cfg, scenario

    async def _agent(self, ref: str, cfg: Any, scenario: Any) -> Any:
        from sead_ray.agent.backends import agent_backend
        from sead_ray.core.models import ModelError, resolve_model
        from sead_ray.training.checkpoint import latest_checkpoint, load_train_state
        try:
            backend = agent_backend(ref)
            if backend.build is not None:
                return (await backend.build(cfg, scenario, ref))[0]
            version = 0
            if ref.startswith("run:"):   # a run of the viewed folder: its latest checkpoint
                run = self.views.folder.path(ref[4:])
                checkpoint = latest_checkpoint(run)
                if checkpoint is None:
                    raise ViewError(f"{ref[4:] or '.'}: no checkpoint yet to talk with", 400)
                path = str(resolve_model(str(checkpoint), prepare=False))
                version = load_train_state(checkpoint).version("agent")
            else:
                path = str(resolve_model(ref, prepare=False))
        except (ModelError, ValueError) as exc:
            raise ViewError(str(exc), 400) from None
        async with self.lock:
            if path not in self.engines:
                self.engines[path] = LocalEngineAgent(cfg, path, version)
            engine = self.engines[path]
            try:
                await engine.start()
            except Exception as exc:   # said on the page; the next try starts afresh
                del self.engines[path]
                raise ViewError(f"the local engine for {path} did not start: {exc}", 500) from None
        return engine

    async def start(self, config_dir: str, ref: str, state: Optional[dict], behaviors: list[str]) -> dict:
        cfg, scenario = self.setting(config_dir)
        schema = scenario.schema
        try:
            initial = schema.from_mapping(state) if state else schema.middle
        except ValueError as exc:
            raise ViewError(f"state: {exc}", 400) from None
        agent = await self._agent(ref, cfg, scenario)   # a missing endpoint key: a ConfigError, said on the page
        if len(self.sessions) >= MAX_SESSIONS:
            self.sessions.pop(next(iter(self.sessions)))
        sid = uuid.uuid4().hex[:12]
        profile = Profile(initial, tuple(b for b in behaviors if isinstance(b, str) and b.strip()),
                          extra={"user_set": "talk"})
        session = self.sessions[sid] = TalkSession(sid, ref, agent, cfg, scenario, profile, seed=cfg.seed)
        await self._agent_turn(session)
        return session.view()

    def get(self, sid: str) -> TalkSession:
        if sid not in self.sessions:
            raise ViewError(f"no talk {sid!r} (the viewer was restarted, or it was closed)", 404)
        return self.sessions[sid]

    async def say(self, sid: str, text: str, state: Optional[dict], status: str) -> dict:
        session = self.get(sid)
        if session.over:
            raise ViewError("this call is over: save it or start another", 409)
        if status not in STATUSES:
            raise ViewError(f"status: one of {', '.join(STATUSES)}, got {status!r}", 400)
        if not text.strip():
            raise ViewError("say something (the agent hears only your words)", 400)
        schema = session.scenario.schema
        try:
            now = schema.from_mapping(state) if state else (
                schema.from_mapping(session.turns[-1].user_state) if session.turns[-1].user_state else session.profile.state)
        except ValueError as exc:
            raise ViewError(f"state: {exc}", 400) from None
        turn = session.turns[-1]
        turn.user, turn.user_state, turn.user_status = text.strip(), schema.to_dict(now), status
        session.heard.append(text.strip())
        session.status = status
        if not session.over:
            await self._agent_turn(session)
        return session.view()

    async def _agent_turn(self, session: TalkSession) -> None:
        cfg, scenario = session.cfg, session.scenario
        messages = agent_messages(scenario, session.heard, session.raw)
        sampling = cfg.dialogue.agent_eval
        index = len(session.turns)
        try:
            out = await session.agent.generate(session.id, None, messages=messages, request_id=f"{session.id}-a{index}",
                                               seed=turn_seed(session.seed, index) if sampling.temperature > 0 else None,
                                               temperature=sampling.temperature, top_p=sampling.top_p,
                                               max_tokens=sampling.max_tokens)
        except Exception as exc:   # an endpoint down, a refused key: said on the page, the call stays open
            raise ViewError(f"the agent failed: {exc}", 502) from None
        parsed = parse_agent_output(out.text, scenario.schema)
        session.raw.append(out.text)
        session.turns.append(Turn(parsed.reply, parsed.estimate, out.text, parsed.ok, out.policy_version,
                                  len(out.token_ids) or out.completion_tokens, agent_prompt_tokens=out.prompt_tokens))

    def save(self, sid: str) -> tuple[dict, Path]:
        """Write the conversation as a one-record dialogues file into <folder>/talks/."""
        from sead_ray.core.jsonl import write_jsonl
        session = self.get(sid)
        record = session.record()
        path = self.views.folder.path("talks", must_exist=False) / f"talk-{time.strftime('%Y%m%d-%H%M%S')}-{sid}.jsonl"
        try:
            write_jsonl(path, [record])
        except OSError as exc:
            raise ViewError(f"cannot write {path} ({exc.strerror})", 500) from None
        return record, path

    async def close(self) -> None:
        for engine in self.engines.values():
            await engine.close()
