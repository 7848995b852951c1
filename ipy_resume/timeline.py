"""``from ipy_resume import timeline; timeline()``: the in-notebook timeline widget.

The contract names both a module (``ipy_resume.timeline``) and a function
``timeline()``; Python binds the submodule over any attribute of the same name in the
package, so this module is made callable. It is only a facade: the queries are
:class:`ipy_resume.engine.queries.Timeline`, restoring is :meth:`ipy_resume.engine.core.Engine.restore`,
and the functions below keep the short spellings of both for a notebook.
"""

from __future__ import annotations

import sys
import types
from collections.abc import MutableMapping
from typing import Any

from .engine.queries import Timeline
from .engine.restoring import restore as restore_namespace
from .frontends import comm
from .store import Store
from .store.location import Location, default_root, open_store

__all__ = ["default_root", "restore", "snapshot"]


def snapshot(
    root: Location, *, after: int | None = None, limit: int | None = None
) -> dict[str, Any]:
    """:meth:`Timeline.snapshot` of the store at *root*.

    >>> snapshot(default_root())["exists"]  # doctest: +SKIP
    True
    """
    return Timeline.open(root).snapshot(after=after, limit=limit)


def restore(
    namespace: MutableMapping[str, Any],
    root: Location,
    target: str,
    store: Store | None = None,
    how: str = "restore",
) -> dict[str, Any]:
    """Restore *namespace* as of *target*; on the kernel's timeline when it has an engine there.

    >>> restore(get_ipython().user_ns, default_root(), "train")["restored"]  # doctest: +SKIP
    ['model', 'history']
    """
    store = store or open_store(root)
    engine = comm.engine_of(comm.current_shell(), store.location)
    if engine is not None:
        return engine.restore(namespace, target, how=how, store=store)
    return restore_namespace(namespace, store, target).report(store)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .frontends.widget import timeline_widget

        return timeline_widget(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
