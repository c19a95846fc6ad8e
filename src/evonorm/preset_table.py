"""The search presets' one table, `presets.toml` beside this module (shipped in the wheel), read as
data: one entry a preset, its engine's part and its task's part side by side with the reasons
for them. The engine reads only its part (`evonorm.search.settings`), the built-in task only its
own (`evonorm.proxy.presets`); this module knows neither, so that neither imports the other.
Standard library only."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

PARTS = ("engine", "task")


def read_table() -> dict[str, dict[str, Any]]:
    """Every preset's entry, in the table's order (`parse_table`)."""
    return parse_table(resources.files("evonorm").joinpath("presets.toml").read_text())


def parse_table(text: str) -> dict[str, dict[str, Any]]:
    """The entries of a preset table's text. ValueError, in one line, for text that is not TOML
    or an entry with a part other than `PARTS`."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"presets.toml: {err}") from None
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise ValueError(f"search preset {name!r} in presets.toml: not a table (an entry is "
                             f"[{name}.engine] and [{name}.task])")
        bad = sorted(set(entry) - set(PARTS))
        if bad:
            raise ValueError(f"search preset {name!r} in presets.toml: unknown part {bad[0]} "
                             f"(an entry holds {' and '.join(PARTS)})")
    return table


def preset_names() -> list[str]:
    return list(read_table())


def preset_part(name: str, part: str) -> dict[str, Any]:
    """One part of a preset's entry ({} where the entry leaves it out). ValueError, in one line,
    for an unknown preset."""
    table = read_table()
    if name not in table:
        raise ValueError(f"unknown search preset {name!r} (choose from {', '.join(table)})")
    return table[name].get(part, {})
