"""Jobs run as their owners' Unix accounts: uid, gid, supplementary groups, home and a
clean environment, in a directory of their own; unknown accounts and root are refused
at once; a workdir the account may not enter (the agent's state) is refused; an agent
that is not root runs jobs as itself. Real accounts: these tests need root."""

from __future__ import annotations

import logging
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import accounts, dirs
from agent.accounts import Identity
from agent.backends.simulated import SimulatedBackend
from agent.cluster import parse_cluster
from agent.daemon import Agent, AgentConfig
from agent.dirs import UnsafeDirectory, own_dir
from tests.agent.test_daemon import FakeServer, step_until
from tests.agent.unix_accounts import Account, needs_root, open_directory, unix_account

PROBE = "id -u; id -g; id -G; pwd; touch made-by-the-job; echo ---; exec env"
COLLOC_VARIABLES = {"CUDA_VISIBLE_DEVICES", "COLLOC_JOB_ID", "COLLOC_ATTEMPT", "COLLOC_SIM_STATE"}
LOGIN_VARIABLES = {"HOME", "USER", "LOGNAME", "SHELL", "PATH"}


@pytest.fixture
def root() -> Iterator[Path]:
    with open_directory() as path:
        yield path


@pytest.fixture
def account() -> Iterator[Account]:
    with unix_account() as made:
        yield made


def _agent(root: Path, server: FakeServer, identity: Identity) -> Agent:
    (node,) = parse_cluster({"nodes": [{"name": "n", "gpus": [{"model": "T4", "count": 1}]}]})
    config = AgentConfig(
        name="n",
        state_dir=root / "state",
        logs_dir=root / "logs",
        work_dir=root / "work",
        kill_grace_s=1,
        identity=identity,
    )
    return Agent(server, SimulatedBackend(node, root / "sim"), config)  # type: ignore[arg-type]


def _run(agent: Agent, server: FakeServer, account: str, command: list[str], **spec: Any) -> str:
    """Run one job to its end; its stdout."""
    uuid = agent.backend.devices()[0].uuid
    job_id = len(server.reports) + 1000
    server.pending.append(
        {
            "job_id": job_id,
            "attempt": 1,
            "command": command,
            "env": spec.get("env", {}),
            "workdir": spec.get("workdir"),
            "gpu_uuids": [uuid],
            "account": account,
            "reserved_mib": 1000,
            "reserved_mib_by_gpu": {uuid: 1000},
        }
    )
    step_until(agent, server, lambda: any(r["job_id"] == job_id for r in server.reports))
    step_until(agent, server, lambda: not agent.jobs)
    return server.logs.get((job_id, 1, "stdout"), b"").decode()


@needs_root
def test_a_job_runs_as_its_owner_in_a_clean_environment(root: Path, account: Account) -> None:
    server = FakeServer()
    agent = _agent(root, server, Identity("owner"))
    out = _run(agent, server, account.name, ["/bin/sh", "-c", PROBE], env={"MINE": "yes"})
    assert server.reports[-1]["outcome"] == "succeeded", server.reports[-1]
    ids, _, env_text = out.partition("---\n")
    uid, gid, groups, cwd = ids.split("\n")[:4]
    assert (int(uid), int(gid)) == (account.uid, account.gid)
    assert {int(g) for g in groups.split()} == {account.gid, account.extra_gid}  # initgroups
    workdir = Path(cwd)
    assert workdir.parent == root / "work" and workdir.stat().st_uid == account.uid
    assert stat.S_IMODE(workdir.stat().st_mode) == 0o700
    assert (workdir / "made-by-the-job").stat().st_uid == account.uid
    env = dict(line.split("=", 1) for line in env_text.splitlines())
    # nothing of the agent's environment: the login variables, the spec's, Colloc's
    # (PWD is the shell's own)
    assert set(env) - {"PWD"} == LOGIN_VARIABLES | COLLOC_VARIABLES | {"MINE"}
    assert env["HOME"] == account.home and env["USER"] == env["LOGNAME"] == account.name
    assert env["PATH"] == accounts.DEFAULT_PATH and env["MINE"] == "yes"
    # the agent's directories are its own; the job's output is readable by it alone
    for private in (root / "state", root / "logs", root / "logs" / "ended"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    for log in (root / "logs").rglob("job-*"):  # ended jobs' files are in logs/ended
        assert stat.S_IMODE(log.stat().st_mode) == 0o600 and log.stat().st_uid == 0
    assert stat.S_IMODE((root / "work").stat().st_mode) == 0o711


@needs_root
def test_an_account_the_node_does_not_know_fails_at_once(root: Path) -> None:
    server = FakeServer()
    agent = _agent(root, server, Identity("owner"))
    _run(agent, server, "nosuchuser", ["/bin/true"])
    final = server.reports[-1]
    assert final["outcome"] == "failed" and final["exit_code"] is None
    assert final["reason"] == "no Unix account 'nosuchuser' on this node"
    assert not list((root / "work").iterdir())  # nothing was started


@needs_root
def test_root_is_refused_unless_the_admin_allows_it(root: Path) -> None:
    server = FakeServer()
    agent = _agent(root, server, Identity("owner"))
    _run(agent, server, "root", ["/bin/true"])
    assert server.reports[-1]["outcome"] == "failed"
    assert "refusing to run a job as root" in server.reports[-1]["reason"]
    agent.shutdown()  # one agent per state directory: lets the next one in
    # an agent running jobs as itself, itself root, is refused the same way
    agent = _agent(root, server, Identity("agent"))
    _run(agent, server, "", ["/bin/true"])
    assert "refusing to run a job as root" in server.reports[-1]["reason"]
    agent.shutdown()
    out = _run(
        _agent(root, server, Identity("owner", allow_root_jobs=True)), server, "root", ["id", "-u"]
    )
    assert server.reports[-1]["outcome"] == "succeeded" and out.strip() == "0"


def test_a_system_account_is_refused_whatever_a_token_is_named() -> None:
    """A token named `daemon` or `postgres` must not run jobs that own that account's files."""
    system = next(e for e in pwd.getpwall() if 0 < e.pw_uid < accounts.MIN_JOB_UID)
    with pytest.raises(accounts.AccountError, match="refusing to run a job as system account"):
        Identity("owner").resolve(system.pw_name)
    assert Identity("owner", min_job_uid=1).resolve(system.pw_name).uid == system.pw_uid


@needs_root
def test_a_workdir_the_account_may_not_enter_is_refused(root: Path, account: Account) -> None:
    server = FakeServer()
    agent = _agent(root, server, Identity("owner"))
    _run(agent, server, account.name, ["/bin/ls"], workdir=str(root / "state"))
    final = server.reports[-1]
    assert final["outcome"] == "failed"
    assert f"account {account.name} cannot enter '{root / 'state'}'" in final["reason"]


def test_an_agent_that_is_not_root_runs_jobs_as_itself(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    with caplog.at_level(logging.WARNING):
        identity = Identity.effective("owner", allow_root_jobs=False)
    assert identity == Identity("agent", allow_root_jobs=False)
    assert "cannot switch users: every job runs as its own account" in caplog.text
    assert Identity.effective("agent", False) == Identity("agent", False)
    job = identity.resolve(None)
    assert (job.uid, job.switch) == (4321, False)
    assert job.environment()["PATH"] == os.environ["PATH"]


@needs_root
def test_directories_under_a_parent_other_accounts_can_change_are_refused(
    root: Path, account: Account
) -> None:
    """A user who made the agent's parent directory first could swap the agent's tree
    for links later; a world-writable one without the sticky bit lets anyone do so."""
    theirs = root / "made-by-a-user"
    theirs.mkdir()
    os.chown(theirs, account.uid, account.gid)
    with pytest.raises(UnsafeDirectory, match="which other accounts can change"):
        own_dir(theirs / "node", dirs.PRIVATE)
    shared = root / "world-writable"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="which other accounts can change"):
        own_dir(shared / "node", dirs.PRIVATE)
    link = root / "a-users-link"
    link.symlink_to(root)
    os.chown(link, account.uid, account.gid, follow_symlinks=False)
    with pytest.raises(UnsafeDirectory, match="which other accounts can change"):
        own_dir(link / "node", dirs.PRIVATE)
    shared.chmod(0o1777)  # sticky, as /tmp: only an entry's owner may rename it
    assert own_dir(shared / "node", dirs.PRIVATE).is_dir()


@needs_root
def test_a_link_in_place_of_an_attempts_directory_is_not_followed(
    root: Path, account: Account
) -> None:
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    work = own_dir(root / "work", dirs.TRAVERSE_ONLY)
    (work / "job-1-attempt-1").symlink_to(elsewhere)
    job = Identity("owner").resolve(account.name)
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        dirs.attempt_workdir(work, "job-1-attempt-1", job)
    assert elsewhere.stat().st_uid == 0  # not handed to the job's account


@needs_root
def test_a_refused_workdir_does_not_tell_whether_it_exists(root: Path, account: Account) -> None:
    """The supervisor is root: a check of the path before switching would answer which
    paths exist inside directories the account cannot read."""
    hidden = root / "roots-own"
    (hidden / "project").mkdir(parents=True)
    hidden.chmod(0o700)
    server = FakeServer()
    agent = _agent(root, server, Identity("owner"))
    reasons = []
    for name in ("project", "no-such-project"):
        _run(agent, server, account.name, ["/bin/true"], workdir=str(hidden / name))
        reasons.append(server.reports[-1]["reason"].replace(name, "X"))
    assert reasons[0] == reasons[1]
