"""The built-in proxy task of the layer search (paper Sec. 4-5): the objective that trains each
candidate on anchor architectures (pre-checks, stability and quality tests, staged training), its
presets and the prescreen's task features. What is measured after a search (rerank, retrain,
calibrate) is `evonorm.measure`'s. It runs on the search
engine (`evonorm.search`), which never imports it: the task is handed to the engine as an
objective (`ProxyObjective`). From Python: `search(out=...)`, `resume(out)`; torch is imported
where candidates train.
"""

from evonorm.proxy.api import resume, search
from evonorm.proxy.objective import ProxyObjective

__all__ = ["ProxyObjective", "search", "resume"]
