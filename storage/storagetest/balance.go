package storagetest

import (
	"context"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// CheckBalance fails tb unless the user's balance is start − spent
// (micro-units) and its ledger rows (up to 1,000) sum to that balance, the
// two invariants of every charge; it returns the balance. The billing tests
// of the gateway and of the demo's end to end share it.
func CheckBalance(tb testing.TB, ctx context.Context, s storage.Users, userID string, start, spent int64) int64 {
	tb.Helper()
	bal, err := s.Balance(ctx, userID)
	if err != nil {
		tb.Fatal(err)
	}
	if bal != start-spent {
		tb.Fatalf("balance %d, want start %d - spent %d = %d", bal, start, spent, start-spent)
	}
	ledger, err := s.Ledger(ctx, storage.LedgerQuery{UserID: userID, Limit: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	var sum int64
	for _, e := range ledger {
		sum += e.Amount
	}
	if sum != bal {
		tb.Fatalf("ledger sums to %d, balance %d", sum, bal)
	}
	return bal
}
