package scripts

import (
	"embed"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// DefaultPolicy is the policy Troupe serves when the configuration names none.
const DefaultPolicy = "smart"

//go:embed policies/*.lua
var shipped embed.FS

// Builtin returns the source of the shipped policy name ("smart",
// "round_robin", "least_inflight", "sticky", "quota_reset", "weighted").
func Builtin(name string) (string, bool) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return "", false
	}
	b, err := shipped.ReadFile("policies/" + name + ".lua")
	if err != nil {
		return "", false
	}
	return string(b), true
}

// Builtins lists the shipped policies' names, sorted.
func Builtins() []string {
	entries, _ := fs.ReadDir(shipped, "policies")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), path.Ext(e.Name())))
	}
	slices.Sort(names)
	return names
}
