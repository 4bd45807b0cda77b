"""Regenerate the architecture catalog with torch, torchvision, timm and transformers.

    python -m estimator.catalog.build [--timm-names FILE] [--only SOURCE]

Needs the `catalog` extra (`pip install -e ".[catalog]"`); Colloc itself never imports
torch. Every model is built on PyTorch's meta device (shapes only: no weights are
allocated or downloaded), put in training mode and run forward once; autograd's
saved-tensor hooks then count the activation elements kept for backward, each storage
once and parameters excluded. A second, smaller input gives how that count scales
with input size. Hugging Face entries are built from the config values written below
(the models' published config.json), on the meta device too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

DATA_DIR = Path(__file__).with_name("data")
BATCH = 2

# Published config.json values (Hugging Face Hub) of the common families.
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "bert-base-uncased": {
        "model_type": "bert",
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
    "bert-large-uncased": {
        "model_type": "bert",
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
    "roberta-base": {
        "model_type": "roberta",
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "vocab_size": 50265,
        "max_position_embeddings": 514,
    },
    "roberta-large": {
        "model_type": "roberta",
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 50265,
        "max_position_embeddings": 514,
    },
    "distilbert-base-uncased": {
        "model_type": "distilbert",
        "n_layers": 6,
        "dim": 768,
        "n_heads": 12,
        "hidden_dim": 3072,
        "vocab_size": 30522,
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_layer": 12,
        "n_embd": 768,
        "n_head": 12,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "gpt2-medium": {
        "model_type": "gpt2",
        "n_layer": 24,
        "n_embd": 1024,
        "n_head": 16,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "gpt2-large": {
        "model_type": "gpt2",
        "n_layer": 36,
        "n_embd": 1280,
        "n_head": 20,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "gpt2-xl": {
        "model_type": "gpt2",
        "n_layer": 48,
        "n_embd": 1600,
        "n_head": 25,
        "vocab_size": 50257,
        "n_positions": 1024,
    },
    "xlnet-base-cased": {
        "model_type": "xlnet",
        "n_layer": 12,
        "d_model": 768,
        "n_head": 12,
        "d_inner": 3072,
        "vocab_size": 32000,
    },
    "xlnet-large-cased": {
        "model_type": "xlnet",
        "n_layer": 24,
        "d_model": 1024,
        "n_head": 16,
        "d_inner": 4096,
        "vocab_size": 32000,
    },
    "t5-small": {
        "model_type": "t5",
        "num_layers": 6,
        "num_decoder_layers": 6,
        "d_model": 512,
        "num_heads": 8,
        "d_ff": 2048,
        "d_kv": 64,
        "vocab_size": 32128,
    },
    "t5-base": {
        "model_type": "t5",
        "num_layers": 12,
        "num_decoder_layers": 12,
        "d_model": 768,
        "num_heads": 12,
        "d_ff": 3072,
        "d_kv": 64,
        "vocab_size": 32128,
    },
    "t5-large": {
        "model_type": "t5",
        "num_layers": 24,
        "num_decoder_layers": 24,
        "d_model": 1024,
        "num_heads": 16,
        "d_ff": 4096,
        "d_kv": 64,
        "vocab_size": 32128,
    },
    "google/vit-base-patch16-224": {
        "model_type": "vit",
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "image_size": 224,
        "patch_size": 16,
    },
    "meta-llama/Llama-2-7b-hf": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-2-13b-hf": {
        "model_type": "llama",
        "num_hidden_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
        "intermediate_size": 13824,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-2-70b-hf": {
        "model_type": "llama",
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "meta-llama/Meta-Llama-3-8B": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    },
    "meta-llama/Meta-Llama-3-70B": {
        "model_type": "llama",
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    },
    "meta-llama/Llama-3.2-1B": {
        "model_type": "llama",
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
    },
    "mistralai/Mistral-7B-v0.1": {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
    },
    "Qwen/Qwen2-7B": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
    "Qwen/Qwen2.5-0.5B": {
        "model_type": "qwen2",
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen/Qwen2.5-1.5B": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "facebook/opt-1.3b": {
        "model_type": "opt",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "ffn_dim": 8192,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    },
    "EleutherAI/pythia-1b": {
        "model_type": "gpt_neox",
        "num_hidden_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 8,
        "intermediate_size": 8192,
        "vocab_size": 50304,
        "tie_word_embeddings": False,
    },
}

LAYER_TYPES = {
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
    "Conv3d": "conv3d",
    "Linear": "linear",
    "BatchNorm1d": "batchnorm",
    "BatchNorm2d": "batchnorm",
    "LayerNorm": "layernorm",
    "GroupNorm": "groupnorm",
    "MultiheadAttention": "attention",
    "Attention": "attention",
    "Embedding": "embedding",
}


def saved_activation_elements(model: torch.nn.Module, inputs: torch.Tensor) -> tuple[int, int]:
    """Elements autograd keeps for backward in one forward pass (parameters excluded),
    and the largest single saved storage among them."""
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in params:
            saved[storage._cdata] = storage.nbytes() // max(tensor.element_size(), 1)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(inputs)
    return sum(saved.values()), max(saved.values(), default=0)


def describe(model: torch.nn.Module) -> dict[str, Any]:
    layers = Counter(
        LAYER_TYPES[type(m).__name__] for m in model.modules() if type(m).__name__ in LAYER_TYPES
    )
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "matrices": sum(1 for p in model.parameters() if p.dim() >= 2),
        "layers": dict(sorted(layers.items())),
    }


def on_meta(build: Any, name: str, size: int) -> torch.nn.Module:
    """The model on the meta device, in training mode. A few constructors compute on
    their weights (torchvision's RegNet): those are built on the CPU, then moved."""
    try:
        with torch.device("meta"):
            model = build(name, size)
    except NotImplementedError:
        model = build(name, size).to("meta")
    model.train()
    return model


def vision_entry(source: str, name: str, build: Any, size: int) -> dict[str, Any]:
    """Parameters, layer counts and saved activations at `size` and at a smaller input."""
    model = on_meta(build, name, size)
    entry: dict[str, Any] = {
        "name": name,
        "source": source,
        "kind": "vision",
        "reference_size": size,
        **describe(model),
    }
    reference, largest = saved_activation_elements(
        model, torch.empty(BATCH, 3, size, size, device="meta")
    )
    entry["activations_per_sample"] = reference // BATCH
    entry["largest_activation_per_sample"] = largest // BATCH
    smaller = max(32, (size * 3 // 4) // 32 * 32)
    try:
        resized = on_meta(build, name, smaller)
        fewer, _ = saved_activation_elements(
            resized, torch.empty(BATCH, 3, smaller, smaller, device="meta")
        )
        exponent = math.log(reference / fewer) / math.log((size / smaller) ** 2)
        entry["activation_exponent"] = round(min(max(exponent, 0.5), 2.0), 4)
    except Exception:  # fixed-size models: assume activations grow with pixels
        entry["activation_exponent"] = 1.0
        entry["exponent_assumed"] = True
    return entry


def build_timm(name: str, size: int) -> torch.nn.Module:
    import timm

    try:
        return timm.create_model(name, pretrained=False, img_size=size)
    except TypeError:
        return timm.create_model(name, pretrained=False)


def timm_size(name: str) -> int:
    import timm

    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    return int(model.pretrained_cfg.get("input_size", (3, 224, 224))[-1])


def build_torchvision(name: str, size: int) -> torch.nn.Module:
    import torchvision

    kwargs = {"image_size": size} if name.startswith("vit_") else {}
    if name == "inception_v3":
        kwargs = {"aux_logits": True, "init_weights": False}
    model: torch.nn.Module = torchvision.models.get_model(name, weights=None, **kwargs)
    return model


def hf_entry(name: str, config: dict[str, Any]) -> dict[str, Any]:
    import transformers

    model_type = config["model_type"]
    cfg = transformers.AutoConfig.for_model(
        model_type, **{k: v for k, v in config.items() if k != "model_type"}
    )
    head = {
        "bert": transformers.AutoModelForMaskedLM,
        "roberta": transformers.AutoModelForMaskedLM,
        "distilbert": transformers.AutoModelForMaskedLM,
        "t5": transformers.AutoModelForSeq2SeqLM,
        "vit": transformers.AutoModelForImageClassification,
    }.get(model_type, transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        model = head.from_config(cfg)
    return {
        "name": name,
        "source": "hf",
        "kind": "transformer",
        "hf_config": config,
        **describe(model),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timm-names", type=Path, help="file with one timm model name a line")
    parser.add_argument("--only", choices=["torchvision", "timm", "hf"])
    args = parser.parse_args()
    DATA_DIR.mkdir(exist_ok=True)
    failures: dict[str, str] = {}

    def collect(source: str, names: list[str], make: Any) -> None:
        entries = []
        for name in names:
            try:
                entries.append(make(name))
            except Exception as exc:  # recorded in the output, not fatal
                failures[f"{source}:{name}"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{source}: {len(entries)}/{len(names)} {name}", file=sys.stderr)
        path = DATA_DIR / f"{source}.json"
        path.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")

    if args.only in (None, "torchvision"):
        import torchvision

        names = sorted(torchvision.models.list_models(module=torchvision.models))
        collect(
            "torchvision",
            names,
            lambda n: vision_entry(
                "torchvision", n, build_torchvision, 299 if n == "inception_v3" else 224
            ),
        )
    if args.only in (None, "timm"):
        import timm

        extra = args.timm_names.read_text().split() if args.timm_names else []
        popular = timm.list_models(
            [
                "resnet*",
                "efficientnet_b*",
                "vit_*_patch16_224",
                "convnext_*",
                "deit_*",
                "swin_*_224",
                "mobilenetv3_*",
                "regnet*",
                "densenet*",
                "xception*",
                "inception*",
            ]
        )
        names = sorted(set(extra) | set(popular))
        collect("timm", names, lambda n: vision_entry("timm", n, build_timm, timm_size(n)))
    if args.only in (None, "hf"):
        collect("hf", sorted(HF_CONFIGS), lambda n: hf_entry(n, HF_CONFIGS[n]))
    (DATA_DIR / "build_failures.json").write_text(json.dumps(failures, indent=1, sort_keys=True))
    versions = {"torch": torch.__version__}
    for module in ("torchvision", "timm", "transformers"):
        versions[module] = __import__(module).__version__
    (DATA_DIR / "versions.json").write_text(json.dumps(versions, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
