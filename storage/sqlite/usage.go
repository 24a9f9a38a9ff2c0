package sqlite

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

const (
	usageColumns = `request_id, at, key_id, account_id, model, route, stream, status, error_class, attempts,
	latency_us, ttft_us, input_tokens, cached_tokens, output_tokens, reasoning_tokens, decision, estimated,
	cache_write_tokens, user_id, cost`
	usageTuple  = `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	usageParams = 21 // the parameters of usageTuple
)

// usageRowsShift sets the largest statement of InsertUsage: 1<<usageRowsShift
// records (21 parameters each). A batch is written as statements of
// power-of-two sizes, largest first (500 records: 128+128+128+64+32+16+4),
// all prepared once at Open, so no batch parses SQL. A statement per record
// cost each record a round through database/sql (its locks, the
// conversion of its arguments, a result) and the VDBE's per-statement
// setup (BenchmarkInsertUsage, docs/benchmarks.md).
const usageRowsShift = 7

// insertUsagesSQL stores n usage records in one statement; stored ones are
// skipped.
func insertUsagesSQL(n int) string {
	return valuesSQL(`INSERT INTO usage_records (`+usageColumns+`) VALUES `, usageTuple, n, `
ON CONFLICT(request_id) DO NOTHING`)
}

// insertErrorEventSQL stores one failed attempt; a repeated one is skipped.
const insertErrorEventSQL = `INSERT INTO error_events (request_id, attempt, at, account_id, class, status, latency_us)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(request_id, attempt) DO NOTHING`

// rollupRowsShift sets the largest upsert statement of InsertUsage's
// usage_hourly rows: 1<<rollupRowsShift rows (11 parameters each). Over a
// large pool nearly every record of a batch has a row of its own (its
// account's), and a statement per row cost each a round through the driver
// and the VDBE's per-statement setup (BenchmarkInsertUsage "varied"). As
// the records', the rows go in statements of power-of-two sizes, largest
// first, prepared once (usageStmts).
const rollupRowsShift = 7

// upsertRollupsSQL adds n groups' sums to their usage_hourly rows, one
// VALUES tuple a group; the groups of one statement are distinct.
func upsertRollupsSQL(n int) string {
	return valuesSQL(`INSERT INTO usage_hourly (
	hour, key_id, account_id, model, status,
	requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost
) VALUES `, `(?,?,?,?,?,?,?,?,?,?,?)`, n, "\n"+addToRollupSQL)
}

// addToRollupSQL ends the usage_hourly upserts: a group's sums are added to
// its row's.
const addToRollupSQL = `ON CONFLICT (hour, key_id, account_id, model, status) DO UPDATE SET
	requests = requests + excluded.requests,
	input_tokens = input_tokens + excluded.input_tokens,
	cached_tokens = cached_tokens + excluded.cached_tokens,
	output_tokens = output_tokens + excluded.output_tokens,
	reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
	cost = cost + excluded.cost`

// addRecordRollupsSQL adds each usage record stored after rowid ? (the
// records the transaction inserted: see lastRowidSQL) to its usage_hourly
// row, one upsert a record in rowid order, the sums read by SQLite from
// the rows as stored: nothing is bound but the rowid. The hour rounds
// down, also before 1970, as in migrations 2 and 13. SQLite applies an
// upsert to a row the same statement inserted, so a group's records add
// up. addRollups chooses it over upsertRollupsSQL when a batch has nearly
// a row per record (recordRollups).
const addRecordRollupsSQL = `INSERT INTO usage_hourly (
	hour, key_id, account_id, model, status,
	requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost
) SELECT at - ((at % 3600000) + 3600000) % 3600000, key_id, account_id, model, status,
	1, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost
FROM usage_records WHERE rowid > ? ORDER BY rowid
` + addToRollupSQL

// lastRowidSQL is the largest rowid of usage_records, 0 when it is empty.
// SQLite gives a row inserted without a rowid one larger than the largest
// in the table while that is below the largest int64
// (https://sqlite.org/autoinc.html), so the rows a transaction of the one
// writer inserts are exactly those above the largest before it.
const lastRowidSQL = `SELECT coalesce(max(rowid), 0) FROM usage_records`

// recordRollups reports whether rows usage_hourly rows for n stored
// records are upserted cheaper a record at a time from the stored rows
// (addRecordRollupsSQL) than a row at a time with their sums bound
// (upsertRollupsSQL): when there are more than 2 rows for every 3
// records. An upsert costs about 14,500 instructions, binding a row's 11
// parameters (three of them text, each copied into C memory by
// modernc.org/sqlite) and sorting the rows about 7,000 more
// (TestZZCount in docs/benchmarks.md, "Issue 21, the usage write"): over a
// pool of 10,000 accounts nearly every record of a batch has a row of its
// own, over a few accounts a batch has a few rows.
func recordRollups(rows, n int) bool { return 3*rows > 2*n }

// maxRowid is the largest rowid: past it SQLite picks new rowids at random
// (lastRowidSQL), which InsertUsage refuses rather than miscount.
const maxRowid = math.MaxInt64

// valuesSQL is head, n copies of tuple separated by commas, then tail.
func valuesSQL(head, tuple string, n int, tail string) string {
	var b strings.Builder
	b.Grow(len(head) + (len(tuple)+1)*n + len(tail))
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	b.WriteString(tail)
	return b.String()
}

// pruneBatch is how many rows one DELETE of PruneUsage removes: each batch is
// its own short transaction, so the writer is never held for long.
const pruneBatch = 5000

const hourMs = int64(time.Hour / time.Millisecond)

// rollupKey identifies a usage_hourly row.
type rollupKey struct {
	hour                    int64 // unix ms
	keyID, accountID, model string
	status                  int
}

// rollupSums are the sums of one usage_hourly row; cost in micro-units.
type rollupSums struct {
	requests, input, cached, output, reasoning, cost int64
}

// rollupRow is a usage_hourly row's key and the sums a batch adds to it.
type rollupRow struct {
	key  rollupKey
	sums rollupSums
}

// rollups are the usage_hourly rows of the records of one batch: rows in
// the order first met, index the position of each key in rows. Its memory
// is kept from batch to batch (usageStmts).
type rollups struct {
	index   map[rollupKey]int
	rows    []rollupRow
	records int // the records added
}

// reset empties r for a new batch.
func (r *rollups) reset() {
	if r.index == nil {
		r.index = make(map[rollupKey]int, 8)
	}
	clear(r.index)
	r.rows = r.rows[:0]
	r.records = 0
}

// hourOf returns the start of the UTC hour of unix ms, rounding down.
func hourOf(ms int64) int64 {
	h := ms - ms%hourMs
	if ms%hourMs < 0 {
		h -= hourMs
	}
	return h
}

// InsertUsage writes recs in one transaction through prepared statements:
// either all are stored or none. At is stored with millisecond precision,
// Latency and TTFT with microsecond precision. An empty recs is a no-op.
// A record whose RequestID is already stored (or repeated within recs: the
// first one is kept) is skipped, so a batch retried after an ambiguous
// failure is not doubled. The usage_hourly rows of the stored records are
// upserted (sums added) in the same transaction, from exactly the records
// that were stored, so the rollups always agree with the records. Text that
// is not valid UTF-8 or holds NUL bytes is stored with U+FFFD in place of the
// bad bytes, as the PostgreSQL backend must.
//
// The records go in multi-row statements (usageRowsShift). When one of them
// stores fewer rows than it holds — records stored already, as in a batch
// retried or replayed from the journal, or repeated within recs — which
// ones were skipped is not known, so the transaction is rolled back and the
// batch written again a record a statement, each one's result telling
// whether it was stored.
// Errors: storage.ErrInvalid when a record fails Validate (nothing is written).
func (s *Store) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("sqlite: insert usage: record %d: %w", i, err)
		}
		recs[i].Bound()
	}
	err := s.insertUsageTx(ctx, recs, s.insertBatch)
	if errors.Is(err, errSkipped) {
		err = s.insertUsageTx(ctx, recs, s.insertRecords)
	}
	s.idle.wrote()
	return err
}

// errSkipped is insertBatch's error when a statement stored fewer records
// than it held.
var errSkipped = errors.New("sqlite: insert usage: records stored already")

// insertFunc inserts recs through the driver statements of us, on the
// connection of the transaction, adds the stored ones to us.groups and
// returns what they charge their users (see insertBatch and insertRecords).
type insertFunc func(ctx context.Context, us *usageStmts, recs []storage.UsageRecord) ([]userCharge, error)

// insertUsageTx is one transaction of InsertUsage: the records through
// insert, then their rollups and charges. The transaction runs on the
// writer's connection taken from the pool, so that insert can run its
// statements on the driver connection under it (usageStmts).
func (s *Store) insertUsageTx(ctx context.Context, recs []storage.UsageRecord, insert insertFunc) (err error) {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: insert usage: %w", err)
	}
	defer conn.Close() // back to the pool; its transaction has ended
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: insert usage: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	if err := conn.Raw(func(dc any) error {
		us, err := s.usageStmtsOn(ctx, dc)
		if err != nil {
			return err
		}
		us.groups.reset()
		last, err := us.lastRowid(ctx)
		if err != nil {
			return err
		}
		if last > maxRowid-int64(len(recs)) {
			return fmt.Errorf("sqlite: insert usage: usage_records rowids are exhausted (%d)", last)
		}
		charges, err := insert(ctx, us, recs)
		if err != nil {
			return err
		}
		if err := us.addRollups(ctx, last); err != nil {
			return err
		}
		return us.charge(ctx, charges)
	}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: insert usage: commit: %w", err)
	}
	return nil
}

// usageStmts are InsertUsage's statements prepared on one driver connection,
// the writer's. They are run with driver.NamedValues built in place, not
// through database/sql: a Stmt.Exec there converts every argument into a
// fresh []driver.NamedValue (21 a record), which was 14 % of the bytes the
// gateway allocated at saturation (docs/benchmarks.md, issue 21).
type usageStmts struct {
	conn driver.Conn // the connection the statements are prepared on
	// insert[k] stores 1<<k usage records (insertUsagesSQL).
	insert [usageRowsShift + 1]driver.StmtExecContext
	// rollup[k] adds to 1<<k usage_hourly rows (upsertRollupsSQL).
	rollup [rollupRowsShift + 1]driver.StmtExecContext
	// records adds the records stored after a rowid to usage_hourly
	// (addRecordRollupsSQL).
	records driver.StmtExecContext
	// last reads the largest rowid of usage_records (lastRowidSQL).
	last driver.StmtQueryContext
	// exists, ledger, balance and daily bill a batch's records of users
	// (charge): userExistsSQL, insertChargesSQL (ledger[k] stores 1<<k
	// charge rows), chargeBalanceSQL and addUserDailySQL. Prepared anew
	// for every record in the batch's transaction, they cost a record of a
	// user 8 times what one of an operator key costs (docs/benchmarks.md,
	// issue 21, tenantperf).
	exists         driver.StmtQueryContext
	ledger         [usageRowsShift + 1]driver.StmtQueryContext
	balance, daily driver.StmtExecContext
	dest           [1]driver.Value     // last's or exists' row
	row            [2]driver.Value     // a row ledger returns
	args           []driver.NamedValue // the parameters of one statement, reused
	groups         rollups             // the batch's usage_hourly rows, reused
	bill           billing             // the batch's charges, reused
}

// usageStmtsOn returns InsertUsage's statements on dc, the writer's driver
// connection, preparing them when dc is not the connection they were
// prepared on (the first use, or a writer connection the pool replaced). It
// is called only inside (*sql.Conn).Raw on the writer, whose pool holds one
// connection: never by two goroutines at once.
func (s *Store) usageStmtsOn(ctx context.Context, dc any) (*usageStmts, error) {
	if s.usage != nil && s.usage.conn == dc {
		return s.usage, nil
	}
	// Statements of a connection the pool closed are not closed here: the
	// driver freed what closing them needs. The writer's connection is
	// never closed for idleness (Open), so this is not expected.
	s.usage = nil
	c, ok := dc.(interface {
		driver.Conn
		driver.ConnPrepareContext
	})
	if !ok {
		return nil, fmt.Errorf("sqlite: insert usage: driver connection %T cannot prepare with a context", dc)
	}
	us := &usageStmts{conn: c}
	prepare := func(query string) (driver.StmtExecContext, error) {
		return prepareOn[driver.StmtExecContext](ctx, c, query, "execute")
	}
	prepareQuery := func(query string) (driver.StmtQueryContext, error) {
		return prepareOn[driver.StmtQueryContext](ctx, c, query, "query")
	}
	var err error
	defer func() {
		if err != nil {
			_ = us.close() // the error that matters is err
		}
	}()
	for k := range us.insert {
		if us.insert[k], err = prepare(insertUsagesSQL(1 << k)); err != nil {
			return nil, err
		}
	}
	for k := range us.rollup {
		if us.rollup[k], err = prepare(upsertRollupsSQL(1 << k)); err != nil {
			return nil, err
		}
	}
	for _, p := range []struct {
		st    *driver.StmtExecContext
		query string
	}{{&us.records, addRecordRollupsSQL}, {&us.balance, chargeBalanceSQL}, {&us.daily, addUserDailySQL}} {
		if *p.st, err = prepare(p.query); err != nil {
			return nil, err
		}
	}
	if us.last, err = prepareQuery(lastRowidSQL); err != nil {
		return nil, err
	}
	if us.exists, err = prepareQuery(userExistsSQL); err != nil {
		return nil, err
	}
	for k := range us.ledger {
		if us.ledger[k], err = prepareQuery(insertChargesSQL(1 << k)); err != nil {
			return nil, err
		}
	}
	s.usage = us
	return us, nil
}

// prepareOn prepares query on the driver connection c as a statement of
// type T (driver.StmtExecContext or driver.StmtQueryContext; can names
// what T does, for the error). The statement is closed again when the
// driver's is not a T.
func prepareOn[T any](ctx context.Context, c driver.ConnPrepareContext, query, can string) (T, error) {
	var zero T
	st, err := c.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return zero, fmt.Errorf("sqlite: prepare: %w", err)
	}
	t, ok := st.(T)
	if !ok {
		_ = st.Close()
		return zero, fmt.Errorf("sqlite: prepare: driver statement %T cannot %s with a context", st, can)
	}
	return t, nil
}

// close closes the statements of us; the errors are joined.
func (us *usageStmts) close() error {
	var errs []error
	for _, st := range append(append(us.insert[:], us.rollup[:]...), us.records, us.balance, us.daily) {
		if c, ok := st.(driver.Stmt); ok {
			errs = append(errs, c.Close())
		}
	}
	for _, st := range append([]driver.StmtQueryContext{us.last, us.exists}, us.ledger[:]...) {
		if c, ok := st.(driver.Stmt); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// lastRowid returns the largest rowid of usage_records, 0 when it is empty
// (lastRowidSQL), under a context without cancellation as exec.
func (us *usageStmts) lastRowid(ctx context.Context) (int64, error) {
	rows, err := us.last.QueryContext(context.WithoutCancel(ctx), nil)
	if err != nil {
		return 0, fmt.Errorf("sqlite: insert usage: last rowid: %w", err)
	}
	err = rows.Next(us.dest[:])
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: insert usage: last rowid: %w", err)
	}
	n, ok := us.dest[0].(int64)
	if !ok {
		return 0, fmt.Errorf("sqlite: insert usage: last rowid: %T, not an integer", us.dest[0])
	}
	return n, nil
}

// exec runs st with us.args and returns how many rows it changed. It runs
// under a context without cancellation: the driver would otherwise start a
// watcher goroutine per statement. Cancellation is honoured between
// statements by the callers.
func (us *usageStmts) exec(ctx context.Context, st driver.StmtExecContext) (int64, error) {
	res, err := st.ExecContext(context.WithoutCancel(ctx), us.args)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// insertBatch inserts recs in multi-row statements, adds them to
// us.groups and returns what they charge their users, or errSkipped when a
// statement stored fewer rows than it held. Cancellation is honoured
// between statements.
func (s *Store) insertBatch(ctx context.Context, us *usageStmts, recs []storage.UsageRecord) ([]userCharge, error) {
	var charges []userCharge
	for start := 0; start < len(recs); {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: insert usage: %w", err)
		}
		k := bits.Len(uint(min(len(recs)-start, 1<<usageRowsShift))) - 1
		chunk := recs[start : start+1<<k]
		us.args = us.args[:0]
		for i := range chunk {
			var c userCharge
			us.args, c = usageArgs(us.args, &chunk[i])
			us.groups.add(&c, &chunk[i])
			if c.userID != "" {
				charges = append(charges, c)
			}
		}
		n, err := us.exec(ctx, us.insert[k])
		if err != nil {
			return nil, fmt.Errorf("sqlite: insert usage: records %d-%d of %d: %w", start, start+len(chunk)-1, len(recs), err)
		}
		if n != int64(len(chunk)) {
			return nil, errSkipped
		}
		start += len(chunk)
	}
	return charges, nil
}

// usageArgs appends r's parameters (usageTuple's order, numbered on from
// len(args)) to args, and returns them with r's charge: its cleaned text and
// tokens (userID "" when r has no user). The numbers are int64s, the
// driver.Value the driver binds. A text equal to the previous record's in
// args reuses its driver.Value (reuse) rather than boxing the string again
// (most records of a batch share their key, model and route).
func usageArgs(args []driver.NamedValue, r *storage.UsageRecord) ([]driver.NamedValue, userCharge) {
	c := userCharge{requestID: storage.CleanText(r.RequestID), userID: storage.CleanText(r.UserID), model: storage.CleanText(r.Model),
		at: r.At.UnixMilli(), input: r.InputTokens, cached: r.CachedTokens, output: r.OutputTokens, cost: max(r.Cost, 0)}
	var prev []driver.NamedValue // the previous record's
	if len(args) >= usageParams {
		prev = args[len(args)-usageParams:]
	}
	text := func(i int, s string) driver.Value { return reuse(prev, i, s) }
	for _, v := range [usageParams]driver.Value{
		c.requestID, c.at, text(2, storage.CleanText(r.KeyID)), text(3, storage.CleanText(r.AccountID)), text(4, c.model), text(5, storage.CleanText(r.Route)),
		int64(boolInt(r.Stream)), int64(r.Status), text(8, storage.CleanText(r.ErrorClass)), int64(r.Attempts),
		r.Latency.Microseconds(), r.TTFT.Microseconds(),
		r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens, text(16, storage.CleanText(r.Decision)), int64(boolInt(r.Estimated)),
		r.CacheWriteTokens, text(19, c.userID), r.Cost} {
		args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v})
	}
	return args, c
}

// reuse returns v as a driver.Value: prev[i]'s when that holds v (no
// allocation), else v boxed anew. prev may be shorter than i (none).
func reuse[T string | int64](prev []driver.NamedValue, i int, v T) driver.Value {
	if i < len(prev) {
		if p, ok := prev[i].Value.(T); ok && p == v {
			return prev[i].Value
		}
	}
	return v
}

// add adds stored record r, whose charge is c (usageArgs), to its rollup
// row's sums in g.
func (g *rollups) add(c *userCharge, r *storage.UsageRecord) {
	k := rollupKey{hour: hourOf(c.at), keyID: storage.CleanText(r.KeyID), accountID: storage.CleanText(r.AccountID), model: c.model, status: r.Status}
	i, ok := g.index[k]
	if !ok {
		i = len(g.rows)
		g.rows = append(g.rows, rollupRow{key: k})
		g.index[k] = i
	}
	g.records++
	sum := &g.rows[i].sums
	sum.requests++
	sum.input += r.InputTokens
	sum.cached += r.CachedTokens
	sum.output += r.OutputTokens
	sum.reasoning += r.ReasoningTokens
	sum.cost += r.Cost
}

// insertRecords inserts recs a record a statement, skipping those already
// stored, adds the records it stored to us.groups and returns what they
// charge their users. Cancellation is honoured between rows.
func (s *Store) insertRecords(ctx context.Context, us *usageStmts, recs []storage.UsageRecord) ([]userCharge, error) {
	var charges []userCharge
	for i := range recs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: insert usage: %w", err)
		}
		var c userCharge
		us.args, c = usageArgs(us.args[:0], &recs[i])
		n, err := us.exec(ctx, us.insert[0])
		if err != nil {
			return nil, fmt.Errorf("sqlite: insert usage: record %d of %d: %w", i, len(recs), err)
		}
		if n == 0 {
			continue // already stored: not counted again
		}
		us.groups.add(&c, &recs[i])
		if c.userID != "" {
			charges = append(charges, c)
		}
	}
	return charges, nil
}

// addRollups adds us.groups, the rollups of the records the transaction
// stored after rowid last, to their usage_hourly rows. With nearly a row a
// record (recordRollups) one statement reads the stored records and
// upserts a record at a time (addRecordRollupsSQL); otherwise the rows go
// with their sums bound, in key order, in statements of power-of-two sizes,
// largest first (rollupRowsShift). Either way the sums are the stored
// records'. Cancellation is honoured between statements.
func (us *usageStmts) addRollups(ctx context.Context, last int64) error {
	rows := us.groups.rows
	if recordRollups(len(rows), us.groups.records) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: insert usage: %w", err)
		}
		us.args = append(us.args[:0], driver.NamedValue{Ordinal: 1, Value: last})
		if _, err := us.exec(ctx, us.records); err != nil {
			return fmt.Errorf("sqlite: insert usage: update rollups: %w", err)
		}
		return nil
	}
	slices.SortFunc(rows, func(a, b rollupRow) int { return compareRollupKeys(a.key, b.key) })
	for start := 0; start < len(rows); {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: insert usage: %w", err)
		}
		k := bits.Len(uint(min(len(rows)-start, 1<<rollupRowsShift))) - 1
		us.args = us.args[:0]
		for i := range rows[start : start+1<<k] {
			us.args = rollupArgs(us.args, &rows[start+i])
		}
		if _, err := us.exec(ctx, us.rollup[k]); err != nil {
			return fmt.Errorf("sqlite: insert usage: update rollups: %w", err)
		}
		start += 1 << k
	}
	return nil
}

// rollupParams is the number of parameters of a row of upsertRollupsSQL.
const rollupParams = 11

// rollupArgs appends row's parameters (upsertRollupsSQL's order, numbered on
// from len(args)) to args. Values equal to the previous row's reuse its
// driver.Values (reuse): rows in key order share their hour, key and model.
func rollupArgs(args []driver.NamedValue, row *rollupRow) []driver.NamedValue {
	var prev []driver.NamedValue
	if len(args) >= rollupParams {
		prev = args[len(args)-rollupParams:]
	}
	k, g := &row.key, &row.sums
	for _, v := range [rollupParams]driver.Value{
		reuse(prev, 0, k.hour), reuse(prev, 1, k.keyID), reuse(prev, 2, k.accountID), reuse(prev, 3, k.model), int64(k.status),
		g.requests, g.input, g.cached, g.output, g.reasoning, g.cost} {
		args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v})
	}
	return args
}

func compareRollupKeys(a, b rollupKey) int {
	return cmp.Or(
		cmp.Compare(a.hour, b.hour),
		strings.Compare(a.keyID, b.keyID),
		strings.Compare(a.accountID, b.accountID),
		strings.Compare(a.model, b.model),
		cmp.Compare(a.status, b.status),
	)
}

// CountUsage returns the number of stored usage records.
func (s *Store) CountUsage(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM usage_records`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count usage: %w", err)
	}
	return n, nil
}

// Rollups returns the usage_hourly rows matching q (see storage.UsageQuery),
// ordered by hour, key, account, model (bytewise) and status. Hours are UTC;
// an empty result is a nil slice.
func (s *Store) Rollups(ctx context.Context, q storage.UsageQuery) ([]storage.UsageRollup, error) {
	var (
		where []string
		args  []any
	)
	if !q.From.IsZero() {
		where, args = append(where, "hour >= ?"), append(args, toMillis(q.From))
	}
	if !q.To.IsZero() {
		where, args = append(where, "hour < ?"), append(args, toMillis(q.To))
	}
	for _, f := range []struct{ col, v string }{{"key_id", q.KeyID}, {"account_id", q.AccountID}, {"model", q.Model}} {
		if f.v != "" {
			where, args = append(where, f.col+" = ?"), append(args, storage.CleanText(f.v))
		}
	}
	query := `SELECT hour, key_id, account_id, model, status, requests, input_tokens, cached_tokens,
	output_tokens, reasoning_tokens, cost FROM usage_hourly`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY hour, key_id, account_id, model, status"
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: rollups: %w", err)
	}
	defer rows.Close()
	var out []storage.UsageRollup
	for rows.Next() {
		var (
			r    storage.UsageRollup
			hour int64
		)
		if err := rows.Scan(&hour, &r.KeyID, &r.AccountID, &r.Model, &r.Status, &r.Requests,
			&r.InputTokens, &r.CachedTokens, &r.OutputTokens, &r.ReasoningTokens, &r.Cost); err != nil {
			return nil, fmt.Errorf("sqlite: rollups: %w", err)
		}
		r.Hour = fromMillis(hour)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: rollups: %w", err)
	}
	return out, nil
}

// PruneUsage deletes the usage records whose At is before recordsBefore and
// the rollup rows whose hour is before rollupsBefore, in batches of 5,000
// rows, each its own transaction (so the single writer is never held for long
// and other writes interleave), and returns how many of each it deleted. On
// an error or cancellation the batches already committed stay deleted and
// their counts are returned with the error. A zero time deletes nothing.
func (s *Store) PruneUsage(ctx context.Context, recordsBefore, rollupsBefore time.Time) (records, rollups int64, err error) {
	if !recordsBefore.IsZero() {
		records, err = s.pruneLoop(ctx, `DELETE FROM usage_records WHERE rowid IN (
			SELECT rowid FROM usage_records WHERE at < ? LIMIT `+fmt.Sprint(pruneBatch)+`)`, toMillis(recordsBefore))
		if err != nil {
			return records, 0, fmt.Errorf("sqlite: prune usage records: %w", err)
		}
		if _, err = s.pruneLoop(ctx, `DELETE FROM error_events WHERE rowid IN (
			SELECT rowid FROM error_events WHERE at < ? LIMIT `+fmt.Sprint(pruneBatch)+`)`, toMillis(recordsBefore)); err != nil {
			return records, 0, fmt.Errorf("sqlite: prune error events: %w", err)
		}
	}
	if !rollupsBefore.IsZero() {
		rollups, err = s.pruneLoop(ctx, `DELETE FROM usage_hourly WHERE rowid IN (
			SELECT rowid FROM usage_hourly WHERE hour < ? LIMIT `+fmt.Sprint(pruneBatch)+`)`, toMillis(rollupsBefore))
		if err != nil {
			return records, rollups, fmt.Errorf("sqlite: prune usage rollups: %w", err)
		}
	}
	return records, rollups, nil
}

// pruneLoop runs the batch DELETE query until it deletes fewer than a batch.
func (s *Store) pruneLoop(ctx context.Context, query string, before int64) (int64, error) {
	var total int64
	for {
		res, err := s.w.ExecContext(ctx, query, before)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}
