"""The inspector: a web page over the gateway showing session trees live (``specs/ui.md``)."""

from __future__ import annotations

from .routes import store_of as store_of, ui_routes as ui_routes
from .snapshot import Snapshot as Snapshot, take_snapshot as take_snapshot
from .view import TreeView as TreeView, fold_view as fold_view

__all__ = [
    "Snapshot",
    "TreeView",
    "fold_view",
    "store_of",
    "take_snapshot",
    "ui_routes",
]
