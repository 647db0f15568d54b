"""Health, the model list, and one real token (health alone can be green while
generation is broken)."""

from __future__ import annotations

from sm12x.http.transport import auth_hint
from verify.client import explain
from verify.context import Context
from verify.result import Evidence


def health(ctx: Context, ev: Evidence) -> None:
    try:
        response = ctx.http.get("/health")
    except Exception as exc:  # noqa: BLE001 - explain() names the cause
        raise explain(exc, "GET /health") from None
    ev.saw(f"GET /health -> HTTP {response.status_code}")
    hint = auth_hint(response.status_code, bool(ctx.endpoint.api_key))
    if hint:
        ev.fail(
            f"/health answered {hint}",
            "authentication, not readiness: the server is up and was started with --api-key",
            "set SM12X_API_KEY (or OPENAI_API_KEY), or pass --api-key, with the server's key",
        )
    if response.status_code != 200:
        ev.fail(
            f"/health answered HTTP {response.status_code}",
            "the server is up but not ready (still loading, or its scheduler died)",
            "wait for 'The server is fired up' in the log, or read the log for the error",
        )


def models(ctx: Context, ev: Evidence) -> None:
    try:
        page = ctx.client.models.list()
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "GET /v1/models") from None
    ids = [m.id for m in page.data]
    ev.saw(f"/v1/models: {ids}")
    if not ids:
        ev.fail(
            "/v1/models lists no model",
            "the server has no model loaded",
            "check --model-path / --served-model-name",
        )
    expected = ctx.options.expected_model
    if expected is not None and expected not in ids:
        line = f" ({ctx.options.line})" if ctx.options.line else ""
        ev.fail(
            f"the recipe serves {expected!r}{line}, the server lists {ids}",
            "another checkpoint or --served-model-name is running than the recipe's: "
            "another model line, or a recipe other than the one verify was given",
            "boot the recipe verify names (SM12X_RECIPE / --recipe), or name the recipe that runs",
        )
    if ctx.model is None:
        ctx.model = expected or ids[0]
    elif ctx.model not in ids:
        ev.fail(
            f"model {ctx.model!r} not served (served: {ids})",
            "--model names a different model than the server's --served-model-name",
            "drop --model to use the served one, or fix the name",
        )
    ev.metrics["model"] = ctx.model


def one_token(ctx: Context, ev: Evidence) -> None:
    try:
        response = ctx.client.chat.completions.create(
            **ctx.payload([{"role": "user", "content": "Say OK."}], max_tokens=1)
        )
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, "one-token generation") from None
    choice = response.choices[0]
    usage = response.usage
    ev.saw(
        f"finish_reason={choice.finish_reason!r} content={choice.message.content!r} "
        f"completion_tokens={usage.completion_tokens if usage else None}"
    )
    if usage is not None and usage.completion_tokens != 1:
        ev.fail(
            f"asked for 1 token, usage says {usage.completion_tokens}",
            "max_tokens is not honoured",
            "check the sglang version",
        )
    if choice.finish_reason not in ("length", "stop"):
        ev.fail(
            f"finish_reason {choice.finish_reason!r} for a 1-token request",
            "generation aborted",
            "read the server log for this request",
        )
