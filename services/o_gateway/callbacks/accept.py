"""Whether the API accepts a request's `callback_url`: refused at once what can be told
at once (the form: the schema, o_contracts/callback_urls.py; a literal address or an
internal name the policy refuses; no secret to sign with). A host name is judged
again, resolved, at every attempt (o_runtime/egress_policy.py)."""

from __future__ import annotations

from fastapi import HTTPException

from o_gateway.callbacks.settings import SECRET_ENV, CallbackSettings


def accepted_callback_url(url: str | None, settings: CallbackSettings) -> str | None:
    if url is None:
        return None
    if settings.secret is None:
        raise HTTPException(
            400,
            f"callback_url needs the server to sign callbacks, and it has no {SECRET_ENV}"
            " (see docs/callbacks.md)",
        )
    refusal = settings.targets.url_refusal(url)
    if refusal is not None:
        # (FastAPI's shape for a field that fails validation, as the schema's own refusals.)
        raise HTTPException(
            422,
            [
                {
                    "type": "value_error",
                    "loc": ["body", "callback_url"],
                    "msg": f"callback_url is refused: {refusal}",
                }
            ],
        )
    return url
