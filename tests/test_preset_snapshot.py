"""Every search preset, as a run stores it, is what it was when the presets moved into one table
(tests/preset_snapshot.json, taken from the tables before): a run folder records its preset's
settings and its calibration notes compare against the preset, so a preset that changed shape
would make old runs read as off their preset's settings."""

import json
from pathlib import Path

from evonorm.proxy.presets import get_preset, list_presets

SNAPSHOT = json.loads((Path(__file__).parent / "preset_snapshot.json").read_text())


def test_every_preset_stores_as_before():
    assert list_presets() == SNAPSHOT["order"]
    for name, stored in SNAPSHOT["presets"].items():
        assert json.loads(json.dumps(get_preset(name).to_dict())) == stored, name
