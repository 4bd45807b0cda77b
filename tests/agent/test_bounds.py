"""What the agent sends is what the server accepts: a reason of any length or content,
NaN and out-of-range readings are cut, cleaned and clamped, checked against the
server's own heartbeat schema."""

from __future__ import annotations

import math
from pathlib import Path

from agent import bounds
from agent.backends.base import GpuSample
from agent.job import JobProcess, now
from service.nodes.schemas import AttemptReport, GpuState, Notice
from tests.agent.test_daemon import FakeServer, make_agent


def test_text_is_cleaned_and_cut_with_a_marker() -> None:
    assert bounds.text("a\x00b\ud800c", 10) == "abc"  # NUL and a lone surrogate dropped
    cut = bounds.text("x" * 5000, bounds.REASON_CHARS)
    assert len(cut) == bounds.REASON_CHARS and cut.endswith(bounds.TRUNCATED)
    assert bounds.number(math.nan, 0, 100) is None and bounds.number(1e9, 0, 100) == 100
    assert bounds.mib(-5) == 0 and bounds.exit_code(2**40) == 2**31 - 1


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
        {
            "kind": "over_reservation",
            "gpu_uuid": "GPU-a",
            "used_mib": 1,
            "reserved_mib": 1,
            "action": "warn",
            "message": "m\x00" * 2000,
        }
    )
    job.outcome, job.exit_code, job.finished_at = "failed", -(2**40), now()
    job.reason = "cannot start '/" + "x\x00" * 4500 + "': File name too long"
    report = AttemptReport.model_validate(job.report())
    assert report.reason is not None and "\x00" not in report.reason
    assert report.reason.endswith(bounds.TRUNCATED) and len(report.reason) == 4096
    assert report.exit_code == -(2**31) and report.peak_mib_by_gpu == {"GPU-a": bounds.MAX_MIB}
    (notice,) = job.notices
    assert Notice.model_validate(notice).message.endswith(bounds.TRUNCATED)


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
    state = GpuState.model_validate(agent._gpu_state(sample))
    assert state.memory_used_mib == 0 and state.utilization_pct == 0.0
    assert state.memory_utilization_pct == 100 and state.temperature_c is None
    assert state.power_w == 100_000 and state.health_reason is not None
    assert "\x00" not in state.health_reason and len(state.health_reason) <= 1024
