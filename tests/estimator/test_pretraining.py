"""LLM pre-training terms against hand-computed values from the formulas they cite."""

from __future__ import annotations

import re
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from estimator.analytical.hf import moe_from_hf_config
from estimator.analytical.model import MIB, SpecError, breakdown, resolve
from estimator.analytical.transformer import (
    in_flight_microbatches,
    layer_activation_bytes,
    total_params,
)
from estimator.spec import Parallelism, TrainingSpec, TransformerDims

# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json)
LLAMA_8B = TransformerDims(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=128256,
    gated_mlp=True,
    tied_embeddings=False,
    dropout=False,
)
# Mixtral-8x7B (mistralai/Mixtral-8x7B-v0.1 config.json)
MIXTRAL = {
    "model_type": "mixtral",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}
SEQ = 8192
Schedule = Literal["1f1b", "gpipe", "interleaved"]


def llama_spec(**kw: Any) -> TrainingSpec:
    body: dict[str, Any] = {
        "model": {"transformer": LLAMA_8B.model_dump()},
        "batch_size": 1,
        "seq_len": SEQ,
        "precision": "bf16",
        "optimizer": "adamw",
        "flash_attention": True,
        "activation_checkpointing": "selective",
        "parallelism": {"dp": 8, "zero_stage": 3},
        **kw,
    }
    return TrainingSpec.model_validate(body)


def test_llama_8b_parameter_count_is_the_published_one() -> None:
    # 8.03 B published; the formula also counts biases Llama does not have (< 0.1%)
    assert total_params(LLAMA_8B) == pytest.approx(8.03e9, rel=1e-3)


def test_llama_8b_fsdp_model_states_on_8_gpus() -> None:
    terms = breakdown(llama_spec(), None)
    params = total_params(LLAMA_8B)
    # the largest FSDP unit is the 128256 x 4096 embedding (or output) table
    unit = 128256 * 4096
    # FSDP2 as torchtitan runs it: fp32 sharded parameter, fp32 gradient and two fp32
    # AdamW moments over 8 ranks; gathered bf16 unit plus its prefetch; one unit's
    # unsharded gradient in bf16 and in fp32 for the reduce-scatter
    assert terms.weights == pytest.approx((params * 4 / 8 + 2 * unit * 2) / MIB)
    assert terms.gradients == pytest.approx((params * 4 / 8 + unit * (2 + 4)) / MIB)
    assert terms.optimizer == pytest.approx(params * 8 / 8 / MIB)


def test_op_level_sac_keeps_every_other_matmul_output() -> None:
    s, b, h = SEQ, 1, 4096
    kept = layer_activation_bytes(LLAMA_8B, s, b, 2.0, True, "selective")
    # block input; matmuls q, k, v, o, w1, w3, w2 -> q, v, w1, w2 kept; the flash
    # attention output: 4096 + 4096 + 1024 + 14336 + 4096 + 4096 elements per token
    assert kept.replicated + kept.sharded == pytest.approx(31744 * 2 * s * b)
    whole = layer_activation_bytes(LLAMA_8B, s, b, 2.0, True, "none")
    # Korthikanti's 34 s b h with GQA (K, V at 1/4) and SwiGLU (4 ffn-wide tensors)
    expected = (8 * h + 5 * h + 8 * 14336) * s * b
    assert whole.replicated + whole.sharded == pytest.approx(expected)
    full = layer_activation_bytes(LLAMA_8B, s, b, 2.0, True, "full")
    assert full.replicated + full.sharded < kept.replicated + kept.sharded < expected


def test_heads_wider_than_the_model_count_their_own_width() -> None:
    # Qwen3-0.6B (config.json): 16 query and 8 key/value heads of 128 on a 1024 width
    qwen3 = TransformerDims.model_validate(
        {"layers": 28, "hidden": 1024, "heads": 16, "kv_heads": 8, "head_dim": 128}
        | {"ffn_hidden": 3072, "vocab": 151936, "gated_mlp": True, "dropout": False}
    )
    assert total_params(qwen3) == pytest.approx(596049920, rel=2e-3)  # the catalog's count
    s, q, kv, h = SEQ, 16 * 128, 8 * 128, 1024
    whole = layer_activation_bytes(qwen3, s, 1, 2.0, True, "none")
    # norm, QKV and MLP inputs (4 h); Q and the attention output (2 q); K and V (2 kv);
    # four ffn-wide MLP tensors
    assert whole.replicated + whole.sharded == pytest.approx(
        (4 * h + 2 * q + 2 * kv + 4 * 3072) * s * 2
    )
    kept = layer_activation_bytes(qwen3, s, 1, 2.0, True, "selective")
    # block input; q, v, w1, w2 outputs; the flash attention output (q wide)
    assert kept.replicated + kept.sharded == pytest.approx((h + q + kv + 3072 + h + q) * s * 2)


def test_llama_8b_activations_with_sac() -> None:
    terms = breakdown(llama_spec(), None)
    s = SEQ
    kept, whole = 31744 * 2 * s, (8 * 4096 + 5 * 4096 + 8 * 14336) * s
    expected = (
        32 * kept  # every block's kept tensors
        + 4096 * 2 * s  # the embedding output
        + (whole - kept)  # one block's recomputed tensors during its backward
        + 2 * 14336 * s * 2  # gradients of the widest tensor's input and output
        + 128256 * s * 12  # fp32 log-softmax, its gradient and the logits' gradient
    )
    assert terms.activations == pytest.approx(expected / MIB)


def test_sac_matters_with_flash_attention_where_korthikanti_selective_does_not() -> None:
    def activations(**kw: Any) -> float:
        return breakdown(llama_spec(**kw), None).activations

    assert activations(activation_checkpointing="none") > 1.5 * activations()
    assert activations() > activations(activation_checkpointing="full")


def test_layer_wise_selective_checkpointing() -> None:
    def activations(every: int) -> float:
        return breakdown(llama_spec(checkpoint_every=every), None).activations

    full = breakdown(llama_spec(activation_checkpointing="full"), None).activations
    none = breakdown(llama_spec(activation_checkpointing="none"), None).activations
    assert activations(1) == pytest.approx(full)
    assert activations(64) == pytest.approx(none)  # no block checkpointed
    assert activations(1) < activations(2) < activations(4) < none
    # every 2nd of 32 blocks fully checkpointed: 16 whole blocks, 16 inputs
    s = SEQ
    whole, one_input = (8 * 4096 + 5 * 4096 + 8 * 14336) * s, 4096 * 2 * s
    assert activations(2) - activations(1) == pytest.approx(16 * (whole - one_input) / MIB)


def states(spec: TrainingSpec) -> float:
    terms = breakdown(spec, None)
    return terms.weights + terms.gradients + terms.optimizer


def test_zero_shards_over_every_data_like_rank() -> None:
    # dp x cp = 8 data-like ranks shard the model states as 8 data-parallel ranks do
    assert states(llama_spec(parallelism={"dp": 4, "cp": 2, "zero_stage": 3})) == pytest.approx(
        states(llama_spec())
    )
    # HSDP: 32 ranks in shard groups of 8 hold what 8-way FSDP holds
    hsdp = llama_spec(parallelism={"dp": 32, "dp_shard": 8, "zero_stage": 3})
    assert states(hsdp) == pytest.approx(states(llama_spec()))
    assert states(llama_spec(parallelism={"dp": 32, "zero_stage": 3})) < states(hsdp)


def test_context_and_sequence_parallelism_split_activations() -> None:
    def activations(**parallel: Any) -> float:
        return breakdown(llama_spec(parallelism=parallel), None).activations

    one = activations(dp=8, zero_stage=3)
    cp2 = activations(dp=4, cp=2, zero_stage=3)
    # cp splits the sequence: every per-token term halves
    assert cp2 == pytest.approx(one / 2)
    tp4 = activations(dp=2, tp=4, zero_stage=3)
    sp4 = activations(dp=2, tp=4, zero_stage=3, sequence_parallel=True)
    assert sp4 < tp4 < one


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_tensor_parallelism_holds_gathered_tensors_whole(sequence_parallel: bool) -> None:
    # Llama-8B over 8 tensor-parallel ranks, full checkpointing, one sequence of 8192
    s, h, ffn, t, vocab = SEQ, 4096, 14336, 8, 128256
    spec = llama_spec(
        parallelism={"dp": 2, "tp": t, "zero_stage": 3, "sequence_parallel": sequence_parallel},
        activation_checkpointing="full",
    )
    split = t if sequence_parallel else 1  # what sequence parallelism splits
    kept = s * h * 2 / split  # each block's input
    # the recomputed block: norm and matmul inputs (4 sbh, split as the block input is),
    # Q and the output (2 sbh), K and V (2 x 1/4 sbh) and four ffn-wide MLP tensors
    # (split over the ranks)
    whole = 4 * h * s * 2 / split + ((2 + 2 / 4) * h + 4 * ffn) * s * 2 / t
    # the backward of the widest column-parallel matmul (w1): its output's gradient (a
    # shard), its input's gradient (whole) and, under sequence parallelism, its input
    # gathered again (whole, less the shard counted in `whole`)
    gathered = h * (2 - 1 / t) if sequence_parallel else h
    transient = (ffn / t + gathered) * s * 2
    expected = (
        32 * kept
        + s * h * 2 / split  # the embedding output
        + (whole - kept)
        + transient
        + vocab / t * s * 12  # the vocab-parallel loss
        + s * h * 2  # the output projection's input, whole
    )
    assert breakdown(spec, None).activations == pytest.approx(expected / MIB)


def test_fsdp_with_pipeline_keeps_the_stage_gathered() -> None:
    spec = llama_spec(
        parallelism={"dp": 8, "pp": 4, "zero_stage": 3, "microbatches": 8},
        activation_checkpointing="full",
    )
    terms = breakdown(spec, None)
    layer = total_params(LLAMA_8B.model_copy(update={"layers": 1})) - total_params(
        LLAMA_8B.model_copy(update={"layers": 0})
    )
    # the busiest stage is the last: 8 blocks, the output head and the final norm
    stage = 8 * layer + 128256 * 4096 + 2 * 4096
    params = stage  # no pipeline stage holds another's parameters
    assert terms.weights == pytest.approx((params * 4 / 8 + stage * 2) / MIB, rel=1e-6)
    assert terms.gradients == pytest.approx((params * 4 / 8 + stage * 4) / MIB, rel=1e-6)
    no_pp = breakdown(llama_spec(parallelism={"dp": 8, "zero_stage": 3}), None)
    assert terms.weights + terms.gradients > (no_pp.weights + no_pp.gradients) / 4


def test_pipeline_schedules_hold_their_warm_up() -> None:
    def held(schedule: Schedule, m: int) -> tuple[float, float]:
        return in_flight_microbatches(Parallelism(pp=8, microbatches=m, pp_schedule=schedule))

    # 1F1B: the first stage p micro-batches, the last one
    assert held("1f1b", 32) == (8, 1)
    assert held("1f1b", 4) == (4, 1)
    # interleaved, two chunks a rank: 2(p-1) + p warm-up chunk forwards, plus the one
    # running, of half a stage each on the first rank; p of them on the last
    assert held("interleaved", 32) == ((2 * 7 + 8 + 1) / 2, (8 + 1) / 2)
    assert held("interleaved", 128) == held("interleaved", 32)  # not fewer with more
    assert held("interleaved", 4) == (4, 4)  # no more than the step's micro-batches
    # GPipe: every forward before any backward
    assert held("gpipe", 32) == (32, 32)


@pytest.mark.parametrize("tp", [1, 2])
def test_the_last_stage_keeps_every_micro_batch_output(tp: int) -> None:
    # pp 32 over Llama-8B's 32 blocks: the last stage (one block, the logits) is the
    # busiest; torch.distributed.pipelining keeps each micro-batch's logits until the
    # step ends, and under GPipe each one's fp32 log-softmax, block input and (under
    # tensor parallelism) output projection input too
    def activations(schedule: Schedule, m: int) -> float:
        parallelism = {"pp": 32, "tp": tp, "microbatches": m, "pp_schedule": schedule}
        spec = llama_spec(parallelism=parallelism, activation_checkpointing="full")
        return breakdown(spec, None).activations

    logits = 128256 / tp * SEQ
    assert activations("1f1b", 8) - activations("1f1b", 4) == pytest.approx(4 * logits * 2 / MIB)
    block_input = SEQ * 4096 * 2
    head_input = block_input if tp > 1 else 0
    assert activations("gpipe", 8) - activations("gpipe", 4) == pytest.approx(
        4 * (logits * (2 + 4) + block_input + head_input) / MIB
    )


def test_context_parallel_scores_span_the_whole_sequence() -> None:
    # without flash attention a rank's queries (s/cp) attend to every key (s): the saved
    # scores halve with cp 2, as every other per-token term does
    def activations(cp: int) -> float:
        spec = llama_spec(
            flash_attention=False,
            activation_checkpointing="none",
            parallelism={"dp": 8 // cp, "cp": cp, "zero_stage": 3},
        )
        return breakdown(spec, None).activations

    assert activations(2) == pytest.approx(activations(1) / 2)


def test_fp8_keeps_bf16_activations_and_adds_weight_casts() -> None:
    bf16 = breakdown(llama_spec(), None)
    fp8 = breakdown(llama_spec(precision="fp8"), None)
    assert fp8.weights + fp8.gradients + fp8.optimizer == pytest.approx(
        bf16.weights + bf16.gradients + bf16.optimizer
    )
    # one byte per weight of the largest unit and per element of the widest input
    casts = 128256 * 4096 + SEQ * 14336
    assert fp8.activations - bf16.activations == pytest.approx(casts / MIB)


def test_moe_config_parsing() -> None:
    assert moe_from_hf_config({"model_type": "llama", "hidden_size": 8}) == {}
    assert moe_from_hf_config(MIXTRAL) == {
        "experts": 8,
        "experts_per_token": 2,
        "expert_ffn_hidden": 14336,
        "shared_expert_ffn": 0,
        "gated_mlp": True,
    }
    qwen = {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408}
    qwen["shared_expert_intermediate_size"] = 5632
    assert moe_from_hf_config(qwen)["shared_expert_ffn"] == 5632
    deepseek = {"n_routed_experts": 64, "num_experts_per_tok": 6, "moe_intermediate_size": 1408}
    deepseek["n_shared_experts"] = 2
    assert moe_from_hf_config(deepseek)["shared_expert_ffn"] == 2 * 1408
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        moe_from_hf_config({"num_local_experts": 8})


def mixtral_spec(**parallel: Any) -> TrainingSpec:
    return TrainingSpec.model_validate(
        {
            "model": {"hf_config": MIXTRAL},
            "batch_size": 1,
            "seq_len": 4096,
            "precision": "bf16",
            "flash_attention": True,
            "parallelism": {"dp": 8, "zero_stage": 3, **parallel},
        }
    )


def test_mixtral_counts_every_expert() -> None:
    shape = resolve(mixtral_spec())
    assert shape.params == pytest.approx(46.7e9, rel=5e-3)  # published: 46.7 B


def test_expert_parallelism_shards_experts_and_charges_active_ones() -> None:
    dims = resolve(mixtral_spec()).dims
    assert dims is not None
    s, h = 4096, 4096
    moe = layer_activation_bytes(dims, s, 1, 2.0, True, "none")
    # per token: 4 h-wide inputs; Q, O and K, V at 1/4; router probabilities (fp32);
    # per active expert (2) its input copy, 4 ffn-wide tensors and its output
    expected = (8 * h + 5 * h) * s + 8 * 4 * s + 2 * (2 * h + 4 * 14336) * 2 * s
    assert moe.replicated + moe.sharded == pytest.approx(expected)
    experts = 32 * 8 * 3 * 4096 * 14336
    dense = total_params(dims) - experts
    # ep 8 over 8 data-like ranks: each rank keeps 1 expert per block, unsharded
    terms = breakdown(mixtral_spec(ep=8), None)
    assert terms.optimizer == pytest.approx((dense * 8 / 8 + experts / 8 * 8) / MIB, rel=1e-6)
    # without ep, FSDP gathers a whole block with all 8 experts at a time
    assert states(mixtral_spec(ep=8)) < states(mixtral_spec())


@pytest.mark.parametrize(
    "parallelism, problem",
    [
        ({"dp": 8, "dp_shard": 3, "zero_stage": 3}, "dp_shard (3) must divide dp x cp (8)"),
        ({"dp": 8, "dp_shard": 4}, "dp_shard needs zero_stage"),
        ({"dp": 4, "ep": 8}, "ep (8) must divide dp x cp (4)"),
        ({"dp": 8, "dp_shard": 2, "ep": 4, "zero_stage": 3}, "must divide the shard group"),
    ],
)
def test_parallel_groups_must_divide(parallelism: dict[str, int], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        Parallelism.model_validate(parallelism)


def test_specs_that_do_not_fit_experts() -> None:
    with pytest.raises(SpecError, match=re.escape("ep (8) needs a mixture-of-experts")):
        breakdown(llama_spec(parallelism={"dp": 8, "ep": 8}), None)
    with pytest.raises(SpecError, match=re.escape("ep (16) must divide experts (8)")):
        breakdown(mixtral_spec(dp=16, ep=16), None)
    with pytest.raises(ValidationError, match="checkpoint_every needs"):
        llama_spec(activation_checkpointing="full", checkpoint_every=2)
    widths = {"expert_ffn_hidden": 1024, "shared_expert_ffn": 1024}
    with pytest.raises(ValidationError, match="shared_expert_ffn describe a mixture of experts"):
        TransformerDims.model_validate({**LLAMA_8B.model_dump(), **widths})


def test_bigger_jobs_need_more_and_more_ranks_need_less() -> None:
    def total(**kw: Any) -> float:
        return breakdown(llama_spec(**kw), None).total

    assert total(batch_size=2) > total()
    assert total(seq_len=16384) > total()
    assert total(parallelism={"dp": 64, "zero_stage": 3}) < total()
    assert total(parallelism={"dp": 8, "zero_stage": 2}) > total()


def test_moe_catalog_entries_count_every_expert() -> None:
    """The formula's count against the catalog's, counted on the meta device or taken
    from the model card: within 5% (DeepSeek's dense first block and latent attention
    are not modelled)."""
    moe = []
    for name in ("Qwen/Qwen1.5-MoE-A2.7B", "allenai/OLMoE-1B-7B-0924", "Qwen/Qwen3-30B-A3B"):
        shape = resolve(
            TrainingSpec.model_validate({"model": {"catalog": f"hf:{name}"}, "batch_size": 1})
        )
        assert shape.dims is not None and shape.dims.moe, name
        moe.append(total_params(shape.dims) / shape.params)
    assert moe == pytest.approx([1.0] * len(moe), rel=0.05)
