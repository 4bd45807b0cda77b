"""Bounds on a Hugging Face `config.json` given in a spec (`model: {hf_config: ...}`).

A config is free-form JSON, so the spec's field types cannot bound it: these checks
refuse at validation what would otherwise fail later, inside the estimator (a list
where a layer count belongs, `1e400`, NaN, a megabyte of labels), so that a spec that
validates is one the estimator can read.
"""

from __future__ import annotations

import json
import re
from typing import Any

# A full config.json is a few KiB; a classifier's label maps (`id2label` and `label2id`
# for ImageNet's 1,000 classes) add some tens of KiB. 256 KiB leaves room for those and
# bounds what one spec makes the server parse and keep (it is stored in the job's row).
HF_CONFIG_MAX_BYTES = 256 * 1024
# Real configs nest a few levels (`text_config.rope_scaling.type`); far deeper is no config.
HF_CONFIG_MAX_DEPTH = 16
# Keys that name counts and sizes in Hugging Face configs (`num_hidden_layers`, `n_head`,
# `hidden_size`, `head_dim`, `max_position_embeddings`, `d_model`, ...): a true or 2.7
# there is no count, though Python would read it as 1 or 2.
_COUNT_KEY = re.compile(
    r"^(num_|n_)|(_size|_layers|_heads|_dim|_position_embeddings|_experts|_embd|_inner)$|"
    r"^(dim|d_model|d_ff|d_kv)$"
)


def _depth(value: Any) -> int:
    """The nesting depth of a JSON value, iteratively (no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > HF_CONFIG_MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            stack.extend((child, level + 1) for child in children)
    return deepest


def _not_counts(config: dict[str, Any]) -> list[str]:
    """The count keys of `config` whose value is a truth value or a fractional number."""
    return [
        key
        for key, value in config.items()
        if _COUNT_KEY.search(key)
        and (isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()))
    ]


def check_hf_config(config: dict[str, Any]) -> None:
    """Raise ValueError saying why the estimator cannot use `config`."""
    if _depth(config) > HF_CONFIG_MAX_DEPTH:
        raise ValueError(f"hf_config nests deeper than {HF_CONFIG_MAX_DEPTH} levels")
    try:
        size = len(json.dumps(config, allow_nan=False))
    except ValueError as exc:  # NaN or infinity (JSON's 1e400 parses as infinity)
        raise ValueError("hf_config holds a number that is not finite (NaN or infinity)") from exc
    if size > HF_CONFIG_MAX_BYTES:
        raise ValueError(f"hf_config is {size} bytes of JSON; at most {HF_CONFIG_MAX_BYTES}")
    wrong = _not_counts(config)
    if wrong:
        raise ValueError(f"hf_config: {', '.join(wrong)} must be whole numbers")
    from estimator.analytical.hf import dims_from_hf_config  # it imports estimator.spec

    try:
        dims_from_hf_config(config)
    except (TypeError, ArithmeticError) as exc:  # a list or dict where a count belongs
        raise ValueError(
            f"hf_config: a value the estimator reads as a count is not a number ({exc})"
        ) from exc
