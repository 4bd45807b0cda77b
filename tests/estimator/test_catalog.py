"""The packaged catalog: every name people use resolves, entries say where their
numbers come from, and unknown names get helpful errors (no torch needed)."""

from __future__ import annotations

import json

import pytest

from estimator.analytical.model import breakdown, resolve
from estimator.catalog import DATA_DIR, UnknownModelError, entries, lookup, sources
from estimator.spec import TrainingSpec
from tests.estimator.kept_once import kept_once_bytes


def test_every_source_is_populated() -> None:
    catalog = entries()
    assert len(catalog["torchvision"]) >= 80
    assert len(catalog["timm"]) >= 1300  # every architecture timm lists
    assert len(catalog["hf"]) >= 150
    resnet = lookup("torchvision:resnet50")
    assert resnet.params == 25_557_032 and resnet.reference_size == 224
    assert resnet.activations_per_sample > resnet.largest_activation_per_sample > 0


@pytest.mark.parametrize(
    "name, expected",
    [
        ("hf:bert-base-uncased", "bert-base-uncased"),
        ("google-bert/bert-base-uncased", "bert-base-uncased"),
        ("hf:bert-base-cased", "bert-base-cased"),
        ("BERT-BASE-CASED", "bert-base-cased"),
        ("google-bert/bert-base-cased", "bert-base-cased"),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
        ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B"),
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B"),
        ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
        ("openai-community/gpt2", "gpt2"),
        ("FacebookAI/roberta-base", "roberta-base"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
        ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-7B"),
        ("google/gemma-2-9b-it", "google/gemma-2-9b"),
        ("timm:xception", "legacy_xception"),  # a deprecated timm alias
        ("convnext_tiny_in22ft1k", "convnext_tiny"),
        ("resnet50.a1_in1k", "resnet50"),  # a pretrained tag: the architecture
        ("timm:resnet50.a1_in1k", "resnet50"),
        ("tv:resnet50", "resnet50"),
    ],
)
def test_the_names_people_use_resolve(name: str, expected: str) -> None:
    assert lookup(name).name == expected


def test_cased_and_uncased_are_different_models() -> None:
    cased, uncased = lookup("bert-base-cased"), lookup("bert-base-uncased")
    assert cased.hf_config is not None and uncased.hf_config is not None
    assert cased.hf_config["vocab_size"] == 28996 and uncased.hf_config["vocab_size"] == 30522
    assert cased.params < uncased.params


def test_every_alias_and_tag_in_the_data_resolves() -> None:
    for source, loaded in sources().items():
        for alias, target in loaded.aliases.items():
            assert lookup(f"{source}:{alias}").name.lower().startswith(target.partition(".")[0])
        for arch, tags in loaded.tags.items():
            for tag in tags:
                assert lookup(f"{source}:{arch}.{tag}").name.lower().startswith(arch)


def test_a_tag_with_another_classifier_changes_the_parameters() -> None:
    base = lookup("timm:vit_base_patch16_224")
    in21k = lookup("timm:vit_base_patch16_224.augreg_in21k")
    assert base.num_classes == 1000 and base.head_features == 768
    assert in21k.params - base.params == (21843 - 1000) * (768 + 1)
    # autocast's 16-bit copy of the wider head is kept once a step
    extra = in21k.autocast_fixed_bytes - base.autocast_fixed_bytes
    assert extra == (21843 - 1000) * (768 + 1) * 2


def test_a_tag_with_another_classifier_keeps_the_once_kept_tables_under_autocast() -> None:
    """BEiT keeps its relative position tables once a step beside autocast's weight
    copies: a tag with a wider head adds that head's copy to both, so the tables are
    still charged under `amp_*`, not taken for the copies the wider head adds."""

    def kept_once(name: str) -> float:
        return kept_once_bytes({"model": {"catalog": name}, "precision": "amp_bf16"}, 8)

    base = "timm:beit_base_patch16_224"
    assert kept_once(base) > 2**20  # a MiB
    assert kept_once(f"{base}.in22k_ft_in22k") == pytest.approx(kept_once(base))


def test_all_torchvision_classification_models_are_there() -> None:
    names = set(entries()["torchvision"])
    families = [
        "alexnet", "vgg19_bn", "resnet152", "densenet201", "inception_v3", "googlenet",
        "mobilenet_v3_large", "efficientnet_v2_l", "regnet_y_128gf", "vit_h_14", "swin_v2_b",
        "maxvit_t", "convnext_large", "squeezenet1_1", "shufflenet_v2_x2_0", "mnasnet1_3",
        "wide_resnet101_2", "resnext101_64x4d",
    ]  # fmt: skip
    for family in families:
        assert family in names, family


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-2-70b-hf", "meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-3.2-3B", "mistralai/Mistral-7B-v0.3", "mistralai/Mixtral-8x22B-v0.1",
        "Qwen/Qwen1.5-MoE-A2.7B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V2-Lite",
        "allenai/OLMoE-1B-7B-0924", "Qwen/Qwen2-72B", "Qwen/Qwen2.5-32B", "Qwen/Qwen3-8B",
        "google/gemma-7b", "google/gemma-2-27b", "google/gemma-3-1b-pt", "microsoft/phi-2",
        "microsoft/Phi-3-mini-4k-instruct", "microsoft/phi-4", "tiiuae/falcon-40b",
        "allenai/OLMo-7B-hf", "allenai/OLMo-2-1124-13B", "EleutherAI/gpt-neox-20b",
        "EleutherAI/pythia-12b", "gpt2-xl", "facebook/opt-66b", "roberta-large",
        "microsoft/deberta-v3-large", "albert/albert-xxlarge-v2",
        "google/electra-large-discriminator", "distilbert/distilbert-base-cased",
        "FacebookAI/xlm-roberta-large", "t5-11b", "google/flan-t5-xxl", "google/mt5-xl",
        "facebook/bart-large",
    ],
)  # fmt: skip
def test_text_families_estimate_from_their_config(name: str) -> None:
    entry = lookup(f"hf:{name}")
    assert entry.kind == "transformer" and entry.hf_config is not None
    spec = TrainingSpec.model_validate(
        {"model": {"catalog": f"hf:{name}"}, "batch_size": 1, "seq_len": 512}
    )
    assert breakdown(spec, None).activations > 0


@pytest.mark.parametrize(
    "name, kind",
    [
        ("google/vit-base-patch16-224", "vision"), ("facebook/deit-small-patch16-224", "vision"),
        ("microsoft/swin-base-patch4-window7-224", "vision"),
        ("openai/clip-vit-large-patch14", "vision"), ("facebook/dinov2-large", "vision"),
        ("openai/whisper-small", "speech"), ("facebook/wav2vec2-base-960h", "speech"),
    ],
)  # fmt: skip
def test_image_and_speech_models_carry_their_own_activations(name: str, kind: str) -> None:
    """Measured on patches and audio frames, not charged a text model's logits."""
    entry = lookup(name)
    assert entry.kind == kind and entry.hf_config is None
    assert entry.activations_per_sample > entry.largest_activation_per_sample > 0
    shape = resolve(TrainingSpec.model_validate({"model": {"catalog": name}, "batch_size": 4}))
    assert shape.dims is None and shape.activations_per_sample == entry.activations_per_sample


@pytest.mark.parametrize(
    "torchvision_name, timm_name",
    [("vit_l_16", "vit_large_patch16_224"), ("efficientnet_b0", "efficientnet_b0"),
     ("convnext_tiny", "convnext_tiny")],
)  # fmt: skip
def test_one_architecture_counts_its_layers_alike_in_either_library(
    torchvision_name: str, timm_name: str
) -> None:
    """The learned correction reads the layer mix: timm's `BatchNormAct2d` is a batch
    norm and torchvision's `nn.MultiheadAttention` holds two linear layers, as the
    other library builds them."""
    ours, theirs = lookup(f"torchvision:{torchvision_name}"), lookup(f"timm:{timm_name}")
    assert ours.layers == theirs.layers


def test_vision_activations_follow_the_image_size() -> None:
    def activations(size: int) -> float:
        spec = {"model": {"catalog": "google/vit-base-patch16-224"}, "batch_size": 8}
        return breakdown(
            TrainingSpec.model_validate({**spec, "image_size": size}), None
        ).activations

    assert activations(384) > 2.9 * activations(224)  # 577 tokens against 197, and s^2 scores


def test_every_hf_entry_resolves_and_says_where_its_numbers_come_from() -> None:
    raw = json.loads((DATA_DIR / "hf.json").read_text())
    assert "meta device" in raw["generated"]
    for item in raw["entries"]:
        assert item["config_source"].startswith("https://huggingface.co/"), item["name"]
        spec = {"model": {"catalog": f"hf:{item['name']}"}, "batch_size": 1, "seq_len": 128}
        assert resolve(TrainingSpec.model_validate(spec)).params == item["params"]
    for source in ("torchvision", "timm"):
        assert "meta device" in json.loads((DATA_DIR / f"{source}.json").read_text())["generated"]


# Total parameters as the model cards state them (the headline figure of each card).
PUBLISHED_PARAMS = {
    "meta-llama/Llama-3.1-8B": 8.03e9,
    "meta-llama/Llama-3.1-405B": 405e9,
    "mistralai/Mixtral-8x7B-v0.1": 46.7e9,
    "mistralai/Mixtral-8x22B-v0.1": 141e9,
    "Qwen/Qwen1.5-MoE-A2.7B": 14.3e9,
    "Qwen/Qwen3-30B-A3B": 30.5e9,
    "Qwen/Qwen3-235B-A22B": 235e9,
    "deepseek-ai/DeepSeek-V2-Lite": 15.7e9,
    "allenai/OLMoE-1B-7B-0924": 6.9e9,
    "microsoft/Phi-3.5-MoE-instruct": 41.9e9,
    "microsoft/phi-4": 14.7e9,
    "google/gemma-2-9b": 9.24e9,
    "EleutherAI/gpt-neox-20b": 20.6e9,
    "facebook/opt-66b": 66e9,
    "google/mt5-small": 300e6,
    "bert-base-uncased": 110e6,
    "openai/whisper-large-v3": 1.55e9,
}


@pytest.mark.parametrize("name, published", PUBLISHED_PARAMS.items())
def test_built_parameter_counts_match_the_model_cards(name: str, published: float) -> None:
    assert lookup(f"hf:{name}").params == pytest.approx(published, rel=0.02)


def test_mixture_of_experts_counts_every_expert() -> None:
    mixtral, mistral = lookup("Mixtral-8x7B-v0.1"), lookup("Mistral-7B-v0.1")
    assert mixtral.hf_config is not None
    assert mixtral.hf_config["num_local_experts"] == 8
    assert mixtral.hf_config["num_experts_per_tok"] == 2
    assert 46e9 < mixtral.params < 47.5e9 and mixtral.params > 6 * mistral.params


def test_image_configs_are_refused_with_what_works() -> None:
    spec = {"model": {"hf_config": {"model_type": "vit", "hidden_size": 768}}, "batch_size": 1}
    with pytest.raises(ValueError, match="--trace"):  # when validated, or when resolved
        resolve(TrainingSpec.model_validate(spec))


def test_unknown_names_suggest_close_ones_and_the_other_forms() -> None:
    with pytest.raises(UnknownModelError) as raised:
        lookup("resnet-50")
    assert "resnet50" in raised.value.suggestions
    message = str(raised.value)
    for form in ("transformer", "hf_config", "summary", "--trace"):
        assert form in message
    with pytest.raises(UnknownModelError) as raised:
        lookup("resnet50.no_such_tag")
    assert raised.value.suggestions[0] == "resnet50"
    with pytest.raises(UnknownModelError):
        lookup("hf:resnet50")  # a prefix restricts the search to its source
