"""Commands that run on GPU nodes, in every simulated job or often at a prompt load none of
the server's web and database libraries: each imports only its own handler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVER_LIBRARIES = ("fastapi", "sqlalchemy", "alembic", "uvicorn")

# Runs `colloc ARGS` in this process, then writes which server libraries it loaded.
RUN_AND_LIST = """
import json, sys
from service.cli import main
argv, report = sys.argv[2:], sys.argv[1]
try:
    main(argv)
except SystemExit as exit_:
    status = exit_.code
loaded = [name for name in {libraries!r} if name in sys.modules]
with open(report, "w") as file:
    json.dump({{"status": status, "loaded": loaded}}, file)
"""


@pytest.mark.parametrize(
    "argv, status",
    [
        (["--help"], 0),
        (["jobs", "--help"], 0),
        (["jobs", "--server", "http://127.0.0.1:9"], 1),  # nothing listens there
        (["simjob", "--help"], 0),
        (["simjob", "--peak-mib", "1000", "--seconds", "1"], 2),  # no simulated GPU visible
        (["agent", "--help"], 0),
        (["agent", "--config", "{tmp}/missing.yaml"], 2),
    ],
    ids=["help", "jobs-help", "jobs", "simjob-help", "simjob", "agent-help", "agent"],
)
def test_client_and_node_commands_load_no_server_library(
    argv: list[str], status: int, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLOC_", "CUDA_VISIBLE"))}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_AND_LIST.format(libraries=SERVER_LIBRARIES),
            str(report),
            *(arg.format(tmp=tmp_path) for arg in argv),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(report.read_text())
    # the status shows the handler ran (or the help was printed), not an import error
    assert outcome == {"status": status, "loaded": []}, result.stderr
