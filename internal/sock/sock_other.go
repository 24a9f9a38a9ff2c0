//go:build !linux

package sock

import (
	"context"
	"net"
)

// Wrap returns c unchanged: raw socket calls are Linux's only (doc.go).
func Wrap(c net.Conn) net.Conn { return c }

// Dial returns d's DialContext.
func Dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.DialContext
}
