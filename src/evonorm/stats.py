"""Shared statistics helpers used by the hand-written layers and the graph primitives alike."""

from __future__ import annotations


def resolve_groups(num_channels: int, groups: int, group_size: int | None = None) -> int:
    """The group count actually used: the largest divisor of C that is <= `groups` (SPEC); or, given
    `group_size` (timm's argument), C / group_size groups of that many channels (C must be a multiple).

    Example: C=24, groups=32 -> 24; C=48, groups=32 -> 24; C=3 -> 3; C=1 -> 1; C=48, group_size=16 -> 3.
    """
    if group_size:
        if group_size < 1 or num_channels % group_size:
            raise ValueError(f"group_size must divide num_channels, got {group_size} for {num_channels}")
        return num_channels // group_size
    if num_channels < 1 or groups < 1:
        raise ValueError(f"need num_channels >= 1 and groups >= 1, got {num_channels}, {groups}")
    for g in range(min(groups, num_channels), 0, -1):
        if num_channels % g == 0:
            return g
    return 1
