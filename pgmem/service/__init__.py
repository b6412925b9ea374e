"""``pgmem serve``: the HTTP API and the web dashboard (needs the ``serve`` extra: ``pip install 'pgmem-agents[serve]'``).

:func:`create_app` (an ASGI app) and :func:`serve` (uvicorn) take :class:`Settings`; see docs/service.md.
"""

from .app import Settings, create_app, serve

__all__ = ["Settings", "create_app", "serve"]
