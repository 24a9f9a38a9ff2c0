//go:build !unix

package gateway

// read1 reads one byte from the connection (read1_unix.go takes more).
func (c *guardedConn) read1(p []byte) (int, error) { return c.Conn.Read(p) }
