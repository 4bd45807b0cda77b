"""The API's pages (`/docs`, Swagger UI; `/redoc`) from packaged files, not a CDN, so
they work on a cluster without internet as the dashboard does.

FastAPI's own pages load Swagger UI and ReDoc from a CDN; this is its documented way
of serving them yourself (docs_url=None, then `get_swagger_ui_html` pointing at a
StaticFiles mount: https://fastapi.tiangolo.com/how-to/custom-docs-ui-assets/). The
files are those the `fastapi-offline` package ships: Swagger UI 5, which renders the
OpenAPI 3.1 FastAPI writes (the 4.x in `swagger-ui-bundle` does not), and ReDoc.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"


def install(app: FastAPI) -> None:
    """Mount the assets and serve both pages; the app is made with docs_url and
    redoc_url None so FastAPI's CDN pages are not there too."""
    app.mount(ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")  # behind a proxy that strips a prefix
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            # its default sends the spec's address to validator.swagger.io for a badge
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
