"""The run's runtime: the one torch thread, the orchestrator (request -> frames), the run's state, retry, memory, the shared models' context, traces, replays, Paper scale's plan."""
