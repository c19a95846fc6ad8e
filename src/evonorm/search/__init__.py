"""The layer search (paper Sec. 4-5): rejection, regularized evolution, store, executors, driver,
reranking, reference layers. Heavy modules (torch) are imported on use; the config, presets, the
evaluation records and the store are cheap.

From Python: `search(objective, out=...)` searches layers for an objective of one's own
(`objective(norm_act, trial) -> float | dict`, `Reject` to reject; `evonorm.search.objective`),
or for the built-in proxy task without one; `resume(out, objective)`, `load(out).top(k)`.
"""

from evonorm.search.api import load, resume, search
from evonorm.search.candidates import Candidate
from evonorm.search.driver import SearchResult
from evonorm.search.config import SearchConfig, TrainSetting
from evonorm.search.evaluation import Evaluation
from evonorm.search.objective import Reject, Trial
from evonorm.search.presets import PRESETS, get_preset, list_presets
from evonorm.search.store import Store

__all__ = ["PRESETS", "SearchConfig", "TrainSetting", "get_preset", "list_presets", "Candidate",
           "Evaluation", "Store", "search", "resume", "load", "Reject", "Trial", "SearchResult"]
