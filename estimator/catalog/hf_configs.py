"""Published config.json values of the Hugging Face models the catalog names.

Each model's values are those of `https://huggingface.co/<repo>/blob/main/config.json`
(`repo` is the model's name unless given), limited to the keys that fix the
architecture; `aliases` are other repositories publishing the same architecture
(instruction-tuned and chat checkpoints, renamed repositories). The decoder families'
values were checked against Lightning-AI/litgpt `litgpt/config.py`, which cites the
same files, and the built parameter counts against the counts the model cards state
(tests/estimator/test_catalog.py).

`task` picks the head the build puts on: the one the published checkpoint carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HfModel:
    name: str
    config: dict[str, Any]
    task: str = "causal-lm"  # causal-lm | masked-lm | seq2seq | image | clip | backbone | speech
    aliases: tuple[str, ...] = ()
    repo: str = ""  # where the values come from, when not `name`
    note: str = ""
    reference: dict[str, int] = field(default_factory=dict)  # speech models' input

    @property
    def source(self) -> str:
        return f"https://huggingface.co/{self.repo or self.name}/blob/main/config.json"


def decoder(
    name: str,
    model_type: str,
    dims: tuple[int, int, int, int, int, int],
    tied: bool,
    aliases: tuple[str, ...] = (),
    **extra: Any,
) -> HfModel:
    """A Llama-style decoder and its kin: dims are (layers, hidden, heads, kv_heads,
    intermediate_size, vocab_size)."""
    layers, hidden, heads, kv_heads, ffn, vocab = dims
    config = {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        **extra,
    }
    return HfModel(name, config, aliases=aliases)


def named(org: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{org}/{name}" for name in names)


L, M, Q = "meta-llama", "mistralai", "Qwen"

# fmt: off
LLAMA = [
    decoder(f"{L}/Llama-2-7b-hf", "llama", (32, 4096, 32, 32, 11008, 32000), False,
            named(L, "Llama-2-7b-chat-hf")),
    decoder(f"{L}/Llama-2-13b-hf", "llama", (40, 5120, 40, 40, 13824, 32000), False,
            named(L, "Llama-2-13b-chat-hf")),
    decoder(f"{L}/Llama-2-70b-hf", "llama", (80, 8192, 64, 8, 28672, 32000), False,
            named(L, "Llama-2-70b-chat-hf")),
    decoder(f"{L}/Meta-Llama-3-8B", "llama", (32, 4096, 32, 8, 14336, 128256), False,
            named(L, "Meta-Llama-3-8B-Instruct")),
    decoder(f"{L}/Meta-Llama-3-70B", "llama", (80, 8192, 64, 8, 28672, 128256), False,
            named(L, "Meta-Llama-3-70B-Instruct")),
    decoder(f"{L}/Llama-3.1-8B", "llama", (32, 4096, 32, 8, 14336, 128256), False,
            named(L, "Llama-3.1-8B-Instruct", "Meta-Llama-3.1-8B",
                  "Meta-Llama-3.1-8B-Instruct")),
    decoder(f"{L}/Llama-3.1-70B", "llama", (80, 8192, 64, 8, 28672, 128256), False,
            named(L, "Llama-3.1-70B-Instruct", "Meta-Llama-3.1-70B",
                  "Meta-Llama-3.1-70B-Instruct", "Llama-3.3-70B-Instruct")),
    decoder(f"{L}/Llama-3.1-405B", "llama", (126, 16384, 128, 8, 53248, 128256), False,
            named(L, "Llama-3.1-405B-Instruct", "Meta-Llama-3.1-405B",
                  "Meta-Llama-3.1-405B-Instruct")),
    decoder(f"{L}/Llama-3.2-1B", "llama", (16, 2048, 32, 8, 8192, 128256), True,
            named(L, "Llama-3.2-1B-Instruct")),
    decoder(f"{L}/Llama-3.2-3B", "llama", (28, 3072, 24, 8, 8192, 128256), True,
            named(L, "Llama-3.2-3B-Instruct")),
]

MISTRAL = [
    decoder(f"{M}/Mistral-7B-v0.1", "mistral", (32, 4096, 32, 8, 14336, 32000), False,
            named(M, "Mistral-7B-Instruct-v0.1", "Mistral-7B-Instruct-v0.2")),
    decoder(f"{M}/Mistral-7B-v0.3", "mistral", (32, 4096, 32, 8, 14336, 32768), False,
            named(M, "Mistral-7B-Instruct-v0.3")),
    decoder(f"{M}/Mistral-Nemo-Base-2407", "mistral", (40, 5120, 32, 8, 14336, 131072), False,
            named(M, "Mistral-Nemo-Instruct-2407"), head_dim=128),
    decoder(f"{M}/Mistral-Small-24B-Base-2501", "mistral", (40, 5120, 32, 8, 32768, 131072),
            False, named(M, "Mistral-Small-24B-Instruct-2501"), head_dim=128),
    decoder(f"{M}/Mistral-Large-Instruct-2407", "mistral", (88, 12288, 96, 8, 28672, 32768),
            False),
]

# Mixture-of-experts: every expert's weights are parameters; each token passes through
# `num_experts_per_tok` of them (and the shared experts, where there are some).
MOE = [
    decoder(f"{M}/Mixtral-8x7B-v0.1", "mixtral", (32, 4096, 32, 8, 14336, 32000), False,
            named(M, "Mixtral-8x7B-Instruct-v0.1"), num_local_experts=8, num_experts_per_tok=2),
    decoder(f"{M}/Mixtral-8x22B-v0.1", "mixtral", (56, 6144, 48, 8, 16384, 32768), False,
            named(M, "Mixtral-8x22B-Instruct-v0.1"), num_local_experts=8,
            num_experts_per_tok=2),
    decoder(f"{Q}/Qwen1.5-MoE-A2.7B", "qwen2_moe", (24, 2048, 16, 16, 5632, 151936), False,
            named(Q, "Qwen1.5-MoE-A2.7B-Chat"), moe_intermediate_size=1408,
            shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4,
            decoder_sparse_step=1),
    decoder(f"{Q}/Qwen2-57B-A14B", "qwen2_moe", (28, 3584, 28, 4, 18944, 151936), False,
            named(Q, "Qwen2-57B-A14B-Instruct"), moe_intermediate_size=2560,
            shared_expert_intermediate_size=20480, num_experts=64, num_experts_per_tok=8,
            decoder_sparse_step=1),
    decoder(f"{Q}/Qwen3-30B-A3B", "qwen3_moe", (48, 2048, 32, 4, 6144, 151936), False,
            named(Q, "Qwen3-30B-A3B-Base", "Qwen3-30B-A3B-Instruct-2507",
                  "Qwen3-30B-A3B-Thinking-2507"),
            head_dim=128, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
            decoder_sparse_step=1),
    decoder(f"{Q}/Qwen3-235B-A22B", "qwen3_moe", (94, 4096, 64, 4, 12288, 151936), False,
            named(Q, "Qwen3-235B-A22B-Instruct-2507", "Qwen3-235B-A22B-Thinking-2507"),
            head_dim=128, moe_intermediate_size=1536, num_experts=128, num_experts_per_tok=8,
            decoder_sparse_step=1),
    decoder("deepseek-ai/DeepSeek-V2-Lite", "deepseek_v2", (27, 2048, 16, 16, 10944, 102400),
            False, named("deepseek-ai", "DeepSeek-V2-Lite-Chat"), moe_intermediate_size=1408,
            n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6,
            first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128,
            qk_rope_head_dim=64, v_head_dim=128),
    decoder("allenai/OLMoE-1B-7B-0924", "olmoe", (16, 2048, 16, 16, 1024, 50304), False,
            named("allenai", "OLMoE-1B-7B-0924-Instruct"), num_experts=64,
            num_experts_per_tok=8),
    decoder("microsoft/Phi-3.5-MoE-instruct", "phimoe", (32, 4096, 32, 8, 6400, 32064), False,
            num_local_experts=16, num_experts_per_tok=2),
]

QWEN = [
    decoder(f"{Q}/Qwen2-0.5B", "qwen2", (24, 896, 14, 2, 4864, 151936), True,
            named(Q, "Qwen2-0.5B-Instruct")),
    decoder(f"{Q}/Qwen2-1.5B", "qwen2", (28, 1536, 12, 2, 8960, 151936), True,
            named(Q, "Qwen2-1.5B-Instruct")),
    decoder(f"{Q}/Qwen2-7B", "qwen2", (28, 3584, 28, 4, 18944, 152064), False,
            named(Q, "Qwen2-7B-Instruct")),
    decoder(f"{Q}/Qwen2-72B", "qwen2", (80, 8192, 64, 8, 29568, 152064), False,
            named(Q, "Qwen2-72B-Instruct")),
    decoder(f"{Q}/Qwen2.5-0.5B", "qwen2", (24, 896, 14, 2, 4864, 151936), True,
            named(Q, "Qwen2.5-0.5B-Instruct", "Qwen2.5-Coder-0.5B",
                  "Qwen2.5-Coder-0.5B-Instruct")),
    decoder(f"{Q}/Qwen2.5-1.5B", "qwen2", (28, 1536, 12, 2, 8960, 151936), True,
            named(Q, "Qwen2.5-1.5B-Instruct", "Qwen2.5-Coder-1.5B",
                  "Qwen2.5-Coder-1.5B-Instruct")),
    decoder(f"{Q}/Qwen2.5-3B", "qwen2", (36, 2048, 16, 2, 11008, 151936), True,
            named(Q, "Qwen2.5-3B-Instruct")),
    decoder(f"{Q}/Qwen2.5-7B", "qwen2", (28, 3584, 28, 4, 18944, 152064), False,
            named(Q, "Qwen2.5-7B-Instruct", "Qwen2.5-Coder-7B", "Qwen2.5-Coder-7B-Instruct")),
    decoder(f"{Q}/Qwen2.5-14B", "qwen2", (48, 5120, 40, 8, 13824, 152064), False,
            named(Q, "Qwen2.5-14B-Instruct")),
    decoder(f"{Q}/Qwen2.5-32B", "qwen2", (64, 5120, 40, 8, 27648, 152064), False,
            named(Q, "Qwen2.5-32B-Instruct", "Qwen2.5-Coder-32B",
                  "Qwen2.5-Coder-32B-Instruct")),
    decoder(f"{Q}/Qwen2.5-72B", "qwen2", (80, 8192, 64, 8, 29568, 152064), False,
            named(Q, "Qwen2.5-72B-Instruct")),
    decoder(f"{Q}/Qwen3-0.6B", "qwen3", (28, 1024, 16, 8, 3072, 151936), True,
            named(Q, "Qwen3-0.6B-Base"), head_dim=128),
    decoder(f"{Q}/Qwen3-1.7B", "qwen3", (28, 2048, 16, 8, 6144, 151936), True,
            named(Q, "Qwen3-1.7B-Base"), head_dim=128),
    decoder(f"{Q}/Qwen3-4B", "qwen3", (36, 2560, 32, 8, 9728, 151936), True,
            named(Q, "Qwen3-4B-Base", "Qwen3-4B-Instruct-2507", "Qwen3-4B-Thinking-2507"),
            head_dim=128),
    decoder(f"{Q}/Qwen3-8B", "qwen3", (36, 4096, 32, 8, 12288, 151936), False,
            named(Q, "Qwen3-8B-Base"), head_dim=128),
    decoder(f"{Q}/Qwen3-14B", "qwen3", (40, 5120, 40, 8, 17408, 151936), False,
            named(Q, "Qwen3-14B-Base"), head_dim=128),
    decoder(f"{Q}/Qwen3-32B", "qwen3", (64, 5120, 64, 8, 25600, 151936), False, head_dim=128),
]

GEMMA = [
    decoder("google/gemma-2b", "gemma", (18, 2048, 8, 1, 16384, 256000), True,
            named("google", "gemma-2b-it"), head_dim=256),
    decoder("google/gemma-7b", "gemma", (28, 3072, 16, 16, 24576, 256000), True,
            named("google", "gemma-7b-it"), head_dim=256),
    decoder("google/gemma-2-2b", "gemma2", (26, 2304, 8, 4, 9216, 256000), True,
            named("google", "gemma-2-2b-it"), head_dim=256),
    decoder("google/gemma-2-9b", "gemma2", (42, 3584, 16, 8, 14336, 256000), True,
            named("google", "gemma-2-9b-it"), head_dim=256),
    decoder("google/gemma-2-27b", "gemma2", (46, 4608, 32, 16, 36864, 256000), True,
            named("google", "gemma-2-27b-it"), head_dim=128),
    decoder("google/gemma-3-1b-pt", "gemma3_text", (26, 1152, 4, 1, 6912, 262144), True,
            named("google", "gemma-3-1b-it"), head_dim=256),
]
# Gemma 3 4B/12B/27B are image-text models: their `text_config` is catalogued, the
# SigLIP image tower (about 0.4B parameters) is not.
GEMMA += [
    HfModel(m.name, m.config, aliases=m.aliases, note="text decoder only (text_config)")
    for m in (
        decoder("google/gemma-3-4b-pt", "gemma3_text", (34, 2560, 8, 4, 10240, 262208), True,
                named("google", "gemma-3-4b-it"), head_dim=256),
        decoder("google/gemma-3-12b-pt", "gemma3_text", (48, 3840, 16, 8, 15360, 262208),
                True, named("google", "gemma-3-12b-it"), head_dim=256),
        decoder("google/gemma-3-27b-pt", "gemma3_text", (62, 5376, 32, 16, 21504, 262208),
                True, named("google", "gemma-3-27b-it"), head_dim=128),
    )
]

PHI = [
    HfModel("microsoft/phi-2",
            {"model_type": "phi", "num_hidden_layers": 32, "hidden_size": 2560,
             "num_attention_heads": 32, "intermediate_size": 10240, "vocab_size": 51200,
             "partial_rotary_factor": 0.4, "tie_word_embeddings": False}),
    HfModel("microsoft/phi-1_5",
            {"model_type": "phi", "num_hidden_layers": 24, "hidden_size": 2048,
             "num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 51200,
             "partial_rotary_factor": 0.5, "tie_word_embeddings": False}),
    decoder("microsoft/Phi-3-mini-4k-instruct", "phi3", (32, 3072, 32, 32, 8192, 32064), False,
            named("microsoft", "Phi-3-mini-128k-instruct", "Phi-3.5-mini-instruct")),
    decoder("microsoft/Phi-3-medium-4k-instruct", "phi3", (40, 5120, 40, 10, 17920, 32064),
            False, named("microsoft", "Phi-3-medium-128k-instruct")),
    decoder("microsoft/phi-4", "phi3", (40, 5120, 40, 10, 17920, 100352), False,
            named("microsoft", "Phi-4-reasoning", "Phi-4-reasoning-plus")),
    decoder("microsoft/Phi-4-mini-instruct", "phi3", (32, 3072, 24, 8, 8192, 200064), True,
            named("microsoft", "Phi-4-mini-reasoning"), partial_rotary_factor=0.75),
]

FALCON_7B = {"multi_query": True, "new_decoder_architecture": False, "parallel_attn": True}
FALCON_NEW = {"new_decoder_architecture": True, "num_kv_heads": 8, "parallel_attn": True}
FALCON = [
    HfModel("tiiuae/falcon-7b",
            {"model_type": "falcon", "num_hidden_layers": 32, "hidden_size": 4544,
             "num_attention_heads": 71, "vocab_size": 65024, "bias": False, **FALCON_7B},
            aliases=("tiiuae/falcon-7b-instruct",)),
    HfModel("tiiuae/falcon-40b",
            {"model_type": "falcon", "num_hidden_layers": 60, "hidden_size": 8192,
             "num_attention_heads": 128, "vocab_size": 65024, "bias": False, **FALCON_NEW},
            aliases=("tiiuae/falcon-40b-instruct",)),
    HfModel("tiiuae/falcon-180B",
            {"model_type": "falcon", "num_hidden_layers": 80, "hidden_size": 14848,
             "num_attention_heads": 232, "vocab_size": 65024, "bias": False, **FALCON_NEW},
            aliases=("tiiuae/falcon-180B-chat",)),
    decoder("tiiuae/Falcon3-7B-Base", "llama", (28, 3072, 12, 4, 23040, 131072), False,
            named("tiiuae", "Falcon3-7B-Instruct"), head_dim=256),
    decoder("tiiuae/Falcon3-10B-Base", "llama", (40, 3072, 12, 4, 23040, 131072), False,
            named("tiiuae", "Falcon3-10B-Instruct"), head_dim=256),
]

OLMO = [
    HfModel("allenai/OLMo-1B-hf",
            {"model_type": "olmo", "num_hidden_layers": 16, "hidden_size": 2048,
             "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 50304,
             "tie_word_embeddings": True}),
    HfModel("allenai/OLMo-7B-hf",
            {"model_type": "olmo", "num_hidden_layers": 32, "hidden_size": 4096,
             "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 50304,
             "tie_word_embeddings": False},
            aliases=("allenai/OLMo-7B-Instruct-hf",)),
    decoder("allenai/OLMo-2-1124-7B", "olmo2", (32, 4096, 32, 32, 11008, 100352), False,
            named("allenai", "OLMo-2-1124-7B-SFT", "OLMo-2-1124-7B-DPO",
                  "OLMo-2-1124-7B-Instruct")),
    decoder("allenai/OLMo-2-1124-13B", "olmo2", (40, 5120, 40, 40, 13824, 100352), False,
            named("allenai", "OLMo-2-1124-13B-SFT", "OLMo-2-1124-13B-DPO",
                  "OLMo-2-1124-13B-Instruct")),
]
# fmt: on


def neox(name: str, layers: int, hidden: int, heads: int, vocab: int) -> HfModel:
    """GPT-NeoX and Pythia (whose `-deduped` twins share the architecture)."""
    config = {
        "model_type": "gpt_neox",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
    }
    deduped = (f"{name}-deduped",) if "pythia" in name else ()
    return HfModel(name, config, aliases=deduped)


def gpt2(name: str, layers: int, hidden: int, heads: int) -> HfModel:
    config = {
        "model_type": "gpt2",
        "n_layer": layers,
        "n_embd": hidden,
        "n_head": heads,
        "vocab_size": 50257,
        "n_positions": 1024,
    }
    repo = f"openai-community/{name}"
    return HfModel(name, config, aliases=(repo,), repo=repo)


def opt(name: str, layers: int, hidden: int, heads: int, **extra: Any) -> HfModel:
    config = {
        "model_type": "opt",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "ffn_dim": 4 * hidden,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        **extra,
    }
    return HfModel(f"facebook/{name}", config)


# fmt: off
NEOX = [
    neox("EleutherAI/pythia-70m", 6, 512, 8, 50304),
    neox("EleutherAI/pythia-160m", 12, 768, 12, 50304),
    neox("EleutherAI/pythia-410m", 24, 1024, 16, 50304),
    neox("EleutherAI/pythia-1b", 16, 2048, 8, 50304),
    neox("EleutherAI/pythia-1.4b", 24, 2048, 16, 50304),
    neox("EleutherAI/pythia-2.8b", 32, 2560, 32, 50304),
    neox("EleutherAI/pythia-6.9b", 32, 4096, 32, 50432),
    neox("EleutherAI/pythia-12b", 36, 5120, 40, 50688),
    neox("EleutherAI/gpt-neox-20b", 44, 6144, 64, 50432),
]
GPT2 = [gpt2("gpt2", 12, 768, 12), gpt2("gpt2-medium", 24, 1024, 16),
        gpt2("gpt2-large", 36, 1280, 20), gpt2("gpt2-xl", 48, 1600, 25)]
OPT = [
    opt("opt-125m", 12, 768, 12),
    opt("opt-350m", 24, 1024, 16, word_embed_proj_dim=512, do_layer_norm_before=False),
    opt("opt-1.3b", 24, 2048, 32), opt("opt-2.7b", 32, 2560, 32), opt("opt-6.7b", 32, 4096, 32),
    opt("opt-13b", 40, 5120, 40), opt("opt-30b", 48, 7168, 56), opt("opt-66b", 64, 9216, 72),
]
# fmt: on

BERT_POSITIONS = {"max_position_embeddings": 512, "type_vocab_size": 2}
ROBERTA_POSITIONS = {"max_position_embeddings": 514, "type_vocab_size": 1}
DEBERTA_V3 = {
    "max_position_embeddings": 512,
    "type_vocab_size": 0,
    "relative_attention": True,
    "position_buckets": 256,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "pos_att_type": ["p2c", "c2p"],
    "position_biased_input": False,
    "max_relative_positions": -1,
}


def encoder(
    name: str,
    model_type: str,
    dims: tuple[int, int, int, int],
    extra: dict[str, Any],
    aliases: tuple[str, ...] = (),
    repo: str = "",
) -> HfModel:
    """A BERT-style encoder with its masked-language-model head; dims are (layers,
    hidden, heads, vocab_size)."""
    layers, hidden, heads, vocab = dims
    config = {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "vocab_size": vocab,
        **extra,
    }
    return HfModel(name, config, task="masked-lm", aliases=aliases, repo=repo)


def legacy(name: str, org: str, model_type: str, dims: Any, extra: dict[str, Any]) -> HfModel:
    """A model first published without an organisation (`bert-base-uncased`), now under
    one (`google-bert/bert-base-uncased`): both names resolve."""
    return encoder(name, model_type, dims, extra, (f"{org}/{name}",), f"{org}/{name}")


def distilbert(name: str, vocab: int) -> HfModel:
    config = {
        "model_type": "distilbert",
        "n_layers": 6,
        "dim": 768,
        "n_heads": 12,
        "hidden_dim": 3072,
        "vocab_size": vocab,
    }
    return HfModel(name, config, task="masked-lm", aliases=(f"distilbert/{name}",),
                   repo=f"distilbert/{name}")  # fmt: skip


def xlnet(name: str, layers: int, hidden: int, heads: int) -> HfModel:
    config = {
        "model_type": "xlnet",
        "n_layer": layers,
        "d_model": hidden,
        "n_head": heads,
        "d_inner": 4 * hidden,
        "vocab_size": 32000,
    }
    return HfModel(name, config, aliases=(f"xlnet/{name}",), repo=f"xlnet/{name}")


ALBERT = {"embedding_size": 128, **BERT_POSITIONS}
G, FB = "google", "FacebookAI"

# fmt: off
ENCODERS = [
    legacy("bert-base-uncased", "google-bert", "bert", (12, 768, 12, 30522), BERT_POSITIONS),
    legacy("bert-base-cased", "google-bert", "bert", (12, 768, 12, 28996), BERT_POSITIONS),
    legacy("bert-large-uncased", "google-bert", "bert", (24, 1024, 16, 30522), BERT_POSITIONS),
    legacy("bert-large-cased", "google-bert", "bert", (24, 1024, 16, 28996), BERT_POSITIONS),
    legacy("bert-base-multilingual-cased", "google-bert", "bert", (12, 768, 12, 119547),
           BERT_POSITIONS),
    legacy("roberta-base", FB, "roberta", (12, 768, 12, 50265), ROBERTA_POSITIONS),
    legacy("roberta-large", FB, "roberta", (24, 1024, 16, 50265), ROBERTA_POSITIONS),
    legacy("xlm-roberta-base", FB, "xlm-roberta", (12, 768, 12, 250002), ROBERTA_POSITIONS),
    legacy("xlm-roberta-large", FB, "xlm-roberta", (24, 1024, 16, 250002), ROBERTA_POSITIONS),
    encoder("microsoft/deberta-v3-xsmall", "deberta-v2", (12, 384, 6, 128100), DEBERTA_V3),
    encoder("microsoft/deberta-v3-small", "deberta-v2", (6, 768, 12, 128100), DEBERTA_V3),
    encoder("microsoft/deberta-v3-base", "deberta-v2", (12, 768, 12, 128100), DEBERTA_V3),
    encoder("microsoft/deberta-v3-large", "deberta-v2", (24, 1024, 16, 128100), DEBERTA_V3),
    legacy("albert-base-v2", "albert", "albert", (12, 768, 12, 30000), ALBERT),
    legacy("albert-large-v2", "albert", "albert", (24, 1024, 16, 30000), ALBERT),
    legacy("albert-xxlarge-v2", "albert", "albert", (12, 4096, 64, 30000), ALBERT),
    encoder(f"{G}/electra-small-discriminator", "electra", (12, 256, 4, 30522),
            {"embedding_size": 128, **BERT_POSITIONS}),
    encoder(f"{G}/electra-base-discriminator", "electra", (12, 768, 12, 30522),
            {"embedding_size": 768, **BERT_POSITIONS}),
    encoder(f"{G}/electra-large-discriminator", "electra", (24, 1024, 16, 30522),
            {"embedding_size": 1024, **BERT_POSITIONS}),
    distilbert("distilbert-base-uncased", 30522),
    distilbert("distilbert-base-cased", 28996),
    distilbert("distilbert-base-multilingual-cased", 119547),
    xlnet("xlnet-base-cased", 12, 768, 12),
    xlnet("xlnet-large-cased", 24, 1024, 16),
]
# fmt: on


def t5(
    name: str,
    dims: tuple[int, int, int, int],
    vocab: int = 32128,
    d_kv: int = 64,
    gated: bool = False,
) -> HfModel:
    """T5, or with `gated` the v1.1 recipe of Flan-T5 and mT5 (gated GELU, an output
    layer of its own); dims are (layers per stack, d_model, heads, d_ff)."""
    layers, d_model, heads, d_ff = dims
    config: dict[str, Any] = {
        "model_type": "mt5" if vocab == 250112 else "t5",
        "num_layers": layers,
        "num_decoder_layers": layers,
        "d_model": d_model,
        "num_heads": heads,
        "d_kv": d_kv,
        "d_ff": d_ff,
        "vocab_size": vocab,
    }
    if gated:
        config |= {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}
    if "/" in name:
        return HfModel(name, config, task="seq2seq")
    repo = f"google-t5/{name}"
    return HfModel(name, config, task="seq2seq", aliases=(repo,), repo=repo)


def bart(name: str, layers: int, d_model: int, heads: int) -> HfModel:
    config = {
        "model_type": "bart",
        "encoder_layers": layers,
        "decoder_layers": layers,
        "d_model": d_model,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": 4 * d_model,
        "decoder_ffn_dim": 4 * d_model,
        "vocab_size": 50265,
        "max_position_embeddings": 1024,
    }
    return HfModel(name, config, task="seq2seq")


MT5 = 250112
# fmt: off
SEQ2SEQ = [
    t5("t5-small", (6, 512, 8, 2048)), t5("t5-base", (12, 768, 12, 3072)),
    t5("t5-large", (24, 1024, 16, 4096)), t5("t5-3b", (24, 1024, 32, 16384), d_kv=128),
    t5("t5-11b", (24, 1024, 128, 65536), d_kv=128),
    t5(f"{G}/flan-t5-small", (8, 512, 6, 1024), gated=True),
    t5(f"{G}/flan-t5-base", (12, 768, 12, 2048), gated=True),
    t5(f"{G}/flan-t5-large", (24, 1024, 16, 2816), gated=True),
    t5(f"{G}/flan-t5-xl", (24, 2048, 32, 5120), gated=True),
    t5(f"{G}/flan-t5-xxl", (24, 4096, 64, 10240), gated=True),
    t5(f"{G}/mt5-small", (8, 512, 6, 1024), vocab=MT5, gated=True),
    t5(f"{G}/mt5-base", (12, 768, 12, 2048), vocab=MT5, gated=True),
    t5(f"{G}/mt5-large", (24, 1024, 16, 2816), vocab=MT5, gated=True),
    t5(f"{G}/mt5-xl", (24, 2048, 32, 5120), vocab=MT5, gated=True),
    t5(f"{G}/mt5-xxl", (24, 4096, 64, 10240), vocab=MT5, gated=True),
    bart("facebook/bart-base", 6, 768, 12), bart("facebook/bart-large", 12, 1024, 16),
]
# fmt: on


def vit(name: str, model_type: str, dims: tuple[int, int, int], image: int, patch: int) -> HfModel:
    """ViT-style image encoders; dims are (layers, hidden, heads)."""
    layers, hidden, heads = dims
    config: dict[str, Any] = {
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "image_size": image,
        "patch_size": patch,
    }
    if model_type == "deit":  # config.json names the distilled head
        config["architectures"] = ["DeiTForImageClassificationWithTeacher"]
    return HfModel(name, config, task="backbone" if model_type == "dinov2" else "image")


def swin(name: str, embed: int, depths: list[int], heads: list[int]) -> HfModel:
    config = {
        "model_type": "swin",
        "embed_dim": embed,
        "depths": depths,
        "num_heads": heads,
        "window_size": 7,
        "image_size": 224,
        "patch_size": 4,
    }
    return HfModel(name, config, task="image")


def clip(
    name: str, text: tuple[int, int, int], vision: tuple[int, int, int], image: tuple[int, int]
) -> HfModel:
    """Text and image towers (layers, hidden, heads each); image is (patch, size)."""
    text_config = {
        "num_hidden_layers": text[0],
        "hidden_size": text[1],
        "num_attention_heads": text[2],
        "intermediate_size": 4 * text[1],
    }
    vision_config = {
        "num_hidden_layers": vision[0],
        "hidden_size": vision[1],
        "num_attention_heads": vision[2],
        "intermediate_size": 4 * vision[1],
        "patch_size": image[0],
        "image_size": image[1],
    }
    config = {
        "model_type": "clip",
        "text_config": text_config,
        "vision_config": vision_config,
        "projection_dim": text[1],
    }
    return HfModel(name, config, task="clip")


# Image models are measured on the meta device at their `image_size` (and a smaller one).
# fmt: off
VISION = [
    vit(f"{G}/vit-base-patch16-224", "vit", (12, 768, 12), 224, 16),
    vit(f"{G}/vit-base-patch16-384", "vit", (12, 768, 12), 384, 16),
    vit(f"{G}/vit-base-patch32-384", "vit", (12, 768, 12), 384, 32),
    vit(f"{G}/vit-large-patch16-224", "vit", (24, 1024, 16), 224, 16),
    vit(f"{G}/vit-large-patch32-384", "vit", (24, 1024, 16), 384, 32),
    vit("facebook/deit-tiny-patch16-224", "vit", (12, 192, 3), 224, 16),
    vit("facebook/deit-small-patch16-224", "vit", (12, 384, 6), 224, 16),
    vit("facebook/deit-base-patch16-224", "vit", (12, 768, 12), 224, 16),
    vit("facebook/deit-base-distilled-patch16-224", "deit", (12, 768, 12), 224, 16),
    swin("microsoft/swin-tiny-patch4-window7-224", 96, [2, 2, 6, 2], [3, 6, 12, 24]),
    swin("microsoft/swin-small-patch4-window7-224", 96, [2, 2, 18, 2], [3, 6, 12, 24]),
    swin("microsoft/swin-base-patch4-window7-224", 128, [2, 2, 18, 2], [4, 8, 16, 32]),
    swin("microsoft/swin-large-patch4-window7-224", 192, [2, 2, 18, 2], [6, 12, 24, 48]),
    clip("openai/clip-vit-base-patch32", (12, 512, 8), (12, 768, 12), (32, 224)),
    clip("openai/clip-vit-base-patch16", (12, 512, 8), (12, 768, 12), (16, 224)),
    clip("openai/clip-vit-large-patch14", (12, 768, 12), (24, 1024, 16), (14, 224)),
    clip("openai/clip-vit-large-patch14-336", (12, 768, 12), (24, 1024, 16), (14, 336)),
    vit("facebook/dinov2-small", "dinov2", (12, 384, 6), 518, 14),
    vit("facebook/dinov2-base", "dinov2", (12, 768, 12), 518, 14),
    vit("facebook/dinov2-large", "dinov2", (24, 1024, 16), 518, 14),
    HfModel("facebook/dinov2-giant",
            {"model_type": "dinov2", "num_hidden_layers": 40, "hidden_size": 1536,
             "num_attention_heads": 24, "mlp_ratio": 4, "use_swiglu_ffn": True,
             "image_size": 518, "patch_size": 14},
            task="backbone"),
]
# fmt: on

# Speech models are measured at the longest input their standard recipes take: Whisper
# at its fixed 30 s window (3000 mel frames) and 448 decoder tokens (its
# max_target_positions); wav2vec2 at 20 s of 16 kHz audio, the upper clip length of
# transformers' examples/pytorch/speech-recognition/run_speech_recognition_ctc.py.
WHISPER_INPUT = {"mel_frames": 3000, "decoder_tokens": 448}
WAV2VEC2_INPUT = {"audio_samples": 20 * 16000}


def whisper(
    name: str, layers: tuple[int, int], d_model: int, heads: int, v3: bool = False
) -> HfModel:
    """layers: (encoder, decoder); v3 has 128 mel bins and one more token."""
    config = {
        "model_type": "whisper",
        "encoder_layers": layers[0],
        "decoder_layers": layers[1],
        "d_model": d_model,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": 4 * d_model,
        "decoder_ffn_dim": 4 * d_model,
        "num_mel_bins": 128 if v3 else 80,
        "vocab_size": 51866 if v3 else 51865,
    }
    return HfModel(name, config, task="speech", reference=WHISPER_INPUT)


def wav2vec2(name: str, layers: int, hidden: int, heads: int, stable: bool) -> HfModel:
    config = {
        "model_type": "wav2vec2",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "intermediate_size": 4 * hidden,
        "vocab_size": 32,
        "do_stable_layer_norm": stable,
        "feat_extract_norm": "layer" if stable else "group",
    }
    return HfModel(name, config, task="speech", reference=WAV2VEC2_INPUT)


W = "openai/whisper"
# fmt: off
SPEECH = [
    whisper(f"{W}-tiny", (4, 4), 384, 6), whisper(f"{W}-base", (6, 6), 512, 8),
    whisper(f"{W}-small", (12, 12), 768, 12), whisper(f"{W}-medium", (24, 24), 1024, 16),
    whisper(f"{W}-large-v2", (32, 32), 1280, 20),
    whisper(f"{W}-large-v3", (32, 32), 1280, 20, v3=True),
    whisper(f"{W}-large-v3-turbo", (32, 4), 1280, 20, v3=True),
    wav2vec2("facebook/wav2vec2-base-960h", 12, 768, 12, False),
    wav2vec2("facebook/wav2vec2-large-960h-lv60-self", 24, 1024, 16, True),
    wav2vec2("facebook/wav2vec2-large-xlsr-53", 24, 1024, 16, True),
]
# fmt: on

MODELS: list[HfModel] = [
    *LLAMA, *MISTRAL, *MOE, *QWEN, *GEMMA, *PHI, *FALCON, *OLMO, *NEOX, *GPT2, *OPT,
    *ENCODERS, *SEQ2SEQ, *VISION, *SPEECH,
]  # fmt: skip
