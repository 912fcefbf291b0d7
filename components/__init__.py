"""UI pieces of the specrej app: pure functions from events to charts, tables and markdown,
``build_*()`` builders returning named Gradio handles. Nothing here samples or prunes: the
algorithms live in ``specrej``; this package only presents their events.

Presentation (this folder):

- ``theme``   colours (Okabe-Ito, colour-blind safe) and number formats
- ``looks``   each method's colour, chart kind and words
- ``charts``  chart specs (plain plotly JSON) for each arm, the race and the verdict
- ``panels``  status line, leaders, the end-of-run summary (``specrej.compare``), the candidates table
- ``frames``  ``Frame`` and the frame builders (start, live, final, failure)
- ``ui``      ``build_*()`` builders and the frame -> component update mapping
- ``autospec_tab``  the parallel-sampling lab's tab

``session/``: the run's runtime (the one torch thread ``worker``, the orchestrator ``stream``, the
run's state ``view``, ``retry``, ``memory``, the shared models' ``context``, ``trace``, ``replay``,
Paper scale's ``paper``, ``gpu``). ``deploy/``: the public deployment's ``guard`` and ``limits``.
"""
