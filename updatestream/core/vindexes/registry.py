"""The registry of vindex kinds: type name -> factory, refusing duplicate names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from updatestream.core.vindexes.vindex import LookupStore, Vindex, VindexError, describe

__all__ = [
    "DEFAULT_REGISTRY",
    "VindexFactory",
    "VindexRegistry",
    "create_vindex",
    "functional_types",
    "known_types",
    "register",
]


class VindexFactory(Protocol):
    """Builds a vindex named ``name`` from its VSchema ``params``."""

    def __call__(
        self, name: str, params: Mapping[str, str], lookup_store: LookupStore | None
    ) -> Vindex: ...


class VindexRegistry:
    """Vindex kinds by type name. Tests may build their own; the core uses DEFAULT_REGISTRY."""

    def __init__(self) -> None:
        self._factories: dict[str, VindexFactory] = {}
        self._needs_store: set[str] = set()

    def register(
        self, type_name: str, factory: VindexFactory, *, needs_lookup_store: bool = False
    ) -> None:
        """Add a kind; ``needs_lookup_store`` marks kinds that read a lookup table."""
        if not isinstance(type_name, str) or not type_name:
            raise VindexError(f"vindex type name must be non-empty text, got {type_name!r}")
        if type_name in self._factories:
            raise VindexError(
                f"vindex type {type_name!r} is already registered; pick another type name"
            )
        self._factories[type_name] = factory
        if needs_lookup_store:
            self._needs_store.add(type_name)

    def known_types(self) -> tuple[str, ...]:
        """Every registered type name, sorted."""
        return tuple(sorted(self._factories))

    def functional_types(self) -> tuple[str, ...]:
        """The registered types that compute a keyspace id without a lookup store, sorted."""
        return tuple(sorted(set(self._factories) - self._needs_store))

    def create(
        self,
        name: str,
        type_name: str,
        params: Mapping[str, str] | None = None,
        *,
        lookup_store: LookupStore | None = None,
    ) -> Vindex:
        """Build the vindex ``name`` of kind ``type_name``."""
        if not isinstance(name, str) or not name:
            raise VindexError(
                f"vindex name must be non-empty text, got {name!r} (type {type_name})"
            )
        factory = self._factories.get(type_name)
        if factory is None:
            raise VindexError(
                f"{describe(name, type_name)}: unknown vindex type {type_name!r}; "
                f"known types: {', '.join(self.known_types())}"
            )
        given = dict(params or {})
        for key, value in given.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise VindexError(
                    f"{describe(name, type_name)}: param {key!r} = {value!r} must be text, "
                    'as in Vitess ("params": {"table": "...", "from": "...", "to": "..."})'
                )
        return factory(name, given, lookup_store)


DEFAULT_REGISTRY = VindexRegistry()


def register(type_name: str, factory: VindexFactory, *, needs_lookup_store: bool = False) -> None:
    """Add a kind to the default registry; refuses a type name that is already taken."""
    DEFAULT_REGISTRY.register(type_name, factory, needs_lookup_store=needs_lookup_store)


def create_vindex(
    name: str,
    type_name: str,
    params: Mapping[str, str] | None = None,
    *,
    lookup_store: LookupStore | None = None,
) -> Vindex:
    """Build a vindex from the default registry; unknown types list the known ones."""
    return DEFAULT_REGISTRY.create(name, type_name, params, lookup_store=lookup_store)


def known_types() -> tuple[str, ...]:
    """Every type name in the default registry, sorted."""
    return DEFAULT_REGISTRY.known_types()


def functional_types() -> tuple[str, ...]:
    """The default registry's types that need no lookup store, sorted."""
    return DEFAULT_REGISTRY.functional_types()
