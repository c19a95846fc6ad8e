"""A Ray task for the cluster test: where the worker found evonorm and what it reads in its data folder
(shipped to the workers by value, as Ray cannot import tests/)."""

import os


def probe(payload: dict) -> dict:
    import evonorm

    with open(os.path.join(payload["data_dir"], "marker.txt")) as f:
        marker = f.read()
    return {"evonorm": evonorm.__file__, "marker": marker, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
