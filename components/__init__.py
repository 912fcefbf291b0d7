"""UI pieces of the specrej app: pure functions from events to charts, tables and markdown,
``build_*()`` builders returning named Gradio handles. Nothing here samples or prunes: the
algorithms live in ``specrej``; this package only presents their events.

Presentation (this folder):

- ``theme``   colours (Okabe-Ito, colour-blind safe) and number formats
- ``looks``   each method's colour, chart kind and words
- ``charts``  chart specs (plain plotly JSON) for each arm, the race and the verdict
- ``panels``  status line, leaders, the end-of-run summary (``specrej.analysis.compare``), the candidates table
- ``frames``  ``Frame``, the frame builders (start, live, final, failure) and ``draw`` (an ``Update`` as a frame)
- ``ui``      ``build_*()`` builders and the frame -> component update mapping
- ``autospec_tab``  the parallel-sampling lab's tab
- ``lecture`` lecture mode: charts for a room, the controls locked while a play runs, the clicker's keys
- ``links``   a race as a short link and its QR code; the Classroom preset

``state/``: the run's state, the room both wings read (imports only ``specrej``): the run's ``view``,
the ``request``, the runtime's ``update``, the JSON ``summary``, ``shared`` names and presets.
``session/``: the run's runtime (the shared models' ``context``, plain data; the ``startup`` room that warms up and
measures this machine, its measurements' ``profile``; the ``planner`` that decides every play button's press and the
executor ``stream`` that plays it; ``pace``, Paper scale's ``paper``, ``recordings``, the page's ``budget`` rule, the
one torch thread ``worker``, ``retry``, ``trace``, ``gpu``); it writes state and never imports presentation, nor
presentation it: ``app.py`` wires them. Every import in ``components/`` runs one way (no circle).
``deploy/``: the public deployment: ``clients`` (identity, caps), the ``gate``, its ``surface``, ``gradio_private``
(every read of Gradio's private state), ``limits``, ``memory``.
"""
