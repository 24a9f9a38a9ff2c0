// Package telemetry sets up Troupe's OpenTelemetry tracing: the official
// Go SDK with an OTLP exporter (HTTP or gRPC), configured from troupe's
// tracing.* keys and the standard OTEL_* environment variables. It only
// builds the pipeline; the gateway makes the spans (gateway/tracing.go) and
// docs/observability.md lists them.
//
// Tracing is off unless the configuration or the environment turns it on;
// off, Setup returns a nil *Provider and nothing is started.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/internal/ratelog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is what troupe's configuration says about tracing (the tracing.*
// keys, docs/configuration.md). The zero value leaves tracing to the
// environment.
type Config struct {
	// Enabled turns tracing on. The environment may also turn it on
	// (OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint variable) or off
	// (OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true).
	Enabled bool
	// Endpoint is the collector's OTLP base URL, e.g.
	// "http://127.0.0.1:4318" (HTTP; "/v1/traces" is appended unless the
	// URL has a path) or "http://127.0.0.1:4317" (gRPC); http:// means no
	// TLS. "": OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's default on localhost.
	// When set it wins over those variables.
	Endpoint string
	// Protocol is "http/protobuf", "http/json" or "grpc"; "":
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http/protobuf.
	Protocol string
	// SampleRatio is the share of new traces sampled, 0 to 1; a request
	// that arrives with a sampled W3C traceparent is always sampled
	// (parent-based). OTEL_TRACES_SAMPLER, when set, wins.
	SampleRatio float64
	// ServiceVersion is service.version on every span's resource.
	ServiceVersion string
	// Logger gets the SDK's errors (a collector that cannot be reached,
	// spans dropped), at most one line per errorInterval; nil: slog.Default().
	Logger *slog.Logger
}

// errorInterval is the least time between two logged SDK errors: a
// collector that is down fails every export, and the log must stay readable.
const errorInterval = time.Minute

// Provider is a running trace pipeline: spans are batched and exported in
// the background until Shutdown. Safe for concurrent use.
type Provider struct {
	tp       *sdktrace.TracerProvider
	instance string
	endpoint string
	protocol string
}

// Tracer returns the tracer the gateway's spans are made with.
func (p *Provider) Tracer() trace.Tracer {
	return p.tp.Tracer("github.com/troupe-gw/troupe/gateway")
}

// Instance is this process's service.instance.id (the resource's, which
// OTEL_RESOURCE_ATTRIBUTES may set; default the host name).
func (p *Provider) Instance() string { return p.instance }

// Endpoint describes where spans go, for the start-up log line: the
// configured URL, or which variable or default decides.
func (p *Provider) Endpoint() string { return p.endpoint }

// Protocol is the OTLP protocol spans are exported with.
func (p *Provider) Protocol() string { return p.protocol }

// ForceFlush exports the spans ended so far and waits for the export (ctx
// bounds the wait).
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Shutdown exports the spans still queued and stops the pipeline; ctx
// bounds the wait.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

// Enabled reports whether tracing is on for cfg in the environment getenv:
// OTEL_SDK_DISABLED=true turns it off; OTEL_TRACES_EXPORTER "otlp" turns it
// on and "none" off; unset, cfg.Enabled or an OTLP endpoint variable turns
// it on. Another exporter name is an error (Troupe exports OTLP only).
func Enabled(cfg Config, getenv func(string) string) (bool, error) {
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		if off, err := strconv.ParseBool(v); err == nil && off {
			return false, nil
		}
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return cfg.Enabled || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: troupe exports traces with otlp (or none)", v)
	}
}

// Setup starts the trace pipeline cfg and the environment ask for, or
// returns nil when tracing is off (Enabled). getenv nil means os.Getenv;
// the SDK itself reads the OTEL_* variables from the process environment
// (headers, timeouts, TLS files, batch sizes, the sampler, resource
// attributes). Errors name the setting at fault.
func Setup(ctx context.Context, cfg Config, getenv func(string) string) (*Provider, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	on, err := Enabled(cfg, getenv)
	if err != nil || !on {
		return nil, err
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing.sample_ratio %v: want a number from 0 to 1", cfg.SampleRatio)
	}
	protocol := cfg.Protocol
	if protocol == "" {
		protocol = firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol == "" {
		protocol = "http/protobuf"
	}
	exp, endpoint, err := newExporter(ctx, protocol, cfg.Endpoint, getenv)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg.ServiceVersion)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	}
	logErrors(cfg.Logger)
	p := &Provider{tp: sdktrace.NewTracerProvider(opts...), endpoint: endpoint, protocol: protocol}
	if v, ok := res.Set().Value("service.instance.id"); ok {
		p.instance = v.AsString()
	}
	return p, nil
}

// logErrors sends the SDK's errors to log, rate-limited (ratelog). The
// SDK has one error handler per process (otel.SetErrorHandler), so the last
// Setup's logger gets them.
func logErrors(log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	budget := ratelog.New(1, errorInterval)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if ok, held := budget.Take(context.Background(), log, slog.LevelWarn); ok {
			log.Warn("tracing: OpenTelemetry SDK error (spans may be lost)", "err", err, "suppressed", held)
		}
	}))
}

// firstEnv returns the first of names set in the environment.
func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// newExporter builds the OTLP exporter of protocol; endpoint, when set, is
// the collector's base URL. It returns the exporter and a description of
// its destination.
func newExporter(ctx context.Context, protocol, endpoint string, getenv func(string) string) (sdktrace.SpanExporter, string, error) {
	where := endpoint
	if where == "" {
		where = firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("tracing.endpoint %q: want an http:// or https:// URL", endpoint)
		}
	}
	switch protocol {
	case "http/protobuf", "http/json":
		var opts []otlptracehttp.Option
		if protocol == "http/json" {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		} else {
			opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
		}
		if endpoint != "" {
			u, _ := url.Parse(endpoint)
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
			where = u.String()
		}
		if where == "" {
			where = "http://localhost:4318/v1/traces (default)"
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp http exporter: %w", err)
		}
		return exp, where, nil
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		if where == "" {
			where = "localhost:4317 (default)"
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp grpc exporter: %w", err)
		}
		return exp, where, nil
	}
	return nil, "", fmt.Errorf("OTLP protocol %q: want http/protobuf, http/json or grpc", protocol)
}

// InstanceID is the service.instance.id this process's spans carry (or
// would, with tracing off): the host name, unless OTEL_RESOURCE_ATTRIBUTES
// sets service.instance.id. It names the instance in answers that are one
// instance's own (the admin API's statistics).
func InstanceID(ctx context.Context) string {
	res, err := newResource(ctx, "")
	if err != nil {
		host, _ := os.Hostname()
		return host
	}
	v, _ := res.Set().Value("service.instance.id")
	return v.AsString()
}

// newResource describes this process: service.name "troupe", its version
// and service.instance.id (the host name), then what OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES say, which win.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "troupe")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		attrs = append(attrs, attribute.String("service.instance.id", host))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}
