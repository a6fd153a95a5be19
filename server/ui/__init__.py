"""The inspector: a web page over the gateway showing session trees live (``specs/ui.md``)."""

from __future__ import annotations

from .routes import Inspector as Inspector, store_of as store_of
from .snapshot import Snapshot as Snapshot, take_snapshot as take_snapshot
from .view import TreeView as TreeView, fold_view as fold_view, user_turns as user_turns

__all__ = [
    "Inspector",
    "Snapshot",
    "TreeView",
    "fold_view",
    "store_of",
    "take_snapshot",
    "user_turns",
]
