"""Scripts that run inside images (the full image's probe, the build's collect and packages
stages), never on the host: standard library only, copied into containers and build contexts
as single files beside each other."""
