"""An agent told to stop its jobs when it stops (`--stop-jobs-on-exit`, as the harness's
agents are): the job it stops ends `lost` and runs again, it is never `failed`."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.harness import running, simjob


def test_a_job_stopped_by_its_agents_shutdown_runs_again(tmp_path: Path, database_url: str) -> None:
    with running(tmp_path, database_url, env={"COLLOC_OOM_BACKOFF_S": "0"}) as colloc:
        # 12 s: still running when its agent is stopped, however slow the machine
        spec = {"name": "j", "command": simjob(500, 12), "memory_mib": 1000, "gpu_models": ["T4"]}
        response = colloc.http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = int(response.json()["id"])
        colloc.wait_for(job_id, {"running"})
        agent = colloc.agents.pop("node-b")
        agent.terminate()  # SIGTERM: the agent stops the job it launched, then exits
        assert agent.wait(timeout=30) == 0
        colloc.start_agent("node-b")  # reports the stopped attempt from the state directory
        job = colloc.wait_for(job_id, {"succeeded", "failed", "oom", "cancelled", "lost"}, 90)
        first, *later = job["attempts"]
        assert (first["state"], first["reason"]) == ("lost", "stopped as its agent shut down")
        assert job["state"] == "succeeded" and [a["state"] for a in later] == ["succeeded"]
