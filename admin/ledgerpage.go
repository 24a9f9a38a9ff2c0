package admin

import (
	"context"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/storage"
)

// A user's ledger is read newest first, a page at a time, with the id of a
// page's last row as the cursor of the next, older page. The users' console
// (GET /api/console/balance, a user's own ledger) and the admin API (GET
// /api/admin/users/{id}/ledger, any user's) page it through the two
// functions below, so both take the same parameters and answer the same
// next_before (docs/admin-api.md).

// ledgerPageQuery reads a page's parameters from a, for the ledger of
// userID: limit (def when absent, 1 to 1000) and before (the next_before
// of the previous page: a ledger row id, at least 1; absent for the newest
// page). The error is the 400 to answer, naming the parameter.
func ledgerPageQuery(a *fasthttp.Args, userID string, def int) (storage.LedgerQuery, *APIError) {
	limit, aerr := intArg(a, "limit", def, 1, 1000)
	if aerr != nil {
		return storage.LedgerQuery{}, aerr
	}
	q := storage.LedgerQuery{UserID: userID, Limit: limit}
	if v := a.Peek("before"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 1 {
			return storage.LedgerQuery{}, errBadParam("before", "before is the next_before of the previous page: the id of a ledger row, a positive integer.")
		}
		q.Before = n
	}
	return q, nil
}

// readLedgerPage reads the page q (q.Limit from 1 to 1000, as
// ledgerPageQuery gives it), newest first. next is the cursor of the next,
// older page, for the answer's next_before: the id of the page's last row
// when the page is full (the next page may then be empty), nil (JSON null)
// when it is not and the page is the ledger's last. Ledger rows are never
// deleted, so following next from the newest page reads each older row
// once, with neither a repeat nor a gap between pages.
func (s *Server) readLedgerPage(rctx context.Context, q storage.LedgerQuery) (rows []storage.LedgerEntry, next *int64, err error) {
	rows, err = s.store.Ledger(rctx, q)
	if err != nil {
		return nil, nil, err
	}
	if len(rows) > 0 && len(rows) >= q.Limit {
		id := rows[len(rows)-1].ID
		next = &id
	}
	return rows, next, nil
}
