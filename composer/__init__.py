"""triton-composer: compose slim Triton Inference Server images and prove they serve."""

__version__ = "0.1.0"
# Where the project lives: the provenance's build type and builder id are URIs under it, and
# docs/reference/build-type.md (at that address) says what the build type's parameters mean.
PROJECT_URL = "https://github.com/triton-composer/triton-composer"
