"""`colloc estimate --trace`: the summary form of the user's own model, built on the
meta device (needs torch: `make test-catalog`; skipped without it, except the message
for a machine without torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from estimator.catalog import lookup
from estimator.estimate import default_estimator
from estimator.spec import TrainingSpec
from tests.estimator.kept_once import kept_once_bytes
from tests.estimator.torch_or_skip import need

FACTORIES = """
import torch
import torchvision


def resnet18():
    return torchvision.models.resnet18()


class TwoTowers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.text = torch.nn.Embedding(1000, 64)
        self.mix = torch.nn.Linear(64, 64)

    def forward(self, tokens, scale):
        return self.mix(self.text(tokens)) * scale


def towers():
    tokens = torch.zeros(4, 16, dtype=torch.long)
    return TwoTowers(), {"tokens": tokens, "scale": torch.ones(4, 1, 1)}


class Attend(torch.nn.Module):
    # attention over 256 tokens: 2 heads of 4 channels, a padding mask made from the input
    # (not a parameter: kept for backward), or the windows as a fifth dimension

    def __init__(self, windows=0, checkpointed=False, upcast=False):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.windows = windows
        self.checkpointed = checkpointed
        self.upcast = upcast

    def attend(self, x):
        if self.windows:
            shape = (x.shape[0], 2, self.windows, 256 // self.windows, 3, 4)
            q, k, v = self.qkv(x).view(shape).unbind(-2)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v).relu()
        qkv = self.qkv(x).float() if self.upcast else self.qkv(x)
        q, k, v = qkv.view(x.shape[0], 256, 3, 2, 4).permute(2, 0, 3, 1, 4)
        mask = (x[..., :1] > 0).transpose(1, 2).unsqueeze(1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).relu()

    def forward(self, x):
        if self.checkpointed:
            return torch.utils.checkpoint.checkpoint(self.attend, x, use_reentrant=False)
        return self.attend(x)


def attend():
    return Attend(), torch.empty(2, 256, 8)


def windowed():
    return Attend(windows=4), torch.empty(2, 256, 8)


def checkpointed():
    return Attend(checkpointed=True), torch.empty(2, 256, 8)

def upcast():
    return Attend(upcast=True), torch.empty(2, 256, 8)


class Standardised(torch.nn.Module):
    # a layer whose weight is standardised in every forward, as NF-Nets' and BiT's
    # convolutions are: the standardised copy is kept for backward once a step

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(64, 32))

    def forward(self, x):
        centred = self.weight - self.weight.mean(1, keepdim=True)
        return torch.nn.functional.linear(x, centred / centred.norm(dim=1, keepdim=True)).relu()


def standardised():
    return Standardised(), torch.empty(2, 32)


def standardised_behind():
    # behind a layer, so that its input needs a gradient and its weight is kept
    return torch.nn.Sequential(torch.nn.Linear(32, 32), Standardised()), torch.empty(2, 32)


class Recurrent(torch.nn.Module):
    # a GRU given its first state, whose batch is its second dimension

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(8, 16, num_layers=2, batch_first=True)

    def forward(self, x, state):
        return self.gru(x, state)[0]


def recurrent():
    # two layers and two samples: the state's first dimension looks like a batch
    return Recurrent(), (torch.empty(2, 5, 8), torch.zeros(2, 2, 16))


class Discards(torch.nn.Module):
    # values computed and dropped before the kept path (a probe, a branch not taken):
    # what their graphs saved is freed with them, and the kept path's narrower storages
    # may take their addresses; one dropped graph is kept alive by a reference cycle
    # until the collector runs

    def __init__(self, dropped=0):
        super().__init__()
        self.wide = torch.nn.Linear(32, 1024)
        self.mix = torch.nn.Linear(32, 32)
        self.dropped = dropped

    def forward(self, x):
        for _ in range(self.dropped):
            self.wide(x).relu().exp()
        if self.dropped:
            cycle = [self.wide(x).relu()]
            cycle.append(cycle)
        return self.mix(x).relu().exp()


def kept_path():
    return Discards(), torch.empty(2, 32)


def dropped_branches():
    return Discards(dropped=4), torch.empty(2, 32)


def broken():
    return torch.nn.Linear(8, 8), torch.empty(2, 9)


def not_a_model():
    return 42
"""


def colloc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "estimate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mymodels.py").write_text(FACTORIES)
    return tmp_path


def test_a_traced_resnet18_matches_its_catalog_entry(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("torchvision")
    from estimator.trace import trace

    monkeypatch.chdir(project)
    summary = trace("mymodels:resnet18", (3, 224, 224))
    entry = lookup("torchvision:resnet18")
    assert summary.params == entry.params == 11_689_512
    assert summary.activations_per_sample == entry.activations_per_sample
    assert summary.largest_activation_per_sample == entry.largest_activation_per_sample
    assert summary.fixed_activations == entry.fixed_activations
    assert summary.autocast_bytes_per_sample == entry.autocast_bytes_per_sample
    assert summary.autocast_fixed_bytes == entry.autocast_fixed_bytes
    assert summary.layers == {k: v for k, v in entry.layers.items()}


def test_the_cli_writes_a_summary_that_estimates(project: Path) -> None:
    need("torchvision")
    out = project / "model.yaml"
    result = colloc(project, "--trace", "mymodels:towers", "--out", str(out))
    assert result.returncode == 0, result.stderr
    model = yaml.safe_load(out.read_text())["model"]
    summary = model["summary"]
    assert summary["params"] == 1000 * 64 + 64 * 64 + 64
    # per sample: the 16 token ids (the embedding's backward), the embedding output
    # (16x64, the Linear's input) and `scale` (1, for the product's gradient); the
    # Linear's output is not kept, as `scale` needs no gradient
    assert summary["activations_per_sample"] == 16 + 16 * 64 + 1
    assert summary["layers"] == {"embedding": 1, "linear": 1}
    spec = TrainingSpec.model_validate({"model": model, "batch_size": 32})
    assert default_estimator().estimate(spec, "T4").peak_mib > 0
    printed = colloc(project, "--trace", "torchvision.models:resnet18", "--input-shape", "3,64,64")
    assert printed.returncode == 0, printed.stderr
    assert yaml.safe_load(printed.stdout)["model"]["summary"]["params"] == 11_689_512


def test_attention_is_counted_as_the_fused_kernels_keep_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per sample: the input (256x8, the Linear's), the qkv output whose views are the
    query, key and value (256x24), the padding mask (256), the attention output (256x8,
    also the ReLU's input), one log-sum-exp per head and row (2x256) and the ReLU's output
    (256x8); not the 2x256x256 weights the meta device's math kernel keeps. Windows as a
    fifth dimension run the math kernel on a GPU (4 windows of 64x64 weights per head are
    kept); under activation checkpointing the recomputed forward matches the first. The
    scores an eager attention would keep as well are counted apart, for fused calls whose
    tensors are kept (not inside checkpointing, which keeps its input alone)."""
    need("torchvision")
    from estimator.trace import trace

    monkeypatch.chdir(project)
    fused = 256 * (8 + 24 + 1 + 8 + 2 + 8)
    attend = trace("mymodels:attend")
    assert attend.activations_per_sample == fused
    assert attend.attention_scores_per_sample == 2 * 256 * 256
    windowed = trace("mymodels:windowed")
    assert windowed.activations_per_sample > 2 * 4 * 64 * 64
    assert windowed.attention_scores_per_sample == 0
    checkpointed = trace("mymodels:checkpointed")
    assert checkpointed.activations_per_sample < fused
    assert checkpointed.attention_scores_per_sample == 0


def test_autocast_bytes_are_those_a_gpu_keeps_under_autocast(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per sample under autocast: the Linear's input cast to 16 bits (256x8x2), the qkv
    output (256x24x2), the padding mask (256x1), the attention output (256x8x2), the
    fp32 log-sum-exp (2x256x4) and the ReLU's output (256x8x2); the Linear's weight cast
    to 16 bits is the same at any batch and not counted. Under checkpointing the input
    alone, in fp32 (2048x4). Query, key and value that reach the attention in fp32 are
    cast to 16 bits by autocast, which the kernel keeps (3 copies of 2x256x4x2) instead
    of the qkv output: as many bytes here."""
    need("torchvision")
    from estimator.trace import trace

    monkeypatch.chdir(project)
    per_sample = 256 * 8 * 2 + 256 * 24 * 2 + 256 + 256 * 8 * 2 + 2 * 256 * 4 + 256 * 8 * 2
    assert trace("mymodels:attend").autocast_bytes_per_sample == per_sample
    assert trace("mymodels:checkpointed").autocast_bytes_per_sample == 2048 * 4
    assert trace("mymodels:upcast").autocast_bytes_per_sample == per_sample


def test_what_a_step_keeps_once_is_not_counted_per_sample(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight standardised in the forward is kept for backward once a step, whatever
    the batch: per sample only the layer's input (32) and the ReLU's output (64) count;
    the centred weight (64x32) and its norms (64), which the division keeps, are kept
    apart. Counted at the example batch of 2 alone, they came to over 1,000 elements a
    sample."""
    need("torchvision")
    from estimator.trace import load_factory, saved_growth, trace

    monkeypatch.chdir(project)
    summary = trace("mymodels:standardised")
    assert (summary.activations_per_sample, summary.fixed_activations) == (32 + 64, 64 * 32 + 64)
    model, batch = load_factory("mymodels:standardised")()
    saved, growth = saved_growth(model.to("meta"), batch.to("meta"))
    assert growth.per_sample == 32 + 64
    assert growth.largest == 64
    assert growth.fixed == 64 * 32 + 64
    assert saved.elements == growth.fixed + 2 * growth.per_sample


def test_what_a_step_keeps_once_under_autocast_is_charged_as_traced(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind another layer, a standardised weight is kept three ways once a step: the
    centred weight (64x32) and its norms (64), which the division keeps, and the
    standardised weight, which the matmul keeps for its input's gradient: 4,160 fp32
    elements. Under autocast the first two stay fp32 (8,448 bytes) and the matmul keeps
    the 16-bit cast of the standardised weight (4,096) in place of autocast's copy of a
    raw weight. `amp_*` charges that, not the fp32 elements at 16 bits (8,320) beside a
    copy of every weight (6,208)."""
    need("torchvision")
    from estimator.trace import trace

    monkeypatch.chdir(project)
    summary = trace("mymodels:standardised_behind")
    assert summary.params == 64 * 32 + 32 * 32 + 32
    assert summary.fixed_activations == 2 * 64 * 32 + 64
    assert summary.autocast_fixed_bytes == (64 * 32 + 64) * 4 + 64 * 32 * 2

    def kept_once(**summary_fields: int) -> float:
        """Under autocast (plain SGD: no optimizer-step temporaries outweigh this small
        model's)."""
        body = {
            "model": {"summary": summary.model_dump() | summary_fields},
            "precision": "amp_bf16",
            "optimizer": "sgd",
        }
        return kept_once_bytes(body)

    copies = summary.params * 2  # charged with the weights
    assert kept_once() + copies == pytest.approx(summary.autocast_fixed_bytes)
    unmeasured = kept_once(autocast_fixed_bytes=0) + copies
    assert unmeasured == pytest.approx(summary.fixed_activations * 2 + copies)


def test_a_model_that_takes_no_doubled_batch_is_traced_at_its_example_batch(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Doubling every input whose first dimension is the batch doubles the GRU state's
    layers, which the GRU refuses: what the example batch keeps is then taken per
    sample, as before the doubled forward, rather than failing the trace."""
    need("torchvision")
    from estimator.trace import load_factory, saved_activations, trace

    monkeypatch.chdir(project)
    summary = trace("mymodels:recurrent")
    model, (x, state) = load_factory("mymodels:recurrent")()
    kept = saved_activations(model.to("meta"), x.to("meta"), state.to("meta"))
    assert summary.activations_per_sample == kept.elements // 2 > 0
    assert summary.fixed_activations == 0


def test_what_a_forward_computed_and_dropped_is_not_counted(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what is still saved once the forward ends is kept for backward: dropped
    branches, whose saved ReLU and exp outputs were freed with their graphs (and whose
    addresses the kept path's storages may reuse), or are freed once a reference cycle
    is collected, trace as the kept path alone: per sample the Linear's input, the
    ReLU's output and the exp's (3 x 32), in every run."""
    need("torchvision")
    from estimator.trace import trace

    monkeypatch.chdir(project)
    kept = trace("mymodels:kept_path")
    assert kept.activations_per_sample == 3 * 32
    for _ in range(5):
        dropped = trace("mymodels:dropped_branches")
        assert dropped.activations_per_sample == kept.activations_per_sample
        assert dropped == kept


@pytest.mark.parametrize(
    "args, message",
    [
        (("--trace", "mymodels"), "pkg.module:factory"),
        (("--trace", "nosuchmodule:f"), "cannot import nosuchmodule"),
        (("--trace", "mymodels:nothing"), "has no nothing"),
        (("--trace", "mymodels:resnet18"), "--input-shape"),
        (("--trace", "mymodels:resnet18", "--input-shape", "3,x"), "invalid literal"),
        (("--trace", "mymodels:broken"), "tracing mymodels:broken failed"),
        (("--trace", "mymodels:not_a_model", "--input-shape", "3"), "not a torch module"),
    ],
)
def test_bad_factories_get_a_message_not_a_traceback(
    project: Path, args: tuple[str, ...], message: str
) -> None:
    need("torchvision")
    result = colloc(project, *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_layers_count_by_the_torch_class_they_derive_from() -> None:
    """A subclass of a torch layer counts as that layer; `nn.MultiheadAttention` adds
    its input projections (one packed weight, or three with other key/value widths)."""
    torch = need("torch")
    from estimator.trace import describe

    norm_act = type("NormAct", (torch.nn.BatchNorm2d,), {})  # as timm's BatchNormAct2d
    with torch.device("meta"):
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3),
            norm_act(8),
            torch.nn.MultiheadAttention(8, 2),
            torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=4),
        )
    layers = describe(model)["layers"]
    # each attention's output projection, then 1 + 3 input projections
    assert layers == {"attention": 2, "batchnorm": 1, "conv2d": 1, "linear": 6}


def test_without_torch_the_cli_says_how_to_get_it(project: Path) -> None:
    """A Python whose `import torch` fails (a stand-in module that raises)."""
    (project / "torch.py").write_text("raise ImportError('No module named torch')\n")
    result = colloc(project, "--trace", "mymodels:towers")
    assert result.returncode == 2
    assert "pip install 'colloc[trace]'" in result.stderr and "Traceback" not in result.stderr
