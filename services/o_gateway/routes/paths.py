"""Letta clients call collection routes with a trailing slash and others without;
every route answers both forms (no redirects: a redirected POST loses its body
in some clients).

Every route is a `CheckedRoute` (o_gateway.guards): its JSON body is checked for
what cannot be stored before FastAPI validates it, and its integer parameters are
bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

from o_gateway.guards import CheckedRoute


def route(router: APIRouter, method: str, path: str, **kwargs: Any) -> Callable[[Any], Any]:
    other = path[:-1] if path.endswith("/") else path + "/"
    kwargs.setdefault("route_class_override", CheckedRoute)

    def register(fn: Any) -> Any:
        router.add_api_route(path, fn, methods=[method], **kwargs)
        router.add_api_route(other, fn, methods=[method], include_in_schema=False, **kwargs)
        return fn

    return register
