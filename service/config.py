"""Service settings, from `COLLOC_*` environment variables or a YAML config file.

`COLLOC_CONFIG_FILE=colloc.yaml` names a file whose keys are these settings' names;
environment variables win over it. Unsafe or unknown values stop the server at
start-up rather than at the first request.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from agent.protocol import FENCE_MARGIN_HEARTBEATS
from service.durations import MAX_DURATION_S, parse_duration_s
from service.scheduler.framework import Limit, Quotas, SchedulerConfig
from service.scheduler.lifecycle import ReservationRules
from service.scheduler.plugins import BUILT_IN

CONFIG_FILE_ENV = "COLLOC_CONFIG_FILE"
# the priorities a job can have (higher runs first)
JOB_PRIORITY_RANGE = (-1000, 1000)
# a time limit: seconds, or `1h30m`-style (service/durations.py)
TimeLimitS = Annotated[int, BeforeValidator(parse_duration_s), Field(ge=1, le=MAX_DURATION_S)]


def normalise_database_url(url: str) -> str:
    """Use the psycopg 3 driver for plain `postgresql://` URLs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class LimitSetting(BaseModel):
    gpus: int | None = Field(default=None, ge=0)
    memory_mib: int | None = Field(default=None, ge=0)


class Settings(BaseSettings):
    """Everything an operator can tune."""

    model_config = SettingsConfigDict(env_prefix="COLLOC_", extra="forbid")

    database_url: str = "sqlite:///./colloc.db"
    # larger request bodies are refused (413); a heartbeat carries at most 2 MiB of logs
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    # users' requests served at once, and as many agents' (register, heartbeat) in slots
    # of their own; more get 503 with Retry-After at once. The server runs twice this many
    # worker threads plus 2 for probes, and 2 pooled connections per thread plus 5
    # (service/load_shedding.py): PostgreSQL's max_connections must cover that. Most
    # requests take the placement lock, so more at once only queue in the database
    # (bench/load.py at 250 agents: 12 threads served 23 heartbeats/s, 40 threads 16)
    max_requests_in_flight: int = Field(default=12, ge=1, le=100)
    # a request's whole body must arrive within this long, before it takes a slot, else
    # 408 and the connection closes: a client trickling a body holds no slot for long.
    # The agent's client gives up on a request after 10 s (agent/client.py), and 10 s lets
    # the default 8 MiB cap through at 0.8 MiB/s
    request_body_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # development only: every caller is an admin; `colloc server` then binds to loopback only
    auth_disabled: bool = False
    schedule_interval_s: float = Field(default=1.0, gt=0, le=300)
    heartbeat_interval_s: float = Field(default=2.0, gt=0, le=300)
    # a node whose agent is silent this long is lost: its attempts end `lost` and retry
    node_lease_s: float = Field(default=30.0, gt=0, le=86400)
    # a placed attempt its node has not started this long after placement is taken back
    # and its job requeued: an agent starts what it is given on the heartbeat that brings
    # it, so a node that heartbeats but never starts one would keep it placed for ever
    launch_timeout_s: float = Field(default=120.0, gt=0, le=86400)
    scheduler_enabled: bool = True
    # group commit (service/nodes/heartbeat_batch.py): heartbeats that change no
    # reservation wait this long for others to share their transaction and commit: about
    # one commit's time, so the wait costs no more latency than a shared commit saves.
    # pgbench's single-row INSERTs, a commit each, took 1.3-3.2 ms per client (8 clients,
    # 2,500-6,300/s; bench/load.py on the 2-core dev VM's local PostgreSQL 15, fsync and
    # synchronous_commit on). 0: each heartbeat commits alone
    heartbeat_batch_window_ms: float = Field(default=2.0, ge=0, le=100)
    # the most heartbeats one transaction holds; a batch also never holds more than the
    # agents' request slots (max_requests_in_flight), so by default it closes as soon
    # as every agent request being served is in it
    heartbeat_batch_max: int = Field(default=100, ge=1, le=1000)
    default_max_attempts: int = Field(default=3, ge=1, le=20)
    # OOM recovery: the next attempt reserves at least this factor times what the
    # failed one needed, more where the cluster's own OOM'd jobs went on to need more
    # (`retry_factor`; never more than the largest eligible GPU gives; on its last try
    # it gets that GPU whole: `scheduler/lifecycle.py`), after a back-off of
    # oom_backoff_s * 2^(failures - 1). 1.2 is the step Kubernetes' vertical pod
    # autoscaler takes after an OOM (its recommender's oom-bump-up-ratio default)
    oom_reservation_factor: float = Field(default=1.2, ge=1.0, le=4.0)
    oom_backoff_s: float = Field(default=10.0, ge=0, le=3600)
    # placement pipeline (plugin names from service/scheduler/plugins.py's BUILT_IN)
    scheduler_queue_sort: str = "priority_fifo"
    scheduler_filters: list[str] = Field(default_factory=lambda: list(SchedulerConfig().filters))
    scheduler_scorers: dict[str, float] = Field(
        default_factory=lambda: dict(SchedulerConfig().scorers)
    )
    memory_headroom_mib: int = Field(default=256, ge=0)
    max_jobs_per_gpu: int = Field(default=4, ge=1, le=64)
    max_gpu_utilization_pct: float = Field(default=90.0, gt=0, le=100)
    backfill: bool = True
    preemption: bool = False
    # jobs searched for room per cycle; the rest wait, in queue order, for the next
    # (service/scheduler/framework.py says why 1,000); null (in YAML): no bound
    max_attempts_per_cycle: int | None = Field(
        default=SchedulerConfig().max_attempts_per_cycle, ge=1
    )
    user_quotas: dict[str, LimitSetting] = Field(default_factory=dict)
    queue_quotas: dict[str, LimitSetting] = Field(default_factory=dict)
    # the highest priority a user may give a job, by queue ("*": any other queue); an
    # admin may set any (JOB_PRIORITY_RANGE), at submission or later. With preemption on,
    # a priority is a claim on other users' GPUs, so users get none above 0 unless granted
    queue_max_priority: dict[str, int] = Field(default_factory=lambda: {"*": 0})
    # a job's time limit in seconds, by queue ("*": any other queue; absent: none): the
    # default where its spec names none, and the most it may name; an attempt running
    # past its limit is stopped and the job ends `timeout`
    queue_default_time_limit_s: dict[str, TimeLimitS] = Field(default_factory=dict)
    queue_max_time_limit_s: dict[str, TimeLimitS] = Field(default_factory=dict)
    # running jobs' reservations follow what they really use once it is steady
    reservation_margin: float = Field(default=0.10, ge=0, le=2)
    reservation_stable_s: float = Field(default=120.0, ge=0)
    # job output kept per attempt and stream (the newest bytes; older ones are dropped)
    log_keep_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024, le=1024 * 1024 * 1024)
    # closed loop: refit the estimator's calibration this often when new peaks came in
    estimator_refit_interval_s: float = Field(default=0, ge=0)
    # utilisation history (admin queries, dashboard): a sample this often, kept this long
    usage_sample_interval_s: float = Field(default=60.0, gt=0, le=3600)
    usage_keep_days: float = Field(default=30.0, gt=0, le=3650)
    # retention (service/retention.py): what is past these limits is pruned every
    # `retention_interval_s`, a batch of `retention_batch_rows` per transaction (each
    # holds the write lock for milliseconds, so heartbeats never wait long behind it)
    retention_interval_s: float = Field(default=300.0, gt=0, le=86400)
    retention_batch_rows: int = Field(default=500, ge=1, le=100_000)
    # finished jobs, whole, after a month (as usage history) or past the newest 100,000
    # (about 30 days of a cluster finishing 3,000 a day); jobs the estimator learned a
    # peak from keep their job, attempts and peaks, which it rebuilds its history from
    retention_job_days: float = Field(default=30.0, gt=0, le=3650)
    retention_max_finished_jobs: int = Field(default=100_000, ge=1)
    # events after a month, or past the newest million (never an unfinished job's)
    retention_event_days: float = Field(default=30.0, gt=0, le=3650)
    retention_max_events: int = Field(default=1_000_000, ge=1)
    # an ended attempt's output after a week (read while fresh, the biggest rows), and
    # the oldest ones' past 4 GiB in all (500 attempts at the whole per-attempt cap)
    retention_log_days: float = Field(default=7.0, gt=0, le=3650)
    retention_max_log_bytes: int = Field(default=4 * 1024**3, ge=1024 * 1024)
    # usage samples past this many (they go by age after `usage_keep_days` too): 30 days
    # of one-minute samples of 5 GPU models and 4 owners each (1.08 million), doubled
    retention_max_usage_samples: int = Field(default=2_000_000, ge=1)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if not config_file:
            return (init_settings, env_settings)
        return (
            init_settings,
            env_settings,
            YamlConfigSettingsSource(settings_cls, Path(config_file)),
        )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        url = normalise_database_url(url)
        if not url.startswith(("sqlite", "postgresql")):
            raise ValueError("COLLOC_DATABASE_URL must be a sqlite:// or postgresql:// URL")
        return url

    @model_validator(mode="after")
    def _known_plugins(self) -> Settings:
        if unknown := BUILT_IN.unknown(self.scheduler()):
            raise ValueError("unknown scheduler plugin(s): " + "; ".join(unknown))
        return self

    @model_validator(mode="after")
    def _lease_outlasts_heartbeats(self) -> Settings:
        if self.node_lease_s < 3 * self.heartbeat_interval_s:
            raise ValueError(
                "node_lease_s must be at least 3 heartbeat intervals "
                f"({3 * self.heartbeat_interval_s:g} s): one late heartbeat must not lose a node"
            )
        return self

    @model_validator(mode="after")
    def _launch_outlasts_heartbeats(self) -> Settings:
        if self.launch_timeout_s < 3 * self.heartbeat_interval_s:
            raise ValueError(
                "launch_timeout_s must be at least 3 heartbeat intervals "
                f"({3 * self.heartbeat_interval_s:g} s): an agent starts an attempt on the "
                "heartbeat that brings it"
            )
        return self

    def fence_margin_s(self) -> float:
        """How long before its lease ends a silent agent stops its jobs (self-fencing), and
        how long after it a job whose attempt was lost with the node waits to be placed
        again: FENCE_MARGIN_HEARTBEATS heartbeat intervals (agent/protocol.py says why)."""
        return FENCE_MARGIN_HEARTBEATS * self.heartbeat_interval_s

    @field_validator("queue_max_priority")
    @classmethod
    def _priorities_in_range(cls, limits: dict[str, int]) -> dict[str, int]:
        low, high = JOB_PRIORITY_RANGE
        wrong = {queue: n for queue, n in limits.items() if not low <= n <= high}
        if wrong:
            raise ValueError(f"queue_max_priority must lie in {low}..{high}: {wrong}")
        return limits

    def max_priority(self, queue: str) -> int:
        """The highest priority a user may give a job in `queue`."""
        return self.queue_max_priority.get(queue, self.queue_max_priority.get("*", 0))

    def default_time_limit_s(self, queue: str) -> int | None:
        """The time limit of a job in `queue` whose spec names none."""
        limits = self.queue_default_time_limit_s
        return limits.get(queue, limits.get("*"))

    def max_time_limit_s(self, queue: str) -> int | None:
        """The longest time limit a job in `queue` may have."""
        limits = self.queue_max_time_limit_s
        return limits.get(queue, limits.get("*"))

    def reservation_rules(self) -> ReservationRules:
        """How running and retried jobs' reservations move under these settings."""
        return ReservationRules(
            margin=self.reservation_margin,
            stable_s=self.reservation_stable_s,
            oom_factor=self.oom_reservation_factor,
            oom_backoff_s=self.oom_backoff_s,
        )

    def scheduler(self) -> SchedulerConfig:
        """The placement pipeline these settings describe."""
        return SchedulerConfig(
            queue_sort=self.scheduler_queue_sort,
            filters=tuple(self.scheduler_filters),
            scorers=dict(self.scheduler_scorers),
            headroom_mib=self.memory_headroom_mib,
            max_jobs_per_gpu=self.max_jobs_per_gpu,
            max_utilization_pct=self.max_gpu_utilization_pct,
            max_attempts_per_cycle=self.max_attempts_per_cycle,
            backfill=self.backfill,
            preemption=self.preemption,
            quotas=Quotas(
                users={k: Limit(v.gpus, v.memory_mib) for k, v in self.user_quotas.items()},
                queues={k: Limit(v.gpus, v.memory_mib) for k, v in self.queue_quotas.items()},
            ),
        )
