package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/codexmock"
)

func TestOAuthRefreshAgainstMock(t *testing.T) {
	m, err := codexmock.Start(codexmock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rt := m.AddAccount(codexmock.Account{ID: "acc-1", Email: "a@example.com", Plan: "plus"})
	o := NewOAuth(OAuthConfig{TokenURL: m.TokenURL()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := o.Refresh(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" || tok.RefreshToken == rt || tok.ExpiresIn != time.Hour {
		t.Fatalf("tokens: rotated %v, expires_in %v", tok.RefreshToken != rt, tok.ExpiresIn)
	}
	c, ok := ParseTokenClaims(tok.AccessToken)
	if !ok || c.AccountID != "acc-1" || c.Plan != "plus" || !c.Expires.After(time.Now()) {
		t.Fatalf("claims %+v", c)
	}
	// Refresh tokens are single use.
	_, err = o.Refresh(ctx, rt)
	var re *RefreshError
	if !errors.As(err, &re) || re.Code != "refresh_token_reused" || !Permanent(err) {
		t.Fatalf("reuse: %v", err)
	}
	if _, err := o.Refresh(ctx, tok.RefreshToken); err != nil {
		t.Fatalf("the rotated token: %v", err)
	}
	if _, err := NewOAuth(OAuthConfig{TokenURL: m.TokenURL(), ClientID: "app_other"}).Refresh(ctx, "rt_x"); !Permanent(err) {
		t.Fatalf("wrong client id: %v", err)
	}
	if _, err := o.Refresh(ctx, ""); !errors.Is(err, ErrNoRefreshToken) {
		t.Fatalf("empty token: %v", err)
	}
}

func TestOAuthRefreshErrors(t *testing.T) {
	cases := []struct {
		status    int
		body      string
		code      string
		permanent bool
	}{
		{401, string(testdata(t, "codex/oauth-refresh.error-401-expired.json")), "refresh_token_expired", true},
		{401, string(testdata(t, "codex/oauth-refresh.error-401-invalidated.json")), "refresh_token_invalidated", true},
		{401, string(testdata(t, "codex/oauth-refresh.error-401-reused.json")), "refresh_token_reused", true},
		{400, `{"error":"invalid_grant","error_description":"bad"}`, "invalid_grant", true},
		{500, string(testdata(t, "codex/oauth-refresh.error-500-transient.json")), "temporary-failure", false},
		{429, `{}`, "", false},
		{200, `{"refresh_token":"x"}`, "", false}, // no access token
		{200, `not json`, "", false},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Originator") != CodexOriginator || r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(400)
				return
			}
			w.WriteHeader(tc.status)
			w.Write([]byte(tc.body))
		}))
		_, err := NewOAuth(OAuthConfig{TokenURL: srv.URL}).Refresh(context.Background(), "rt_secret")
		srv.Close()
		var re *RefreshError
		if !errors.As(err, &re) {
			t.Fatalf("%d %s: %v", tc.status, tc.body, err)
		}
		if re.Code != tc.code || Permanent(err) != tc.permanent {
			t.Errorf("%d %s: code %q permanent %v", tc.status, tc.body, re.Code, Permanent(err))
		}
		if strings.Contains(err.Error(), "rt_secret") {
			t.Errorf("error quotes the token: %v", err)
		}
	}
	// A server that is not there is a transient failure.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if _, err := NewOAuth(OAuthConfig{TokenURL: url}).Refresh(context.Background(), "rt"); err == nil || Permanent(err) {
		t.Fatalf("down: %v", err)
	}
}
