"""The demos ``helix-agents demo`` runs.

``tree``: a delegation tree streamed live; ``hitl``: a tree that pauses for a person.
"""
