"""Build the Hugging Face part of the catalog from `hf_configs.py` (needs transformers).

Language models are instantiated on the meta device for their exact parameter count
and layer counts; their activations come from the transformer formulas, which read the
stored config. Image and speech models are run forward on the meta device like timm's,
so their entries carry measured activations for their own inputs (patches, mel frames,
audio samples) instead of a text model's logits.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from estimator.catalog.build import (
    BATCH,
    DATA_DIR,
    Builder,
    activations_entry,
    autocast_entry,
    measured,
    on_meta,
    scores_entry,
)
from estimator.catalog.hf_configs import MODELS, HfModel
from estimator.trace import describe, saved_growth

HEADS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "image": "AutoModelForImageClassification",
    "clip": "AutoModel",
    "backbone": "AutoModel",
    "speech": "AutoModelForSpeechSeq2Seq",
}
IMAGENET_CLASSES = 1000  # the published image classifiers' ImageNet-1k heads
CLIP_TOKENS = 77  # CLIP's text context (max_position_embeddings)


def instantiate(model: HfModel, **overrides: Any) -> torch.nn.Module:
    import transformers

    values = {k: v for k, v in model.config.items() if k != "model_type"}
    for key, value in overrides.items():
        if key in ("text_config", "vision_config"):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    if model.task == "image":
        values["num_labels"] = IMAGENET_CLASSES
    config = transformers.AutoConfig.for_model(model.config["model_type"], **values)
    head = HEADS[model.task]
    if model.config["model_type"] == "wav2vec2":
        head = "AutoModelForCTC"
    built: torch.nn.Module = on_meta(lambda: getattr(transformers, head).from_config(config))
    untie(built, model.config)
    return built


def untie(built: Any, config: dict[str, Any]) -> None:
    """Give the output layer weights of its own where the published config says so.

    transformers 5 ties T5-family output layers to the input embedding whatever the
    config (MT5Config forces tie_word_embeddings); the published Flan-T5 and mT5
    checkpoints carry a separate one (their config.json: tie_word_embeddings false).
    """
    if config.get("tie_word_embeddings", True):
        return
    output, inputs = built.get_output_embeddings(), built.get_input_embeddings()
    if output is not None and output.weight is inputs.weight:
        output.weight = torch.nn.Parameter(torch.empty_like(inputs.weight))


def image_inputs(model: HfModel) -> Any:
    def inputs(size: int) -> dict[str, Any]:
        batch: dict[str, Any] = {"pixel_values": torch.empty(BATCH, 3, size, size, device="meta")}
        if model.task == "clip":
            batch["input_ids"] = torch.zeros(BATCH, CLIP_TOKENS, dtype=torch.long, device="meta")
            batch["return_loss"] = True
        return batch

    return inputs


def image_entry(model: HfModel) -> dict[str, Any]:
    def build(size: int) -> torch.nn.Module:
        if model.task == "clip":
            return instantiate(model, vision_config={"image_size": size})
        return instantiate(model, image_size=size)

    config = model.config.get("vision_config", model.config)
    entry = measured(model.name, build, image_inputs(model), int(config["image_size"]))
    return {**entry, "kind": "vision"}


# wav2vec2 trains with LayerDrop and SpecAugment (its config.json: layerdrop 0.1,
# mask_time_prob 0.05), which make one step's saved tensors random; the measurement runs
# every layer unmasked, the step that holds the most.
WAV2VEC2_MEASURED = {"layerdrop": 0.0, "mask_time_prob": 0.0}


def speech_entry(model: HfModel) -> dict[str, Any]:
    """Measured at the reference input of `hf_configs` (no input-size scaling)."""
    ref = model.reference
    if "audio_samples" in ref:
        built = instantiate(model, **WAV2VEC2_MEASURED)
        inputs = {"input_values": torch.empty(BATCH, ref["audio_samples"], device="meta")}
    else:
        built = instantiate(model)
        mels = int(model.config["num_mel_bins"])
        inputs = {
            "input_features": torch.empty(BATCH, mels, ref["mel_frames"], device="meta"),
            "decoder_input_ids": torch.zeros(
                BATCH, ref["decoder_tokens"], dtype=torch.long, device="meta"
            ),
        }
    saved, growth = saved_growth(built, **inputs)
    return {
        "name": model.name,
        "kind": "speech",
        "reference_input": ref,
        **activations_entry(growth),
        **scores_entry(saved),
        **describe(built),
        **autocast_entry(built, inputs),
    }


def entry(model: HfModel) -> dict[str, Any]:
    if model.task in ("image", "clip", "backbone"):
        built = image_entry(model)
        built["config"] = model.config
    elif model.task == "speech":
        built = speech_entry(model) | {"config": model.config}
    else:
        built = {"name": model.name, "kind": "transformer", "hf_config": model.config}
        built |= describe(instantiate(model))
    built["config_source"] = model.source
    if model.note:
        built["note"] = model.note
    return built


def write(builder: Builder) -> None:
    by_name = {model.name: model for model in MODELS}
    # always built again: the values in hf_configs.py may have changed
    built = builder.collect("hf", sorted(by_name), lambda name: entry(by_name[name]), reuse=False)
    aliases = {
        alias: model.name
        for model in MODELS
        for alias in model.aliases
        if model.name in built and alias != model.name
    }
    lines = ",\n".join(json.dumps(e, sort_keys=True, separators=(",", ":")) for e in built.values())
    head = {
        "source": "hf",
        "generated": (
            "config values: the published config.json of each entry's config_source; "
            "parameters, layers and (image, speech) activations: built on the meta "
            "device by estimator/catalog/hf_build.py (data/versions.json)"
        ),
        "aliases": dict(sorted(aliases.items())),
    }
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    (DATA_DIR / "hf.json").write_text(f'{body},\n "entries": [\n{lines}\n ]\n}}\n')
