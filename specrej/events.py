"""The methods' events, at the path older code imports: they live in ``specrej.core.events`` (the
torch-free core), and this module re-exports them."""
from .core.events import Arm, Candidate, Event, Finished, Ledger, Match, Progress, Round, Status, to_dict

__all__ = ["Arm", "Candidate", "Event", "Finished", "Ledger", "Match", "Progress", "Round", "Status", "to_dict"]
