package telemetry

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/internal/telemetry/telemetrytest"
	"go.opentelemetry.io/otel/trace"
)

// env is a fake environment.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		env  func(string) string
		want bool
		err  bool
	}{
		{"off by default", Config{}, env(), false, false},
		{"config", Config{Enabled: true}, env(), true, false},
		{"endpoint variable", Config{}, env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), true, false},
		{"traces endpoint variable", Config{}, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"), true, false},
		{"exporter otlp", Config{}, env("OTEL_TRACES_EXPORTER", "otlp"), true, false},
		{"exporter none beats config", Config{Enabled: true}, env("OTEL_TRACES_EXPORTER", "none"), false, false},
		{"sdk disabled beats all", Config{Enabled: true}, env("OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"), false, false},
		{"sdk disabled false", Config{Enabled: true}, env("OTEL_SDK_DISABLED", "false"), true, false},
		{"other exporter", Config{Enabled: true}, env("OTEL_TRACES_EXPORTER", "zipkin"), false, true},
	} {
		got, err := Enabled(tc.cfg, tc.env)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: Enabled = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestSetupOff(t *testing.T) {
	p, err := Setup(context.Background(), Config{SampleRatio: 1}, env())
	if p != nil || err != nil {
		t.Fatalf("Setup with tracing off = %v, %v; want nil, nil", p, err)
	}
}

func TestSetupRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		env  func(string) string
		want string
	}{
		{Config{Enabled: true, SampleRatio: 1.5}, env(), "sample_ratio"},
		{Config{Enabled: true, SampleRatio: 1, Endpoint: "collector:4318"}, env(), "tracing.endpoint"},
		{Config{Enabled: true, SampleRatio: 1, Protocol: "thrift"}, env(), "thrift"},
		{Config{Enabled: true, SampleRatio: 1}, env("OTEL_EXPORTER_OTLP_PROTOCOL", "udp"), "udp"},
	} {
		p, err := Setup(context.Background(), tc.cfg, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Setup(%+v) error %v, want one naming %q", tc.cfg, err, tc.want)
		}
		if p != nil {
			p.Shutdown(context.Background())
		}
	}
}

// TestSetupExports sends a span through the real OTLP/HTTP exporter to an
// in-process receiver.
func TestSetupExports(t *testing.T) {
	r := telemetrytest.NewReceiver(t)
	p, err := Setup(context.Background(), Config{Enabled: true, Endpoint: r.URL, SampleRatio: 1, ServiceVersion: "v-test"}, env())
	if err != nil || p == nil {
		t.Fatalf("Setup = %v, %v", p, err)
	}
	if p.Endpoint() != r.URL+"/v1/traces" || p.Protocol() != "http/protobuf" || p.Instance() == "" {
		t.Errorf("endpoint %q, protocol %q, instance %q", p.Endpoint(), p.Protocol(), p.Instance())
	}
	_, span := p.Tracer().Start(context.Background(), "chat m", trace.WithSpanKind(trace.SpanKindServer))
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	spans := r.Spans()
	if len(spans) != 1 || spans[0].Name != "chat m" {
		t.Fatalf("received %d spans (%v), want the one made", len(spans), spans)
	}
	res := spans[0].Resource
	if res["service.name"] != "troupe" || res["service.version"] != "v-test" || res["service.instance.id"] != p.Instance() {
		t.Errorf("resource %v: want service.name troupe, service.version v-test, service.instance.id %q", res, p.Instance())
	}
}

// TestSetupSampleRatio: a ratio of 0 samples no new trace, yet a request
// that arrives with a sampled traceparent is followed (parent-based).
func TestSetupSampleRatio(t *testing.T) {
	r := telemetrytest.NewReceiver(t)
	p, err := Setup(context.Background(), Config{Enabled: true, Endpoint: r.URL, SampleRatio: 0}, env())
	if err != nil {
		t.Fatal(err)
	}
	_, root := p.Tracer().Start(context.Background(), "new trace")
	root.End()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, child := p.Tracer().Start(parent, "continued")
	child.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := r.Spans()
	if len(spans) != 1 || spans[0].Name != "continued" {
		t.Fatalf("received %v, want only the span continuing a sampled client trace", spans)
	}
}

// TestSetupGRPC builds the gRPC exporter (it connects lazily).
func TestSetupGRPC(t *testing.T) {
	p, err := Setup(context.Background(), Config{Enabled: true, Protocol: "grpc", Endpoint: "http://127.0.0.1:4317", SampleRatio: 1}, env())
	if err != nil || p == nil || p.Protocol() != "grpc" {
		t.Fatalf("Setup grpc = %v, %v", p, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.Shutdown(ctx)
}

// TestInstanceID: the instance the admin API's statistics name is the one
// spans carry: the host name, or what OTEL_RESOURCE_ATTRIBUTES says.
func TestInstanceID(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no host name:", err)
	}
	if got := InstanceID(context.Background()); got != host {
		t.Errorf("InstanceID() = %q, want the host name %q", got, host)
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=gw-7,deployment.environment=prod")
	if got := InstanceID(context.Background()); got != "gw-7" {
		t.Errorf("InstanceID() with OTEL_RESOURCE_ATTRIBUTES = %q, want gw-7", got)
	}
}
