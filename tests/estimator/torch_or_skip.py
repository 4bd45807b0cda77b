"""Tests that need torch skip without it, except under `make test-catalog`
(COLLOC_REQUIRE_TORCH=1), where a missing library is a failure."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def need(module: str) -> ModuleType:
    if os.environ.get("COLLOC_REQUIRE_TORCH"):
        return importlib.import_module(module)
    found: ModuleType = pytest.importorskip(module)
    return found
