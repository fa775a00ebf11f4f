// Command referrers-registry serves go-containerregistry's registry (the one `crane registry serve`
// runs) with its OCI 1.1 referrers API turned on, which crane's command leaves off: the tests'
// registry with that API (zot is not on the Go module proxy; distribution v3 has no such API).
//
//	referrers-registry ADDRESS DIR
package main

import (
	"log"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: referrers-registry ADDRESS DIR")
	}
	handler := registry.New(registry.WithReferrersSupport(true),
		registry.WithBlobHandler(registry.NewDiskBlobHandler(os.Args[2])))
	log.Fatal(http.ListenAndServe(os.Args[1], handler))
}
