"""The built-in proxy task's part of the search presets (each entry's task part in the preset
table, `evonorm/presets.toml`), joined to the engine's part as a run stores them, and what was
measured of each preset (measured.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from evonorm.preset_table import preset_names, preset_part
from evonorm.proxy.config import ProxyConfig, configured, measured, with_task
from evonorm.search.config import SearchConfig
from evonorm.search.objective import CandidateCost
from evonorm.search.settings import engine_preset

# The task's settings that hold training overrides, where the table writes None as "none" (TOML
# has no null).
OVERRIDES = ("train", "arch_train", "rerank_train")


def task_preset(name: str) -> ProxyConfig:
    """The task part of preset `name` as the table writes it, checked. ValueError, in one line
    naming the preset, for an unknown preset, field or value."""
    part = preset_part(name, "task")
    try:
        return ProxyConfig.from_dict({k: _none(v) if k in OVERRIDES else v
                                      for k, v in part.items()})
    except (ValueError, TypeError) as err:
        raise ValueError(f"search preset {name!r}: {err}") from None


def _none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _none(v) for k, v in value.items()}
    return None if value == "none" else value


def unmeasured(preset: str, config: Mapping[str, Any] | None) -> list[str]:
    """The settings a calibration depends on (`evonorm.proxy.config.measured`) in which a run's
    config (as stored) differs from `preset` as it ships: such a run (a `--set` override, or a run
    of an earlier version of the preset) is not what was measured, and its notes say so rather
    than lend it the preset's numbers. [] at the preset's settings, for an unknown preset, or
    without a config; a setting the stored config lacks (a run older than the setting) is not
    compared."""
    if preset not in preset_names() or not config:
        return []
    ours = measured(get_preset(preset).to_dict())
    task = ours["task"]
    task["dataset"] = task.get("dataset") or "fashion_mnist"  # the default, as a run names it

    def same(a: Any, b: Any) -> bool:  # tuples and lists alike, as JSON stores them
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    return [k for part, got in measured(config).items() for k, v in got.items()
            if not same(v, ours.get(part, {}).get(k))]


def _elsewhere(kind: str, preset: str, space: str, off: list[str]) -> str:
    names = ", ".join(off[:-1]) + " and " + off[-1] if len(off) > 1 else off[0]
    return (f"{kind} of {preset} ({space.upper()} space): not measured at this run's settings "
            f"(its {names} {'differ' if len(off) > 1 else 'differs'} from {preset}'s as measured), "
            f"so {preset}'s numbers do not apply (docs/calibration.md)")


def measurement(kind: str, preset: str, space: str) -> str | None:
    """The summary of what was measured of `preset`'s proxy in `space` (`kind`: "calibration" or
    "fidelity"), formatted from its numbers; None where nothing was. A results file the package
    ships (measured.json), not the source: a measurement is data, kept with the command that
    made it, and a new one changes no code."""
    entries = json.loads((Path(__file__).parent / "measured.json").read_text())[kind]
    found = [e for e in entries if (e["preset"], e["space"]) == (preset, space)]
    return found[0]["summary"].format(**found[0]["numbers"]) if found else None


def measured_cost(config: SearchConfig) -> CandidateCost | None:
    """What a candidate of the run's preset was measured to cost, in worker-seconds (measured.json's
    "cost", with the command that measured it), for the search's ETA before the run has timings of
    its own; None for a preset not measured, or a run not at its settings as measured
    (`unmeasured`)."""
    entries = json.loads((Path(__file__).parent / "measured.json").read_text())["cost"]
    preset, space = config.preset, config.evolution.space
    found = [e for e in entries if (e["preset"], e["space"]) == (preset, space)]
    if not found or unmeasured(preset, config.to_dict()):
        return None
    return CandidateCost(float(found[0]["numbers"]["seconds_per_candidate"]),
                         f"{preset}'s measured cost")


def calibration_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's proxy task can tell layers apart in a space (at a run's
    `config`, where given)."""
    found = measurement("calibration", preset, space)
    off = unmeasured(preset, config)
    if found and off:
        return _elsewhere("calibration", preset, space, off)
    if found:
        return f"calibration of {preset} ({space.upper()} space): {found} (docs/calibration.md)"
    return (f"calibration of {preset} ({space.upper()} space): not measured; its fitness may be "
            f"training-seed noise (`evonorm calibrate --preset {preset} --space {space}`)")


def fidelity_note(preset: str, space: str, config: Mapping[str, Any] | None = None) -> str:
    """One line on how far a preset's order of layers agrees with longer training (at a run's
    `config`, where given)."""
    found = measurement("fidelity", preset, space)
    off = unmeasured(preset, config)
    if found and off:
        return _elsewhere("rank fidelity", preset, space, off)
    if found:
        return f"rank fidelity of {preset} ({space.upper()} space): {found} (docs/calibration.md)"
    how = (f"`evonorm calibrate --preset {preset} --panel PANEL.json`" if preset in preset_names()
           else "`evonorm calibrate --panel PANEL.json` measures a preset's")
    return (f"rank fidelity of {preset if preset in preset_names() else 'this proxy'} ({space.upper()} "
            f"space): not measured; its order of layers may differ from that of longer training "
            f"({how}, docs/calibration.md)")


def list_presets() -> list[str]:
    return preset_names()


def get_preset(name: str, **settings) -> SearchConfig:
    """A preset by name, its engine's part carrying its task's, with some settings changed by
    plain keyword, the engine's and the task's (`evonorm.search.config.with_settings`; None
    values are ignored); ValueError on bad input."""
    cfg = with_task(engine_preset(name), task_preset(name))
    return configured(cfg, **{k: v for k, v in settings.items() if v is not None})
