"""The web app of `sead-ray view` (Starlette, served by uvicorn on 127.0.0.1 only) and the command.

The page (static/) is plain HTML, CSS and JS: no build step and nothing fetched from the network. The JSON
API under /api names files by paths relative to the viewed folder (sead_ray.view.files.Folder confines
them). Requests must name this server as their Host (no DNS rebinding) and a POST must come from its own
page (Origin), so no other site can drive the talk page or write into the folder.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import socket
from pathlib import Path
from typing import Any

from sead_ray.view.calls import FILTERS
from sead_ray.view.files import Folder, ViewError
from sead_ray.view.pages import Views
from sead_ray.view.talk import Talks

STATIC = Path(__file__).resolve().parent / "static"
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8"}
log = logging.getLogger(__name__)


def _int(value: Any, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ViewError(f"{name}: expected an integer, got {value!r}", 400) from None


def build_app(root: Path, port: int) -> Any:
    """The Starlette app over `root` (a folder that holds runs, comparisons or evaluations)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Route

    views = Views(Folder(root))
    talks = Talks(views)
    hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}

    def api(handler, threaded: bool = True):
        """JSON in and out; ViewError (and a bad config or model) become {"error": message} with a status."""
        async def endpoint(request: Request) -> Response:
            if request.headers.get("host") not in hosts:
                return JSONResponse({"error": "unexpected Host header (the viewer answers 127.0.0.1 only)"}, 403)
            if request.method == "POST" and request.headers.get("origin") not in {f"http://{h}" for h in hosts}:
                return JSONResponse({"error": "POST from another origin refused"}, 403)
            try:
                body = await request.json() if request.method == "POST" else {}
                if not isinstance(body, dict):
                    raise ViewError("the body must be a JSON object", 400)
                if threaded:   # file scans run beside the event loop
                    result = await run_in_threadpool(handler, request.query_params, body)
                else:
                    result = await handler(request.query_params, body, request.path_params)
                return JSONResponse(result)
            except ViewError as exc:
                return JSONResponse({"error": str(exc)}, exc.status)
            except ValueError as exc:   # ConfigError, a body that is not JSON
                return JSONResponse({"error": str(exc)}, 400)
        return endpoint

    def static(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        path = STATIC / name
        if "/" in name or path.suffix not in STATIC_TYPES or not path.is_file():
            return JSONResponse({"error": f"no file {name!r}"}, 404)
        return FileResponse(path, media_type=STATIC_TYPES[path.suffix], headers={"Cache-Control": "no-store"})

    def filters(q) -> dict:
        return {k: q.get(k) for k in FILTERS if q.get(k)}

    async def talk_start(q, body, _params):
        behaviors = body.get("behaviors") or []
        return await talks.start(str(body.get("config", "")), str(body.get("agent", "")), body.get("state"),
                                 behaviors if isinstance(behaviors, list) else [])

    async def talk_say(q, body, params):
        return await talks.say(params["sid"], str(body.get("text", "")), body.get("state"),
                               str(body.get("status", "continue")))

    async def talk_save(q, body, params):
        record, path = await run_in_threadpool(talks.save, params["sid"])
        return {"path": views.folder.rel(path), "record": record}

    routes = [
        Route("/", static),
        Route("/static/{name}", static),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/folder", api(lambda q, b: views.overview())),
        Route("/api/run", api(lambda q, b: views.run(q.get("path", "")))),
        Route("/api/curriculum", api(lambda q, b: views.curriculum(q.get("run", ""),
                                                                   _int(q.get("iteration"), "iteration", 1)))),
        Route("/api/dialogues", api(lambda q, b: views.dialogues(q.get("file"), filters(q),
                                                                 _int(q.get("offset"), "offset", 0),
                                                                 _int(q.get("limit"), "limit", 50)))),
        Route("/api/dialogue", api(lambda q, b: views.dialogue(q.get("file"), _int(q.get("index"), "index", 0)))),
        Route("/api/same_profile", api(lambda q, b: views.same_profile(q.get("file"), _int(q.get("index"), "index", 0)))),
        Route("/api/compare", api(lambda q, b: views.compare(q.get("path", "")))),
        Route("/api/talk", api(talk_start, threaded=False), methods=["POST"]),
        Route("/api/talk/{sid}/say", api(talk_say, threaded=False), methods=["POST"]),
        Route("/api/talk/{sid}/save", api(talk_save, threaded=False), methods=["POST"]),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await talks.close()   # local engines stop with the server
    return Starlette(routes=routes, lifespan=lifespan, max_body_size=1 << 20)


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port (0: any free port); a port in use is a usage error."""
    from sead_ray.runs.inputs import UsageError
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: already in use on 127.0.0.1 (choose another with --port)") from None
        raise UsageError(f"--port {port}: cannot listen on 127.0.0.1 ({exc.strerror})") from None
    sock.listen(128)
    return sock


def cmd_view(args) -> int:
    import uvicorn

    from sead_ray.runs.inputs import UsageError
    root = Path(args.folder)
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder (give a run directory, or a folder that holds runs or comparisons)")
    found = Folder(root).discover()
    if not any(found.values()):
        raise UsageError(f"{root}: not a sead-ray run directory, and no run (config.yaml + metrics.jsonl), comparison "
                         "(compare.json) or evaluation (dialogues.jsonl) in it")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: expected 0..65535")
    sock = bind(args.port)
    port = sock.getsockname()[1]
    app = build_app(root, port)
    print(f"sead-ray view: {len(found['runs'])} run(s), {len(found['compares'])} comparison(s), "
          f"{len(found['evals'])} evaluation(s) in {root.resolve()}\n  open http://127.0.0.1:{port}/   (Ctrl-C stops)",
          flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])
    return 0
