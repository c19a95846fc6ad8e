"""The engine's named settings: the engine part (evolution, hurdles, execution) of an entry of
the preset table (`evonorm/presets.toml`, where each preset's reasons stand beside it). The task's
part is the task's to read (`evonorm.proxy.presets`); an objective of one's own takes this alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from evonorm.preset_table import preset_part
from evonorm.search.config import PARTS, SearchConfig, with_settings


def norm_relu(kind: str) -> dict:
    """max((x - mean(x)) / std(x), 0) over an axis set (batch, group, layer, instance), as graph
    JSON: the textbook layers written as graphs, as a search meets them. Here, not beside the named
    graphs, because importing `evonorm.graph` loads torch, which the settings do not need."""
    return {"nodes": [[f"{kind}_mean", 0], ["neg", 4], ["add", 0, 5], [f"{kind}_std", 0],
                      ["div", 6, 7], ["max", 8, 1]]}


def engine_preset(name: str, **settings) -> SearchConfig:
    """A preset's engine settings (its entry's engine part in the preset table) with some
    changed, by plain keyword (`with_settings`; None values are ignored). ValueError on an
    unknown name or keyword, or a bad value."""
    cfg = engine_part(name, preset_part(name, "engine"))
    given = {k: v for k, v in settings.items() if v is not None}
    return with_settings(cfg, None, given)[0]


def engine_part(name: str, part: Mapping[str, Any]) -> SearchConfig:
    """The engine part of preset `name` as the table writes it (settings by part), checked as a
    stored config is. ValueError, in one line naming the preset, for anything else."""
    try:
        bad = sorted(set(part) - set(PARTS))
        if bad:
            raise ValueError(f"unknown part {bad[0]!r} (the engine's are {', '.join(PARTS)})")
        return SearchConfig.from_dict({"preset": name, **part})
    except (ValueError, TypeError) as err:
        raise ValueError(f"search preset {name!r}: {err}") from None
