package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/internal/progress"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// maxImportFile bounds an import file: 64 MiB.
const maxImportFile = 64 << 20

func accountsImportCmd() *cobra.Command {
	var opts admin.ImportOptions
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import codex (ChatGPT OAuth) accounts from auth.json, JSON, JSON lines or a list of refresh tokens",
		Long: `Import codex accounts. FILE ("-" for stdin) is the Codex CLI's ~/.codex/auth.json,
a JSON array or JSON lines of {refresh_token, access_token?, id_token?, account_id?,
email?, plan?, proxy?}, or a plain list of refresh tokens, one per line. Entries are
de-duplicated by ChatGPT account id (taken from the tokens when not given): an entry
for a stored account replaces its credentials. Prints what happened to every entry;
credentials are sealed in storage and never printed. See docs/codex.md.`,
		Example: `  troupe accounts import ~/.codex/auth.json
  troupe accounts import logins.jsonl --models gpt-5.4,gpt-5.5 --max-concurrency 4 --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readImportFile(cmd.InOrStdin(), args[0])
			if err != nil {
				return err
			}
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				st := importBar(cmd.ErrOrStderr(), s, data)
				rep, err := admin.ImportCodexAccounts(ctx, st, data, opts)
				st.bar.Finish()
				if err != nil {
					return err
				}
				if !rep.DryRun && rep.Counts["imported"]+rep.Counts["updated"] > 0 {
					announceAccounts(cmd, cfg, "import")
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "LINE\tSTATUS\tNAME\tACCOUNT ID\tEMAIL\tPLAN\tREASON")
				for _, e := range rep.Entries {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Line, e.Status, e.Name, e.AccountID, e.Email, e.Plan, e.Reason)
				}
				w.Flush()
				dry := ""
				if rep.DryRun {
					dry = " (dry run: nothing stored)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d imported, %d updated, %d unchanged, %d refused%s\n",
					rep.Counts["imported"], rep.Counts["updated"], rep.Counts["unchanged"], rep.Counts["refused"], dry)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.NamePrefix, "name-prefix", "codex-", "names of new accounts: PREFIX + the start of the ChatGPT account id")
	f.StringVar(&opts.BaseURL, "base-url", "", "codex base URL of new accounts (default "+upstream.DefaultCodexBaseURL+")")
	f.StringSliceVar(&opts.Models, "models", nil, "models new accounts serve (default: any)")
	f.IntVar(&opts.MaxConcurrency, "max-concurrency", defaultMaxConcurrency, "in-flight requests allowed at once, for new accounts")
	f.StringVar(&opts.Group, "group", "", "routing group of new accounts")
	f.StringSliceVar(&opts.Tags, "tags", nil, "routing tags of new accounts")
	f.BoolVar(&opts.DryRun, "dry-run", false, "report what would happen, store nothing")
	return cmd
}

// barStore counts an import's writes on a progress bar.
type barStore struct {
	admin.ImportAccounts
	bar *progress.Bar
}

func (s barStore) PutAccount(ctx context.Context, a storage.Account) (storage.Account, error) {
	defer s.bar.Add(1)
	return s.ImportAccounts.PutAccount(ctx, a)
}

// importBar returns s with a progress bar on w over the entries of data,
// when w is a terminal (the entries are counted only then); without one,
// the bar is nil and draws nothing.
func importBar(w io.Writer, s admin.ImportAccounts, data []byte) barStore {
	st := barStore{ImportAccounts: s}
	if progress.IsTerminal(w) {
		entries, _ := upstream.ParseCodexFile(data)
		st.bar = progress.New(w, len(entries), "import: storing accounts")
	}
	return st
}

func readImportFile(stdin io.Reader, path string) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxImportFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxImportFile {
		return nil, fmt.Errorf("import: %s is larger than %d MiB", path, maxImportFile>>20)
	}
	return data, nil
}

func accountsExportCmd() *cobra.Command {
	var format, out string
	var names []string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export codex accounts' credentials (auth.json, json, jsonl or tokens)",
		Long: `Write the credentials of codex accounts (all, or those given with --name) in one
of the import formats, so that "troupe accounts import" (here or elsewhere) reads them
back. The output holds live secrets: it is written with mode 0600 when --out is given.`,
		Example: `  troupe accounts export --format jsonl --out codex.jsonl
  troupe accounts export --format auth.json --name codex-0a1b2c3d > auth.json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, s storage.Store) error {
				b, n, err := admin.ExportCodexAccounts(ctx, s, format, names)
				if err != nil {
					return err
				}
				if out == "" {
					_, err = cmd.OutOrStdout().Write(b)
					return err
				}
				if err := os.WriteFile(out, b, 0o600); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%d accounts written to %s\n", n, out)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", upstream.FormatJSONL, "auth.json, json, jsonl or tokens")
	f.StringVar(&out, "out", "", "file to write (mode 0600); default stdout")
	f.StringSliceVar(&names, "name", nil, "accounts to export (default: every codex account)")
	return cmd
}
