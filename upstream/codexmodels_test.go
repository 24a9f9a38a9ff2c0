package upstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/storage"
)

func TestCodexModelsCatalog(t *testing.T) {
	m, err := codexmock.Start(codexmock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var accs []storage.Account
	for _, a := range []codexmock.Account{{ID: "p1", Plan: "plus"}, {ID: "p2", Plan: "plus"}, {ID: "f1", Plan: "free"}} {
		m.AddAccount(a)
		at, id := m.IssueAccess(a.ID, time.Hour)
		accs = append(accs, storage.Account{Name: a.ID, Provider: storage.ProviderCodex, BaseURL: m.BaseURL(),
			Credentials: storage.Credentials{AccessToken: at, IDToken: id}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slugs, etag, err := FetchCodexModels(ctx, accs[0], Options{}, "")
	if err != nil || !slices.Equal(slugs, []string{"gpt-5.4"}) || etag != `"models-plus"` {
		t.Fatalf("fetch: %v %v %q", err, slugs, etag)
	}
	if _, _, err := FetchCodexModels(ctx, accs[0], Options{}, etag); !errors.Is(err, ErrNotModified) {
		t.Fatalf("with the etag: %v", err)
	}
	var c CodexCatalog
	if err := c.Refresh(ctx, accs, func(storage.Account) Options { return Options{} }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Plan("plus"), []string{"gpt-5.4"}) || len(c.Plan("free")) != 0 || !slices.Equal(c.Models(), []string{"gpt-5.4"}) {
		t.Fatalf("catalog: plus %v free %v all %v", c.Plan("plus"), c.Plan("free"), c.Models())
	}
	// A second refresh is answered 304 and keeps the list.
	if err := c.Refresh(ctx, accs, func(storage.Account) Options { return Options{} }); err != nil || !slices.Equal(c.Plan("plus"), []string{"gpt-5.4"}) {
		t.Fatalf("second refresh: %v %v", err, c.Plan("plus"))
	}
	// A refused token is an error for that plan; the list stays.
	bad := accs[0]
	bad.Credentials.AccessToken = "x.e30.y"
	if err := c.Refresh(ctx, []storage.Account{bad}, func(storage.Account) Options { return Options{} }); err == nil || !slices.Equal(c.Plan("plus"), []string{"gpt-5.4"}) {
		t.Fatalf("refused: %v %v", err, c.Plan("plus"))
	}
}
