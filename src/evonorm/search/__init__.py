"""The layer search engine (paper Sec. 4-5): regularized evolution, hurdles, the store, executors,
the driver, on an objective the caller hands in. It imports no task: the built-in proxy task is
`evonorm.proxy`. Heavy modules (torch) are imported on use; the config, the evaluation records and
the store are cheap.

From Python: `search(objective, out=...)` searches layers for an objective
(`objective(norm_act, trial) -> float | dict`, `Reject` to reject; `evonorm.search.objective`);
`resume(out, objective)`, `load(out).top(k)`.
"""

from evonorm.search.api import load, resume, search
from evonorm.search.candidates import Candidate
from evonorm.search.config import Evolution, Execution, Hurdles, SearchConfig
from evonorm.search.driver import SearchResult
from evonorm.search.evaluation import Evaluation
from evonorm.search.objective import CandidateCost, Reject, Trial
from evonorm.search.store import Store

__all__ = ["SearchConfig", "Evolution", "Hurdles", "Execution", "Candidate", "Evaluation", "Store",
           "search", "resume", "load", "Reject", "Trial", "CandidateCost", "SearchResult"]
