"""Transformer dimensions from a Hugging Face `config.json`.

Key names differ by family (BERT `num_hidden_layers`, GPT-2 `n_layer`, T5 `num_layers`
plus `num_decoder_layers`, BART `encoder_layers` plus `decoder_layers`, ...); the first
present alias wins. Encoder-decoder models count encoder and decoder blocks together
(cross-attention is not counted separately).

Image and speech configs (ViT, Swin, CLIP, DINOv2, Whisper, wav2vec2) are refused: their
inputs are patches and audio frames, not tokens with a vocabulary's logits. The
catalog's entries of those families are measured on their own inputs, and `colloc
estimate --trace` measures any other.
"""

from __future__ import annotations

from typing import Any

from estimator.spec import TransformerDims

_ALIASES = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads"),
    "ffn_hidden": (
        "intermediate_size",
        "n_inner",
        "d_ff",
        "d_inner",
        "ffn_dim",
        "hidden_dim",
        "encoder_ffn_dim",
    ),
    "vocab": ("vocab_size",),
    "kv_heads": ("num_key_value_heads", "n_kv_heads", "num_kv_heads"),
}
_DECODER_LAYERS = ("num_decoder_layers", "decoder_layers")
# Llama-style decoders: SwiGLU MLP, rotary positions, no dropout in training
_MODERN = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "phi3", "phimoe", "olmo", "olmo2", "olmoe", "deepseek_v2",
}  # fmt: skip
_GATED = _MODERN
_NO_DROPOUT = _MODERN | {"gpt_neox", "falcon"}
_NO_POSITION_TABLE = {"t5", "mt5", "xlnet", "deberta-v2", "phi"}  # relative or rotary
_LEARNED_POSITIONS = ("max_position_embeddings", "n_positions")
_NOT_TEXT = {
    "vit", "deit", "swin", "clip", "dinov2", "beit", "convnext", "whisper", "wav2vec2",
    "hubert", "siglip",
}  # fmt: skip


def _first(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def dims_from_hf_config(config: dict[str, Any]) -> TransformerDims:
    """TransformerDims for a config; ValueError names the missing keys."""
    model_type = str(config.get("model_type", "")).lower()
    if model_type in _NOT_TEXT:
        raise ValueError(
            f"a {model_type!r} config describes an image or speech model, whose inputs "
            "the transformer formulas do not cover: name it from the catalog (e.g. "
            "hf:google/vit-base-patch16-224, hf:openai/whisper-small) or measure it with "
            "`colloc estimate --trace pkg.module:factory`"
        )
    values = {field: _first(config, keys) for field, keys in _ALIASES.items()}
    if values["kv_heads"] is None and config.get("multi_query"):
        values["kv_heads"] = 1  # Falcon-7B: one key/value head
    head_width = _first(config, ("head_dim", "d_kv"))  # Qwen3, Gemma; T5
    missing = [
        f"{field} ({' / '.join(_ALIASES[field])})"
        for field in ("layers", "hidden", "heads")
        if values[field] is None
    ]
    if missing:
        raise ValueError(f"hf_config lacks {', '.join(missing)}")
    layers = int(values["layers"]) + int(_first(config, _DECODER_LAYERS) or 0)
    rotary = model_type in _NO_DROPOUT or model_type in _NO_POSITION_TABLE
    positions = 0 if rotary else int(_first(config, _LEARNED_POSITIONS) or 0)
    return TransformerDims(
        layers=layers,
        hidden=int(values["hidden"]),
        heads=int(values["heads"]),
        ffn_hidden=int(values["ffn_hidden"]) if values["ffn_hidden"] else None,
        vocab=int(values["vocab"] or 32000),
        kv_heads=int(values["kv_heads"]) if values["kv_heads"] else None,
        head_dim=int(head_width) if head_width else None,
        gated_mlp=model_type in _GATED
        or bool(config.get("is_gated_act"))
        or str(config.get("feed_forward_proj", "")).startswith("gated-"),
        tied_embeddings=bool(config.get("tie_word_embeddings", True)),
        dropout=model_type not in _NO_DROPOUT,
        learned_positions=positions,
    )


# Mixture-of-experts keys by family: Mixtral, Phi-3.5-MoE and GPT-OSS
# `num_local_experts`; Qwen2/3-MoE and OLMoE `num_experts`; DeepSeek-V2/V3
# `n_routed_experts`. Expert width: `moe_intermediate_size` where the family has it
# (Qwen-MoE, DeepSeek), else `intermediate_size` (Mixtral, OLMoE, Phi-MoE).
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "experts_per_token", "moe_top_k")


def moe_from_hf_config(config: dict[str, Any]) -> dict[str, Any]:
    """TransformerDims fields of a mixture-of-experts config ({} for a dense model).

    Every listed family uses gated (SwiGLU) experts. The shared expert is Qwen2-MoE's
    `shared_expert_intermediate_size` or DeepSeek's `n_shared_experts` experts of
    `moe_intermediate_size`. ValueError for a config that names experts but not how
    many are active per token.
    """
    experts = _first(config, _EXPERTS)
    if experts is None or int(experts) <= 1:
        return {}
    active = _first(config, _EXPERTS_PER_TOKEN)
    if active is None:
        raise ValueError(f"hf_config has {experts} experts but no {' / '.join(_EXPERTS_PER_TOKEN)}")
    width = _first(config, ("moe_intermediate_size", "intermediate_size"))
    shared = int(config.get("shared_expert_intermediate_size") or 0)
    if not shared and config.get("n_shared_experts") and width:
        shared = int(config["n_shared_experts"]) * int(width)
    return {
        "experts": int(experts),
        "experts_per_token": int(active),
        "expert_ffn_hidden": int(width) if width else None,
        "shared_expert_ffn": shared,
        "gated_mlp": True,
    }
