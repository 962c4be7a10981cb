"""Names of the coarse metrics a ``SeriesStore`` holds, shared by the samplers that write them
and the figures and views that read them."""

NVML_GPU_UTIL = "nvml.gpu_util"
NVML_MEM_USED = "nvml.mem_used"
NVML_SM_CLOCK = "nvml.sm_clock"
NVML_POWER = "nvml.power"
NVML_METRICS = (NVML_GPU_UTIL, NVML_MEM_USED, NVML_SM_CLOCK, NVML_POWER)
PROC_CPU = "proc.cpu"
PROC_RSS = "proc.rss"
SYS_CPU = "sys.cpu"


def rank_metric(rank: int, name: str) -> str:
    """A metric of another rank's GPU as a recording stores it beside the run's own."""
    return f"rank{rank}/{name}"


def metric_rank(metric: str, name: str) -> int | None:
    """The rank of a ``rank_metric`` name for ``name``, else None."""
    head, _, tail = metric.partition("/")
    if tail != name or not head.startswith("rank") or not head[4:].isdigit():
        return None
    return int(head[4:])
