// estargz-check reads an eStargz blob with the reference implementation (stargz-snapshotter's
// estargz package, v0.18.2) and verifies it as stargz-snapshotter does when it mounts a layer:
// the footer, the TOC against the digest a manifest annotation gives, and every chunk of every
// regular file against its chunkDigest. It prints what it saw as one JSON object.
//
//	estargz-check BLOB TOC_DIGEST
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/opencontainers/go-digest"
)

type report struct {
	TOCDigest   string   `json:"toc_digest"`
	Files       int      `json:"files"`
	Chunks      int      `json:"chunks"`
	Bytes       int64    `json:"bytes"`
	Landmark    string   `json:"landmark"`
	Prefetched  []string `json:"prefetched"`
	FooterStart int64    `json:"toc_offset"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: estargz-check BLOB TOC_DIGEST")
		os.Exit(2)
	}
	if err := check(os.Args[1], digest.Digest(os.Args[2])); err != nil {
		fmt.Fprintln(os.Stderr, "estargz-check:", err)
		os.Exit(1)
	}
}

func check(path string, tocDigest digest.Digest) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return err
	}
	blob := io.NewSectionReader(file, 0, info.Size())
	tocOffset, _, err := estargz.OpenFooter(blob)
	if err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	reader, err := estargz.Open(blob)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	verifier, err := reader.VerifyTOC(tocDigest)
	if err != nil {
		return fmt.Errorf("TOC: %w", err)
	}
	out := report{TOCDigest: reader.TOCDigest().String(), FooterStart: tocOffset}
	if _, ok := reader.Lookup(estargz.PrefetchLandmark); ok {
		out.Landmark = estargz.PrefetchLandmark
	} else if _, ok := reader.Lookup(estargz.NoPrefetchLandmark); ok {
		out.Landmark = estargz.NoPrefetchLandmark
	}
	landmark, hasLandmark := reader.Lookup(estargz.PrefetchLandmark)
	var walk func(dir string, entry *estargz.TOCEntry) error
	walk = func(dir string, entry *estargz.TOCEntry) error {
		var failure error
		entry.ForeachChild(func(base string, child *estargz.TOCEntry) bool {
			name := base
			if dir != "" {
				name = dir + "/" + base
			}
			if child.Type == "dir" {
				failure = walk(name, child)
				return failure == nil
			}
			if child.Type != "reg" {
				return true
			}
			out.Files++
			if hasLandmark && child.Size > 0 && child.Offset < landmark.Offset && name != estargz.PrefetchLandmark {
				out.Prefetched = append(out.Prefetched, name)
			}
			failure = verifyFile(reader, verifier, name, child, &out)
			return failure == nil
		})
		return failure
	}
	root, ok := reader.Lookup("")
	if !ok {
		return fmt.Errorf("no root in the TOC")
	}
	if err := walk("", root); err != nil {
		return err
	}
	sort.Strings(out.Prefetched)
	return json.NewEncoder(os.Stdout).Encode(out)
}

// verifyFile reads every chunk of a regular file and checks it against its chunkDigest.
func verifyFile(reader *estargz.Reader, verifier estargz.TOCEntryVerifier, name string, entry *estargz.TOCEntry,
	out *report) error {
	if entry.Size == 0 {
		return nil
	}
	content, err := reader.OpenFile(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for offset := int64(0); offset < entry.Size; {
		chunk, ok := reader.ChunkEntryForOffset(name, offset)
		if !ok {
			return fmt.Errorf("%s: no chunk at offset %d", name, offset)
		}
		check, err := verifier.Verifier(chunk)
		if err != nil {
			return fmt.Errorf("%s: chunk at %d: %w", name, offset, err)
		}
		size := chunk.ChunkSize
		// The chunk in one read: the reader inflates a chunk's member from its start on each ReadAt.
		data := make([]byte, size)
		if _, err := io.ReadFull(io.NewSectionReader(content, chunk.ChunkOffset, size), data); err != nil {
			return fmt.Errorf("%s: reading the chunk at %d: %w", name, offset, err)
		}
		if _, err := check.Write(data); err != nil {
			return fmt.Errorf("%s: chunk at %d: %w", name, offset, err)
		}
		if !check.Verified() {
			return fmt.Errorf("%s: the chunk at %d does not match its chunkDigest %s", name, offset, chunk.ChunkDigest)
		}
		out.Chunks++
		out.Bytes += size
		offset = chunk.ChunkOffset + size
	}
	return nil
}
