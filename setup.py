"""The package list only: every other setting is in pyproject.toml. The composer's packages are
found (a new one needs no listing); its templates and presets, kept at the top of the repository,
are mapped into it by pyproject.toml's package-dir."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["composer", "composer.*"]) + ["composer.dockerfiles", "composer.backend_sets"])
