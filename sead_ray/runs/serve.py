"""`sead-ray serve`: the trained agent behind Ray Serve."""
from __future__ import annotations

import logging
import signal
import time

from sead_ray.core.config import SeadConfig
from sead_ray.core.models import resolve_model
from sead_ray.runs.cluster import connect
from sead_ray.scenario.scenario import Scenario

log = logging.getLogger(__name__)


def serve_agent(cfg: SeadConfig, scenario: Scenario, model: str, *, host: str, port: int, api_key: str,
                settings: dict) -> None:
    """`sead-ray serve`: the agent on Ray Serve until Ctrl-C or SIGTERM (actors/serve_agent.py)."""
    import sys

    from ray import serve

    from actors.engine_sizing import engine_spec_from_config
    from actors.ray_cluster import actor_env
    from actors.serve_agent import ServeSettings, build_agent_app
    from actors.vllm_engine import engine_kwargs
    from placement.groups import tensor_parallel_bundles

    path = str(resolve_model(model))
    role = cfg.placement.agent
    spec = engine_spec_from_config(cfg, "agent", path, cfg.seed)
    bundles = tensor_parallel_bundles(role, spec.tensor_parallel_size)
    env = {**actor_env(cfg), **({} if role.gpus else {"VLLM_CPU_OMP_THREADS_BIND": "nobind"})}
    decoding = cfg.dialogue.agent_eval.as_params()
    connect(cfg)   # before the app is built: building it starts Ray if none is connected (with Ray's defaults)
    app = build_agent_app(path, scenario, api_key, ServeSettings(
        decoding=decoding, prefill=cfg.dialogue.agent_prefill, **settings), engine_kwargs(spec), bundles, env)
    serve.start(http_options={"host": host, "port": port})
    t0 = time.perf_counter()
    log.info("starting the agent %s on Ray Serve (ray.serve.llm, %s replica(s))", model,
             f"{settings['min_replicas']}-{settings['max_replicas']}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve.run(app, name="sead-agent", route_prefix="/", blocking=False)
        url = f"http://{host}:{port}/v1"
        print(f"serving {model} as model {settings['model_id']!r} at {url} (ready in {time.perf_counter() - t0:.0f} s)\n"
              f"  scenario {scenario.name}: its prompt and output format are applied here; clients send the call\n"
              f"  evaluate it: sead-ray eval --config C --agent openai:{settings['model_id']}@{url} --n 16\n"
              "  Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)
    finally:
        serve.shutdown()
