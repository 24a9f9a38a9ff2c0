package cachetest

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestSlackURL(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0?pool_size=4&read_timeout=5s"} {
		opt, err := redis.ParseURL(SlackURL(u))
		if err != nil {
			t.Fatalf("%s: %v", SlackURL(u), err)
		}
		read := SlackTimeout
		if u != "redis://127.0.0.1:6379/0" {
			read = 5e9 // kept
			if opt.PoolSize != 4 {
				t.Errorf("%s: pool_size %d, want 4", u, opt.PoolSize)
			}
		}
		if opt.DialTimeout != SlackTimeout || opt.ReadTimeout != read || opt.WriteTimeout != SlackTimeout || opt.PoolTimeout != SlackTimeout {
			t.Errorf("%s: dial %v read %v write %v pool %v", SlackURL(u), opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout)
		}
	}
}
