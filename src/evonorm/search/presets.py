"""The search presets' old address. They are the built-in proxy task's, in `evonorm.proxy.presets`
(the engine's part of each: `evonorm.search.settings`); importing this module says so in one line.
"""

raise ImportError("evonorm.search.presets moved to evonorm.proxy.presets (PRESETS, get_preset, "
                  "list_presets, calibration_note); the engine's part is evonorm.search.settings")
