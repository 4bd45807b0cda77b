"""`GET /metrics`: the Prometheus text exposition."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client.exposition import choose_encoder

from service.auth.deps import allow
from service.metrics.instruments import Instruments

router = APIRouter(tags=["metrics"], dependencies=[Depends(allow("admin"))])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Cluster memory per GPU, queue by state, placements, OOMs, retries, estimator
    error, scheduling-cycle and API latency (an admin token: Prometheus's
    `authorization: {credentials_file: ...}`)."""
    instruments: Instruments = request.app.state.instruments
    # Prometheus text format 0.0.4, or OpenMetrics when the scraper asks for it
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(instruments.registry), headers={"Content-Type": content_type})
