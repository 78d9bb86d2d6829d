"""Names of the dcgm-exporter metrics and labels that gpu-balancer reads and writes. Pure constants."""

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"

GPU_METRICS = (GPU_UTIL, GR_ENGINE_ACTIVE, FB_USED, FB_FREE, GPU_TEMP, POWER_USAGE, XID_ERRORS)
"""Every per-GPU gauge a snapshot is built from."""

HELP = {
    GPU_UTIL: ("gauge", "GPU utilization (in %)."),
    FB_USED: ("gauge", "Framebuffer memory used (in MiB)."),
    FB_FREE: ("gauge", "Framebuffer memory free (in MiB)."),
    GPU_TEMP: ("gauge", "GPU temperature (in C)."),
    POWER_USAGE: ("gauge", "Power draw (in W)."),
    XID_ERRORS: ("gauge", "Value of the last XID error encountered."),
    GR_ENGINE_ACTIVE: ("gauge", "Ratio of time the graphics engine is active."),
    DRAM_ACTIVE: ("gauge", "Ratio of cycles the device memory interface is active sending or receiving data."),
}
"""`# TYPE` and `# HELP` as dcgm-exporter prints them, for the exporters we ship."""

NODE_LABEL_CANDIDATES = ("node", "kubernetes_node", "nodename", "Hostname", "hostname")
"""Where the node name may be, most specific first: relabelled names beat the exporter's own
`Hostname`, which older installs set to the exporter pod's name."""

IDENTITY_LABELS = ("gpu", "UUID", "device", "pci_bus_id", "modelName", "GPU_I_PROFILE", "GPU_I_ID")
WORKLOAD_LABELS = ("exported_pod", "exported_namespace", "exported_container", "pod", "namespace", "container")
