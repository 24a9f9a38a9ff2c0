package admin

import (
	"cmp"
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// usagePoint is one time bucket of one series.
type usagePoint struct {
	T               time.Time `json:"t,omitzero"` // bucket start (UTC); absent in the total
	Requests        int64     `json:"requests"`
	Errors          int64     `json:"errors"` // requests answered with status >= 400
	InputTokens     int64     `json:"input_tokens"`
	CachedTokens    int64     `json:"cached_tokens"`
	OutputTokens    int64     `json:"output_tokens"`
	ReasoningTokens int64     `json:"reasoning_tokens"`
	// Cost is what the requests cost their users, as the rest of the admin
	// API shows money: a decimal string in units of the billing currency
	// (billing.FormatAmount of CostMicro, set by priced) and in micro-units.
	Cost      string `json:"cost"`
	CostMicro int64  `json:"cost_micro"`
}

// add adds rollup row r to p's sums (Cost is set by priced once p is whole).
func (p *usagePoint) add(r *storage.UsageRollup) {
	p.Requests += r.Requests
	if r.Status >= 400 {
		p.Errors += r.Requests
	}
	p.InputTokens += r.InputTokens
	p.CachedTokens += r.CachedTokens
	p.OutputTokens += r.OutputTokens
	p.ReasoningTokens += r.ReasoningTokens
	p.CostMicro += r.Cost
}

// priced sets p.Cost from p.CostMicro, once every row is added.
func (p *usagePoint) priced() {
	p.Cost = billing.FormatAmount(p.CostMicro)
}

// usageSeries is the usage of one key, account or model over time.
type usageSeries struct {
	ID     string       `json:"id"`   // key or account ID, or the model name
	Name   string       `json:"name"` // display name ("" when the key or account is gone)
	Total  usagePoint   `json:"total"`
	Points []usagePoint `json:"points"` // only the buckets with traffic, oldest first
}

// timeArg parses an RFC 3339 query parameter (def when absent).
func timeArg(a *fasthttp.Args, name string, def time.Time) (time.Time, *APIError) {
	v := a.Peek(name)
	if len(v) == 0 {
		return def, nil
	}
	t, err := time.Parse(time.RFC3339, string(v))
	if err != nil {
		return time.Time{}, errBadParam(name, name+" is an RFC 3339 time, e.g. 2026-12-01T00:00:00Z.")
	}
	return t.UTC(), nil
}

// adminUsage serves GET /api/admin/usage (series from the hourly rollups)
// and GET /api/admin/usage/requests (the request log).
func (s *Server) adminUsage(ctx *fasthttp.RequestCtx, method string, parts []string) {
	if method != "GET" {
		writeError(ctx, errMethod(method, string(ctx.Path())))
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(parts) == 0:
		s.usageSeries(ctx, rctx)
	case len(parts) == 1 && parts[0] == "requests":
		s.usageRequests(ctx, rctx)
	default:
		writeError(ctx, errNotFound(string(ctx.Path())))
	}
}

// names returns key and account display names by ID.
func (s *Server) names(ctx context.Context) (keys, accounts map[string]string) {
	keys, accounts = map[string]string{}, map[string]string{}
	if ks, err := s.store.ListAPIKeys(storeCtx(ctx)); err == nil {
		for _, k := range ks {
			keys[k.ID] = k.Name
		}
	}
	for _, v := range s.sys.Views() {
		accounts[v.ID] = v.Name
	}
	return keys, accounts
}

// seriesQuery is the query of GET /api/admin/usage.
type seriesQuery struct {
	storage.UsageQuery               // the window and the key, account and model filters
	bucket             time.Duration // an hour or a day
	by                 string        // model, key or account
	top                int           // series returned, busiest first
}

// parseSeriesQuery reads the query of GET /api/admin/usage: from and to
// (RFC 3339; default the last 24 whole hours), bucket (hour or day),
// group_by (model, key or account), top (1-100, default 10), key, account,
// model.
func parseSeriesQuery(a *fasthttp.Args, now time.Time) (seriesQuery, *APIError) {
	var q seriesQuery
	to, aerr := timeArg(a, "to", now.Truncate(time.Hour).Add(time.Hour))
	if aerr != nil {
		return q, aerr
	}
	from, aerr := timeArg(a, "from", to.Add(-24*time.Hour))
	if aerr != nil {
		return q, aerr
	}
	if !from.Before(to) || to.Sub(from) > 400*24*time.Hour {
		return q, errBadParam("from", "from must be before to, at most 400 days apart.")
	}
	q.bucket = time.Hour
	switch string(a.Peek("bucket")) {
	case "", "hour":
	case "day":
		q.bucket = 24 * time.Hour
	default:
		return q, errBadParam("bucket", "bucket is hour or day.")
	}
	if q.bucket == time.Hour && to.Sub(from) > 31*24*time.Hour {
		return q, errBadParam("bucket", "Hourly buckets cover at most 31 days; use bucket=day.")
	}
	q.by = string(a.Peek("group_by"))
	switch q.by {
	case "", "model":
		q.by = "model"
	case "key", "account":
	default:
		return q, errBadParam("group_by", "group_by is key, account or model.")
	}
	if q.top, aerr = intArg(a, "top", 10, 1, 100); aerr != nil {
		return q, aerr
	}
	q.UsageQuery = storage.UsageQuery{From: from, To: to, KeyID: string(a.Peek("key")), AccountID: string(a.Peek("account")), Model: string(a.Peek("model"))}
	return q, nil
}

// usageSeries serves GET /api/admin/usage: the hourly rollups of the
// window, summed per bucket into one series per model, key or account (the
// top busiest), with the total.
func (s *Server) usageSeries(ctx *fasthttp.RequestCtx, rctx context.Context) {
	q, aerr := parseSeriesQuery(ctx.QueryArgs(), s.now().UTC())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rows, err := s.store.Rollups(rctx, q.UsageQuery)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	keyNames, accountNames := s.names(rctx)
	group := func(r *storage.UsageRollup) (id, name string) {
		switch q.by {
		case "key":
			return r.KeyID, keyNames[r.KeyID]
		case "account":
			return r.AccountID, accountNames[r.AccountID]
		}
		return r.Model, r.Model
	}
	series, total := groupSeries(rows, q.bucket, group)
	total.priced()
	out := make([]usageSeries, 0, min(len(series), q.top))
	for _, g := range series[:min(len(series), q.top)] {
		out = append(out, g.points())
	}
	writeJSON(ctx, 200, map[string]any{"from": q.From, "to": q.To, "bucket": map[bool]string{true: "hour", false: "day"}[q.bucket == time.Hour],
		"group_by": q.by, "series": out, "groups": len(series), "total": total})
}

// seriesSum is one series being summed: its total and its buckets by start
// (unix seconds).
type seriesSum struct {
	series  usageSeries
	buckets map[int64]*usagePoint
}

// points returns the series with its buckets as points, oldest first, and
// their costs and the total's priced.
func (g *seriesSum) points() usageSeries {
	for _, p := range g.buckets {
		p.priced()
		g.series.Points = append(g.series.Points, *p)
	}
	g.series.Total.priced()
	slices.SortFunc(g.series.Points, func(x, y usagePoint) int { return x.T.Compare(y.T) })
	return g.series
}

// groupSeries sums rows into buckets of the given length, one series per
// group (group returns a row's group ID and display name), busiest series
// first (then by ID); total sums every row.
func groupSeries(rows []storage.UsageRollup, bucket time.Duration, group func(*storage.UsageRollup) (id, name string)) (series []*seriesSum, total usagePoint) {
	groups := map[string]*seriesSum{}
	for i := range rows {
		r := &rows[i]
		id, display := group(r)
		g := groups[id]
		if g == nil {
			g = &seriesSum{series: usageSeries{ID: id, Name: display}, buckets: map[int64]*usagePoint{}}
			groups[id] = g
		}
		t := r.Hour.Truncate(bucket)
		p := g.buckets[t.Unix()]
		if p == nil {
			p = &usagePoint{T: t}
			g.buckets[t.Unix()] = p
		}
		p.add(r)
		g.series.Total.add(r)
		total.add(r)
	}
	series = make([]*seriesSum, 0, len(groups))
	for _, g := range groups {
		series = append(series, g)
	}
	slices.SortFunc(series, func(x, y *seriesSum) int {
		if c := cmp.Compare(y.series.Total.Requests, x.series.Total.Requests); c != 0 {
			return c
		}
		return strings.Compare(x.series.ID, y.series.ID)
	})
	return series, total
}

// recordJSON is one request of the request log.
type recordJSON struct {
	RequestID       string    `json:"request_id"`
	At              time.Time `json:"at"`
	KeyID           string    `json:"key_id"`
	Key             string    `json:"key"` // the key's name ("" when gone)
	AccountID       string    `json:"account_id"`
	Account         string    `json:"account"` // the account's name
	Model           string    `json:"model"`
	Route           string    `json:"route"`
	Stream          bool      `json:"stream"`
	Status          int       `json:"status"`
	ErrorClass      string    `json:"error_class"`
	Attempts        int       `json:"attempts"`
	LatencyMs       float64   `json:"latency_ms"`
	TTFTMs          float64   `json:"ttft_ms"`
	InputTokens     int64     `json:"input_tokens"`
	CachedTokens    int64     `json:"cached_tokens"`
	OutputTokens    int64     `json:"output_tokens"`
	ReasoningTokens int64     `json:"reasoning_tokens"`
	Estimated       bool      `json:"estimated"` // tokens estimated by the gateway (storage.UsageRecord.Estimated)
	// Cost is what the request cost its user, the record's own charge
	// (storage.UsageRecord.Cost, never recomputed from today's prices): a
	// decimal string in units of the billing currency (billing.FormatAmount)
	// and CostMicro in micro-units, as the usage series show money; 0 for an
	// operator key's request and a refused one.
	Cost      string `json:"cost"`
	CostMicro int64  `json:"cost_micro"`
}

// encodeCursor makes the opaque next_cursor of a request-log page.
func encodeCursor(c storage.UsageCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UnixNano(), 10) + ":" + c.RequestID))
}

func decodeCursor(s string) (storage.UsageCursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return storage.UsageCursor{}, false
	}
	ns, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return storage.UsageCursor{}, false
	}
	return storage.UsageCursor{At: time.Unix(0, n).UTC(), RequestID: id}, true
}

// fromTo parses the optional from and to (RFC 3339) of a query; zero when
// absent. The error is 400 naming the bad one.
func fromTo(a *fasthttp.Args) (from, to time.Time, aerr *APIError) {
	if from, aerr = timeArg(a, "from", time.Time{}); aerr != nil {
		return
	}
	to, aerr = timeArg(a, "to", time.Time{})
	return
}

// pageArgs parses a request-log page's from, to, limit (1..1000, default
// 100) and cursor (a previous page's next_cursor) into q. The error is 400
// naming the bad parameter.
func pageArgs(a *fasthttp.Args, q *storage.UsageRecordQuery) *APIError {
	var aerr *APIError
	if q.From, q.To, aerr = fromTo(a); aerr != nil {
		return aerr
	}
	if q.Limit, aerr = intArg(a, "limit", 100, 1, 1000); aerr != nil {
		return aerr
	}
	if c := a.Peek("cursor"); len(c) > 0 {
		cur, ok := decodeCursor(string(c))
		if !ok {
			return errBadParam("cursor", "cursor is the next_cursor of a previous page.")
		}
		q.After = cur
	}
	return nil
}

// nextCursor is a page's next_cursor: the last record's, when the page is
// full (more may follow); nil otherwise.
func nextCursor(recs []storage.UsageRecord, q storage.UsageRecordQuery) any {
	if len(recs) == q.PageLimit() {
		last := recs[len(recs)-1]
		return encodeCursor(storage.UsageCursor{At: last.At, RequestID: last.RequestID})
	}
	return nil
}

func (s *Server) usageRequests(ctx *fasthttp.RequestCtx, rctx context.Context) {
	a := ctx.QueryArgs()
	var q storage.UsageRecordQuery
	if aerr := pageArgs(a, &q); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var aerr *APIError
	if q.Status, aerr = intArg(a, "status", 0, 0, 599); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	q.KeyID, q.AccountID, q.Model = string(a.Peek("key")), string(a.Peek("account")), string(a.Peek("model"))
	q.FailedOnly = a.GetBool("failed")
	recs, err := s.store.ListUsageRecords(rctx, q)
	if err != nil {
		s.storageError(ctx, err)
		return
	}
	keyNames, accountNames := s.names(rctx)
	out := make([]recordJSON, 0, len(recs))
	for _, r := range recs {
		out = append(out, recordJSON{RequestID: r.RequestID, At: r.At, KeyID: r.KeyID, Key: keyNames[r.KeyID], AccountID: r.AccountID,
			Account: accountNames[r.AccountID], Model: r.Model, Route: r.Route, Stream: r.Stream, Status: r.Status, ErrorClass: r.ErrorClass,
			Attempts: r.Attempts, LatencyMs: float64(r.Latency.Microseconds()) / 1000, TTFTMs: float64(r.TTFT.Microseconds()) / 1000,
			InputTokens: r.InputTokens, CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens, ReasoningTokens: r.ReasoningTokens,
			Estimated: r.Estimated, Cost: billing.FormatAmount(r.Cost), CostMicro: r.Cost})
	}
	writeJSON(ctx, 200, map[string]any{"records": out, "next_cursor": nextCursor(recs, q)})
}
