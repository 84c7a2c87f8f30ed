"""The analytics dashboard at /dashboard: a page for analysts (and admins), served by the gateway.

A browser opening the page sends no Authorization header (the token lives in the tab's sessionStorage),
so the page itself is public and asks for a log-in; its data comes from /api/analytics/*, which checks
the role on every call. A client that does send a bearer token learns its rights at once: 401 for a bad
token, 403 for a user without the analyst role.
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from fastapi.security.utils import get_authorization_scheme_param

from services.gateway.auth import authenticate
from services.gateway.deps import SessionsDep, SettingsDep
from services.gateway.roles import grants
from services.gateway.web_page import CONTENT_TYPES, PAGE_METHODS, WEB_DIR
from shared.errors import Forbidden
from shared.json_body import StrictJsonRoute

PAGE = "dashboard.html"
# The chat page's policy, except that inline styles are allowed: plotly.js adds its own stylesheets as
# <style> elements when it loads (its chart rules, and those of the map library it bundles), and those
# cannot carry a nonce. Scripts stay 'self' only, and the page puts every text in with textContent.
DASHBOARD_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy": DASHBOARD_CSP}

router = APIRouter(route_class=StrictJsonRoute, include_in_schema=False)


async def _refuse_non_analysts(request: Request, sessions: SessionsDep, settings: SettingsDep) -> None:
    authorization = request.headers.get("Authorization")
    if authorization is None:
        return
    scheme, token = get_authorization_scheme_param(authorization)
    session = await authenticate(
        sessions=sessions,
        token=token if scheme.lower() == "bearer" else None,
        ttl_s=settings.session_ttl_seconds,
        max_age_s=settings.session_max_age_seconds,
    )
    if not grants(session.roles, "analyst"):
        raise Forbidden("the dashboard is for analysts only")


@router.api_route("/dashboard", methods=PAGE_METHODS)
async def dashboard(request: Request, sessions: SessionsDep, settings: SettingsDep) -> FileResponse:
    await _refuse_non_analysts(request, sessions, settings)
    return FileResponse(WEB_DIR / PAGE, media_type=CONTENT_TYPES[".html"], headers=_HEADERS)
