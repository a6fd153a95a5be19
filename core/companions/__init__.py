"""Companions: persistent children a parent spawns, consults and stops.

``tools`` (the ``companion__*`` tools as the model sees them), ``refs`` (what
the parent's log says of its companions), ``base`` (what the companion tools
share), ``spawn`` and ``stop``, ``parent`` (``Companions``, the tools of one
parent run). See ``specs/companions.md``. May import children and the log.
"""
