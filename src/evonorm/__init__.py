"""evonorm: evolving normalization-activation layers (Liu et al., NeurIPS 2020) on PyTorch.

Submodules are imported on use so that `import evonorm` stays cheap:
`evonorm.layers` (the discovered layers and baselines), `evonorm.graph` (the search space),
`evonorm.data`, `evonorm.models`, `evonorm.train` (the trainer), `evonorm.search` (the layer search
engine and its store), `evonorm.proxy` (the built-in proxy task it searches on) and `evonorm.report`
(figures and the HTML report).
"""

__version__ = "0.1.0"
