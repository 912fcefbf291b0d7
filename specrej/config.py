"""The run's settings, at the path older code imports: the dataclass lives in ``specrej.core.config``
(the torch-free core), and this module re-exports it."""
from .core.config import AUTO, DECISIONS, RunConfig, check_text, env_int

__all__ = ["AUTO", "DECISIONS", "RunConfig", "check_text", "env_int"]
