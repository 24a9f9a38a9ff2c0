package main

import (
	"fmt"
	"path/filepath"
)

// mockDataDir is troupe mock's directory when --data is not given: it holds
// only the mock's troupe.pid, so that troupe stop --mock finds it.
const mockDataDir = "./data/mock"

// holder describes the troupe that holds dir's pid file, for an error
// message: "pid 4242, listening on 127.0.0.1:8080", or "" when no live
// process holds it (no file, a stale one, or one not yet written).
func holder(dir string) string {
	pid, addr, running, err := readPidFile(dir)
	if err != nil || !running {
		return ""
	}
	if addr == "" {
		return fmt.Sprintf("pid %d", pid)
	}
	return fmt.Sprintf("pid %d, listening on %s", pid, addr)
}

// busyDirError is the error of a start refused because another troupe
// (what: "troupe demo", "a troupe") runs on dir: it names the process when
// its pid file says which, and says how to stop it or go elsewhere. It does
// not wrap the lock's error: flock's "resource temporarily unavailable" on
// a file path is an internal the user cannot act on.
func busyDirError(dir, what, stopCmd string) error {
	who := ""
	if h := holder(dir); h != "" {
		who = " (" + h + ")"
	}
	return fmt.Errorf("%s is already running on the data directory %s%s: stop it with `%s`, or give this one another directory with --data DIR", what, dir, who, stopCmd)
}

// stopHint is the troupe stop command line that stops what runs on dir.
func stopHint(dir string) string {
	if filepath.Clean(dir) == filepath.Clean(mockDataDir) {
		return "troupe stop --mock"
	}
	if filepath.Clean(dir) == "data" {
		return "troupe stop"
	}
	return "troupe stop --data " + dir
}
