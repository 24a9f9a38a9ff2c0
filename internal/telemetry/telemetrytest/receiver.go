// Package telemetrytest is an in-process OTLP/HTTP trace receiver for
// tests: a collector's /v1/traces on 127.0.0.1 that decodes what the real
// exporter sends (protobuf, optionally gzipped) and keeps it for the test
// to inspect.
package telemetrytest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running OTLP/HTTP trace receiver. Build it with
// NewReceiver; it is safe for concurrent use and stops when the test ends.
type Receiver struct {
	// URL is the receiver's base URL (http://127.0.0.1:PORT), what an
	// exporter's endpoint setting takes; spans are accepted on URL+"/v1/traces".
	URL string

	mu    sync.Mutex
	spans []Span
	raw   [][]byte // every export request's body as received (decompressed)
}

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string // resource attributes, as Value renders them
}

// NewReceiver starts a receiver on 127.0.0.1 until t ends.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// serve takes one export request: POST /v1/traces, protobuf.
func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.raw = append(r.raw, b)
	for _, rs := range msg.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = Value(kv.Value)
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Contains reports whether any export request received so far holds the
// bytes of s anywhere (attribute values, names, resource): for checks
// that a secret never left the process.
func (r *Receiver) Contains(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.raw {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// Attr returns the rendering (Value) of the span's attribute key, and
// whether it has it.
func (s Span) Attr(key string) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return Value(kv.Value), true
		}
	}
	return "", false
}

// TraceID is the span's trace id in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.Span.TraceId) }

// ID is the span's id in hex.
func (s Span) ID() string { return hex.EncodeToString(s.SpanId) }

// ParentID is the span's parent span id in hex ("" for a root span).
func (s Span) ParentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Value renders an attribute value: a string as it is, numbers and
// booleans as Go formats them, an array as [a,b].
func Value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, len(x.ArrayValue.GetValues()))
		for i, e := range x.ArrayValue.GetValues() {
			parts[i] = Value(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return ""
}
