"""The web pages' files: the chat page at `/`, the assets of both pages under /web/, and the dashboard's
chart library under /web/vendor/, all served by the gateway itself (no CDN). The dashboard page is
served at /dashboard by dashboard.py.

Only the files of the web/ folder with a known type are served, each with `Cache-Control: no-cache`
so a browser revalidates after an upgrade instead of mixing old and new modules.
"""
from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from shared.errors import NotFound
from shared.json_body import StrictJsonRoute

WEB_DIR = Path(__file__).parent / "web"
PAGE = "index.html"
PAGES = frozenset({PAGE, "dashboard.html"})  # each served at its own path, never under /web/
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_HEADERS = {"Cache-Control": "no-cache"}
PAGE_METHODS = ["GET", "HEAD"]  # HEAD too: uptime checks and `curl -I` ask for a page without its body

router = APIRouter(route_class=StrictJsonRoute, include_in_schema=False)


def _asset_names() -> frozenset[str]:
    return frozenset(p.name for p in WEB_DIR.iterdir() if p.suffix in CONTENT_TYPES and p.name not in PAGES)


_ASSETS = _asset_names()


@cache
def plotly_path() -> Path:
    """plotly.min.js as the installed plotly package bundles it."""
    try:
        path = Path(str(resources.files("plotly").joinpath("package_data", "plotly.min.js")))
    except ModuleNotFoundError:
        raise NotFound("the dashboard's chart library is not installed (the plotly package)") from None
    if not path.is_file():
        raise NotFound("the plotly package carries no plotly.min.js")
    return path


@router.api_route("/", methods=PAGE_METHODS)
async def page() -> FileResponse:
    return FileResponse(WEB_DIR / PAGE, media_type=CONTENT_TYPES[".html"], headers=_HEADERS)


@router.get("/web/vendor/plotly.min.js")
async def plotly(request: Request) -> Response:
    path = plotly_path()
    response = FileResponse(path, media_type=CONTENT_TYPES[".js"], headers=_HEADERS, stat_result=path.stat())
    # 4.6 MB: a browser revalidating its copy gets 304 instead of the whole file again.
    if request.headers.get("if-none-match") == response.headers["etag"]:
        return Response(status_code=304, headers={"ETag": response.headers["etag"], **_HEADERS})
    return response


@router.get("/web/{name}")
async def asset(name: str) -> FileResponse:
    if name not in _ASSETS:  # the name is looked up, never joined to a path as given
        raise NotFound("no such asset")
    path = WEB_DIR / name
    return FileResponse(path, media_type=CONTENT_TYPES[path.suffix], headers=_HEADERS)
