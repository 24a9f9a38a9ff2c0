package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/troupe-gw/troupe/scripts"
)

// policyNewCmd is `troupe policy new NAME`: it writes a starter policy, a
// copy of a built-in, for the operator to edit.
func policyNewCmd() *cobra.Command {
	var from string
	var force bool
	cmd := &cobra.Command{
		Use:   "new NAME|FILE.lua",
		Short: "Write a starter policy (a copy of a built-in) to edit",
		Long: `Write FILE.lua (NAME.lua in the current directory when the argument has no
.lua suffix): a copy of the built-in policy --from (default smart, the policy
that serves when none is chosen), under a header naming where it came from.
Edit it, try it offline with "troupe policy check|simulate|replay FILE.lua",
then serve it with "troupe serve --policy-dir DIR --policy NAME". An existing
file is kept unless --force is given. docs/policies.md has the whole contract.`,
		Example: `  troupe policy new my                       # my.lua, a copy of smart
  troupe policy new policies/eu.lua --from least_inflight`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, name, err := newPolicyPath(args[0])
			if err != nil {
				return err
			}
			src, ok := scripts.Builtin(from)
			if !ok {
				return fmt.Errorf("--from %q: no such built-in policy (%s)", from, strings.Join(scripts.Builtins(), ", "))
			}
			text := fmt.Sprintf("-- %s: a routing policy, started as a copy of the built-in %q by `troupe policy new`.\n"+
				"-- Try it: troupe policy check %s; serve it: troupe serve --policy-dir %s --policy %s\n"+
				"-- The contract (score, route, the policy table, every account field): docs/policies.md\n\n%s",
				name, from, path, filepath.Dir(path), name, src)
			// Compile what is written, so that a starter that does not load
			// is an error here rather than at serve time.
			p, err := scripts.Compile(name, text, scripts.Options{})
			if err != nil {
				return err
			}
			p.Close()
			if dir := filepath.Dir(path); dir != "." {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
			}
			flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(path, flag, 0o644)
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s exists: edit it, or give --force to replace it", path)
			}
			if err != nil {
				return err
			}
			if _, err := f.WriteString(text); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (a copy of %s)\n", path, from)
			fmt.Fprintf(cmd.ErrOrStderr(), "# next: troupe policy check %s, then troupe policy simulate %s\n", path, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", defaultPolicy, "built-in policy to start from ("+strings.Join(scripts.Builtins(), ", ")+")")
	cmd.Flags().BoolVar(&force, "force", false, "replace FILE when it exists")
	return cmd
}

// newPolicyPath turns the argument of policy new into the file to write and
// the policy's name (the file's base name without .lua, which --policy
// takes). A name must be a plain word: letters, digits, '-' and '_'.
func newPolicyPath(arg string) (path, name string, err error) {
	path = arg
	if !strings.HasSuffix(path, ".lua") {
		path += ".lua"
	}
	name = strings.TrimSuffix(filepath.Base(path), ".lua")
	if name == "" || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return "", "", fmt.Errorf("policy name %q: use letters, digits, '-' and '_' (the name is what --policy takes)", name)
	}
	return path, name, nil
}
