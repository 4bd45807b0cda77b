"""The agent's settings: flags, over `COLLOC_SERVER`/`COLLOC_TOKEN`, over a config file.

`colloc agent --config /etc/colloc/agent.yaml` reads a YAML file whose keys are the
settings below (`examples/agent.yaml` lists them all); a flag given on the command
line wins over the environment, which wins over the file.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent import logkeep
from agent.accounts import MIN_JOB_UID, Identity, RunJobsAs
from agent.confinement import Policy as ConfinementPolicy
from agent.enforcement import Enforcement
from estimator.files import read_yaml


class AgentConfigError(ValueError):
    """Settings the agent cannot run with, and what is wrong with them."""


class AgentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = "http://127.0.0.1:8000"
    token: str | None = None  # COLLOC_TOKEN or the config file: never a flag (`ps` shows flags)
    token_file: Path | None = None  # keeps the node token out of unit files and `ps`
    ca_file: Path | None = None  # the CA an https server's certificate is checked against
    node: str | None = None  # this node's name; the host name by default
    simulate: Path | None = None  # a simulated cluster file instead of NVML
    sim_state: Path = Path(tempfile.gettempdir()) / "colloc-sim"
    state_dir: Path | None = None  # the jobs' run records; survives agent restarts
    logs_dir: Path | None = None  # job stdout/stderr files
    sample_interval_s: float = Field(default=0.5, gt=0, le=0.5)  # at least 2 Hz
    kill_grace_s: float = Field(default=10.0, ge=0, le=3600)
    max_backoff_s: float = Field(default=30.0, gt=0, le=3600)
    enforcement: Literal["warn", "kill"] = "warn"
    enforcement_tolerance: float = Field(default=0.10, ge=0, le=10)
    xid_quarantine_s: float = Field(default=600.0, ge=0)
    stop_jobs_on_exit: bool = False  # stop the jobs this agent process launched
    stop_adopted_jobs_on_exit: bool = False  # and those an earlier one left running
    run_jobs_as: RunJobsAs = "owner"  # owner: switch to each job's account (needs root)
    allow_root_jobs: bool = False
    min_job_uid: int = Field(default=MIN_JOB_UID, ge=1)  # system accounts below: refused
    work_dir: Path | None = None  # one directory per attempt, owned by the job's account
    gpu_confinement: ConfinementPolicy = "stop"
    # stop the jobs once the server has not answered for nearly its lease, before it
    # gives them to other nodes (off: a partition may run them twice at once)
    self_fencing: bool = True
    # ended jobs' output files, once the server holds all of it (logs_dir/ended): kept
    # this long, and at most this much on disk in all, the oldest removed first
    ended_logs_keep_s: float = Field(default=logkeep.DEFAULT_KEEP_S, ge=0)
    ended_logs_max_bytes: int = Field(default=logkeep.DEFAULT_MAX_BYTES, ge=0)

    def resolved_token(self) -> str | None:
        if self.token is not None and self.token_file is not None:
            raise AgentConfigError(
                "both a token (COLLOC_TOKEN or the config file) and token_file are set: "
                "keep only the token file"
            )
        if self.token_file is None:
            return self.token
        try:
            with open(self.token_file, encoding="utf-8") as file:
                _private(self.token_file, "token_file", os.fstat(file.fileno()).st_mode)
                return file.read().strip()
        except OSError as exc:
            raise AgentConfigError(f"cannot read token_file {self.token_file}: {exc}") from exc

    def identity(self) -> Identity:
        """Whose account jobs run as, as far as this process can switch users."""
        return Identity.effective(self.run_jobs_as, self.allow_root_jobs, self.min_job_uid)

    def node_name(self) -> str:
        return self.node or socket.gethostname()

    def state_path(self, node: str) -> Path:
        return self.state_dir or Path(tempfile.gettempdir()) / "colloc-agent" / node

    def logs_path(self, node: str) -> Path:
        return self.logs_dir or self.state_path(node) / "logs"

    def work_path(self, node: str) -> Path:
        """Outside the state directory, which jobs cannot enter."""
        return self.work_dir or Path(tempfile.gettempdir()) / "colloc-jobs" / node

    def enforcement_rules(self) -> Enforcement:
        return Enforcement(self.enforcement, self.enforcement_tolerance)


def _private(path: Path, what: str, mode: int | None = None) -> None:
    """Refuse a file holding the token that other users could read (jobs run as them)."""
    mode = path.stat().st_mode if mode is None else mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AgentConfigError(
            f"{what} {path} is open to other users (mode {stat.S_IMODE(mode):04o}): make it "
            f"readable by the agent's user only (chmod 600 {path})"
        )


ENVIRONMENT = {"server": "COLLOC_SERVER", "token": "COLLOC_TOKEN", "ca_file": "COLLOC_CA_FILE"}


def load_settings(config_file: Path | None, flags: dict[str, Any]) -> AgentSettings:
    """The settings from the file, the environment and the flags that were given."""
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = read_yaml(config_file)
        except ValueError as exc:
            raise AgentConfigError(f"agent config: {exc}") from exc
        if data is not None and not isinstance(data, dict):
            raise AgentConfigError(f"{config_file} must be a mapping of settings")
        if data and "token" in data:
            _private(config_file, "a config file holding the token")
        values.update(data or {})
    for key, variable in ENVIRONMENT.items():
        if os.environ.get(variable):
            values[key] = os.environ[variable]
    values.update({key: value for key, value in flags.items() if value is not None})
    try:
        return AgentSettings.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
            for error in exc.errors()
        )
        where = f" in {config_file}" if config_file else ""
        raise AgentConfigError(f"bad agent settings{where}: {problems}") from exc
