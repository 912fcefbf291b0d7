"""The public deployment's guard (request checks, per-client caps, the HTTP gate) and limits (sizes, model policy)."""
