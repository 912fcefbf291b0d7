"""UI pieces of the specrej app: pure functions from events to charts, tables and markdown,
``build_*()`` builders returning named Gradio handles, and the streaming callback.

Nothing here samples or prunes: the algorithms live in ``specrej``; this package only presents
their events. Modules:

- ``theme``   colours (Okabe-Ito, colour-blind safe) and number formats
- ``view``    ``RunView``: the per-run accumulation of both arms' events (no globals)
- ``charts``  chart specs (plain plotly JSON) for each arm and for the compute race
- ``panels``  status line, leaders, the end-of-run summary, the candidates table
- ``trace``   the run's JSON trace
- ``context`` which models the app may load (``AppContext``, ``get_models``), ``spaces.GPU``
- ``stream``  the streaming callback that steps ``race(...)`` and yields frames
- ``ui``      ``build_*()`` builders and the frame -> component update mapping
"""
