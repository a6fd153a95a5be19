"""Lazy re-exports for the subpackages' ``__init__`` modules.

A subpackage's public names live in its modules, and lower layers import those
modules directly (``helix_agents.runtime.writer`` is needed by children and
workspaces long before ``helix_agents.runtime.executor`` can be imported). An
``__init__`` that imported its modules eagerly would make every such import run
the whole package, and close import cycles between packages. So an ``__init__``
declares where each public name lives, and the name is imported on first use
(PEP 562); type checkers read the same names from an ``if TYPE_CHECKING:`` block.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, importing each name from its home module.

    Args:
        package: the package's ``__name__`` (for the error message).
        homes: public name -> the module that defines it.
    """

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:
        return sorted(homes)

    return __getattr__, __dir__
