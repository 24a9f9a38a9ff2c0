// Package scenarios embeds the shipped load-test scenarios (the *.yaml
// files of this directory), so `troupe bench --scenario NAME` works from any
// directory. docs/bench.md describes each one.
package scenarios

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Source returns the YAML of the shipped scenario name (e.g. "smoke"), or an
// error naming the shipped ones.
func Source(name string) ([]byte, error) {
	b, err := files.ReadFile(name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("scenarios: no shipped scenario %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return b, nil
}

// Names lists the shipped scenarios, sorted.
func Names() []string {
	ents, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(out)
	return out
}
