// ctr-remote is containerd's ctr (v2.2.0, the containerd stargz-snapshotter v0.18.2 was released
// with) plus `ctr-remote images rpull`: a pull whose layers are left to the stargz snapshotter to
// mount lazily. The project's own build: the release's cmd module is not on the Go module proxy, so
// this main gives only rpull, with the same handler (the snapshotter's default labels, 10 MiB prefetch).
//
//	ctr-remote -a SOCKET -n NAMESPACE images rpull [--plain-http] [--user U:P] REF
package main

import (
	"fmt"
	"os"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/cmd/ctr/app"
	"github.com/containerd/containerd/v2/cmd/ctr/commands"
	"github.com/containerd/stargz-snapshotter/fs/source"
	"github.com/urfave/cli/v2"
)

var rpull = &cli.Command{
	Name:      "rpull",
	Usage:     "pull an image, its layers mounted lazily by the stargz snapshotter",
	ArgsUsage: "[flags] <ref>",
	Flags: append(commands.RegistryFlags, &cli.StringFlag{
		Name: "snapshotter", Value: "stargz", Usage: "the remote snapshotter's name in containerd's config"}),
	Action: func(cx *cli.Context) error {
		ref := cx.Args().First()
		if ref == "" {
			return fmt.Errorf("please provide an image reference to pull")
		}
		client, ctx, cancel, err := commands.NewClient(cx)
		if err != nil {
			return err
		}
		defer cancel()
		ctx, done, err := client.WithLease(ctx)
		if err != nil {
			return err
		}
		defer done(ctx)
		resolver, err := commands.GetResolver(ctx, cx)
		if err != nil {
			return err
		}
		image, err := client.Pull(ctx, ref, containerd.WithResolver(resolver), containerd.WithPullUnpack,
			containerd.WithPullSnapshotter(cx.String("snapshotter")),
			containerd.WithImageHandlerWrapper(source.AppendDefaultLabelsHandlerWrapper(ref, 10<<20)))
		if err != nil {
			return err
		}
		fmt.Printf("%s %s\n", image.Name(), image.Target().Digest)
		return nil
	},
}

func main() {
	ctr := app.New()
	ctr.Name = "ctr-remote"
	for _, command := range ctr.Commands {
		if command.Name == "images" {
			command.Subcommands = append(command.Subcommands, rpull)
		}
	}
	if err := ctr.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "ctr-remote: %v\n", err)
		os.Exit(1)
	}
}
