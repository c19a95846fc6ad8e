"""The layer search (paper Sec. 4-5): rejection, regularized evolution, store, executors, driver,
reranking, reference layers. Heavy modules (torch) are imported on use; the config, presets, the
evaluation records and the store are cheap.
"""

from evonorm.search.candidates import Candidate
from evonorm.search.config import SearchConfig, TrainSetting
from evonorm.search.evaluation import Evaluation
from evonorm.search.presets import PRESETS, get_preset, list_presets
from evonorm.search.store import Store

__all__ = ["PRESETS", "SearchConfig", "TrainSetting", "get_preset", "list_presets", "Candidate",
           "Evaluation", "Store"]
