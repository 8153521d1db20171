"""A campaign's run statistics: one shape, whichever way its runs ran (here, in lanes, in
a Slurm array, in guests on the virtual clock), so the parts that ran them add up."""
from __future__ import annotations

SUMMED = ("overhead_s", "traffic_s", "network_setup_s", "network_teardown_s")


def new_stats(total: int, todo: int) -> dict:
    """The statistics of a campaign of `total` runs of which `todo` are still to run."""
    return {"runs": total, "skipped": total - todo, "failed": [], **{key: 0.0 for key in SUMMED}, "wall_s": 0.0}


def add_stats(stats: dict, part: dict) -> None:
    """Add one part's statistics (a lane's, a task's, a guest's) to the campaign's."""
    for key in SUMMED:
        stats[key] += part.get(key, 0.0)
    stats["failed"] += part.get("failed", [])
