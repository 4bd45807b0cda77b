"""The core's cheap GpuView copy (`placement._as`) must stay what `dataclasses.replace`
gives: it lists GpuView's fields by position, so a field added to GpuView must be
added there too."""

from __future__ import annotations

from dataclasses import fields, replace

from service.scheduler.placement import _as
from service.scheduler.snapshot import GpuView


def test_as_copies_every_field_but_the_three_it_sets() -> None:
    # every field a distinct non-default value, so a dropped or swapped one shows
    values = {
        f.name: f"{f.name}-value" if f.type == "str" else i + 7
        for i, f in enumerate(fields(GpuView))
    }
    values["healthy"] = False
    gpu = GpuView(**values)  # type: ignore[arg-type]
    assert _as(gpu, 1, 2, 3) == replace(gpu, reserved_mib=1, used_mib=2, jobs=3)
