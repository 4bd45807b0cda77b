"""The packaged catalog: lookups, prefixes and helpful errors."""

from __future__ import annotations

import pytest

from estimator.catalog import UnknownModelError, entries, lookup


def test_every_source_is_populated() -> None:
    catalog = entries()
    assert len(catalog["torchvision"]) >= 60
    assert len(catalog["hf"]) >= 20
    resnet = lookup("torchvision:resnet50")
    assert resnet.params == 25_557_032 and resnet.reference_size == 224
    assert resnet.activations_per_sample > resnet.largest_activation_per_sample > 0


def test_prefixes_case_and_organisation_free_names() -> None:
    assert lookup("hf:bert-base-uncased").source == "hf"
    assert lookup("BERT-BASE-UNCASED").name == "bert-base-uncased"
    assert lookup("Llama-2-7b-hf").name == "meta-llama/Llama-2-7b-hf"
    assert lookup("resnet50").source == "torchvision"  # torchvision wins unprefixed


def test_unknown_names_suggest_close_ones() -> None:
    with pytest.raises(UnknownModelError) as raised:
        lookup("resnet-50")
    assert "resnet50" in raised.value.suggestions
    with pytest.raises(UnknownModelError):
        lookup("hf:resnet50")  # a prefix restricts the search to its source
