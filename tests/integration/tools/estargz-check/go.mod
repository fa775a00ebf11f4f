module triton-composer.test/estargz-check

go 1.26

require (
	github.com/containerd/stargz-snapshotter/estargz v0.18.2
	github.com/opencontainers/go-digest v1.0.0
)

require (
	github.com/klauspost/compress v1.18.3 // indirect
	github.com/vbatts/tar-split v0.12.2 // indirect
	golang.org/x/sync v0.19.0 // indirect
)
