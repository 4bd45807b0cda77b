"""GPU names as users write them: a family name stands for the cluster's one model of it."""

from __future__ import annotations

from estimator.gpus import canonical_gpu_name

V100_16 = "Tesla V100-SXM2-16GB"
V100_32 = "Tesla V100-SXM2-32GB"


def test_a_family_name_is_the_clusters_one_model_of_that_family() -> None:
    assert canonical_gpu_name("V100", (V100_16, "Tesla T4")) == V100_16
    assert canonical_gpu_name("tesla v100", (V100_32, V100_32)) == V100_32
    assert canonical_gpu_name("V100-SXM2", ("Tesla V100-SXM2-32GB",)) == V100_32
    # a new model the catalog lacks, reported by an agent
    assert canonical_gpu_name("X9", ("NVIDIA X9 48GB",)) == "NVIDIA X9 48GB"


def test_a_family_name_with_several_or_no_models_in_the_cluster_names_none() -> None:
    assert canonical_gpu_name("V100", (V100_16, V100_32)) is None
    assert canonical_gpu_name("V100", ("Tesla T4",)) is None
    assert canonical_gpu_name("V100") is None
    # a family is a whole leading part of the name: A10 is not the A100's family
    assert canonical_gpu_name("A10", ("NVIDIA A100-SXM4-80GB",)) == "NVIDIA A10"
    assert canonical_gpu_name("X", ("NVIDIA X9 48GB",)) is None


def test_aliases_and_exact_names_come_first() -> None:
    assert canonical_gpu_name("T4", (V100_16,)) == "Tesla T4"
    assert canonical_gpu_name("acme x9-48gb", ("Acme X9-48GB", "Acme X9-48GB-PCIe")) == (
        "Acme X9-48GB"
    )
