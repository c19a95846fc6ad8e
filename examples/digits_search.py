"""Search a normalization-activation layer for your own task: a small conv net on scikit-learn's
digits (8x8 grey images, 10 classes), trained for a few dozen steps, held-out accuracy as fitness.

    pip install -e '.[examples]'          # in the evonorm clone: scikit-learn, for the digits
    python examples/digits_search.py --out runs/digits --budget 30 --workers 2

The same search from the command line (run from examples/, so that the module is importable):

    evonorm search --objective digits_search:objective --budget 30 --workers 2 --out runs/digits
"""

from __future__ import annotations

import argparse
from functools import lru_cache

import torch
from torch import nn

STEPS = 60  # training steps per candidate; the search reports half-way, for its hurdle
BATCH = 64


@lru_cache(maxsize=1)
def digits(seed: int = 0):
    """(train_x, train_y, test_x, test_y): 1,437 training and 360 held-out images, N x 1 x 8 x 8."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = (x[order] - 0.3) / 0.4, y[order]
    return x[360:], y[360:], x[:360], y[:360]


class SmallNet(nn.Module):
    """Two convolutions, each followed by the candidate layer, then a linear classifier."""

    def __init__(self, norm_act, width: int = 16, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1, bias=False), norm_act(width),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False), norm_act(2 * width),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def objective(norm_act, trial) -> float:
    """Train SmallNet with the candidate layer and return its held-out accuracy."""
    torch.manual_seed(trial.seed)
    x, y, test_x, test_y = (t.to(trial.device) for t in digits())
    groups = 4  # the candidate's group statistics over 4 groups (16 and 32 channels)
    model = SmallNet(lambda c: norm_act(c, groups=groups)).to(trial.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = torch.Generator().manual_seed(trial.seed)
    for step in range(1, STEPS + 1):
        idx = torch.randint(len(y), (BATCH,), generator=batches).to(trial.device)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        if not torch.isfinite(loss):
            return float("nan")  # rejected as unstable
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == STEPS // 2:
            trial.report(accuracy(model, test_x, test_y), step)
            if trial.should_stop():  # below the search's hurdle: stop here
                break
    return accuracy(model, test_x, test_y)


def main(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/digits", help="run folder (created)")
    p.add_argument("--budget", type=int, default=30, help="candidates to propose")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--force", action="store_true", help="start over in a non-empty run folder")
    args = p.parse_args(argv)

    from evonorm.graph import Graph
    from evonorm.search import search

    # Workers import the objective by its module's name: take it from `digits_search` (this file,
    # importable from its folder) rather than from __main__, so the run records
    # "digits_search:objective", the name `evonorm search/resume --objective` would use too.
    import digits_search

    result = search(digits_search.objective, out=args.out, budget=args.budget,
                    workers=args.workers, force=args.force, stage_steps=(STEPS // 2,))
    for c in result.top(5):
        print(f"{c.fitness:.3f}  {Graph.from_json(c.graph).to_text()}")
    return result


if __name__ == "__main__":
    main()
