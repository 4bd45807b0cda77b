"""The FastAPI application: routers, error handlers, migrations and the scheduler loop."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from service import api_docs
from service.admin.router import router as admin_router
from service.auth.router import router as accounts_router
from service.auth.router import tokens_router
from service.auth.tokens import PrincipalCache, agent_slot_hashes
from service.body_limit import BodyLimit
from service.cluster.router import router as cluster_router
from service.config import Settings
from service.dashboard.router import router as dashboard_router
from service.dashboard.router import static_files
from service.db import make_engine, make_sessionmaker, read_transaction, upgrade
from service.deps import SessionDep
from service.errors import ERROR_RESPONSES, install_error_handlers
from service.estimates.router import router as estimates_router
from service.estimates.service import EstimatorState
from service.jobs.router import router as jobs_router
from service.load_shedding import AgentTokens, Capacity, LoadShedding
from service.metrics.collector import ClusterCollector
from service.metrics.instruments import Instruments, RequestTimer
from service.metrics.router import router as metrics_router
from service.nodes.heartbeat_batch import HeartbeatBatcher
from service.nodes.router import router as nodes_router
from service.periodic import Periodic
from service.retention import pruner
from service.scheduler.placement import Scheduler
from service.scheduling.loop import SchedulerLoop
from service.usage.sampler import usage_sampler

VERSION = "0.1.0"


def _reader(sessions: sessionmaker[Session]) -> Callable[[], frozenset[str]]:
    """Reads the tokens that may take the agents' request slots."""

    def read() -> frozenset[str]:
        with read_transaction(sessions) as session:
            return agent_slot_hashes(session)

    return read


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app for `settings`; start-up migrates the database and starts scheduling."""
    settings = settings or Settings()
    capacity = Capacity(settings.max_requests_in_flight)
    engine = make_engine(settings.database_url, capacity.connections)
    sessions = make_sessionmaker(engine)
    estimator_state = EstimatorState()
    scheduler = Scheduler(settings.scheduler())
    instruments = Instruments()
    instruments.registry.register(ClusterCollector(sessions, settings))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        upgrade(settings.database_url)
        to_thread.current_default_thread_limiter().total_tokens = capacity.threads
        workers: list[SchedulerLoop | Periodic] = [
            usage_sampler(sessions, settings),
            pruner(sessions, settings),
        ]
        if settings.scheduler_enabled:
            workers.append(
                SchedulerLoop(
                    sessions,
                    settings,
                    scheduler,
                    estimator_state,
                    on_cycle=instruments.cycle_seconds.observe,
                )
            )
        for worker in workers:
            worker.start()
        try:
            yield
        finally:
            for worker in workers:
                worker.stop()
            engine.dispose()

    # docs pages from packaged files (api_docs), not FastAPI's CDN ones
    app = FastAPI(title="Colloc", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.sessions = sessions
    app.state.estimator_state = estimator_state
    app.state.scheduler = scheduler
    app.state.instruments = instruments
    app.state.heartbeat_batcher = HeartbeatBatcher(settings)
    app.state.principals = PrincipalCache()  # service/auth/deps.py
    # added last is outermost: BodyLimit caps the body LoadShedding reads before a slot
    app.add_middleware(
        LoadShedding,
        capacity=capacity,
        body_timeout_s=settings.request_body_timeout_s,
        agent_tokens=AgentTokens(None if settings.auth_disabled else _reader(sessions)),
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestTimer, instruments=instruments)
    install_error_handlers(app)
    for router in (
        jobs_router,
        nodes_router,
        cluster_router,
        admin_router,
        accounts_router,
        tokens_router,
        estimates_router,
    ):
        app.include_router(router, prefix="/v1", responses=ERROR_RESPONSES)
    app.include_router(metrics_router, responses=ERROR_RESPONSES)
    app.include_router(dashboard_router)
    app.mount("/static", static_files, name="static")
    api_docs.install(app)

    @app.get("/healthz", tags=["health"])
    def healthz(session: SessionDep) -> dict[str, str | int]:
        """Liveness and database reachability; the pid lets `colloc up` tell the server it
        started from another one already on the port."""
        session.execute(text("SELECT 1"))
        return {"status": "ok", "version": VERSION, "pid": os.getpid()}

    return app
