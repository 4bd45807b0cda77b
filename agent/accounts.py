"""Which Unix account a job runs as, and what the agent needs to start it as that account.

Mode `owner`: each job runs as the account the server names in its assignment (the
owner's token name, or the admin's mapping of it), with that account's uid, primary gid
and supplementary groups (as initgroups(3) would set them), its home and shell. Only a
root agent can switch users. Mode `agent`: every job runs as the agent's own account,
which is a single-user deployment (`colloc up`, or an agent that is not root). Either
way a job is refused uid 0 unless the admin allowed it (`allow_root_jobs`), and in
mode `owner` an account below `min_job_uid` (a system account such as `daemon` or
`postgres`, whose files a job must not own) is refused whatever its token is named.
"""

from __future__ import annotations

import logging
import os
import pwd
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

RunJobsAs = Literal["owner", "agent"]

# Debian's login.defs ENV_PATH for ordinary users (shadow-utils 4.x): the PATH a login
# shell would give a job whose spec sets none
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_SHELL = "/bin/sh"  # passwd(5): an empty shell field means /bin/sh
# The first uid of ordinary accounts: UID_MIN in login.defs(5), 1000 on Debian, Ubuntu,
# Fedora and RHEL 7+ (system accounts such as daemon, nobody's peers, postgres lie below).
MIN_JOB_UID = 1000


class AccountError(Exception):
    """A job cannot run as the account it names; the message is its failure reason."""


@dataclass(frozen=True)
class JobAccount:
    """The identity a job process gets; `switch` is False when it is the agent's own."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str
    path: str
    switch: bool

    def environment(self) -> dict[str, str]:
        """What a login gives every process of the account (spec env may add to it)."""
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "SHELL": self.shell,
            "PATH": self.path,
        }


def _agent_account() -> JobAccount:
    """The agent's own account (a uid without a passwd entry, as in containers, too)."""
    uid = os.geteuid()
    try:
        entry = pwd.getpwuid(uid)
        name, home, shell = entry.pw_name, entry.pw_dir, entry.pw_shell or DEFAULT_SHELL
    except KeyError:
        name = str(uid)
        home = os.environ.get("HOME", "/")
        shell = DEFAULT_SHELL
    return JobAccount(
        name=name,
        uid=uid,
        gid=os.getegid(),
        groups=tuple(os.getgroups()),
        home=home,
        shell=shell,
        path=os.environ.get("PATH") or DEFAULT_PATH,
        switch=False,
    )


def _named_account(name: str) -> JobAccount:
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a name holding a NUL
        raise AccountError(f"no Unix account {name!r} on this node") from None
    return JobAccount(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
        home=entry.pw_dir,
        shell=entry.pw_shell or DEFAULT_SHELL,
        path=DEFAULT_PATH,
        switch=True,
    )


@dataclass(frozen=True)
class Identity:
    """The agent's policy for whose account jobs run as."""

    run_jobs_as: RunJobsAs = "owner"
    allow_root_jobs: bool = False
    min_job_uid: int = MIN_JOB_UID

    @classmethod
    def effective(
        cls, run_jobs_as: RunJobsAs, allow_root_jobs: bool, min_job_uid: int = MIN_JOB_UID
    ) -> Identity:
        """The policy this process can carry out: only root can switch users."""
        if run_jobs_as == "owner" and os.geteuid() != 0:
            log.warning(
                "the agent is not root, so it cannot switch users: every job runs as "
                "its own account %s (run_jobs_as: agent)",
                _agent_account().name,
            )
            return cls("agent", allow_root_jobs, min_job_uid)
        return cls(run_jobs_as, allow_root_jobs, min_job_uid)

    def describe(self) -> str:
        if self.run_jobs_as == "owner":
            who = "as their owners' Unix accounts"
        else:
            who = f"as the agent's own account {_agent_account().name}"
        return f"jobs run {who}; root {'allowed' if self.allow_root_jobs else 'refused'}"

    def resolve(self, account: str | None) -> JobAccount:
        """The account a job of `account` (as the server named it) runs as."""
        if self.run_jobs_as == "agent":
            found = _agent_account()
        elif not account:
            raise AccountError("the server named no Unix account for this job")
        else:
            found = _named_account(account)
        if found.uid == 0 and not self.allow_root_jobs:
            raise AccountError(
                f"refusing to run a job as root (account {found.name!r}): "
                "the agent's allow_root_jobs setting is off"
            )
        if found.switch and 0 < found.uid < self.min_job_uid:
            raise AccountError(
                f"refusing to run a job as system account {found.name!r} (uid {found.uid}): "
                f"job accounts start at uid {self.min_job_uid} (the agent's min_job_uid)"
            )
        return found
