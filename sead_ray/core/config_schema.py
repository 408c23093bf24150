"""The run configuration's schema: every key a dataclass field with its default, range and doc.

Loading a YAML file into it, `--set` overrides and the checks across keys are sead_ray.core.config.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

from sead_ray.core.typed_load import ConfigError as ConfigError  # re-exported: where config errors were always imported from
from sead_ray.core.typed_load import option

EMBEDDED_MODEL = "embedded:smollm2-135m-instruct"


@dataclass
class ModelsConfig:
    agent: str = option(EMBEDDED_MODEL, doc="agent policy model: HF folder, embedded:NAME or run checkpoint")
    user: str = option(EMBEDDED_MODEL, doc="frozen user role-play model (vllm back-end)")
    dtype: Literal["float32", "bfloat16", "float16"] = option("float32", doc="engine and trainer dtype")


@dataclass
class SamplingConfig:
    temperature: float = option(1.0, 0.0, 5.0)
    top_p: float = option(1.0, 0.0, 1.0)
    max_tokens: int = option(96, 1, 8192, "most tokens a turn may generate (with train.warm_start = sop_rehearsal, "
                                          "a run raises the agent's to hold the honest script's longest turn)")

    def as_params(self) -> dict:
        """Keyword arguments of an engine's generate call."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}


@dataclass
class DialogueConfig:
    max_turns: int = option(15, 1, 200, "T_max: agent turns before the call counts as a timeout")
    agent_train: SamplingConfig = option(SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=96))
    # Evaluation decoding is explicit (the reference code sampled validation at 1.2 by accident).
    agent_eval: SamplingConfig = option(SamplingConfig(temperature=0.0, top_p=1.0, max_tokens=96))
    user: SamplingConfig = option(SamplingConfig(temperature=0.7, top_p=0.95, max_tokens=160))
    user_retries: int = option(2, 0, 10, "re-asks of the simulator when its reply does not parse")
    error_replays: int = option(2, 0, 10, "replays (same profile and seed) of a call that ended in error")
    user_reply_max_chars: int = option(300, 8, 4000, "longest spoken reply the simulator's JSON schema allows")
    privileged_user_view: bool = option(False, doc="training-time only: show the agent the simulator's state")
    # Text the agent's turn starts with, placed after the generation prompt (a template token, never
    # trained on): `{"reply": "` sets a small model on the JSON format without constraining decoding.
    agent_prefill: str = option('{"reply": "', doc="text every agent turn starts with (part of the prompt)")


@dataclass
class TrainConfig:
    iterations: int = option(3, 1, 100000)
    batch_size: int = option(8, 1, 100000, "B: profiles per iteration")
    rollouts_per_profile: int = option(1, 1, 64, "GRPO group size")
    lr: float = option(1e-6, 0.0, 1.0, "GRPO's learning rate; 0: self-play is played but no step is taken (the control "
                       "of benchmarks/self_play_gain.py)")
    reward: str = option("outcome", doc="the reward of a call (sead_ray.training.rewards): outcome = the paper's binary "
                         "reward, less format_penalty")
    advantage_mode: str = option("batch_mean", doc="the advantage estimator (sead_ray.training.grpo): batch_mean "
                                 "(paper), group_mean, group_norm")
    success_reward: float = option(1.0)
    format_penalty: float = option(0.0, 0.0, 10.0, "reward subtracted per agent turn that did not parse")
    milestone_weight: float = option(0.3, 0.0, 0.49, "train.reward = milestones: the bonus for the rule user's agenda "
                                     "done during the call, as a share of success_reward (< 0.5: any win beats "
                                     "any failure)")
    clip_eps: float = option(0.2, 0.0, 10.0)
    kl_coef: float = option(0.0, 0.0, 10.0, "0 turns the KL term (and the reference model) off; the "
                             "reference is the model self-play starts from: with train.warm_start, the rehearsed agent")
    entropy_coef: float = option(0.0, 0.0, 10.0)
    # like DAPO's filter of groups without reward differences, for a whole batch: with kl_coef and
    # entropy_coef 0 such a step has no gradient and would only move the weights by Adam's momentum
    skip_no_signal_steps: bool = option(False, doc="skip a GRPO step whose every advantage is 0 (no reward differences): "
                                    "weights, optimizer and version stay as they are")
    # the same filter per call (DAPO's dynamic sampling without resampling): a call whose advantage is 0 adds
    # nothing to the policy gradient but its tokens' forward and backward passes, most of a CPU step's time
    drop_no_signal_calls: bool = option(False, doc="leave calls with advantage 0 out of the GRPO step (with kl_coef and "
                                        "entropy_coef 0 they carry no gradient); the loss is then the token mean "
                                        "over the calls that carry signal")
    # with a KL term those calls carry its gradient, so by default they stay; dropped, the KL is taken over the
    # calls the step moves, and a CPU step costs what it costs without a KL term (about half)
    drop_no_signal_calls_under_kl: bool = option(False, doc="with kl_coef or entropy_coef > 0, drop_no_signal_calls and "
                                                 "skip_no_signal_steps apply all the same: that term is then taken "
                                                 "over the calls that carry signal only")
    grad_clip: float = option(1.0, 0.0, 1e6)
    ppo_epochs: int = option(1, 1, 100)
    micro_batch_size: int = option(4, 1, 4096)
    max_seq_len: int = option(4096, 64, 1 << 20)
    gradient_checkpointing: bool = option(True, doc="recompute layer activations in backward (long calls fit in memory)")
    warm_start: Literal["none", "sop_rehearsal"] = option(
        "none", doc="before iteration 1: none (the paper), or sop_rehearsal: fine-tune the agent on the calls the "
        "scenario's honest script wins against the run's simulator, in the agent's own format (sead_ray.training."
        "warm_start); checkpointed as iteration 0")
    warm_start_steps: int = option(20, 1, 100000, "SOP rehearsal: fine-tuning steps")
    warm_start_calls: int = option(8, 1, 100000, "SOP rehearsal: script calls played per step (those won are learned)")
    warm_start_decision_weight: float = option(1.0, 0.0, 1000.0, "SOP rehearsal: weight of each reply's first tokens "
                                               "(where it chooses what to say) against the copying that follows, "
                                               "the loss still a token mean (sead_ray.training.warm_start)")
    warm_start_lr: float = option(0.0, 0.0, 1.0, "SOP rehearsal: learning rate of its steps (supervised, so larger than "
                                  "GRPO's); 0 = train.lr")
    eval_every: int = option(0, 0, 100000,
                             "evaluate greedily on a fixed held-out profile set every K iterations (0 = never)")
    eval_profiles: int = option(16, 1, 100000, "size of the held-out profile set (drawn once per run)")
    eval_user_sets: tuple[str, ...] = option((), doc="draw the held-out set from each of these user sets of the "
                                             "scenario (eval_profiles each, e.g. [soft, hard]); empty: the "
                                             "curriculum's user_set")
    eval_depths: tuple[Union[int, Literal["cold"]], ...] = option(
        ("cold",), doc="the starts each held-out evaluation plays: cold and/or depths d >= 0 (sead_ray.play.starts)")
    checkpoint_every: int = option(1, 0, 100000, "0 = only at the end (and on a stop or a failure)")
    keep_checkpoints: int = option(2, 0, 100000, "newest checkpoints kept on disk (0 = all)")
    checkpoint_in_background: bool = option(True, doc="write each checkpoint while the next iteration's calls play (its "
                                            "GRPO step waits for it; at most one in flight; a stop waits for it)")
    checkpoint_staging_dir: str = option("", doc="a node-local folder (fast disk) where the trainer writes each "
                                         "checkpoint first; it is then copied into the run directory from the "
                                         "trainer's node(s) while the run goes on (the GRPO step waits only for the "
                                         "local write). Empty: written straight into the run directory")
    stop_save_max_s: float = option(300.0, 0.0, 86400.0, "a stop (Ctrl-C, SIGTERM, ray job stop) checkpoints the "
                                    "last completed iteration only if the run's last save took at most this long; "
                                    "else the last checkpoint stands (a 14B model's ZeRO-3 state on a network "
                                    "filesystem can outlast the job's stop wait)")


@dataclass
class CurriculumConfig:
    mode: Literal["paper", "uniform", "marginal", "off"] = option("paper")
    n_max: int = option(200, 1, 10**9, "N_max: draws of one initial state over a run")
    smoothing: Literal["none", "beta"] = option("none")
    beta_prior: float = option(2.0, 0.0, 1e6, "pseudo-dialogues of the Beta prior (mean 0.5)")
    easy_above: float = option(0.6, 0.0, 1.0)
    hard_below: float = option(0.4, 0.0, 1.0)
    profile_sampling: bool = option(True, doc="False = w/o PS: free-form profiles, no state grid")
    user_set: str = option("", doc="draw initial states from this user set of the scenario (user_sets), or from several "
                           "joined by commas (\"soft,hard\": each profile with its own set's behavior counts); '' = all")
    min_behaviors: int = option(1, 0, 10)
    max_behaviors: int = option(3, 0, 10)
    # issue 36's reverse curriculum: a start is (initial state, depth); off = the paper's cold calls only
    depth: Literal["off", "reverse"] = option("off", doc="where calls start: off (the paper: every call cold) or "
                                              "reverse (the honest script plays up to `depths` turns before its "
                                              "final ask, the policy the rest; cells (state, depth) weighted by CR)")
    depths: tuple[int, ...] = option((0, 1, 2), doc="depth: reverse: the scripted starts drawn beside the cold call "
                                     "(d = the script's turns before its final ask that the policy takes over)")


@dataclass
class RuleUserConfig:
    accept_phrase: str = option("", doc="planted preference: accept only after the agent says this")
    patience: int = option(6, 1, 100, "agent turns without progress before the rule user refuses")
    ear: str = option("lexicon", doc="how the rule user hears the agent (sead_ray.user.rule.ears): lexicon (the scenario's "
                      "words) or semantic (the lexicon plus a sentence-embedding model that hears paraphrases)")


@dataclass
class UserConfig:
    backend: str = option("vllm", doc="the user simulator (sead_ray.user.simulators): vllm (the paper: an LLM on an "
                          "engine of models.user) or rule (the transparent CPU stand-in)")
    engines: Union[int, Literal["auto"]] = option(1, doc="engines in the pool, or auto (one per rollout unit)")
    rule: RuleUserConfig = option(RuleUserConfig())
    tensor_parallel_size: int = option(1, 1, 64, "GPUs per user-simulator engine")
    max_restarts: int = option(3, 0, 1000, "restarts of each engine that dies (in its bundle, while calls wait)")
    max_step: int = option(1, 0, 100, "most levels a state dimension moves per turn (0 = unbounded)")
    status_guards: bool = option(True, doc="apply the scenario's user.status_guards (false: the simulator alone decides)")
    train: bool = option(False, doc="train the simulator too, against the agent (the paper's train-URM ablation): a second "
                     "trainer group, GRPO on its turns with the opposite reward, weights to its engines by shm or "
                     "object_store; needs backend vllm")


@dataclass
class EngineConfig:
    kv_cache_mb: Union[int, Literal["auto"]] = option(512, 16, 1 << 22, "KV cache per engine in MB, or auto: room for "
                                                  "max_num_seqs calls at their longest (CPU: at most a quarter of "
                                                  "the free memory, shared by the engines), logged at start")
    max_num_seqs: int = option(64, 1, 4096)
    block_size: int = option(0, 0, 1024, "KV-cache block in tokens (a multiple of 32 on CPU, 16 on CUDA): the prefix "
                         "cache reuses whole blocks, so smaller blocks reuse more of prompts that share a beginning; "
                         "0 = vLLM's default (128 on CPU, 16 on CUDA)")
    max_model_len: int = option(4096, 128, 1 << 20)
    # CPU engines pin their OpenMP threads; vLLM's `auto` puts every engine on core 0, so `spread`
    # gives engine i core i mod (cores of its node); `nobind` leaves threads unpinned.
    cpu_bind: Literal["spread", "auto", "nobind"] = option("spread")
    start_timeout_s: float = option(1800.0, 1.0, 86400.0, "an engine start-up (model load, KV cache) taking longer fails")
    memory_wait_s: float = option(300.0, 0.0, 86400.0, "a GPU engine first waits up to this long for the share of its "
                                  "GPU(s) it will fill to be free (a replacement started where a dead engine's memory "
                                  "is still being released), then starts anyway")
    request_timeout_s: float = option(600.0, 1.0, 86400.0, "an agent or simulator turn taking longer counts its engine "
                                  "as hung: the engine is replaced and the call played again")
    # vLLM's own lines (KV cache size, CUDA graphs' memory, throughput) are what a first GPU run needs to read
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = option(
        "ERROR", doc="vLLM's log level in every actor (VLLM_LOGGING_LEVEL): INFO shows the engines' memory at start")


@dataclass
class RayConfig:
    address: str = option("", doc="Ray cluster address; empty = $RAY_ADDRESS, else the cluster `ray start` "
                          "started on this machine, else a new local one; local = always a new local one")
    num_cpus: int = option(0, 0, 1 << 16, "CPUs of a new local cluster (0 = all cores)")
    dashboard: bool = option(True, doc="start the Ray dashboard with a new local cluster")
    call_timeout_s: float = option(300.0, 1.0, 86400.0, "a call to the profile controller or the stats actor taking "
                               "longer fails the run (after a checkpoint of the last completed iteration)")


@dataclass
class RoleResources:
    cpus: float = option(1.0, 0.0, 1024)
    gpus: float = option(0.0, 0.0, 64)
    node_resource: str = option("", doc="custom resource the role must land on, e.g. rollout")


@dataclass
class PlacementConfig:
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = option("PACK")
    controller: RoleResources = option(RoleResources(cpus=0.05))
    stats: RoleResources = option(RoleResources(cpus=0.05))
    agent: RoleResources = option(RoleResources(cpus=0.5))
    user: RoleResources = option(RoleResources(cpus=0.5))
    trainer: RoleResources = option(RoleResources(cpus=0.5))
    timeout_s: float = option(60.0, 1.0, 86400.0, "fail fast when placement cannot be satisfied")
    colocate: bool = option(False, doc="CPU only: the engines sleep while the trainer steps (the sequencing of "
                            "GPU colocation, which is not supported yet: docs/cluster.md)")
    gpu_memory_gib: float = option(0.0, 0.0, 4096.0, "memory of one GPU in GiB as torch reports it (A100 80 GB: 79.2, "
                               "A100 40 GB: 39.4, H100 80 GB: 79.1); 0 = this machine's GPU where it has one. "
                               "`sead-ray plan` refuses a config that does not fit it")


@dataclass
class TrainerConfig:
    num_workers: int = option(2, 1, 4096)
    zero_stage: int = option(3, 0, 3)
    threads_per_worker: int = option(0, 0, 1024, "torch threads of each trainer worker; 0 = as many as its bundle's "
                                 "whole CPUs (at least 1). The engines idle while the trainer steps, so one CPU "
                                 "worker can use every core with a small bundle")
    backend: Literal["auto", "gloo", "nccl"] = option("auto")
    shared_prefix: Literal["auto", "off"] = option("auto", doc="compute the tokens the calls of a step share (the "
                                                   "system prompt; a group's scripted turns) once, with gradients, "
                                                   "and continue each call from them: the same loss and gradients, "
                                                   "fewer tokens through the model. auto: where the model supports "
                                                   "it (Llama, Qwen2/3, Mistral, full attention), else off with a "
                                                   "log line saying why")
    offload_optimizer: bool = option(False, doc="DeepSpeed ZeRO-Offload: Adam's states, the fp32 master weights and the "
                                 "gradient shards live in CPU memory and the optimizer steps there (GPU memory for "
                                 "long calls of large models, for a slower step)")
    timeout_s: float = option(7200.0, 10.0, 7 * 86400.0, "a GRPO step, weight sync or save taking longer fails the run "
                          "(a hung rank or collective), after which the last completed iteration is checkpointed")
    start_timeout_s: float = option(900.0, 10.0, 86400.0, "the trainer group's start (every rank's model loaded, under "
                                "ZeRO-3 partitioned, and its optimizer set up) taking longer fails the run")


@dataclass
class WeightSyncConfig:
    # shm/object_store: files or object-store buckets reloaded by each engine; gloo/nccl: vLLM's
    # weight-transfer API (gloo on CPU, nccl between GPUs).
    transport: str = option("shm")
    bucket_mb: int = option(64, 1, 1 << 16, "object-store bucket / packed gloo and NCCL buffer size")
    timeout_s: float = option(600.0, 5.0, 86400.0, "a weight sync taking longer fails (the driver's wait; with gloo "
                              "also the transfer's collectives, so engines left waiting by a dead peer give up)")
    verify: Literal["every", "first", "off"] = option("every", doc="compare a digest of the weights each engine received "
                                                      "(per tensor: sum and sum of squares) with the trainer's of what "
                                                      "it sent: after every sync, the first to each set of engines, or "
                                                      "never; a mismatch fails the sync, which is done once more")


@dataclass
class AgentConfig:
    engines: int = option(1, 1, 1024, "agent engines; each dialogue sticks to one, every one gets each weight version")
    tensor_parallel_size: int = option(1, 1, 64, "GPUs per agent engine")
    max_restarts: int = option(3, 0, 1000, "restarts of each engine that dies (in its bundle, given the current "
                           "policy before it serves; its calls are played again)")


@dataclass
class EndpointConfig:
    """Agents behind OpenAI-compatible endpoints (`openai:MODEL@URL`, sead_ray/agent/endpoints.py)."""
    api_key_env: str = option("OPENAI_API_KEY", doc="environment variable holding the endpoints' API key "
                          "(SEAD_RAY_API_KEY for a `sead-ray serve`)")
    api_key_env_by_host: dict[str, str] = option({}, doc="per host, another variable, e.g. {api.deepseek.com: "
                                              "DEEPSEEK_API_KEY} (compare API models of several providers)")
    timeout_s: float = option(120.0, 1.0, 3600.0, "per request")
    max_concurrency: int = option(16, 1, 4096, "requests in flight to one endpoint")


@dataclass
class CostConfig:
    """Prices for the cost column of `compare`, keyed by agent reference or endpoint model name."""
    usd_per_mtok_in: dict[str, float] = option({}, doc="USD per million prompt tokens, e.g. {gpt-4o: 2.5}")
    usd_per_mtok_out: dict[str, float] = option({}, doc="USD per million completion tokens, e.g. {gpt-4o: 10.0}")

    def price(self, model: str) -> Optional[tuple[float, float]]:
        if model not in self.usd_per_mtok_in and model not in self.usd_per_mtok_out:
            return None
        return self.usd_per_mtok_in.get(model, 0.0), self.usd_per_mtok_out.get(model, 0.0)


@dataclass
class SeadConfig:
    seed: int = option(0, 0, 2**32 - 1)
    scenario: str = option("scenarios/restaurant_promotion.yaml", doc="path, relative to the config file")
    output_dir: str = option("runs", doc="parent folder of run directories")
    models: ModelsConfig = option(ModelsConfig())
    dialogue: DialogueConfig = option(DialogueConfig())
    train: TrainConfig = option(TrainConfig())
    curriculum: CurriculumConfig = option(CurriculumConfig())
    user: UserConfig = option(UserConfig())
    agent: AgentConfig = option(AgentConfig())
    engine: EngineConfig = option(EngineConfig())
    placement: PlacementConfig = option(PlacementConfig())
    trainer: TrainerConfig = option(TrainerConfig())
    weight_sync: WeightSyncConfig = option(WeightSyncConfig())
    ray: RayConfig = option(RayConfig())
    endpoint: EndpointConfig = option(EndpointConfig())
    cost: CostConfig = option(CostConfig())
    # Where the file came from; relative paths inside it resolve against this folder.
    source: str = option("<defaults>", doc="the file loaded", internal=True)

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        if p.is_absolute() or self.source == "<defaults>":
            return p
        return (Path(self.source).parent / p).resolve()
