//go:build unix

package journal

import (
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive advisory lock on f, so that two processes never
// append to one journal (two instances given one data directory).
func lock(f *os.File) error {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("journal: %s is in use by another process (one data directory per instance): %w", f.Name(), err)
	}
	return nil
}
