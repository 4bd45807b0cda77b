"""`colloc simulate`: the output contract, plots, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from estimator.learned import measurements
from service.cli import main
from service.simulator.policies import PolicyInputs
from service.simulator.scenario import SCENARIOS, adjusted, run

CONTRACT = {
    "oom_events",
    "makespan_s",
    "mean_jct_s",
    "p95_jct_s",
    "mean_queue_s",
    "gpu_memory_utilization",
    "jobs_completed",
}


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_json_output_follows_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _err = simulate(
        capsys, "--gpus", "24", "--jobs", "120", "--policies", "exclusive,colloc,oracle", "--json"
    )
    assert status == 0
    report = json.loads(out)
    assert set(report["policies"]) == {"exclusive", "colloc", "oracle"}
    for figures in report["policies"].values():
        assert set(figures) >= CONTRACT
        assert 0 <= figures["gpu_memory_utilization"] <= 1
    assert report["policies"]["oracle"]["oom_events"] == 0
    assert report["trace"]["jobs"] == 120 and report["trace"]["gpus"] <= 24


def test_a_scenario_of_issue_20_adds_its_figures_to_the_contract(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--scenario", "spiky", "--gpus", "16", "--jobs", "200", "--json"]
    status, out, _err = simulate(capsys, *args, "--policies", "exclusive,oracle")
    assert status == 0
    report = json.loads(out)
    for figures in report["policies"].values():
        assert set(figures) >= CONTRACT | {
            "p95_queue_s",
            "oom_lost_share",
            "reserved_over_true_peak",
            "reserved_over_true_peak_after_200",
        }
    trace = report["trace"]
    assert trace["truth"] == "spiky" and trace["spiked_jobs"] == 2  # 1% of 200
    assert trace["implausible_rows_left_out"] == 498


def test_a_seed_gives_the_same_run() -> None:
    scenario = adjusted(SCENARIOS["standard"], gpus=16, jobs=150, seed=3)
    first = run(scenario, ["exclusive", "request", "oracle"]).as_json()
    second = run(scenario, ["exclusive", "request", "oracle"]).as_json()
    first["trace"].pop("wall_s"), second["trace"].pop("wall_s")
    assert first == second


def test_policies_in_parallel_processes_give_the_same_run() -> None:
    scenario = adjusted(SCENARIOS["standard"], gpus=24, jobs=300, seed=5)
    policies = ["exclusive", "analytical", "colloc", "colloc-new-family", "oracle"]
    inputs = PolicyInputs(measurements.read())  # trained here once, then sent to workers
    one_by_one = run(scenario, policies, inputs=inputs).as_json()
    at_once = run(scenario, policies, inputs=inputs, workers=3).as_json()
    assert one_by_one["trace"].pop("wall_s").keys() == at_once["trace"].pop("wall_s").keys()
    assert one_by_one == at_once
    assert list(at_once["policies"]) == policies


def test_table_plots_and_a_cluster_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n"
        "  - name: a\n    gpus: [{model: NVIDIA A100-SXM4-40GB, count: 2}]\n"
        "  - name: b\n    gpus: [{model: Tesla T4, count: 4}]\n"
    )
    args = ["--cluster", str(cluster), "--jobs", "60", "--policies", "exclusive,oracle"]
    status, out, _err = simulate(capsys, *args, "--plots", str(tmp_path / "plots"))
    assert status == 0
    assert "| exclusive |" in out and "| oracle |" in out and "on 6 GPUs" in out
    for name in ("utilization.png", "jct_cdf.png", "summary.png"):
        assert (tmp_path / "plots" / name).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policies", "fifo"], "unknown policy 'fifo'"),
        (["--cluster", "/nonexistent.yaml"], "/nonexistent.yaml"),
        (["--extract", "/tmp"], "not the shared data folder"),
        (["--scenario", "huge"], "unknown scenario 'huge'"),
    ],
)
def test_bad_input_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, _out, err = simulate(capsys, *args)
    assert status != 0 and message in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["--jobs", "0"], ["--load", "-1"], ["--trace", "philly"]])
def test_bad_figures_are_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    status, _out, err = simulate(capsys, *args)
    assert status == 2 and "Traceback" not in err
