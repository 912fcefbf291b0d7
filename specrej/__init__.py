"""specrej: Speculative Rejection (Sun et al., NeurIPS 2024) and Best-of-N on one engine.

The library knows nothing of any UI: methods are iterators of typed events (``events``).
"""
from .arms import DEFAULT_ARMS, REGISTRY, ArmKind, ArmSpec, ArmSpecError, parse_arms, race_arms, register
from .core.budget import BudgetError
from .compare import Comparison, Ratio, Tally, compare, compare_all
from .config import RunConfig
from .events import Candidate, Event, Finished, Ledger, Progress, Round, to_dict
from .methods import METHODS, best_of_n, race, run_to_completion, speculative_rejection
from .models import LM, ModelSpecError, load_generator
from .rewards import CallableReward, Reward, RewardError, Scored, TokenStats, load_reward

__all__ = [
    "DEFAULT_ARMS", "REGISTRY", "ArmKind", "ArmSpec", "ArmSpecError", "parse_arms", "race_arms", "register",
    "Comparison", "Ratio", "Tally", "compare", "compare_all",
    "BudgetError", "RunConfig", "Candidate", "Event", "Finished", "Ledger", "Progress", "Round", "to_dict",
    "METHODS", "best_of_n", "race", "run_to_completion", "speculative_rejection", "LM", "ModelSpecError",
    "load_generator", "CallableReward", "Reward", "RewardError", "Scored", "TokenStats", "load_reward",
]
