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
