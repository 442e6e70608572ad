"""A parameter server sharded across processes: a thin front on the public port, N shards behind it.

`geofed.shard_map` says which slice each shard owns; `router.py` cuts a push's payload into frames and
routes them by offset (prefixes only, the front never decodes a body); `shard.py` is one shard's state
machine (stage, fold, two-phase prepare/commit, durable slices); `engine.py` the round engine the
front's one `Aggregator` drives them with; `*_grpc.py` the wire. See docs/ps-shards.md.
"""
