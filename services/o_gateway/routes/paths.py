"""Letta clients call collection routes with a trailing slash and others without;
every route answers both forms (no redirects: a redirected POST loses its body
in some clients).

Every route is a `CheckedRoute` (o_gateway.guards): its JSON body is checked for
what cannot be stored before FastAPI validates it, and its integer parameters are
bounded."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.routing import compile_path

from o_gateway.guards import CheckedRoute


def route(router: APIRouter, method: str, path: str, **kwargs: Any) -> Callable[[Any], Any]:
    other = path[:-1] if path.endswith("/") else path + "/"
    kwargs.setdefault("route_class_override", CheckedRoute)

    def register(fn: Any) -> Any:
        router.add_api_route(path, fn, methods=[method], **kwargs)
        added = router.routes[-1]
        assert isinstance(added, APIRoute)
        router.routes.append(twin(added, other))
        return fn

    return register


def twin(original: APIRoute, path: str) -> APIRoute:
    """`original` answering at `path` too (its other form), left out of the OpenAPI document.

    A copy, not a second `add_api_route`: building an APIRoute analyses the endpoint's
    signature and its models (~3 ms each here), and the gateway's ~230 routes twice were a
    second of its start. Nothing built from the signature depends on a trailing slash: the
    copy shares the handler, the dependant and the fields, and matches its own path."""
    other = copy.copy(original)
    other.path = path
    other.path_regex, other.path_format, other.param_convertors = compile_path(path)
    other.include_in_schema = False
    return other
