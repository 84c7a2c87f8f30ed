"""The web chat page: `/` and its assets under /web/, served by the gateway itself (no CDN).

Only the files of the web/ folder with a known type are served, each with `Cache-Control: no-cache`
so a browser revalidates after an upgrade instead of mixing old and new modules.
"""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from shared.errors import NotFound

WEB_DIR = Path(__file__).parent / "web"
PAGE = "index.html"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_HEADERS = {"Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


def _asset_names() -> frozenset[str]:
    return frozenset(p.name for p in WEB_DIR.iterdir() if p.suffix in CONTENT_TYPES and p.name != PAGE)


_ASSETS = _asset_names()


@router.get("/")
async def page() -> FileResponse:
    return FileResponse(WEB_DIR / PAGE, media_type=CONTENT_TYPES[".html"], headers=_HEADERS)


@router.get("/web/{name}")
async def asset(name: str) -> FileResponse:
    if name not in _ASSETS:  # the name is looked up, never joined to a path as given
        raise NotFound("no such asset")
    path = WEB_DIR / name
    return FileResponse(path, media_type=CONTENT_TYPES[path.suffix], headers=_HEADERS)
