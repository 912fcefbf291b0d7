"""The public deployment: who a request comes from and the caps on its runs (``clients``), the HTTP gate in
front of Gradio's routes (``gate``, with the routes it serves in ``surface``), the one adapter for every read
of Gradio's private state (``gradio_private``), the size limits and model policy (``limits``) and memory
returned after runs (``memory``). What a request's values may be is ``components/state/request.py``'s."""
