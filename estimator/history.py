"""History: what jobs of the same spec, or of its configuration at other batch sizes,
really used, by GPU model.

A spec's fingerprint is the hash of its canonical JSON, so resubmitting the same
training configuration finds the peaks observed before and needs no guessing: on the
same GPU model as they are, on another with the CUDA context swapped (`estimate.py`).
Runs of one configuration at other batch sizes place it on a line (`batch_line`): what
a training step holds is a fixed part (context, weights, gradients, optimizer state)
plus activations proportional to the batch. The same runs bound its model terms at
batch sizes beyond those seen (`Estimator`, method `history-ratio`): by how far
above the analytical terms the runs' own went.

Repeats of one spec read nearly the same peak, but one run may go far above the rest
(a data-dependent shape, a cuDNN benchmark workspace). Such a surprise bounds the
spec's next runs, and widens its architecture, only until two of the spec's runs repeat
a lower figure, or until it is RUNS_KEPT runs old: what a spec's runs say
(`_Votes.level`) is the largest figure of its latest runs that another of them
repeated, or their largest where none was. A spec whose runs really reach two levels
repeats the higher one too, so it is kept. One attempt is one run, however many GPUs
report it.

History is only as good as the runs it learns from, and on a shared cluster a user
chooses what their job really does. So a peak is learned from only when it is credible
(`credibility_problem`), and one owner's figures (its peaks, what its OOMs held, how far
its runs went above the models' estimate) answer for that owner's jobs at once but for
other owners' only as far as another voter's agree (`_Votes`): of a spec on a GPU model,
each owner's level counts once, and the vouched-for runs' (no owner, or trusted) as
one voter whose figures every owner may rely on at once. Other owners see the largest
level another voter's lies within HISTORY_MARGIN of (what repeats of one
spec differ by), so that one owner's inflated run can raise no one else's reservation
by more than that, and a fake low one cannot talk another's below what an honest owner
reached; two owners who disagree leave other owners' jobs as if neither had run. A run
on one GPU model checks nothing of a figure claimed on another. How far a run went above
the models' estimate widens the bound of every job of its architecture (any batch size,
any GPU model) as far as the spec's agreed figure on that GPU model goes; shared, it
only ever rises, so a user cannot talk another's bound down (only vouched-for runs, and
each owner's for its own jobs, can show their own surprise was one).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from estimator.analytical.model import breakdown
from estimator.gpus import canonical_gpu_name
from estimator.spec import TrainingSpec

# Repeat runs of one configuration in one environment differ by a few percent
# (cuDNN algorithm choice, allocator history); keep this much above the largest seen
# until the cluster's own repeats say less (`repeat_margin`).
HISTORY_MARGIN = 0.10
# The confidence with which the repeats' spread bounds the share of repeats the
# estimator's coverage names: 95%, the usual for a distribution-free tolerance bound
# (Wilks 1941, Ann. Math. Statist. 12(1):91-96; at 95% of repeats, 59 of them are the
# fewest for which the largest ratio seen is such a bound).
REPEAT_CONFIDENCE = 0.95
# A training run reaches its peak in its first optimizer steps (the optimizer state is
# allocated at the first step, the activations at the first forward and backward), after
# a start-up (importing PyTorch, creating the CUDA context, building and loading the
# model, starting data-loader workers, cuDNN autotuning) that takes tens of seconds for
# PyTorch jobs on the GPUs Colloc runs on. A run that ended within a minute most likely
# never reached its training loop (a `sleep`, a crash at import): its peak says nothing.
MIN_CREDIBLE_RUN_S = 60.0
# How far apart (a factor) the two batch sizes around a spec's may be for the line
# between them to estimate it: the doublings runs are usually measured at (8, 16, 32,
# ...) put the nearest two at most 4x apart.
BRACKET_SPAN = 4
# How many batch sizes of a configuration must have run before the largest ratio of
# their model terms to the analytical ones bounds it at other batch sizes: two, so that
# one run's quirk never sets it alone. On the measured timm runs, held out by model,
# two left fewer runs above that bound than one (bench/estimator_accuracy.py, section 5).
MIN_RATIO_BATCHES = 2
# How many of a voter's latest runs of a spec on a GPU model say what the next will do
# (`_Votes.level`): enough for a level repeated among them with a surprise or two beside
# it, few enough that a surprise is forgotten after as many runs (at the rate of
# surprises issue 20 simulates, 1% of runs, two fall within one window of eight in about
# 1 of 370 windows), and that a spec whose runs changed with the cluster's stack soon
# goes by what it does now.
RUNS_KEPT = 8
_N = TypeVar("_N", int, float)


def _level(figures: list[_N]) -> _N | None:
    """What runs' `figures` (largest first) say the next will reach: the largest that
    another lies within HISTORY_MARGIN below, or the largest where none does (None:
    no figures)."""
    repeated = (hi for hi, lo in itertools.pairwise(figures) if hi <= lo * (1 + HISTORY_MARGIN))
    return next(repeated, figures[0]) if figures else None


def _largest(*values: _N | None) -> _N | None:
    """The largest of `values` that are known (None: none is)."""
    return max((value for value in values if value is not None), default=None)


def fingerprint(spec: TrainingSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def configuration(spec: TrainingSpec) -> str:
    """The hash of the spec but for its batch size (per GPU, the micro-batch)."""
    fields = spec.model_dump(mode="json")
    del fields["batch_size"]
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def line_through(peaks: Mapping[int, float], b1: int, b2: int, batch: int) -> float | None:
    """The peak at `batch` on the line through the peaks at batches `b1` < `b2`, or None
    where the peak falls as the batch grows (then one of the two readings is wrong)."""
    y1, y2 = peaks[b1], peaks[b2]
    return None if y2 < y1 else y1 + (y2 - y1) * (batch - b1) / (b2 - b1)


def bracket(peaks: Mapping[int, float], batch: int) -> tuple[int, int] | None:
    """The nearest batches of `peaks` below and above `batch`, or None where a side has
    none or they lie more than BRACKET_SPAN apart."""
    below = [b for b in peaks if b < batch]
    above = [b for b in peaks if b > batch]
    if not (below and above) or min(above) > BRACKET_SPAN * max(below):
        return None
    return max(below), min(above)


def batch_line(peaks: Mapping[int, float], batch: int) -> float | None:
    """The peak at `batch` on the line through a configuration's `peaks` at other batch
    sizes (batch -> peak, on one GPU), or None where they place none.

    Only inside a bracket: the nearest batch on either side, at most BRACKET_SPAN
    apart. Where the two nearest batches below place a line too, the higher of the two
    lines (a run measured near its GPU's capacity bends the chord down), but only as far
    beyond them as twice their own gap, so that repeat runs' noise between two close
    batches is not carried far. Peaks that fall as the batch grows, in either pair used,
    place no line. Beyond the batches seen a line is not followed. On the measured timm
    runs, more peaks lie above the line plus HISTORY_MARGIN for the chord alone, or for
    a line extrapolated beyond the batches seen, than for this rule
    (bench/estimator_accuracy.py, section 4)."""
    pair = bracket(peaks, batch)
    if pair is None:
        return None
    chord = line_through(peaks, *pair, batch)
    below = sorted(b for b in peaks if b < batch)
    if chord is None or len(below) < 2:
        return chord
    b1, b2 = below[-2], below[-1]
    lower = line_through(peaks, b1, b2, batch)
    if lower is None:
        return None
    return max(chord, lower) if batch - b2 <= 2 * (b2 - b1) else chord


def _gpu_key(gpu_model: str) -> str:
    return canonical_gpu_name(gpu_model) or gpu_model


def architecture(spec: TrainingSpec) -> str:
    """The spec's model alone (any batch, precision or GPU count)."""
    return json.dumps(spec.model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def architecture_digest(spec: TrainingSpec) -> str:
    """A short name of `architecture(spec)`, for rows that record which one they are of."""
    return hashlib.sha256(architecture(spec).encode()).hexdigest()[:16]


def weights_mib(spec: TrainingSpec) -> float:
    """The analytical weights term: what one GPU of the job holds of the model's
    parameters (whatever the GPU); SpecError if the estimator cannot read `spec`."""
    return breakdown(spec, None).weights


def credibility_problem(*, peak_mib: int, ran_s: float, weights_mib: float) -> str | None:
    """Why an observed peak of a finished run is not one to learn from, or None."""
    if peak_mib <= 0:
        return "no GPU memory was seen in use"
    if ran_s < MIN_CREDIBLE_RUN_S:
        return (
            f"ran {ran_s:.0f} s, less than the {MIN_CREDIBLE_RUN_S:.0f} s a training run "
            "takes to reach its peak"
        )
    if peak_mib < weights_mib:
        return f"peak {peak_mib} MiB is below the {weights_mib:.0f} MiB its weights alone take"
    return None


def tolerance_rank(samples: int, content: float, confidence: float) -> int | None:
    """The largest r for which the r-th largest of `samples` independent draws lies at
    or above the distribution's `content` quantile with at least `confidence`
    (distribution-free: Wilks 1941); None where not even the largest does.

    The r-th largest falls below the quantile only if at least `samples` - r + 1 draws
    do, each with probability `content`: the binomial tail summed from the top."""
    if not (0 < content < 1 and 0 < confidence < 1):
        raise ValueError(f"content {content} and confidence {confidence} must lie in (0, 1)")
    if samples < 1:
        return None
    allowed = 1.0 - confidence
    log_p, log_q = math.log(content), math.log1p(-content)
    log_pmf = samples * log_p  # all draws below the quantile
    tail, rank = math.exp(log_pmf), 0
    while tail <= allowed and rank < samples:
        rank += 1
        below = samples - rank  # the next term: this many draws below the quantile
        log_pmf += math.log((below + 1) / (samples - below)) + log_q - log_p
        tail += math.exp(log_pmf)
    return rank or None


def _repeat_bound(
    ratios: list[tuple[float, str | None]], count: int, content: float, left_out: str | None
) -> float | None:
    """The tolerance bound of the repeats' `ratios` (largest first, with who ran each)
    but the `count` of owner `left_out`; a walk down the list, so that leaving each
    owner out in turn costs no sort of its own."""
    rank = tolerance_rank(len(ratios) - count, content, REPEAT_CONFIDENCE)
    if rank is None:
        return None
    kept = (ratio for ratio, voter in ratios if voter is None or voter != left_out)
    return next(itertools.islice(kept, rank - 1, None))


@dataclass
class _Repeats:
    """Of each spec that ran again on a GPU model, the largest ratio of a run's peak to
    the level of those before it (`_Votes.level`), by (fingerprint, GPU model, who ran
    it: None for runs without owners or trusted); how often they changed; and the
    margins they gave then, by coverage. One object, shared by every view of a history
    (`seen_by`)."""

    ratios: dict[tuple[str, str, str | None], float] = field(default_factory=dict)
    changed: int = 0
    margins: dict[float, tuple[int, float]] = field(default_factory=dict)


@dataclass
class _Votes(Generic[_N]):
    """One figure of a spec on a GPU model (its peak, what its OOMs held, how far its runs
    went above the models' estimate): each voter's latest runs (an owner, or None for the
    vouched-for runs), what they say of the spec (`level`), and the largest level other
    owners' jobs may rely on (`shared`).

    A voter's level is the largest figure of its last RUNS_KEPT runs that another of them
    repeated (within HISTORY_MARGIN below it), or their largest where none was repeated:
    one run's surprise (a data-dependent shape, a cuDNN benchmark workspace) bounds the
    spec's next runs until two runs repeat a lower figure, or until it is RUNS_KEPT runs
    old; a spec whose runs really reach two levels repeats the higher one too. A run
    (an attempt) counts once, at its largest figure, however many of its GPUs report it.

    A level is shared once another voter's lies within HISTORY_MARGIN of it (either
    side), the largest of such ever, so it only rises: a surprise two voters happened
    to agree on stays shared. The higher of two that agree: a fake figure just below an
    honest one cannot talk other owners' jobs below what the honest owner reached, and
    one just above raises them by at most HISTORY_MARGIN."""

    # each voter's last RUNS_KEPT runs, oldest first: (run, figure); replaced, never
    # changed in place, so a reader on another thread sees one whole tuple
    latest: dict[str | None, tuple[tuple[object, _N], ...]] = field(default_factory=dict)
    shared: _N | None = None

    def figures(self, voter: str | None, without: object = None) -> list[_N]:
        """`voter`'s latest figures, largest first (but run `without`'s, if named)."""
        kept = self.latest.get(voter, ())
        return sorted((f for r, f in kept if without is None or r != without), reverse=True)

    def level(self, voter: str | None, without: object = None) -> _N | None:
        """What `voter`'s runs (but run `without`, if named) say of the spec (None:
        none)."""
        return _level(self.figures(voter, without))

    def ran(self, voter: str | None, run: object) -> bool:
        """Whether `run` (None: unnamed, never) is among `voter`'s latest."""
        return run is not None and any(r == run for r, _f in self.latest.get(voter, ()))

    def add(self, voter: str | None, value: _N, run: object = None) -> _N | None:
        """Count a run's figure (`run`: the run it is of, another GPU of which may have
        reported already; None: a run of its own); returns the shared figure where it
        rose, else None."""
        kept = list(self.latest.get(voter, ()))
        if self.ran(voter, run):
            kept = [(r, value if r == run and value > f else f) for r, f in kept]
        else:
            kept.append((run, value))
        self.latest[voter] = tuple(kept[-RUNS_KEPT:])
        levels = (self.level(each) for each in list(self.latest))
        ranked = sorted((level for level in levels if level is not None), reverse=True)
        agreed = next(
            (hi for hi, lo in itertools.pairwise(ranked) if hi <= lo * (1 + HISTORY_MARGIN)), None
        )
        if agreed is None or (self.shared is not None and agreed <= self.shared):
            return None
        self.shared = agreed
        return agreed

    def seen_by(self, viewer: str | None) -> _N | None:
        """The figure `viewer`'s jobs may rely on: the largest of the viewer's own level,
        the vouched-for runs', and the shared one (None: none of them)."""
        return _largest(self.level(viewer), self.level(None), self.shared)


class ObservationHistory:
    """Observed peaks by spec fingerprint, then GPU model (and the same by configuration
    and batch size); what runs of a spec held when they died of an OOM, likewise; and,
    by architecture, then spec and GPU model, how far runs went above the estimate the
    models made of them.

    `seen_by(owner)` is the history as that owner's jobs see it: the shared figures
    plus the owner's own. The history itself (no viewer) shows the shared ones only."""

    def __init__(self) -> None:
        self._peaks: dict[str, dict[str, _Votes[int]]] = {}
        # the same by configuration, then batch size (one spec's by GPU model)
        self._batches: dict[str, dict[int, dict[str, _Votes[int]]]] = {}
        # the most a run of each fingerprint held when it died of an OOM, by GPU model
        self._ooms: dict[str, dict[str, _Votes[int]]] = {}
        # how far runs went above their estimate: by architecture, then (fingerprint,
        # GPU model)
        self._ratios: dict[str, dict[tuple[str, str], _Votes[float]]] = {}
        self._repeats = _Repeats()
        # runs taken in (peaks and OOMs) by architecture digest, and of them the
        # vouched-for ones: an estimate of the architecture made before either count
        # moved may be out of date (`runs_of`)
        self._runs: Counter[str] = Counter()
        self._vouched: Counter[str] = Counter()
        self._viewer: str | None = None

    def add(
        self,
        spec: TrainingSpec,
        gpu_model: str,
        peak_mib: int,
        ratio: float,
        owner: str | None = None,
        trusted: bool = False,
        run: object = None,
    ) -> list[tuple[str, int]]:
        """Keep a credible peak (of `run`, one attempt, which may report a peak for each
        of its GPUs; None: a run of its own); returns the (GPU model, peak) pairs it made
        every owner's (itself if vouched for, and the spec's shared peak there if it
        rose)."""
        key, gpu = fingerprint(spec), _gpu_key(gpu_model)
        voter = None if trusted else owner
        self._count(spec, voter)
        by_gpu = self._peaks.setdefault(key, {})
        self._batches.setdefault(configuration(spec), {})[spec.batch_size] = by_gpu
        votes = by_gpu.setdefault(gpu, _Votes())
        self._repeat(key, gpu, voter, peak_mib, votes, run)
        released = {peak_mib} if voter is None else set()
        rose = votes.add(voter, peak_mib, run)
        if rose is not None:
            released.add(rose)
        self._widen(spec, key, gpu, ratio, voter, run)
        return [(gpu, mib) for mib in sorted(released)]

    def add_oom(
        self,
        spec: TrainingSpec,
        gpu_model: str,
        held_mib: int,
        ratio: float,
        owner: str | None = None,
        trusted: bool = False,
        run: object = None,
    ) -> None:
        """Note that a run (`run`, as `add` takes it) of `spec` by `owner` died of an OOM
        holding `held_mib` on `gpu_model`, `ratio` times the models' estimate: it needed
        more there (for its owner's jobs at once, for others' as far as another voter's
        agree: `_Votes`; `ooms_by_gpu`), and its ratio widens the architecture's bounds
        as a peak's does (`_widen`)."""
        key, gpu = fingerprint(spec), _gpu_key(gpu_model)
        voter = None if trusted else owner
        self._count(spec, voter)
        ooms = self._ooms.setdefault(key, {}).setdefault(gpu, _Votes())
        before = self._peaks.get(key, {}).get(gpu, _Votes())
        self._repeat(key, gpu, voter, held_mib, before, run, oom=True)
        ooms.add(voter, held_mib, run)
        self._widen(spec, key, gpu, ratio, voter, run)

    def _repeat(
        self,
        key: str,
        gpu: str,
        voter: str | None,
        used_mib: int,
        before: _Votes[int],
        run: object,
        oom: bool = False,
    ) -> None:
        """Note how far `run` of spec `key` on `gpu` by `voter` (None: vouched for) went
        above the level that voter's other runs, or vouched-for ones, showed there
        (`_Votes.level`): no peak of an owner but its own sets what a run is judged
        against. A run's GPUs are judged each, and the largest ratio is kept, so a run
        counts at its largest figure. An OOM counts only where it held more than that
        level, at what it held (a floor of what it needed); below, it may have died of a
        neighbour's memory and says nothing of the spec's spread."""
        levels = (before.level(v, without=run) for v in {None, voter})
        judged = [level for level in levels if level is not None]
        if not judged:
            return
        ratio = used_mib / max(1, max(judged))
        if oom and ratio <= 1:
            return
        slot = (key, gpu, voter)
        if ratio > self._repeats.ratios.get(slot, 0.0):
            self._repeats.ratios[slot] = ratio
            self._repeats.changed += 1

    def repeat_margin(self, content: float) -> float:
        """How far above the level of a spec's peaks on a GPU model (`_Votes.level`) to
        bound its next run there: the least of HISTORY_MARGIN and the spread the
        cluster's repeats show, an upper tolerance bound (REPEAT_CONFIDENCE) of the ratio
        of a repeat to the level before it, for a `content` share of repeats.

        The share is of the cluster's repeats, not of each spec's: a spec whose runs
        scatter more than most may go above it more often. Each owner's repeats count
        once per spec and GPU model, at their largest, judged against that owner's or
        vouched-for peaks only (`_repeat`). It is the largest of the bounds the repeats
        give with each ordinary owner's left out in turn, so never below the bound of
        the other owners' repeats together: an owner whose jobs always read the same
        peak cannot talk every owner's margin down alone. Where the repeats are too few
        for a bound, HISTORY_MARGIN holds."""
        changed = self._repeats.changed
        kept = self._repeats.margins.get(content)
        if kept is not None and kept[0] == changed:
            return kept[1]
        repeats = list(self._repeats.ratios.items())  # (a snapshot: the sync may add)
        ratios = sorted(
            ((ratio, voter) for (_k, _g, voter), ratio in repeats),
            key=lambda pair: pair[0],
            reverse=True,
        )
        counts: Counter[str | None] = Counter(v for _r, v in ratios if v is not None)
        bounds = [
            _repeat_bound(ratios, counts[left_out], content, left_out)
            for left_out in list(counts) or [None]
        ]
        known = [bound for bound in bounds if bound is not None]
        margin = HISTORY_MARGIN  # one owner's repeats would decide, or too few
        if known and len(known) == len(bounds):
            margin = min(HISTORY_MARGIN, max(0.0, max(known) - 1))
        self._repeats.margins[content] = (changed, margin)
        return margin

    def ooms_by_gpu(self, spec: TrainingSpec) -> dict[str, int]:
        """What runs of `spec` the viewer may rely on held when they died of an OOM, by
        GPU model, where that says more than its peaks there: the level of its latest
        peaks and OOMs together (`_Votes.level`, an OOM at what it held), so that one
        OOM above runs that repeated a lower peak is one run's surprise, as a peak would
        be, and OOMs that repeat one another count."""
        key = fingerprint(spec)
        peaks = self._peaks.get(key, {})
        found = {}
        for gpu, ooms in list(self._ooms.get(key, {}).items()):
            ran = peaks.get(gpu, _Votes())
            levels = (
                _level(sorted(ooms.figures(v) + ran.figures(v), reverse=True))
                for v in {self._viewer, None}
            )
            held = _largest(*levels, ooms.shared)
            if held is not None and held > (ran.seen_by(self._viewer) or 0):
                found[gpu] = held
        return found

    def _widen(
        self,
        spec: TrainingSpec,
        key: str,
        gpu: str,
        ratio: float,
        voter: str | None,
        run: object,
    ) -> None:
        """Note that `run` of `voter` (None: vouched for) of spec `key` on `gpu` went
        `ratio` times its estimate (`model_ratio`)."""
        by_spec = self._ratios.setdefault(architecture(spec), {})
        by_spec.setdefault((key, gpu), _Votes()).add(voter, ratio, run)

    def model_ratio(self, spec: TrainingSpec) -> float | None:
        """How far above their estimates runs of this architecture went, at most: of each
        of its specs on each GPU model, the ratio the viewer may rely on (`_Votes`)."""
        by_spec = self._ratios.get(architecture(spec), {})
        return _largest(*(votes.seen_by(self._viewer) for votes in list(by_spec.values())))

    def _count(self, spec: TrainingSpec, voter: str | None) -> None:
        digest = architecture_digest(spec)
        self._runs[digest] += 1
        self._vouched[digest] += voter is None

    def runs_of(self, digest: str) -> tuple[int, int]:
        """How many runs (peaks and OOMs) of the architecture `architecture_digest` names
        this history took in, and how many of them were vouched for: whatever it learns
        of an architecture moves one of the two. (An admin's trust turns an owner's runs
        into vouched-for ones: the history is rebuilt with as many runs, more vouched.)"""
        return self._runs[digest], self._vouched[digest]

    def seen_by(self, owner: str | None) -> ObservationHistory:
        """This history as `owner`'s jobs see it (the same records, not a copy)."""
        view = copy.copy(self)
        view._viewer = owner
        return view

    def peaks_by_gpu(self, spec: TrainingSpec) -> dict[str, int]:
        """The visible peak of `spec` (`_Votes.seen_by`) on each GPU model it ran on, by
        NVML name (or the name it was observed under, for a model the catalog does not
        know)."""
        return self._visible(self._peaks.get(fingerprint(spec), {}))

    def peaks_by_batch(self, spec: TrainingSpec) -> dict[int, dict[str, int]]:
        """`peaks_by_gpu` of the spec's configuration at each other batch size it ran
        at, by batch size."""
        batches = self._batches.get(configuration(spec), {})
        visible = {  # (a snapshot: the service's sync may add a batch meanwhile)
            batch: self._visible(by_gpu)
            for batch, by_gpu in list(batches.items())
            if batch != spec.batch_size
        }
        return {batch: peaks for batch, peaks in visible.items() if peaks}

    def _visible(self, by_gpu: dict[str, _Votes[int]]) -> dict[str, int]:
        seen = {gpu: votes.seen_by(self._viewer) for gpu, votes in list(by_gpu.items())}
        return {gpu: mib for gpu, mib in seen.items() if mib is not None}
