"""The search engine's settings: `SearchConfig`, stored with the run (JSON, `to_dict` /
`from_dict`) so that `resume` and the report read back exactly what the search ran with.

Three parts are the engine's own: `Evolution` (what is proposed, and how parents are picked),
`Hurdles` (multi-fidelity: where a layer may stop early) and `Execution` (workers, device,
timeouts). A setting is read and replaced through its part (`cfg.evolution.budget`). The
objective's own settings travel in `task`, a JSON object the engine stores for the record and
never reads (the built-in proxy task's `evonorm.proxy.config.ProxyConfig`; None for an objective
of one's own, which holds its settings itself).

Where a call comes in (`search(budget=...)`, a preset's overrides, a command-line flag) a setting
is named by a plain keyword: `with_settings` resolves each to its one field, once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from evonorm.search.evolution import ALGORITHMS, CRITERIA
from evonorm.search.objective import SCORE_NAME

SPACES = ("b", "s")
GENOME_NODES = 10  # the most nodes a graph holds (`evonorm.graph.MAX_NODES`; not imported: it loads torch)
MAX_THREADS = 256  # torch threads per worker: past the cores of any machine, OpenMP fails to start them
MAX_SEED = 2**31 - 1  # every seed derived from it (+ offsets) stays within what numpy and torch take
EXECUTORS = ("local", "ray")
DEVICES = ("cpu", "cuda")
# A setting that a preset's calibration depends on (`dataclasses.field(metadata=MEASURED)`): a run
# that differs from its preset in one is not what was measured (`evonorm.proxy.config.measured`).
MEASURED = {"measured": True}


class _Part:
    """A part of the config: frozen, changed by copy."""

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Evolution(_Part):
    """What the search proposes: the space, the algorithm and its population."""

    space: str = field(default="s", metadata=MEASURED)  # the references and random layers measured
    algorithm: str = "evolution"
    budget: int = 100  # candidates proposed in all (rejected and cache hits included)
    budget_seconds: float | None = None  # also stop proposing once candidates took this many
    # worker-seconds in all (equal-compute comparisons; None: no limit)
    max_nodes: int = field(default=10, metadata=MEASURED)  # the random layers measured
    seed_layers: tuple[str, ...] = ()  # named graphs or graph JSON, evaluated first (origin "seed")
    window: int = 2500  # the aging population, and each hurdle's recent layers
    initial_population: int = 20
    tournament_fraction: float = 0.05
    tournament_min: int = 2
    criterion: str = "pareto"
    mutations: int = 2
    p_random: float = 0.5
    # from scratch, where valid layers are rare: layers the objective rejected after they
    # scored on some of its names (near misses) join the population too, below every valid
    # layer (stage 0), so evolution has parents before its first valid layer
    near_misses: bool = False
    # the checks of the layer alone (constant output, output independent of x, non-finite at
    # initialisation: `evonorm.search.checks`), run for every objective before it trains a layer
    prechecks: bool = field(default=True, metadata=MEASURED)
    # the prescreen (evonorm.search.surrogate): a surrogate learned as the search goes ranks
    # `prescreen_pool` children per slot by their features at birth and trains the best; one
    # predicted to pass rejection with probability below `prescreen_threshold` is rejected
    # untrained; a share `prescreen_explore` of slots trains one child whatever it predicts (so it
    # keeps learning and its false negatives are measured); no prediction before it has learned
    # from `prescreen_min` valid and `prescreen_min` rejected candidates (counting the prior's:
    # labelled candidates of earlier runs under the same setting, where the objective has them and
    # `prescreen_prior` is on). Off: not yet measured to pay for itself.
    prescreen: bool = False
    prescreen_pool: int = 4
    prescreen_threshold: float = 0.05
    prescreen_explore: float = 0.2
    prescreen_min: int = 3
    prescreen_prior: bool = True
    # the ladder's first rung: a child whose P(passes) from a forest on the engine's features of
    # the layer alone (milliseconds) is below this is rejected before the task's features (which
    # cost more) are computed; not in exploring slots (0: off)
    prescreen_layer_threshold: float = 0.0
    # a child whose function the run already knows (scored, or in flight) would only take a slot
    # to repeat a known result as a cache hit: it is drawn again (mutated anew, or a fresh random
    # graph), up to `fresh_tries` times, before it takes its slot (0: children are not checked)
    fresh_tries: int = 0
    # the best member of each niche (which statistic the layer divides by) stays a tournament
    # contestant after it ages out of the window, so a normalizing layer found early is not
    # crowded out by faster-starting unnormalized ones
    niches: bool = False

    def __post_init__(self):
        _tuple(self, "seed_layers")

    def errors(self) -> list[str]:
        e = []
        if self.space not in SPACES:
            e.append(f"space must be one of {', '.join(SPACES)}, got {self.space!r}")
        if self.algorithm not in ALGORITHMS:
            e.append(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.criterion not in CRITERIA:
            e.append(f"criterion must be one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.budget < 1:
            e.append(f"budget must be >= 1, got {self.budget}")
        if self.budget_seconds is not None and not (
                math.isfinite(self.budget_seconds) and self.budget_seconds > 0):
            e.append(f"budget_seconds must be a finite number > 0, got {self.budget_seconds}")
        if self.window < 1:
            e.append(f"window must be >= 1, got {self.window}")
        if not 1 <= self.max_nodes <= GENOME_NODES:
            e.append(f"max_nodes must be in 1..{GENOME_NODES}, got {self.max_nodes}")
        if self.initial_population < 0 or self.mutations < 1 or self.tournament_min < 1:
            e.append(f"initial_population must be >= 0, mutations and tournament_min >= 1, got "
                     f"{self.initial_population}, {self.mutations} and {self.tournament_min}")
        if not 0.0 < self.tournament_fraction <= 1.0:
            e.append(f"tournament_fraction must be in (0, 1], got {self.tournament_fraction}")
        if not 0.0 <= self.p_random <= 1.0:
            e.append(f"p_random must be in [0, 1], got {self.p_random}")
        if not isinstance(self.prescreen, bool):
            e.append(f"prescreen must be True or False (on or off), got {self.prescreen!r}")
        if not isinstance(self.prescreen_prior, bool):
            e.append(f"prescreen_prior must be True or False (on or off), got "
                     f"{self.prescreen_prior!r}")
        if self.prescreen_pool < 1:
            e.append(f"prescreen_pool must be >= 1, got {self.prescreen_pool}")
        if not 0.0 <= self.prescreen_threshold < 1.0:
            e.append(f"prescreen_threshold must be in [0, 1), got {self.prescreen_threshold}")
        if not 0.0 <= self.prescreen_explore <= 1.0:
            e.append(f"prescreen_explore must be in [0, 1], got {self.prescreen_explore}")
        if not 0.0 <= self.prescreen_layer_threshold < 1.0:
            e.append(f"prescreen_layer_threshold must be in [0, 1), got "
                     f"{self.prescreen_layer_threshold}")
        if self.prescreen_min < 1:
            e.append(f"prescreen_min must be >= 1, got {self.prescreen_min}")
        if not isinstance(self.niches, bool):
            e.append(f"niches must be True or False (on or off), got {self.niches!r}")
        if self.fresh_tries < 0:
            e.append(f"fresh_tries must be >= 0, got {self.fresh_tries}")
        return e

    @property
    def allow_batch(self) -> bool:
        """B search allows every op; S search excludes the batch_* aggregations."""
        return self.space == "b"


@dataclass(frozen=True)
class Hurdles(_Part):
    """Progressive dynamic hurdles (So et al. 2019): the objective reports once per stage, and a
    layer goes on only while its stage fitness clears that stage's hurdle, the mean stage fitness
    of the last `window` layers that reached it (once `hurdle_min` have). `stage_steps` are the
    training steps the built-in task scores at before its end; only their number matters to the
    engine, and `()` switches hurdles off."""

    stage_steps: tuple[int, ...] = field(default=(), metadata=MEASURED)
    hurdle_min: int = 4

    def __post_init__(self):
        _tuple(self, "stage_steps")

    def errors(self) -> list[str]:
        e = []
        steps = self.stage_steps
        if list(steps) != sorted(set(steps)) or any(s < 1 for s in steps):
            e.append(f"stage_steps must be increasing step counts >= 1, got {list(steps)}")
        if self.hurdle_min < 1:
            e.append(f"hurdle_min must be >= 1, got {self.hurdle_min}")
        return e

    @property
    def num_stages(self) -> int:
        """Scored stages of a fully evaluated layer: one per `stage_steps`, plus the end."""
        return len(self.stage_steps) + 1


@dataclass(frozen=True)
class Execution(_Part):
    """Where candidates run: workers, executor, device, limits."""

    workers: int = 0  # 0 -> one per core
    threads: int = 0  # torch threads per local worker (0: one; more run slower beside other work)
    executor: str = "local"
    address: str | None = None
    timeout: float = 3600.0  # seconds per candidate before its worker is killed
    retries: int = 1  # re-runs of a candidate whose worker died or hung
    # where candidates train: "cpu" or "cuda[:N]" (`--device auto` is resolved when the run
    # starts and stored that way). Local workers share the GPU; a Ray task asks for
    # `gpus_per_worker` of one (None: the cluster's GPUs divided among the workers, at most one each).
    device: str = "cpu"
    gpus_per_worker: float | None = None
    # a folder shipped to remote Ray workers as their working directory (the task's data);
    # the objective finds it as `trial.data_dir`
    data_dir: str | None = None

    def errors(self) -> list[str]:
        e = []
        if self.executor not in EXECUTORS:
            e.append(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.workers < 0:
            e.append(f"workers must be >= 0, got {self.workers}")
        if not 0 <= self.threads <= MAX_THREADS:
            e.append(f"threads must be in 0..{MAX_THREADS} (0: one), got {self.threads}")
        if self.retries < 0:
            e.append(f"retries must be >= 0, got {self.retries}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):  # nan would disable it
            e.append(f"timeout must be a finite number of seconds > 0, got {self.timeout}")
        if self.device.split(":", 1)[0] not in DEVICES:
            e.append(f"device must be cpu or cuda[:N], got {self.device!r}")
        if self.gpus_per_worker is not None and not 0.0 < self.gpus_per_worker <= 1.0:
            e.append(f"gpus_per_worker must be in (0, 1], got {self.gpus_per_worker}")
        return e

    @property
    def num_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


PARTS = {"evolution": Evolution, "hurdles": Hurdles, "execution": Execution}


@dataclass(frozen=True)
class SearchConfig:
    """Everything the engine needs for a run, and the task's settings it carries along."""

    preset: str = "custom"  # the preset it came from, or "custom"
    # the objective scoring candidates, as "module:function" (None: the built-in proxy task).
    # Only recorded: resuming such a run takes the function again from its caller, never from here.
    objective: str | None = None
    seed: int = 0
    # the names the objective scores a layer under (a float result: "objective"; the built-in
    # task: its anchor architectures): what evolution's Pareto tournaments compare
    scores: tuple[str, ...] = (SCORE_NAME,)
    evolution: Evolution = field(default_factory=Evolution)
    hurdles: Hurdles = field(default_factory=Hurdles)
    execution: Execution = field(default_factory=Execution)
    task: Mapping[str, Any] | None = None  # the objective's own settings, stored, never read here

    def __post_init__(self):
        _tuple(self, "scores")
        # the types first, as the CLI's parser and the store's reader check them: a setting given
        # from Python (`window=2.5`, `seed="1"`) is refused here, not written and then refused when
        # read back
        wrong = [f"{name}: {problem}" for name, problem in _type_problems(self, exclude=set(PARTS))]
        wrong += [f"{part}.{name}: {problem}" for part in PARTS
                  for name, problem in _type_problems(getattr(self, part))]
        if wrong:
            raise ValueError("; ".join(wrong))
        errors = [*self.evolution.errors(), *self.hurdles.errors(), *self.execution.errors()]
        if not self.scores:
            errors.append("need at least one score name")
        if not 0 <= self.seed <= MAX_SEED:
            errors.append(f"seed must be in 0..{MAX_SEED}, got {self.seed}")
        if errors:
            raise ValueError("; ".join(errors))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["task"] = None if self.task is None else dict(self.task)
        return _lists(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SearchConfig":
        """The config as stored: each part's settings under its part. ValueError (one line naming
        the field) for anything else."""
        d = dict(d)
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            where = f" (a setting of {KEYWORDS[unknown[0]]}, stored under it)" \
                if KEYWORDS.get(unknown[0]) else ""
            raise ValueError(f"unknown search config field {unknown[0]!r}{where}")
        for part, part_cls in PARTS.items():
            given = d.get(part, {})
            if not isinstance(given, Mapping):
                raise ValueError(f"search config field {part!r} must be an object")
            bad = sorted(set(given) - {f.name for f in fields(part_cls)})
            if bad:
                raise ValueError(f"unknown search config field {part}.{bad[0]}")
            d[part] = part_cls(**given)
        if "scores" in d:
            d["scores"] = tuple(d["scores"])
        return cls(**d)

    def replace(self, **changes) -> "SearchConfig":
        """A copy with some of its own fields changed (a part whole: `evolution=`); a part's
        setting through its part (`cfg.evolution.replace(budget=5)`)."""
        own = {f.name for f in fields(self)}
        bad = sorted(set(changes) - own)
        if bad:
            raise ValueError(f"SearchConfig has no field {bad[0]!r}")
        return dataclasses.replace(self, **changes)


# The plain keywords that name a setting where a call comes in (`search(budget=...)`, a preset's
# overrides, a command-line flag): each is one field, of a part or the config's own ("").
KEYWORDS: dict[str, str] = {"seed": "", **{f.name: part for part, cls in PARTS.items()
                                           for f in fields(cls)}}


def with_settings(cfg: SearchConfig, task: Any, settings: Mapping[str, Any]) -> tuple[
        SearchConfig, Any]:
    """`cfg` and the task's settings `task` (a dataclass, or None for an objective of one's own)
    with `settings` by plain keyword: each the name of one field of an engine part (`KEYWORDS`)
    or of the task. ValueError naming an unknown keyword or a bad value."""
    task_fields = set() if task is None else {f.name for f in fields(task)}
    own: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    task_changes: dict[str, Any] = {}
    for key, value in settings.items():
        if key in KEYWORDS:
            part = KEYWORDS[key]
            (parts.setdefault(part, {}) if part else own)[key] = value
        elif key in task_fields:
            task_changes[key] = value
        else:
            nobody = " (an objective of one's own holds its settings)" if task is None else ""
            raise ValueError(f"unknown setting {key!r}{nobody}")
    for part, changes in parts.items():
        own[part] = getattr(cfg, part).replace(**changes)
    return (cfg.replace(**own) if own else cfg,
            dataclasses.replace(task, **task_changes) if task_changes else task)


def _type_problems(part: Any, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
    """(field, what is wrong) for each field of a part whose value is not of its declared type."""
    from evonorm.files import type_problem

    hints = typing.get_type_hints(type(part))
    return [(f.name, p) for f in fields(part) if f.name not in exclude
            if (p := type_problem(_lists(getattr(part, f.name)), hints[f.name])) is not None]


def _tuple(obj: Any, name: str) -> None:
    """Lists (JSON) as tuples, so that configs compare and hash as values. Text stays text, for the type
    check to refuse: as a tuple, `seed_layers="evonorm_s0"` would be its letters."""
    value = getattr(obj, name)
    if isinstance(value, (list, tuple)):
        object.__setattr__(obj, name, tuple(value))


def _lists(d: Any) -> Any:
    """Tuples as lists, for JSON."""
    if isinstance(d, dict):
        return {k: _lists(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_lists(v) for v in d]
    return d
