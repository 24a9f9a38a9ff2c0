package main

import "strconv"

// concurrencyColumn is the CONCURRENCY column of `troupe accounts list`: the
// effective in-flight limit of an account whose stored max_concurrency is n.
// An unset (<= 0) limit means 1 (storage.Account.MaxConcurrency), shown as
// "1 (default)" so that the listing never shows a limit of 0.
func concurrencyColumn(n int) string {
	if n <= 0 {
		return "1 (default)"
	}
	return strconv.Itoa(n)
}
