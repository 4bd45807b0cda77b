"""The catalog build reproduces the committed data (needs torch, torchvision, timm and
transformers: `make test-catalog`; skipped without them)."""

from __future__ import annotations

import math

import pytest

from estimator.catalog import lookup
from tests.estimator.torch_or_skip import need

need("torch")
need("torchvision")
need("timm")
need("transformers")

from estimator.catalog import build, hf_build  # noqa: E402
from estimator.catalog.hf_configs import MODELS  # noqa: E402

HF = {model.name: model for model in MODELS}


def _committed(source: str, name: str) -> dict[str, object]:
    return build.read_entries(source)[name]


def _as_written(entry: dict[str, object], field: str) -> object:
    """A field as the data file holds it: one the build leaves out (a model without
    fused attention has no scores) is written as 0."""
    return entry.get(field, 0)


@pytest.mark.parametrize("name", ["resnet18", "vit_b_16", "mobilenet_v3_small"])
def test_torchvision_entries_rebuild_exactly(name: str) -> None:
    built = build.torchvision_entry(name)
    committed = _committed("torchvision", name)
    for field in build.VISION_FIELDS:
        assert _as_written(built, field) == committed[field], field


@pytest.mark.parametrize(
    "name", ["resnet50", "vit_base_patch16_224", "legacy_xception", "beit_base_patch16_224"]
)
def test_timm_entries_rebuild_exactly(name: str) -> None:
    built = build.timm_entry(name)
    committed = _committed("timm", name)
    for field in build.TIMM_FIELDS:
        assert _as_written(built, field) == committed[field], field


@pytest.mark.parametrize(
    "name",
    ["bert-base-cased", "meta-llama/Llama-3.1-8B", "mistralai/Mixtral-8x7B-v0.1",
     "google/flan-t5-small", "openai/whisper-tiny", "google/vit-base-patch16-224",
     "facebook/wav2vec2-base-960h"],
)  # fmt: skip
def test_hf_entries_rebuild_from_their_config(name: str) -> None:
    built = hf_build.entry(HF[name])
    committed = _committed("hf", name)
    for field in (
        *("params", "matrices", "layers", "activations_per_sample"),
        *("attention_scores_per_sample", "attention_scores_exponent"),
        *("largest_attention_scores_per_sample", "autocast_bytes_per_sample"),
        *("fixed_activations", "fixed_activations_constant", "autocast_fixed_bytes"),
    ):
        assert built.get(field) == committed.get(field), field
    assert lookup(f"hf:{name}").params == built["params"]


@pytest.mark.parametrize(
    ("source", "name"),
    # BEiT keeps once both constant tensors and tables that grow with the input
    [("torchvision", "resnet18"), ("timm", "beit_base_patch16_224")],
)
def test_a_kept_entry_gets_a_field_added_since_and_stays_if_it_cannot(
    monkeypatch: pytest.MonkeyPatch, source: str, name: str
) -> None:
    """An entry built before `autocast_fixed_bytes` and `fixed_activations_constant` is
    completed with the figures a full build gives; one whose completion fails is kept as
    it was, and the failure recorded."""
    committed = _committed(source, name)
    added = ("autocast_fixed_bytes", "fixed_activations_constant")
    assert all(committed[field] for field in added)
    older = {k: v for k, v in committed.items() if k not in added}
    broken = older | {"name": "broken"}
    monkeypatch.setattr(build, "read_entries", lambda source: {name: older, "broken": broken})
    completes = build.timm_completed if source == "timm" else build.torchvision_completed

    def complete(model: str, entry: dict[str, object]) -> dict[str, int]:
        if model == "broken":
            raise RuntimeError("cannot build")
        return completes(model, entry)

    builder = build.Builder(rebuild=False)
    assert builder.reuse  # the committed data's library versions
    fields = build.TIMM_FIELDS if source == "timm" else build.VISION_FIELDS
    built = builder.collect(source, [name, "broken"], pytest.fail, complete, fields=fields)
    assert built == {name: committed, "broken": broken}
    assert list(builder.failures) == [f"{source}:broken"]


@pytest.mark.parametrize(
    ("fewer", "constant"),
    [
        (1000, 1000),  # the same at both inputs: standardised weights
        (316, 0),  # as the pixels squared (1000 x 0.75**4): a table over pairs of tokens
        (600, 415),  # in between: 400 / (1 - 0.75**4) = 585 elements grow
        (1200, 1000),  # fewer at the larger input: none grows
        (100, 0),  # steeper than the pixels squared: all grows
    ],
)
def test_what_a_step_keeps_once_is_split_into_a_constant_and_a_growing_part(
    fewer: int, constant: int
) -> None:
    """Split so that both inputs' counts hold (where they can), with the growing part
    taken as the pixels squared: a growth in between, as the pixels, is then charged
    more at a larger input than it takes, never less."""
    split = build.constant_part(1000, fewer, 384, 288)
    assert split == constant
    if 0 < split < 1000:
        # the power of the pixels that takes `fewer` to 1,000 kept at twice the input
        exponent = math.log(1000 / fewer) / math.log((384 / 288) ** 2)
        assert split + (1000 - split) * 2**4 > 1000 * (2**2) ** exponent
