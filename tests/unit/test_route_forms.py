"""Every gateway route answers with and without a trailing slash (o_gateway/routes/paths.py):
the second form is a copy of the first route, not a second analysis of the endpoint, and the
routers' routes are the app's own (o_gateway/app.py's add_routes), not included routers that
FastAPI would build again at the first request."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from o_gateway.app import add_routes, create_app
from o_gateway.guards import CheckedRoute, allowed_methods
from o_gateway.routes.paths import route


class Body(BaseModel):
    name: str


def small_app() -> FastAPI:
    router = APIRouter(tags=["things"])

    @route(router, "GET", "/v1/things/{thing_id}")
    async def get_thing(thing_id: str, limit: int = 1) -> dict[str, object]:
        return {"id": thing_id, "limit": limit}

    @route(router, "POST", "/v1/things/")
    async def create_thing(body: Body) -> dict[str, str]:
        return {"created": body.name}

    app = FastAPI()
    add_routes(app, router)
    return app


async def test_both_forms_answer_with_their_parameters_body_and_validation() -> None:
    transport = httpx.ASGITransport(app=small_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://o") as http:
        for path in ("/v1/things/t1", "/v1/things/t1/"):
            got = await http.get(path, params={"limit": 7})
            assert got.status_code == 200, path
            assert got.json() == {"id": "t1", "limit": 7}
            # The bound o_gateway.guards adds to plain integers holds on both forms.
            too_big = await http.get(path, params={"limit": 2**40})
            assert too_big.status_code == 422, path
        for path in ("/v1/things/", "/v1/things"):
            made = await http.post(path, json={"name": "n"})
            assert made.status_code == 200, path
            assert made.json() == {"created": "n"}
            assert (await http.post(path, json={"nom": "n"})).status_code == 422, path


def test_the_second_form_is_not_in_the_document_and_keeps_the_routers_tags() -> None:
    app = small_app()
    paths = app.openapi()["paths"]
    assert set(paths) == {"/v1/things/{thing_id}", "/v1/things/"}
    assert paths["/v1/things/"]["post"]["tags"] == ["things"]
    routes = [r for r in app.router.routes if isinstance(r, APIRoute)]
    forms = {r.path: r for r in routes}
    assert set(forms) == {
        "/v1/things/{thing_id}",
        "/v1/things/{thing_id}/",
        "/v1/things/",
        "/v1/things",
    }
    assert forms["/v1/things/{thing_id}/"].include_in_schema is False
    assert forms["/v1/things/{thing_id}/"].tags == ["things"]
    assert forms["/v1/things/{thing_id}/"].endpoint is forms["/v1/things/{thing_id}"].endpoint


def test_the_gateways_routes_are_its_own_and_each_has_its_other_form() -> None:
    app = create_app(None)  # type: ignore[arg-type]
    # (Those made with routes/paths.py's `route`; health and metrics have one form.)
    routes = [r for r in app.router.routes if isinstance(r, CheckedRoute)]
    assert len(routes) > 400
    # No router is kept whole (FastAPI would build its routes again at the first request).
    assert not any(hasattr(r, "original_router") for r in app.router.routes)
    forms = {(r.path, frozenset(r.methods)) for r in routes}
    for path, methods in forms:
        other = path[:-1] if path.endswith("/") else path + "/"
        assert (other, methods) in forms, path
    # 405's Allow names every method of a path, on either form.
    assert allowed_methods(app.router.routes, "/v1/agents/") >= {"GET", "POST"}
    assert allowed_methods(app.router.routes, "/v1/agents") >= {"GET", "POST"}
