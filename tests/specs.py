"""Tests build CompositionSpecs by field name, as the command line or a set would."""

from composer.catalog.catalog import Flavour
from composer.config.types import Base, CompositionSpec, Device, Packages

_FIELDS = {
    "backends": "selection.backends", "repoagents": "selection.repoagents", "caches": "selection.caches",
    "custom_backends": "selection.custom_backends", "backend_images": "selection.backend_images",
    "with_headers": "selection.with_headers", "version": "images.version", "registry": "images.registry",
    "full_image": "images.full", "min_image": "images.min", "tag": "result.tag", "push": "result.push",
    "labels": "result.labels", "smoke_test": "result.smoke_test", "model_repository": "result.model_repository",
    "bake_models": "selection.bake_models", "smoke_cases": "result.smoke_cases", "samples": "result.samples",
    "base": "selection.base", "keep_tensorrt_builder": "selection.keep_tensorrt_builder",
    "ort_providers": "selection.ort_providers", "device": "selection.device", "gpus": "result.gpus",
    "strict": "result.strict", "flavour": "selection.flavour", "builders": "result.builders",
}


# Fields of a small type of their own, given here by name as the command line gives them.
_TYPES = {"device": Device, "base": Base, "flavour": Flavour}


def spec(packages: Packages | None = None, **fields) -> CompositionSpec:
    """e.g. spec(backends=("python",), version="24.09", tag="x:y", packages=Packages(specs=("six",)))"""
    typed = {name: _TYPES[name](value) if name in _TYPES and isinstance(value, str) else value
             for name, value in fields.items()}
    made = CompositionSpec().with_fields({_FIELDS[name]: value for name, value in typed.items()})
    return made if packages is None else CompositionSpec(made.selection, made.images, packages, made.result)
