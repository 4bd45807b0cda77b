"""Device backends: one narrow interface over real (NVML) or simulated GPUs."""
