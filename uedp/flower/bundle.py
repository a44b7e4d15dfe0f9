"""Whether the submitted app bundle's ClientApp mounts UeDP's client mod, read from the bundle itself.

In a deployment every SuperNode runs the app bundle (FAB) that `flwr run` submitted, and so does the ServerApp:
Flower's ServerApp process puts the bundle's directory at the front of `sys.path` (flwr.supercore.object_ref,
`load_app`). So the ServerApp can read what the nodes will run without asking them: `bundle_client_app()` finds
the first `sys.path` directory whose pyproject.toml names `[tool.flwr.app.components] clientapp`, imports that
object, and `mounts_uedp_mod(app)` looks for a `UeDPMod` among the app-level mods it was built with
(`ClientApp(mods=[...])`, kept in Flower's private `ClientApp._mods`, with the train function registered in
`_registered_funcs`: tests/flower_versions/check_component.py pins both on the lowest and highest supported
Flower), with the module a file of the bundle (`in_bundle`). A decision read from the bundle is the same whoever is
connected: asking the nodes instead (the probe) makes the answer depend on which nodes answer, which in a
deployment is who took part (docs/proofs.md section 1, "The client mod").
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uedp.errors import ConfigError


@dataclass(frozen=True)
class BundleClientApp:
    """The bundle's ClientApp: the pyproject.toml that names it, its reference ("module:attribute"), the object."""

    pyproject: Path
    reference: str
    app: Any


def _clientapp_reference(pyproject: Path) -> str | None:
    try:
        doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    ref = doc.get("tool", {}).get("flwr", {}).get("app", {}).get("components", {}).get("clientapp")
    return ref if isinstance(ref, str) and ":" in ref else None


def bundle_client_app(paths: list[str] | None = None) -> BundleClientApp | None:
    """The ClientApp of the first directory on `paths` (default `sys.path`) with a pyproject.toml that names one;
    None if there is none. ConfigError (naming the file) if the named object cannot be imported."""
    for entry in sys.path if paths is None else paths:
        pyproject = Path(entry or ".") / "pyproject.toml"
        if not pyproject.is_file():
            continue
        reference = _clientapp_reference(pyproject)
        if reference is None:
            continue
        module, _, attribute = reference.partition(":")
        added = entry not in sys.path  # (an explicit `paths`: the bundle's directory, on sys.path for the import)
        if added:
            sys.path.insert(0, entry)
        try:
            obj: Any = importlib.import_module(module)
            for part in attribute.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # noqa: BLE001 - whatever the import raised, it is named with the file
            raise ConfigError(f"{pyproject}: [tool.flwr.app.components] clientapp = {reference!r} cannot be "
                              f"imported ({type(exc).__name__}: {exc})") from None
        finally:
            if added:
                sys.path.remove(entry)
        return BundleClientApp(pyproject, reference, obj)
    return None


def mounts_uedp_mod(app: Any) -> bool:
    """Whether `app` is a flwr ClientApp built with a UeDPMod among its app-level mods (`ClientApp(mods=[...])`),
    a train function registered after them ("train.default", which Flower wraps in the mods it had then) and
    Flower's own `__call__` (a subclass that skips its mods does not count)."""
    from flwr.clientapp import ClientApp

    from uedp.flower.mod import UeDPMod

    return (isinstance(app, ClientApp) and type(app).__call__ is ClientApp.__call__
            and "train.default" in (getattr(app, "_registered_funcs", None) or {})
            and any(isinstance(m, UeDPMod) for m in getattr(app, "_mods", None) or ()))


def in_bundle(found: BundleClientApp) -> bool:
    """Whether the ClientApp's module is a file of the bundle (under its pyproject.toml's directory): one
    imported from elsewhere (the server's environment) says nothing of what the nodes run."""
    module = sys.modules.get(found.reference.partition(":")[0])
    path = getattr(module, "__file__", None)
    return path is not None and Path(path).resolve().is_relative_to(found.pyproject.parent.resolve())
