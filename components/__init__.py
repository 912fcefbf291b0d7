"""UI pieces of the specrej app: pure functions from events to charts, tables and markdown,
``build_*()`` builders returning named Gradio handles, and the streaming callback.

Nothing here samples or prunes: the algorithms live in ``specrej``; this package only presents
their events. Modules:

- ``theme``   colours (Okabe-Ito, colour-blind safe) and number formats
- ``view``    ``RunView``: the per-run accumulation of every arm's events (no globals)
- ``charts``  chart specs (plain plotly JSON) for each arm (by its registry chart kind) and the race
- ``panels``  status line, leaders, the end-of-run summary (``specrej.compare``), the candidates table
- ``trace``   the run's JSON trace
- ``context`` which models and arms the app offers (``AppContext``, ``get_models``)
- ``gpu``     ``spaces.GPU`` on Spaces, a no-op elsewhere
- ``stream``  the request adapter: ``RunRequest`` -> validated config and arms -> frames
- ``frames``  ``Frame`` and the frame builders (start, live, final, failure)
- ``retry``   the out-of-memory retry with half the budget
- ``ui``      ``build_*()`` builders and the frame -> component update mapping
"""
