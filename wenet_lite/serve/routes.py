"""Every plain HTTP route of `wenet-lite serve`'s port, one table: the page and its scripts,
``/health``, and OpenAI's API (``GET /v1/models``, ``POST /v1/audio/transcriptions``; another
``/v1/`` path is OpenAI's 404). Websocket upgrades are the front's (``http_front.py``) and the
sessions' (``sessions.py``)."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

from wenet_lite.serve.gate import PAGES, Gate
from wenet_lite.serve.http_front import HttpRequest, HttpResponse, PlainRoute
from wenet_lite.serve.openai_api import TranscriptionApi

__all__ = ["plain_routes"]


def plain_routes(
    gate: Gate, health: Callable[[], Dict[str, Any]], api: Optional[TranscriptionApi]
) -> List[PlainRoute]:
    """The table, in the order routes are matched (the first of a path and method)."""

    async def health_json(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, json.dumps(health()).encode())

    def page(path: str) -> Callable[[HttpRequest], Any]:
        async def answer(request: HttpRequest) -> HttpResponse:
            return gate.page(path)

        return answer

    rows = [PlainRoute("GET", "/health", health_json)]
    rows += [PlainRoute("GET", path, page(path)) for path in PAGES]
    if api is not None:
        rows += [
            PlainRoute("GET", "/v1/models", api.models, prefix=True),
            PlainRoute("POST", "/v1/audio/transcriptions", api.handle, refuse=api.refuse,
                       body=api.open_body, max_body=api.max_body, body_error=api.body_error),
            PlainRoute("*", "/v1", api.unknown, prefix=True),
        ]  # fmt: skip
    return rows
