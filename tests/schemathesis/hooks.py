"""Rules of the Pulse API that JSON Schema cannot state, for the schemathesis run.

Each rule here depends on the clock, on two fields compared with each other, or on what exists
in the stack, and is stated in the operation's description in /api/openapi.json. schemathesis
cannot read a description, so positive cases such a rule refuses are not sent (or, where one
optional field breaks the rule, are sent without it). Nothing else is filtered or changed, and
negative cases never are: every constraint JSON Schema can express is in the document itself.
"""

from datetime import datetime, timezone

import schemathesis


def _instant(value):
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def _allowed(method, path, case):
    body = case.body if isinstance(case.body, dict) else {}
    query = case.query if isinstance(case.query, dict) else {}
    if (method, path) == ("POST", "/api/tokens"):
        # A token's expiry is in the future.
        at = _instant(body.get("expires_at")) if body.get("expires_at") is not None else None
        return at is None or at > datetime.now(timezone.utc)
    if (method, path) == ("PUT", "/api/resources/{id}/operator-state"):
        # A maintenance window ends in the future, and after it starts.
        window = body.get("maintenance_window")
        if isinstance(window, dict):
            starts, ends = _instant(window.get("starts_at")), _instant(window.get("ends_at"))
            if ends is not None and ends <= datetime.now(timezone.utc):
                return False
            if starts is not None and ends is not None:
                return ends > starts
        return True
    if (method, path) == ("GET", "/api/resources/{id}/forecast"):
        # Without a metric the resource type's default is used; services and app containers
        # have none, and which type an id names depends on the stack.
        return query.get("metric") is not None
    if (method, path) == ("POST", "/api/ai/patrol/run"):
        # A scoped run's resource ids and types must name resources of the stack.
        return not body.get("resource_ids") and not body.get("resource_types")
    if (method, path) == ("PUT", "/api/settings/ai"):
        # Autopilot (autonomy_level full) needs the current acknowledgement, in the body or
        # already saved.
        return body.get("autonomy_level") != "full"
    return True


def _positive_operation(ctx, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    operation = ctx.operation if ctx.operation is not None else case.operation
    return operation.method.upper(), operation.path


@schemathesis.hook
def filter_case(ctx, case):
    operation = _positive_operation(ctx, case)
    return operation is None or _allowed(*operation, case)


@schemathesis.hook
def map_case(ctx, case):
    operation = _positive_operation(ctx, case)
    if operation == ("POST", "/api/ai/patrol/suppress") and isinstance(case.body, dict):
        # A finding named by id must lie inside the suppression's scope, which a random id
        # never does: the scope alone names the finding (the newest one it matches). This is a
        # map, not a filter, because finding_id is in about half the drawn bodies and filtering
        # them out trips Hypothesis's filter_too_much health check on some seeds.
        case.body.pop("finding_id", None)
    if operation == ("POST", "/api/ai/test/{id}"):
        # A provider test needs a provider the stack set up; the demo stack sets up one, openai
        # (any other is refused with provider_not_configured). A map, as for suppress: one
        # provider of fifteen would trip filter_too_much.
        case.path_parameters = {**(case.path_parameters or {}), "id": "openai"}
    return case
