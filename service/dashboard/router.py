"""`GET /`: the dashboard, a static page (vendored HTML, CSS and JavaScript, no build
step and no CDN) that polls the admin API."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from service.scheduler.states import ENDED_ATTEMPT_STATES, FINAL_JOB_STATES, JobState

STATIC_DIR = Path(__file__).with_name("static")

router = APIRouter(tags=["dashboard"])
static_files = StaticFiles(directory=STATIC_DIR)


@router.get("/", include_in_schema=False)
def dashboard() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/states.js", include_in_schema=False)
def states() -> Response:
    """The job and attempt states the page lists and tests, from their one definition."""
    lists = {
        "job": list(JobState),
        "jobEnded": list(FINAL_JOB_STATES),
        "attemptEnded": list(ENDED_ATTEMPT_STATES),
    }
    script = f"const STATES = Object.freeze({json.dumps(lists)});\n"
    return Response(script, media_type="text/javascript", headers={"Cache-Control": "no-cache"})


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> FileResponse:
    """The icon browsers ask for at this path (an SVG: every current browser takes one)."""
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")
