"""The layer search (paper Sec. 4-5): rejection, regularized evolution, store, executors, driver,
reranking. Heavy modules (torch) are imported on use; the store and presets are cheap.
"""

from evonorm.search.presets import PRESETS, SearchConfig, get_preset, list_presets
from evonorm.search.store import Candidate, Store

__all__ = ["PRESETS", "SearchConfig", "get_preset", "list_presets", "Candidate", "Store"]
