package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// metricSum adds every series of one metric, labelled or not, and no
// metric whose name merely starts with it.
func TestMetricSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`# HELP troupe_requests_total Client requests.
# TYPE troupe_requests_total counter
troupe_requests_total{route="chat",status="200"} 1200
troupe_requests_total{route="chat",status="503"} 3
troupe_requests_total_extra 99
troupe_fleet_owned_accounts 3334
`))
	}))
	defer srv.Close()
	if v, err := metricSum(srv.URL, "troupe_requests_total"); err != nil || v != 1203 {
		t.Fatalf("troupe_requests_total: %v, %v; want 1203", v, err)
	}
	if v, err := metricSum(srv.URL, "troupe_fleet_owned_accounts"); err != nil || v != 3334 {
		t.Fatalf("troupe_fleet_owned_accounts: %v, %v; want 3334", v, err)
	}
	if _, err := metricSum(srv.URL, "troupe_fleet_remote_grants_received_total"); err == nil {
		t.Fatal("a missing metric read without error")
	}
}
