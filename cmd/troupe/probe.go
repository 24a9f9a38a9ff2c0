package main

import "time"

// quotaProbe maps gateway.quota_probe_interval to actors.Config.QuotaProbe:
// 0s or less turns probes off.
func quotaProbe(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
