// containerd-stargz-grpc serves stargz-snapshotter v0.18.2's snapshotter (its service package) to a
// containerd as a proxy snapshotter. The project's own build of the daemon: the release's cmd module
// is not on the Go module proxy, so this main wires the same library calls for what the tests use
// (memory metadata store, docker-config keychain read from DOCKER_CONFIG on each pull, the config
// file's resolver and fs keys, Prometheus metrics), without the FUSE manager, IPFS or the bolt store.
//
//	containerd-stargz-grpc -root DIR -address SOCKET -config FILE [-log-level debug]
package main

import (
	"context"
	"flag"
	"fmt"
	golog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	"github.com/containerd/stargz-snapshotter/fs"
	memorymetadata "github.com/containerd/stargz-snapshotter/metadata/memory"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/keychainconfig"
	"github.com/containerd/stargz-snapshotter/version"
	metrics "github.com/docker/go-metrics"
	"github.com/pelletier/go-toml"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

type config struct {
	service.Config
	// MetricsAddress is a TCP address serving /metrics (per-layer fetched bytes among them).
	MetricsAddress string `toml:"metrics_address"`
}

func main() {
	address := flag.String("address", "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock", "the snapshotter's gRPC socket")
	configPath := flag.String("config", "", "the configuration file (TOML)")
	logLevel := flag.String("log-level", "info", "trace, debug, info, warn or error")
	root := flag.String("root", "/var/lib/containerd-stargz-grpc", "the snapshotter's root folder")
	printVersion := flag.Bool("version", false, "print the version")
	flag.Parse()
	if *printVersion {
		fmt.Println("containerd-stargz-grpc", version.Version)
		return
	}
	log.SetFormat(log.JSONFormat)
	if err := log.SetLevel(*logLevel); err != nil {
		log.L.WithError(err).Fatal("bad log level")
	}
	ctx := log.WithLogger(context.Background(), log.L)
	golog.SetOutput(log.G(ctx).WriterLevel(log.DebugLevel)) // go-fuse logs through the standard logger

	var cfg config
	if *configPath != "" {
		tree, err := toml.LoadFile(*configPath)
		if err == nil {
			err = tree.Unmarshal(&cfg)
		}
		if err != nil {
			log.G(ctx).WithError(err).Fatalf("config %q", *configPath)
		}
	}
	if err := service.Supported(*root); err != nil {
		log.G(ctx).WithError(err).Fatal("snapshotter is not supported")
	}
	if cfg.PassThrough {
		cfg.Direct = true // passthrough needs the cache to hand out files
	}
	rpc := grpc.NewServer()
	creds, err := keychainconfig.ConfigKeychain(ctx, rpc, &keychainconfig.Config{
		EnableKubeKeychain: cfg.KubeconfigKeychainConfig.EnableKeychain, KubeconfigPath: cfg.KubeconfigPath,
		EnableCRIKeychain: cfg.CRIKeychainConfig.EnableKeychain, ImageServicePath: cfg.ImageServicePath,
		DefaultImageServiceAddress: "/run/containerd/containerd.sock",
	})
	if err != nil {
		log.G(ctx).WithError(err).Fatal("keychain")
	}
	rs, err := service.NewStargzSnapshotterService(ctx, *root, &cfg.Config, service.WithCredsFuncs(creds...),
		service.WithFilesystemOptions(fs.WithMetricsLogLevel(log.InfoLevel), fs.WithMetadataStore(memorymetadata.NewReader)))
	if err != nil {
		log.G(ctx).WithError(err).Fatal("snapshotter")
	}
	defer rs.Close() // the FUSE servers live in this process: unmount them on the way out

	snapshotsapi.RegisterSnapshotsServer(rpc, snapshotservice.FromSnapshotter(rs))
	errs := make(chan error, 2)
	if cfg.MetricsAddress != "" && !cfg.NoPrometheus {
		l, err := net.Listen("tcp", cfg.MetricsAddress)
		if err != nil {
			log.G(ctx).WithError(err).Fatal("metrics address")
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		go func() { errs <- http.Serve(l, mux) }()
	}
	if err := os.MkdirAll(filepath.Dir(*address), 0o700); err != nil {
		log.G(ctx).WithError(err).Fatal("socket folder")
	}
	_ = os.Remove(*address)
	l, err := net.Listen("unix", *address)
	if err != nil {
		log.G(ctx).WithError(err).Fatal("socket")
	}
	go func() { errs <- rpc.Serve(l) }()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, unix.SIGINT, unix.SIGTERM)
	select {
	case s := <-signals:
		log.G(ctx).Infof("Got %v", s)
	case err := <-errs:
		log.G(ctx).WithError(err).Error("serving")
	}
	rpc.Stop()
	log.G(ctx).Info("Exiting")
}
