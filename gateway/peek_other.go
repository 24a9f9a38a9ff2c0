//go:build !unix

package gateway

import "net"

// canPeek is false where peerClosed has no socket peek: clients are then
// noticed gone only when a write to them fails.
func canPeek(net.Conn) bool { return false }

func peerClosed(net.Conn) bool { return false }
