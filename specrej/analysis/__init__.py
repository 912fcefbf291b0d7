"""The analysis of a finished race, torch-free: the verdict (``verdict``), Best-of-N's curve (``curve``),
the why box's arithmetic (``why``), ledgers compared (``compare``), the paper's metrics (``metrics``),
GPU pricing (``gpu_steps``) and the Best-of-N match (``match``)."""
