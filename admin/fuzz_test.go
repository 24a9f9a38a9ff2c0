package admin

import (
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// FuzzAdminImport feeds arbitrary bodies to the account import parser and
// the account checks: they must never panic, and whatever they accept must
// be storable (a known provider, valid text).
func FuzzAdminImport(f *testing.F) {
	f.Add([]byte(`[{"name":"a","provider":"openai","api_key":"sk-x","models":["m"],"max_concurrency":2}]`))
	f.Add([]byte(`{"accounts":[{"name":"b","provider":"codex","credentials":{"access_token":"t","account_id":"x"}}]}`))
	f.Add([]byte(`[{"name":"","provider":"nope"},{"name":"c","tags":null,"models":[]}]`))
	f.Add([]byte(`[1,"x",null]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		list, err := parseImport(body)
		if err != nil {
			return
		}
		for i := range list {
			a, aerr := list[i].account(storage.Account{})
			if aerr != nil {
				continue
			}
			if !a.Provider.Valid() || !storage.TextOK(a.Name, a.Group, a.BaseURL) || a.MaxConcurrency < 0 {
				t.Fatalf("accepted an unstorable account: %+v", a)
			}
		}
	})
}

// FuzzUsageCursor checks that request-log cursors round-trip and that any
// string decodes without panicking.
func FuzzUsageCursor(f *testing.F) {
	f.Add(int64(1764590400123456789), "req-1", "MTc2NDU5MDQwMDEyMzQ1Njc4OTpyZXEtMQ")
	f.Add(int64(0), "x:y", "%%%")
	f.Fuzz(func(t *testing.T, ns int64, id, raw string) {
		decodeCursor(raw)
		if id == "" {
			return
		}
		c := storage.UsageCursor{At: time.Unix(0, ns).UTC(), RequestID: id}
		got, ok := decodeCursor(encodeCursor(c))
		if !ok || !got.At.Equal(c.At) || got.RequestID != c.RequestID {
			t.Fatalf("cursor %+v came back as %+v, %v", c, got, ok)
		}
	})
}
