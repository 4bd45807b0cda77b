"""Regenerate the architecture catalog with torch, torchvision, timm and transformers.

    python -m estimator.catalog.build [--only SOURCE] [--rebuild]

Needs the `catalog` extra (`make catalog`); Colloc itself never imports torch. Every
model is built on PyTorch's meta device (shapes only: no weights are allocated or
downloaded), put in training mode and run forward once; autograd's saved-tensor hooks
then count the activation elements kept for backward, each storage once and parameters
excluded. A second, smaller input gives how that count scales with input size.

Activations are counted at the example batch and at twice it: what each added sample
keeps, and apart what a step keeps once whatever its batch (weights standardised in
the forward, position tables).

Hugging Face models are built from the published config.json values in `hf_configs.py`
(each with the repository it comes from), on the meta device too: language models keep
their config for the transformer formulas, image and speech models are measured like
timm's.

Entries already in the data files are kept when the library versions are those of
`data/versions.json` (the numbers would come out the same); `--rebuild` builds all.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from estimator.trace import (
    Growth,
    SavedActivations,
    autocast_bytes_where_it_runs,
    describe,
    saved_growth,
)

DATA_DIR = Path(__file__).with_name("data")
BATCH = 2
LIBRARIES = ("torch", "torchvision", "timm", "transformers")
VISION_FIELDS = [
    "name",
    "params",
    "matrices",
    "activations_per_sample",
    "largest_activation_per_sample",
    "activation_exponent",
    "fixed_activations",
    "fixed_activations_constant",
    "attention_scores_per_sample",
    "attention_scores_exponent",
    "largest_attention_scores_per_sample",
    "autocast_bytes_per_sample",
    "autocast_fixed_bytes",
    "reference_size",
    "layers",
]
TIMM_FIELDS = [*VISION_FIELDS, "num_classes", "head_features"]


def on_meta(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """The model on the meta device, in training mode. A few constructors compute on
    their weights (torchvision's RegNet): those are built on the CPU, then moved."""
    try:
        with torch.device("meta"):
            model = build()
    except NotImplementedError:
        model = build().to("meta")
    model.train()
    return model


Inputs = Callable[[int], dict[str, Any]]


def images(size: int) -> dict[str, Any]:
    return {"x": torch.empty(BATCH, 3, size, size, device="meta")}


def _growth(reference: int, fewer: int, size: int, smaller: int) -> float:
    """The exponent of pixels that takes a count from `fewer` at `smaller` to
    `reference` at `size` (within 0.5 and 2: patch tokens grow as pixels, global
    attention's scores as their square)."""
    exponent = math.log(reference / fewer) / math.log((size / smaller) ** 2)
    return round(min(max(exponent, 0.5), 2.0), 4)


def constant_part(reference: int, fewer: int, size: int, smaller: int) -> int:
    """Of the `reference` elements a step keeps once at input `size`, those that do not
    grow with the input, from the `fewer` it keeps at `smaller`. They are split into a
    constant part (weights standardised in the forward) and one that grows as the pixels
    squared (tables over pairs of tokens, the steepest growth) so that both inputs'
    counts hold: a growth between the two is then overestimated at larger inputs, not
    under."""
    squared = (smaller / size) ** 4  # the pixels squared, at the smaller input
    growing = (reference - fewer) / (1 - squared)
    return round(reference - min(max(growing, 0.0), reference))


def smaller_input(size: int) -> int:
    """The second input a model is measured at, to tell how its counts grow."""
    return max(32, (size * 3 // 4) // 32 * 32)


def activations_entry(growth: Growth) -> dict[str, int]:
    """The activations kept per sample (the largest of them too), and those kept once
    a step whatever the batch (`trace.saved_growth`)."""
    return {
        "activations_per_sample": growth.per_sample,
        "largest_activation_per_sample": growth.largest,
        "fixed_activations": growth.fixed,
    }


def scores_entry(saved: SavedActivations) -> dict[str, int]:
    """The attention scores an eager attention would keep, per sample (none: left out)."""
    if not saved.scores:
        return {}
    return {
        "attention_scores_per_sample": saved.scores // BATCH,
        "largest_attention_scores_per_sample": saved.largest_scores // BATCH,
    }


def autocast_entry(model: torch.nn.Module, inputs: dict[str, Any]) -> dict[str, int]:
    """What a step keeps under autocast, per sample and once (`trace.autocast_bytes`),
    left out where it cannot be measured."""
    measured = autocast_bytes_where_it_runs(model, **inputs)
    if not measured.per_sample:
        return {}
    return {
        "autocast_bytes_per_sample": measured.per_sample,
        "autocast_fixed_bytes": measured.fixed,
    }


def measured(
    name: str, build: Callable[[int], torch.nn.Module], inputs: Inputs, size: int
) -> dict[str, Any]:
    """Parameters, layer counts, saved activations (and their bytes under autocast) and
    the attention scores an eager attention would keep beside them, at input `size`, and
    how activations and scores grow with the input (from a second, smaller one)."""
    model = on_meta(lambda: build(size))
    entry: dict[str, Any] = {"name": name, "reference_size": size, **describe(model)}
    example = inputs(size)
    reference, growth = saved_growth(model, **example)
    entry |= activations_entry(growth) | scores_entry(reference)
    entry |= autocast_entry(model, example)
    smaller = smaller_input(size)
    try:
        resized = on_meta(lambda: build(smaller))
        fewer, fewer_growth = saved_growth(resized, **inputs(smaller))
        entry["activation_exponent"] = _growth(
            growth.per_sample, fewer_growth.per_sample, size, smaller
        )
        if growth.fixed:  # the smaller input is smaller: `_growth` raised otherwise
            entry["fixed_activations_constant"] = constant_part(
                growth.fixed, fewer_growth.fixed, size, smaller
            )
        if reference.scores and fewer.scores:
            entry["attention_scores_exponent"] = _growth(
                reference.scores, fewer.scores, size, smaller
            )
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


def timm_entry(name: str) -> dict[str, Any]:
    import timm

    model = on_meta(lambda: timm.create_model(name, pretrained=False))
    pretrained: dict[str, Any] = getattr(model, "pretrained_cfg", {})
    size = int(pretrained.get("input_size", (3, 224, 224))[-1])
    return measured(name, lambda s: build_timm(name, s), images, size) | timm_head(name, model)


def completed(
    name: str, entry: dict[str, Any], build: Callable[[int], torch.nn.Module]
) -> dict[str, int]:
    """What an entry built before `autocast_fixed_bytes` and `fixed_activations_constant`
    lacks: both autocast figures, measured again at its reference input, and the part
    of what a step keeps once that does not grow, from the smaller input (left out
    where that cannot be built, as a full build leaves it)."""
    size = int(entry["reference_size"])
    more: dict[str, int] = {}
    if "autocast_fixed_bytes" not in entry:
        more |= autocast_entry(on_meta(lambda: build(size)), images(size))
    fixed = int(entry.get("fixed_activations", 0))
    smaller = smaller_input(size)
    if "fixed_activations_constant" not in entry and fixed and smaller < size:
        try:
            _, fewer = saved_growth(on_meta(lambda: build(smaller)), **images(smaller))
        except Exception:  # a fixed-size model
            return more
        more["fixed_activations_constant"] = constant_part(fixed, fewer.fixed, size, smaller)
    return more


def timm_completed(name: str, entry: dict[str, Any]) -> dict[str, int]:
    head = {} if "head_features" in entry else timm_head(name)
    return head | completed(name, entry, lambda size: build_timm(name, size))


def torchvision_completed(name: str, entry: dict[str, Any]) -> dict[str, int]:
    return completed(name, entry, lambda size: build_torchvision(name, size))


def timm_head(name: str, model: torch.nn.Module | None = None) -> dict[str, int]:
    """The default classifier's classes and input width (a pretrained tag may change
    the classes, and with them the parameters)."""
    import timm

    model = model or on_meta(lambda: timm.create_model(name, pretrained=False))
    classifier = getattr(model, "get_classifier", None)  # image encoders have none
    head = classifier() if classifier else None
    return {
        "num_classes": int(getattr(model, "num_classes", 0) or 0),
        "head_features": int(head.in_features) if isinstance(head, torch.nn.Linear) else 0,
    }


def timm_names_and_tags(built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """timm's deprecated aliases, each architecture's pretrained tags, and the class
    count of each tag whose classifier differs from the architecture's default."""
    from timm.models import _registry

    aliases = {
        old: new
        for old, new in sorted(_registry.get_deprecated_models().items())
        if new and new.partition(".")[0] in built
    }
    tags: dict[str, str] = {}
    tag_classes: dict[str, int] = {}
    for arch, entry in sorted(built.items()):
        names = _registry._model_with_tags.get(arch, [])
        tags[arch] = " ".join(n.partition(".")[2] for n in names if "." in n)
        for tagged in names:
            cfg = _registry.get_pretrained_cfg(tagged)
            classes = getattr(cfg, "num_classes", None)
            if classes is not None and classes != entry["num_classes"] and entry["head_features"]:
                tag_classes[tagged] = int(classes)
    return {"aliases": aliases, "tags": tags, "tag_classes": tag_classes}


def build_torchvision(name: str, size: int) -> torch.nn.Module:
    import torchvision

    kwargs: dict[str, Any] = {"image_size": size} if name.startswith("vit_") else {}
    if name == "inception_v3":
        kwargs = {"aux_logits": True, "init_weights": False}
    model: torch.nn.Module = torchvision.models.get_model(name, weights=None, **kwargs)
    return model


def torchvision_entry(name: str) -> dict[str, Any]:
    size = 299 if name == "inception_v3" else 224  # torchvision's documented input sizes
    return measured(name, lambda s: build_torchvision(name, s), images, size)


def read_entries(source: str) -> dict[str, dict[str, Any]]:
    """The entries of a committed data file, by name."""
    path = DATA_DIR / f"{source}.json"
    if not path.exists():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(raw, list):  # the first format: a list of entries
        return {item["name"]: item for item in raw}
    items = raw.get("entries") or [dict(zip(raw["fields"], r, strict=True)) for r in raw["rows"]]
    for item in items:
        if item["name"] in raw.get("exponent_assumed", []):
            item["exponent_assumed"] = True
    return {item["name"]: item for item in items}


def versions() -> dict[str, str]:
    return {module: str(__import__(module).__version__) for module in LIBRARIES}


class Builder:
    """Builds entries one by one, keeping unchanged ones and recording failures."""

    def __init__(self, rebuild: bool) -> None:
        path = DATA_DIR / "versions.json"
        same = path.exists() and json.loads(path.read_text()) == versions()
        self.reuse = same and not rebuild
        self.failures: dict[str, str] = {}

    def collect(
        self,
        source: str,
        names: list[str],
        make: Callable[[str], dict[str, Any]],
        complete: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
        reuse: bool = True,
        fields: list[str] = VISION_FIELDS,
    ) -> dict[str, dict[str, Any]]:
        """Entries by name; `complete` adds the `fields` a kept entry lacks (a field
        added since it was built) from the name and the entry."""
        kept = read_entries(source) if self.reuse and reuse else {}
        built: dict[str, dict[str, Any]] = {}
        for number, name in enumerate(names, 1):
            try:
                if name not in kept:
                    built[name] = make(name)
                else:
                    built[name] = kept[name]
                    if complete and not set(fields) <= set(kept[name]):
                        built[name] = kept[name] | complete(name, kept[name])
            except Exception as exc:  # recorded in the output, not fatal (a kept entry stays)
                self.failures[f"{source}:{name}"] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{source}: {number}/{len(names)} {name}", file=sys.stderr)
        return built


def write_rows(
    source: str, built: dict[str, dict[str, Any]], fields: list[str], **extra: Any
) -> None:
    """One row a model (a compact file: timm has over a thousand)."""
    assumed = sorted(name for name, entry in built.items() if entry.get("exponent_assumed"))
    rows = [[entry.get(f, 0) for f in fields] for _, entry in sorted(built.items())]
    lines = ",\n".join(json.dumps(row, separators=(",", ":")) for row in rows)
    head = {
        "source": source,
        "generated": "built on the meta device by estimator/catalog/build.py (data/versions.json)",
        "exponent_assumed": assumed,
        "fields": fields,
        **extra,
    }
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    (DATA_DIR / f"{source}.json").write_text(f'{body},\n "rows": [\n{lines}\n ]\n}}\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=["torchvision", "timm", "hf"])
    parser.add_argument("--rebuild", action="store_true", help="build kept entries again")
    args = parser.parse_args()
    builder = Builder(args.rebuild)
    if args.only in (None, "torchvision"):
        import torchvision

        names = sorted(torchvision.models.list_models(module=torchvision.models))
        built = builder.collect("torchvision", names, torchvision_entry, torchvision_completed)
        write_rows("torchvision", built, VISION_FIELDS)
    if args.only in (None, "timm"):
        import timm

        built = builder.collect(
            "timm", sorted(timm.list_models()), timm_entry, timm_completed, fields=TIMM_FIELDS
        )
        write_rows("timm", built, TIMM_FIELDS, **timm_names_and_tags(built))
    if args.only in (None, "hf"):
        from estimator.catalog import hf_build

        hf_build.write(builder)
    path = DATA_DIR / "build_failures.json"
    failures = json.loads(path.read_text()) if args.only and path.exists() else {}
    prefix = f"{args.only}:" if args.only else ""
    failures = {k: v for k, v in failures.items() if not k.startswith(prefix)} | builder.failures
    path.write_text(json.dumps(failures, indent=1, sort_keys=True) + "\n")
    (DATA_DIR / "versions.json").write_text(json.dumps(versions(), indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
