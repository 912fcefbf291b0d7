"""The run's runtime: the shared models' context, the start-up room (warm-up, measurements), the planner and its executor, pace, recordings, Paper scale, the one torch thread, retry, traces."""
