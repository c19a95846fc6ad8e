"""What every normalization layer runs on, the fixed layers (`evonorm.layers`) and the graph layers
(`evonorm.graph`) alike: the `impl` vocabulary, which path a call ran, tracing and export state, batch
statistics across DDP ranks, and tensor plumbing. It imports nothing else of evonorm, so the layers'
front door (`create_norm_act` of a name or a graph) can sit above the graph package that builds on it.
"""
