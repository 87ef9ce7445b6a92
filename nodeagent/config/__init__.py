"""From the held snapshot to haproxy.cfg, purely: the renderer and its per-backend cache
(`render.py`), and the change classifier that picks nothing, runtime API or reload
(`changes.py`)."""
