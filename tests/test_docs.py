"""The documentation in the repository: present, linked, and current with the schema."""

from __future__ import annotations

import re
from pathlib import Path

from agent import accounts
from service.cli import job_reference


def test_the_job_file_page_is_the_schema_rendered(repo_root: Path) -> None:
    for model, _heading, _what in job_reference.SECTIONS:
        described = set(job_reference.DESCRIPTIONS[model.__name__])
        assert described == set(model.model_fields), f"describe every field of {model.__name__}"
    page = (repo_root / "docs" / "job-file.md").read_text()
    assert page == job_reference.render(), (
        "docs/job-file.md is stale: python -m service.cli.job_reference > docs/job-file.md"
    )
    for field in ("env", "workdir", "priority", "queue", "max_attempts", "preemptible"):
        assert f"| `{field}` |" in page


def test_every_relative_link_in_the_docs_leads_to_a_file(repo_root: Path) -> None:
    pages = [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]
    assert repo_root / "docs" / "DESIGN.md" in pages
    assert "docs/DESIGN.md" in (repo_root / "README.md").read_text()
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_job_file_page_names_the_whole_environment_a_job_gets() -> None:
    """What the agent gives a job besides its `env` (tests/agent/test_accounts.py checks
    the agent against the same names) is what the page tells users."""
    account = accounts.JobAccount("ana", 1000, 1000, (1000,), "/home/ana", "/bin/sh", "", True)
    described = job_reference.DESCRIPTIONS["JobCreate"]["env"]
    for variable in [*account.environment(), "CUDA_VISIBLE_DEVICES", "COLLOC_JOB_ID"]:
        assert f"`{variable}`" in described
    assert "fresh directory" in job_reference.DESCRIPTIONS["JobCreate"]["workdir"]


def test_the_design_page_shows_no_token_on_a_command_line(repo_root: Path) -> None:
    design = (repo_root / "docs" / "DESIGN.md").read_text()
    assert "--token T" not in design and "--token-file FILE" in design
