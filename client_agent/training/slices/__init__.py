"""A site's slices of the flat exchanged vector: one contiguous range per rank of a `torchrun` site.

Not the PS's shards (`ps_server/shards/`): these split one client's model across its own ranks, so each rank
diffs, error-corrects, encodes and checkpoints only its range (`SliceSync`, used by `sync.sliced`).
"""
