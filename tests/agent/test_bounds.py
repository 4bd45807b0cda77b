"""What the agent sends is what the server accepts: a reason of any length or content,
NaN and out-of-range readings are cut, cleaned and clamped, checked against the
server's own reading of a heartbeat."""

from __future__ import annotations

import math
from pathlib import Path

from agent import bounds
from agent.backends.base import GpuSample
from agent.job import JobProcess, now
from agent.protocol import MAX_MIB, REASON_CHARS, TEXT_CHARS, TRUNCATED, Heartbeat, wire
from service.nodes.schemas import HeartbeatIn
from tests.agent.test_daemon import FakeServer, make_agent


def test_text_is_cleaned_and_numbers_clamped() -> None:
    assert bounds.text("a\x00b\ud800c") == "abc"  # NUL and a lone surrogate dropped
    assert bounds.number(math.nan, 0, 100) is None and bounds.number(1e9, 0, 100) == 100
    assert bounds.mib(-5) == 0 and bounds.exit_code(2**40) == 2**31 - 1
    assert bounds.optional_mib(None) is None and bounds.optional_mib(2**40) == MAX_MIB


def test_an_ended_attempts_report_is_within_the_servers_schema(tmp_path: Path) -> None:
    job = JobProcess(
        job_id=1,
        attempt=1,
        gpu_uuids=["GPU-a"],
        run_dir=tmp_path,
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
        peak_mib_by_gpu={"GPU-a": 2**40},
    )
    job.notify(
        kind="over_reservation",
        gpu_uuid="GPU-a",
        used_mib=1,
        reserved_mib=1,
        action="warn",
        message="m\x00" * 2000,
    )
    job.outcome, job.exit_code, job.finished_at = "failed", -(2**40), now()
    job.reason = "cannot start '/" + "x\x00" * 4500 + "': File name too long"
    body = wire(Heartbeat(gpus=[], attempts=[job.report(logs=[])]))
    (report,) = HeartbeatIn.model_validate(body).attempts
    assert report.reason is not None and "\x00" not in report.reason
    assert report.reason.endswith(TRUNCATED) and len(report.reason) == REASON_CHARS
    assert report.exit_code == -(2**31) and report.peak_mib_by_gpu == {"GPU-a": MAX_MIB}
    (notice,) = report.notices
    assert notice.message.endswith(TRUNCATED) and len(notice.message) == TEXT_CHARS


def test_gpu_readings_are_within_the_servers_schema(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, FakeServer())
    uuid = agent.backend.devices()[0].uuid
    agent._unhealthy[uuid] = "XID \x00" * 1000
    sample = GpuSample(
        uuid=uuid,
        memory_used_mib=-3,
        utilization_pct=math.nan,
        processes=(),
        memory_utilization_pct=250.0,
        temperature_c=math.inf,
        power_w=1e12,
    )
    body = wire(Heartbeat(gpus=[agent._gpu_state(sample)]))
    (state,) = HeartbeatIn.model_validate(body).gpus
    assert state.memory_used_mib == 0 and state.utilization_pct is None  # NaN: unknown
    assert state.memory_utilization_pct == 100 and state.temperature_c is None
    assert state.power_w == 100_000 and state.health_reason is not None
    assert "\x00" not in state.health_reason and len(state.health_reason) <= TEXT_CHARS
