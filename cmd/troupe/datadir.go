package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/troupe-gw/troupe/storage/journal"
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

// stopHint is the troupe stop command line that stops what runs on dir,
// starting with the binary as this one was started (cmdName).
func stopHint(dir string) string {
	self := cmdName(os.Args[0])
	if filepath.Clean(dir) == filepath.Clean(mockDataDir) {
		return self + " stop --mock"
	}
	if filepath.Clean(dir) == "data" {
		return self + " stop"
	}
	return self + " stop --data " + dir
}

// cmdName is how a command line to paste names this binary: arg0 (its
// os.Args[0]) when that is a path to a binary named troupe, such as
// make demo's ./bin/troupe, which is not on PATH; "troupe" otherwise (on
// PATH, or a test binary).
func cmdName(arg0 string) string {
	if filepath.Base(arg0) == "troupe" && strings.ContainsRune(arg0, filepath.Separator) {
		return arg0
	}
	return "troupe"
}

// dirClaim is a start's claim on its data directory (claimDir). The start
// defers release and calls started once it runs: a start that returns
// before then (failed) removes what the claim created (releaseFailed); one
// that ran removes, when it stops, the directories the claim created that
// are left empty (troupe mock's ./data/mock holds only its troupe.pid,
// removed first), and nothing else.
type dirClaim struct {
	created, dir string
	ok           bool
}

// started marks the start as running: release then keeps the directory.
func (c *dirClaim) started() { c.ok = true }

// release removes what the claim created unless started was called, and
// after a run the directories it created that are empty (removeEmpty).
func (c *dirClaim) release() {
	if !c.ok {
		releaseFailed(c.created, c.dir)
		return
	}
	removeEmpty(c.created, c.dir)
}

// removeEmpty removes dir and its parents up to created (claimDir's
// answer; "" removes nothing) while each is empty: os.Remove refuses a
// directory that holds anything, so a file another start wrote meanwhile
// keeps its directory.
func removeEmpty(created, dir string) {
	if created == "" {
		return
	}
	created = filepath.Clean(created)
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if os.Remove(p) != nil || p == created || filepath.Dir(p) == p {
			return
		}
	}
}

// claimStart makes the data directory dir of a start (serve, demo, mock)
// and returns the claim on it (claimDir's errors).
func claimStart(dir string) (*dirClaim, error) {
	created, err := claimDir(dir)
	if err != nil {
		return nil, err
	}
	return &dirClaim{created: created, dir: dir}, nil
}

// claimDir makes the data directory dir of a start (serve, demo, mock)
// and returns the outermost directory this call created ("" when dir
// existed): the one a failed start removes (releaseFailed). The outermost
// missing directory is made with os.Mkdir, which fails when it exists, so
// of two starts racing to make it only one owns it.
func claimDir(dir string) (created string, err error) {
	root := missingRoot(dir)
	if root != "" {
		if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
			return "", fmt.Errorf("data directory: %w", err)
		}
		if err := os.Mkdir(root, 0o700); errors.Is(err, fs.ErrExist) {
			root = "" // another process made it meanwhile: not ours
		} else if err != nil {
			return "", fmt.Errorf("data directory: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if root != "" {
			os.RemoveAll(root)
		}
		return "", fmt.Errorf("data directory: %w", err)
	}
	return root, nil
}

// missingRoot returns the outermost directory of dir's path that does not
// exist yet ("" when dir exists): what creating dir would create.
func missingRoot(dir string) string {
	if dir == "" {
		return ""
	}
	dir = filepath.Clean(dir)
	root := ""
	for p := dir; ; {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return root
		}
		root = p
		parent := filepath.Dir(p)
		if parent == p {
			return root
		}
		p = parent
	}
}

// releaseFailed removes created (claimDir's answer) after a failed start,
// so that a failed first start leaves no empty or half-made data directory
// behind; "" (the directory existed) removes nothing. It removes nothing
// either while a process holds a lock file in dir (troupe.pid, demo.lock,
// usage.journal): another start that found the directory made and started
// in it.
func releaseFailed(created, dir string) {
	if created == "" {
		return
	}
	for _, name := range []string{pidFileName, "demo.lock", "usage.journal"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		release, err := journal.LockFile(path)
		if err != nil {
			return // held: in use
		}
		release()
	}
	os.RemoveAll(created)
}
